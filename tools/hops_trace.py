"""
Timestamps inside a daemon or a worker, for C{tools.hops}, without a line of
tracing code in quicx: this wrapper patches the points where frames come in
and go out, then runs the daemon (C{twistd quicx}) or the worker CLI in its
own process.

    python -m tools.hops_trace OUT daemon -n --pidfile= quicx [FLAGS...]
    python -m tools.hops_trace OUT worker MODULE:OBJECT [FLAGS...]

The points:

  - a read: C{dataReceived} of the daemon's and the worker's protocols, on
    entry (L{READ}) and on return (L{READ_END});
  - a write: C{quicx.net.framer.write_now}, through which the daemon's
    output batcher and the worker's replies send, on entry (L{WRITE}) and
    on return (L{WRITE_END}: the kernel has taken the bytes);
  - a handler: whatever calls L{mark} with L{HANDLER} (C{tools.hops}'s).

Each event is its clock (C{time.monotonic_ns}: C{CLOCK_MONOTONIC}, one clock
for every process of the machine) and its code, C{point * 256 + frame type}:
the type of the first frame read or written (its header's second byte).
Events go into preallocated lists, written to C{OUT} as JSON when the
process exits (SIGTERM stops both cleanly).  In a process not started
through this wrapper, L{mark} keeps nothing.
"""

from __future__ import annotations

import atexit
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

READ = 1
READ_END = 2
WRITE = 3
WRITE_END = 4
HANDLER = 5

CAPACITY = 1 << 20
"""Events kept per process; later ones are dropped (and counted)."""

# Preallocated by start(): until then (a process not traced) mark keeps nothing.
_times: list[int] = []
_codes: list[int] = []
# next() on a count is atomic under the GIL: a handler in a pool thread may mark.
_slot = itertools.count().__next__
_clock = time.monotonic_ns


def mark(code: int) -> None:
    """Record event C{code} now."""
    t = _clock()
    i = _slot()
    if i < len(_times):
        _times[i] = t
        _codes[i] = code


def start(out: Path) -> None:
    """Keep this process's events from now on, and write them to C{out} at its exit."""
    global _slot
    _times[:] = [0] * CAPACITY
    _codes[:] = [0] * CAPACITY
    _slot = itertools.count().__next__
    atexit.register(dump, out)


def event(point: int, message_type: int = 0) -> int:
    """The code of C{point} for a frame of C{message_type}."""
    return point << 8 | message_type


def frame_code(point: int, data: bytes) -> int:
    """The code of C{point} for C{data}: its first frame's type (its header's second byte)."""
    return event(point, data[1] if len(data) > 1 else 0)


def dump(out: Path) -> None:
    """Write the events recorded so far to C{out}."""
    seen = _slot()
    kept = min(seen, CAPACITY)
    events = {"times": _times[:kept], "codes": _codes[:kept], "dropped": seen - kept}
    out.write_text(json.dumps(events))


def load(path: Path) -> dict[int, list[int]]:
    """The times of the events in C{path}, sorted, by code."""
    events = json.loads(path.read_text())
    if events["dropped"]:
        raise ValueError(f"{path}: {events['dropped']} events past the {CAPACITY} kept")
    by_code: dict[int, list[int]] = {}
    for t, c in zip(events["times"], events["codes"], strict=True):
        by_code.setdefault(c, []).append(t)
    for times in by_code.values():
        times.sort()
    return by_code


def trace_reads(protocol: type) -> None:
    """Mark each C{dataReceived} of C{protocol} on entry and on return."""
    received: Callable[[Any, bytes], None] = protocol.dataReceived  # type: ignore[attr-defined]

    def dataReceived(self: Any, data: bytes) -> None:
        mark(frame_code(READ, data))
        received(self, data)
        mark(frame_code(READ_END, data))

    protocol.dataReceived = dataReceived  # type: ignore[attr-defined]


def traced_write(write_now: Callable[[Any, bytes], None]) -> Callable[[Any, bytes], None]:
    """C{write_now} marking each write before it is sent and once it is."""

    def traced(transport: Any, data: bytes) -> None:
        mark(frame_code(WRITE, data))
        write_now(transport, data)
        mark(frame_code(WRITE_END, data))

    return traced


def run_daemon(args: Sequence[str]) -> None:
    """Run C{twistd ARGS} with the daemon's reads and writes traced."""
    from twisted.scripts.twistd import run

    from quicx.daemon import server
    from quicx.net import framer

    trace_reads(server.QuicxServerProtocol)
    # BatchedOutput.write finds write_now in the framer module at each call.
    framer.write_now = traced_write(framer.write_now)  # type: ignore[assignment]
    sys.argv = ["twistd", *args]
    run()


def run_worker(args: Sequence[str]) -> int:
    """Run C{quicx worker ARGS} with the worker's reads and writes traced."""
    from quicx import cli
    from quicx.clients import slot, worker

    trace_reads(worker.WorkerProtocol)
    slot.write_now = traced_write(slot.write_now)  # type: ignore[assignment]
    return cli.main(["worker", *args])


def main(argv: Sequence[str]) -> int:
    out, role, *args = argv
    if time.get_clock_info("monotonic").implementation != "clock_gettime(CLOCK_MONOTONIC)":
        raise SystemExit("tools.hops_trace: needs CLOCK_MONOTONIC, one clock for all processes")
    start(Path(out))
    if role == "daemon":
        run_daemon(args)
        return 0
    if role == "worker":
        return run_worker(args)
    raise SystemExit(f"tools.hops_trace: a daemon or a worker, not {role!r}")


if __name__ == "__main__":
    # This file runs as __main__; the handlers mark through the module
    # tools.hops_trace, which must be the one whose events are dumped.
    from tools import hops_trace

    raise SystemExit(hops_trace.main(sys.argv[1:]))
