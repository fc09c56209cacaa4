"""
OpenTelemetry for the clients, when the application uses it: a trace goes with its task.

Nothing here imports OpenTelemetry: an application that traces has
imported C{opentelemetry.trace} (to set its tracer provider, or to start
a span), so that module in C{sys.modules} is the sign, and its absence
costs a producer one dictionary look-up per submit and a worker nothing
(its tasks carry no trace).  When it is there and a span is current:

  - a producer's submit runs in a C{submit} span (a child of the current
    one; kind PRODUCER), whose context rides in the SUBMIT's trace option
    (W3C C{traceparent} and C{tracestate}, see
    L{quicx.protocol.tracecontext.trace_problem}) to a daemon that lists the
    C{trace} capability; the span gets the task id once the OK comes;
  - a worker runs the handler of a task that carries one inside a
    C{run <type>} span, its child (kind CONSUMER), current while the
    handler runs (in a thread, on the reactor or the loop), with the
    task's id, queue, type and attempt, its wait since it was enqueued,
    and its outcome: done, retried or failed (the exception recorded).

The attribute names are in L{ATTRIBUTES}; docs/integrations.md has the whole story.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from quicx.clients.reports import Unrecoverable
from quicx.protocol import taskflow
from quicx.protocol.tracecontext import MAX_TRACE_STATE, TRACE_HEAD, trace_problem

if TYPE_CHECKING:
    from opentelemetry.trace import Span, SpanContext

CAPABILITY = "trace"
"""The capability a daemon's HELLO answer lists when it takes the trace option."""
TRACER = "quicx"
"""The instrumentation scope of the spans."""
_API = "opentelemetry.trace"

ATTRIBUTES = {
    "system": "messaging.system",
    "task_id": "quicx.task.id",
    "queue": "quicx.queue",
    "type": "quicx.task.type",
    "attempt": "quicx.task.attempt",
    "wait": "quicx.task.wait_ms",
    "outcome": "quicx.task.outcome",
}
"""The spans' attribute names (C{messaging.system} is C{"quicx"})."""


def traceparent(trace: bytes) -> str:
    """A trace option's W3C C{traceparent} header (C{00-<trace id>-<parent id>-<flags>})."""
    return f"00-{trace[1:17].hex()}-{trace[17:25].hex()}-{trace[25]:02x}"


def tracestate(trace: bytes) -> str | None:
    """A trace option's W3C C{tracestate} header, if it carries one."""
    return trace[TRACE_HEAD:].decode("ascii") or None


def encode_context(context: SpanContext) -> bytes:
    """
    The trace option of a span's context: its C{tracestate} list members
    from the right dropped until it fits L{MAX_TRACE_STATE} (as W3C allows).
    """
    state = context.trace_state.to_header().encode("ascii", "replace")
    while len(state) > MAX_TRACE_STATE:
        state = state.rpartition(b",")[0]
    head = bytes((0,)) + context.trace_id.to_bytes(16, "big") + context.span_id.to_bytes(8, "big")
    trace = head + bytes((context.trace_flags & 0xFF,)) + state
    return trace if not trace_problem(trace) else trace[:TRACE_HEAD]


def _type_name(task_type: str | bytes) -> str:
    return task_type if isinstance(task_type, str) else task_type.decode("utf-8", "replace")


class SubmitSpan:
    """A producer's C{submit} span, and the trace option of its context (C{trace})."""

    __slots__ = ("span", "trace")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.trace = encode_context(span.get_span_context())

    def submitted(self, task_id: int) -> int:
        """The OK came: the span ends with its task's id (returned)."""
        self.span.set_attribute(ATTRIBUTES["task_id"], task_id)
        self.span.end()
        return task_id

    def refused(self, error: BaseException) -> None:
        """The submit failed with C{error}: the span ends in error, with it recorded."""
        api = sys.modules[_API]
        self.span.record_exception(error)
        self.span.set_status(api.Status(api.StatusCode.ERROR, str(error)))
        self.span.end()

    def around(self, call: Callable[[], int]) -> int:
        """C{call()}'s task id, within the span."""
        try:
            task_id = call()
        except BaseException as e:
            self.refused(e)
            raise
        return self.submitted(task_id)

    async def awaiting(self, call: Awaitable[int]) -> int:
        """C{await call}'s task id, within the span."""
        try:
            task_id = await call
        except BaseException as e:
            self.refused(e)
            raise
        return self.submitted(task_id)


def submit_span(task_type: str | bytes, queue: str | None) -> SubmitSpan | None:
    """
    A C{submit} span for a task of C{task_type} into C{queue}, when the
    application uses OpenTelemetry and a span is current; C{None} otherwise
    (at once when it does not: see the module's documentation).
    """
    api = sys.modules.get(_API)
    if api is None or not api.get_current_span().get_span_context().is_valid:
        return None
    attributes: dict[str, str] = {
        ATTRIBUTES["system"]: "quicx",
        ATTRIBUTES["type"]: _type_name(task_type),
    }
    if queue is not None:
        attributes[ATTRIBUTES["queue"]] = queue
    span = api.get_tracer(TRACER).start_span(
        "submit", kind=api.SpanKind.PRODUCER, attributes=attributes
    )
    return SubmitSpan(span)


def parent_of(trace: bytes) -> Any:
    """The OpenTelemetry context whose (remote) span a trace option names, or C{None}."""
    api = sys.modules.get(_API)
    if api is None or trace_problem(trace):
        return None
    state = tracestate(trace)
    parent = api.SpanContext(
        int.from_bytes(trace[1:17], "big"),
        int.from_bytes(trace[17:25], "big"),
        is_remote=True,
        trace_flags=api.TraceFlags(trace[25]),
        trace_state=api.TraceState.from_header([state]) if state else None,
    )
    return api.set_span_in_context(api.NonRecordingSpan(parent))


def traced(task: taskflow.Task, function: Callable[..., Any]) -> Callable[..., Any]:
    """
    C{function}, the handler of C{task} (whose delivery carried a trace),
    called inside its C{run <type>} span (and awaited so, if it returns an
    awaitable) when the worker uses OpenTelemetry; C{function} itself otherwise.
    """
    span = run_span(task)
    if span is None:
        return function

    def call(*args: Any) -> Any:
        with sys.modules[_API].use_span(span, end_on_exit=False, **_QUIET):
            try:
                result = function(*args)
            except BaseException as e:
                _ended(span, task, e)
                raise
        if inspect.isawaitable(result):
            return _awaited(span, task, result)
        _ended(span, task, None)
        return result

    return call


_QUIET = {"record_exception": False, "set_status_on_exception": False}
"""C{use_span}'s: L{_ended} records the outcome."""


async def _awaited(span: Span, task: taskflow.Task, awaitable: Awaitable[Any]) -> Any:
    with sys.modules[_API].use_span(span, end_on_exit=False, **_QUIET):
        try:
            value = await awaitable
        except BaseException as e:
            _ended(span, task, e)
            raise
    _ended(span, task, None)
    return value


def _ended(span: Span, task: taskflow.Task, error: BaseException | None) -> None:
    """
    C{task}'s handler finished: done (C{error} is C{None}), retried (the
    task may retry, and C{error} is not L{Unrecoverable}) or failed.
    """
    if error is None:
        outcome = "done"
    else:
        may_retry = task.failures < task.retries and not isinstance(error, Unrecoverable)
        outcome = "retried" if may_retry else "failed"
        api = sys.modules[_API]
        span.record_exception(error)
        span.set_status(api.Status(api.StatusCode.ERROR, str(error) or type(error).__name__))
    span.set_attribute(ATTRIBUTES["outcome"], outcome)
    span.add_event(outcome)
    span.end()


def run_span(task: taskflow.Task) -> Span | None:
    """
    The C{run <type>} span of a task whose delivery carried a trace, when
    the worker uses OpenTelemetry (and the trace is well formed); C{None}
    otherwise.
    """
    assert task.trace is not None
    parent = parent_of(task.trace)
    if parent is None:
        return None
    api = sys.modules[_API]
    now = time.time_ns()
    task_type = _type_name(task.task_type)
    attributes = {
        ATTRIBUTES["system"]: "quicx",
        ATTRIBUTES["task_id"]: task.task_id,
        ATTRIBUTES["queue"]: task.queue,
        ATTRIBUTES["type"]: task_type,
        ATTRIBUTES["attempt"]: task.attempt,
        ATTRIBUTES["wait"]: max(0, now // 1_000_000 - task.enqueued_ms),
    }
    span = api.get_tracer(TRACER).start_span(
        f"run {task_type}",
        context=parent,
        kind=api.SpanKind.CONSUMER,
        attributes=attributes,
        start_time=now,
    )
    span.add_event("enqueued", timestamp=task.enqueued_ms * 1_000_000)
    return span
