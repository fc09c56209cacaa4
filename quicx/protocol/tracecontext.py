"""
The trace context a task carries: W3C C{traceparent} in binary, then C{tracestate}.

A SUBMIT's trace option and a TASK's trace context item hold the same value
(docs/protocol.md, "Version 2: trace context"); this module says what a
good one is, for the codec that decodes it and the clients that make it.
"""

from __future__ import annotations

TRACE_HEAD = 26
"""A trace's fixed part: C{[version u8 = 0][trace_id 16][parent_id 8][flags u8]}."""
MAX_TRACE = 255
"""The most bytes a trace option (and context item) takes: its TLV's length byte says so."""
MAX_TRACE_STATE = MAX_TRACE - TRACE_HEAD
"""The most bytes of W3C C{tracestate} a trace carries after its fixed part."""
_ZERO_ID = bytes(16)
_PRINTABLE = bytes(range(0x20, 0x7F))


def trace_problem(value: bytes) -> str:
    """
    What is wrong with a trace option's value, or C{""}: it is
    C{[version u8 = 0][trace_id 16][parent_id 8][flags u8][tracestate]},
    W3C C{traceparent}'s fields (ids not all zeros) and at most
    L{MAX_TRACE_STATE} bytes of C{tracestate} (printable ASCII).
    """
    if not TRACE_HEAD <= len(value) <= MAX_TRACE:
        return f"is {TRACE_HEAD} to {MAX_TRACE} bytes, not {len(value)}"
    if value[0]:
        return f"has version {value[0]}, not 0"
    if value[1:17] == _ZERO_ID or value[17:25] == _ZERO_ID[:8]:
        return "has a trace id or parent id of zeros"
    state = value[TRACE_HEAD:]
    if state.translate(None, _PRINTABLE):
        return "has a tracestate that is not printable ASCII"
    return ""
