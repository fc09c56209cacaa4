"""
A one-task round trip, hop by hop: C{python -m tools.hops}.

A raw-socket producer submits one task at a time to a real daemon, which
hands it to one worker process, whose no-op handler's DONE (ACK with
protocol version 2) the daemon passes back to the producer.  The daemon and
the worker run through L{tools.hops_trace}, which timestamps their reads and
writes on the machine's one monotonic clock; each round trip is then cut at
those points:

    producer sends SUBMIT → daemon reads SUBMIT → daemon sends TASK
    → worker reads TASK → worker sends DONE → daemon reads DONE
    → daemon sends DONE → producer reads DONE

with a few points inside a hop, timed from its start: the daemon's OK to
the producer and the return of its C{dataReceived} (after which the output
batcher's C{callLater(0)} sends to other connections), and the handler's
start (in a pool thread for the stock worker).  Each hop's median, 90th
percentile and mean: the means add up to the round trip's.  Then each send
call (C{write_now}, the producer's C{sendall}): how long it took, and how
often the frame's reader had read it before the call returned (it was
woken and ran first).  Beside them, in the same run, the floor: two round
trips of a SUBMIT's bytes through bare echo servers (L{tools.echo}: a
blocking socket, an epoll loop, Twisted's epoll reactor), the task's shape
(two sends out, two back) without the queue.

Each timestamp costs about 0.2 µs; a round trip takes 15 in the daemon and
the worker.

    python -m tools.hops                      # 2,000 round trips, no-op worker
    python -m tools.hops --worker stock       # the plain `quicx worker module:mapping`
    python -m tools.hops --busy-poll --quick  # busy polling, 200 round trips

C{--worker noop} runs the handler on the reactor (C{thread=False}, as the
benchmark's workers do); C{--worker stock} is a plain function in a mapping,
which the worker runs in its thread pool.  Both speak version 1 unless
C{--protocol 2}.  Figures are noisy on a shared machine: compare runs made
side by side.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from attrs import frozen

from quicx.clients.address import CLIENT_MAX_LENGTH
from quicx.clients.worker import Worker
from quicx.protocol import codec, taskflow, wire
from quicx.protocol.codec import MessageType
from quicx.protocol.frames import Frame, FrameParser
from tools import echo, hops_trace
from tools.bench import BUSY_POLL, payload_of, quantile, wait_for_workers
from tools.hops_trace import HANDLER, READ, READ_END, WRITE, WRITE_END, event, mark
from tools.launcher import DaemonProcess, stop_all, tools_environment

TASK_TYPE = "hops"
WARM_UP = 100
"""Round trips run before those measured."""


def handler(payload: bytes) -> None:
    """The no-op handler: it only marks when it runs."""
    mark(event(HANDLER))


HANDLERS = {TASK_TYPE: handler}
"""The stock worker's target: a plain function, run in the worker's thread pool."""

noop_worker = Worker()
"""The no-op worker's target: the same function, run on the reactor."""
noop_worker.register(TASK_TYPE, handler, thread=False)

SUBMIT, OK, TASK, DONE = MessageType.SUBMIT, MessageType.OK, MessageType.TASK, MessageType.DONE


def outcome_type(protocol: int) -> int:
    """What a worker of C{protocol} reports a done task with: DONE, or ACK (version 2)."""
    return DONE if protocol == 1 else MessageType.ACK


def submit_frame(protocol: int) -> bytes:
    """The producer's SUBMIT: a 100-byte payload."""
    spoken = wire if protocol == 1 else taskflow
    return spoken.encode_submit(TASK_TYPE.encode(), payload_of(100))


WORKERS = {"stock": "tools.hops:HANDLERS", "noop": "tools.hops:noop_worker"}


def traced(role: str, out: Path) -> list[str]:
    """The command line that runs C{role} through L{tools.hops_trace}, into C{out}."""
    return [sys.executable, "-m", "tools.hops_trace", str(out), role]


class TracedDaemon(DaemonProcess):
    """A daemon run through L{tools.hops_trace}; its events go to L{trace}."""

    @property
    def trace(self) -> Path:
        return self.directory / "daemon.trace"

    def command(self) -> list[str]:
        # The twistd arguments, without twistd: the wrapper runs it itself
        # (and imports tools.*, whatever the daemon's working directory).
        twistd_args = super().command()[1:]
        path = tools_environment()["PYTHONPATH"]
        return ["env", f"PYTHONPATH={path}", *traced("daemon", self.trace), *twistd_args]


@frozen
class Point:
    """A point of the round trip: the event C{code} of C{process}."""

    name: str
    process: str
    code: int
    main: bool = True


def chain(protocol: int) -> tuple[Point, ...]:
    """
    The points of a round trip, in order.  The main ones cut it into the
    hops, each at the first such event after the point before; each other
    one (C{main=False}) is the first such event after the main point before
    it, a point inside that hop whatever the order of such points (a change
    to the daemon may send TASK before OK, or before its read returns).
    """
    reported = outcome_type(protocol)
    outcome = MessageType(reported).name
    return (
        Point("producer sends SUBMIT", "producer", event(WRITE, SUBMIT)),
        Point("daemon reads SUBMIT", "daemon", event(READ, SUBMIT)),
        Point("daemon sends OK", "daemon", event(WRITE, OK), False),
        Point("daemon's read returns", "daemon", event(READ_END, SUBMIT), False),
        Point("daemon sends TASK", "daemon", event(WRITE, TASK)),
        Point("worker reads TASK", "worker", event(READ, TASK)),
        Point("handler runs", "worker", event(HANDLER), False),
        Point(f"worker sends {outcome}", "worker", event(WRITE, reported)),
        Point(f"daemon reads {outcome}", "daemon", event(READ, reported)),
        Point("daemon's read returns", "daemon", event(READ_END, reported), False),
        Point("daemon sends DONE", "daemon", event(WRITE, DONE)),
        Point("producer reads DONE", "producer", event(READ, DONE)),
    )


@frozen
class Send:
    """One of the round trip's sends: C{sender} writes a frame of C{frame} type to C{reader}."""

    sender: str
    frame: int
    reader: str

    @property
    def name(self) -> str:
        message = MessageType(self.frame).name
        return f"{self.sender} sends {message} to the {self.reader}"


def sends(protocol: int) -> tuple[Send, ...]:
    return (
        Send("producer", SUBMIT, "daemon"),
        Send("daemon", OK, "producer"),
        Send("daemon", TASK, "worker"),
        Send("worker", outcome_type(protocol), "daemon"),
        Send("daemon", DONE, "producer"),
    )


def produce(
    address: tuple[str, int], n: int, protocol: int
) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """
    C{n} round trips, one after the other (after L{WARM_UP} more).

    @return: each round trip's window (the clock before its SUBMIT is sent,
        and after the read that brings its DONE), and the producer's events,
        by code: its sends and their returns, its reads of OK and of DONE.
    """
    submit = submit_frame(protocol)
    parser = FrameParser(CLIENT_MAX_LENGTH, False, CLIENT_MAX_LENGTH)
    clock = time.monotonic_ns
    windows = []
    events: dict[int, list[int]] = {
        event(WRITE, SUBMIT): [],
        event(WRITE_END, SUBMIT): [],
        event(READ, OK): [],
        event(READ, DONE): [],
    }
    with socket.create_connection(address, timeout=10) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for trip in range(WARM_UP + n):
            task_id = done = None
            times = [clock()]
            connection.sendall(submit)
            times.append(clock())
            while done is None:
                data = connection.recv(65536)
                received = clock()
                if not data:
                    raise RuntimeError("the daemon closed the connection")
                for frame in parser.feed(data):
                    if type(frame) is not Frame:
                        raise RuntimeError(f"a frame refused: {frame}")
                    kind, payload = frame
                    if kind == OK:
                        task_id = codec.TASK_ID.unpack_from(payload)[0]
                    elif kind == DONE and task_id is not None:
                        done = codec.TASK_ID.unpack_from(payload)[0]
                    else:
                        raise RuntimeError(f"unexpected message 0x{kind:02x}: {payload!r}")
                    times.append(received)
            if done != task_id:
                raise RuntimeError(f"DONE for task {done}, not {task_id}")
            if trip >= WARM_UP:
                windows.append((times[0], times[-1]))
                for series, t in zip(events.values(), times, strict=True):
                    series.append(t)
    return windows, events


def first(series: Sequence[int], at_least: int, at_most: float = math.inf) -> int | None:
    """The first time of C{series} (sorted) from C{at_least} to C{at_most}, if any."""
    i = bisect_left(series, at_least)
    return series[i] if i < len(series) and series[i] <= at_most else None


Events = dict[str, dict[int, list[int]]]
"""The times of each process's events, by code, sorted."""


Trip = dict[int, int]
"""A round trip: the time at each point of the chain that happened, by its index."""


def cut(windows: Sequence[tuple[int, int]], points: Sequence[Point], events: Events) -> list[Trip]:
    """
    Each round trip's points (see L{chain}), within its window (one task is
    in flight at a time).  Round trips some main point of which is missing
    are left out.
    """
    trips = []
    for start, end in windows:
        trip: Trip = {}
        last = start
        for i, point in enumerate(points):
            found = first(events[point.process].get(point.code, []), last, end)
            if found is not None:
                trip[i] = found
            if point.main:
                if found is None:
                    break
                last = found
        else:
            trips.append(trip)
    return trips


def send_calls(windows: Sequence[tuple[int, int]], send: Send, events: Events) -> dict[str, Any]:
    """
    How long C{send}'s send call took (write_now's, or the producer's
    C{sendall}), and how often it returned after its reader had read the
    frame: the reader ran first, on the sender's CPU or on the other.
    """
    writes = events[send.sender].get(event(WRITE, send.frame), [])
    returns = events[send.sender].get(event(WRITE_END, send.frame), [])
    reads = events[send.reader].get(event(READ, send.frame), [])
    calls, late = [], 0
    for start, end in windows:
        written = first(writes, start, end)
        if written is None:
            continue
        returned = first(returns, written)
        read = first(reads, written, end)
        if returned is None or read is None:
            continue
        calls.append(returned - written)
        late += returned > read
    return {"send": send.name, **summary(calls), "reader_first": late / max(1, len(calls))}


def summary(samples_ns: Sequence[int]) -> dict[str, float]:
    ordered = sorted(samples_ns) or [0]
    return {
        "median_us": quantile(ordered, 0.5) / 1000,
        "p90_us": quantile(ordered, 0.9) / 1000,
        "mean_us": statistics.fmean(ordered) / 1000,
    }


def breakdown(points: Sequence[Point], trips: Sequence[Trip]) -> list[dict[str, Any]]:
    """
    The hops between the main points, each followed by the points inside
    it (C{"inside": True}), timed from the hop's start.
    """
    rows = []
    mains = [i for i, point in enumerate(points) if point.main]
    for start, end in pairwise(mains):
        for i in [end, *range(start + 1, end)]:
            inside = i != end
            hop = f"{points[start].name} → {points[end].name}"
            samples = [trip[i] - trip[start] for trip in trips if i in trip]
            rows.append(
                {"hop": points[i].name if inside else hop, "inside": inside, **summary(samples)}
            )
    return rows


def traced_round_trips(
    n: int, worker: str, protocol: int, busy_poll: float | None
) -> dict[str, Any]:
    """
    C{n} round trips through a traced daemon and worker (busy polling
    C{busy_poll}, C{None}: their defaults): the hops, the total, the send
    calls, and how many round trips could not be cut.
    """
    spin = [] if busy_poll is None else [f"--busy-poll={busy_poll}"]
    with tempfile.TemporaryDirectory(prefix="quicx-hops-") as directory:
        daemon = TracedDaemon(Path(directory), spin)
        worker_trace = Path(directory) / "worker.trace"
        with daemon, (Path(directory) / "worker.log").open("wb") as log:
            process = subprocess.Popen(
                [
                    *traced("worker", worker_trace),
                    WORKERS[worker],
                    f"--connect={daemon.client_address}",
                    f"--protocol={protocol}",
                    *spin,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=tools_environment(),
            )
            try:
                wait_for_workers(daemon, 1, [process])
                windows, produced = produce(daemon.address, n, protocol)
            finally:
                stop_all([process])
        events = {
            "producer": produced,
            "daemon": hops_trace.load(daemon.trace),
            "worker": hops_trace.load(worker_trace),
        }
    points = chain(protocol)
    trips = cut(windows, points, events)
    if not trips:
        raise SystemExit("tools.hops: no round trip could be cut at every point")
    return {
        "hops": breakdown(points, trips),
        "total": summary([trip[len(points) - 1] - trip[0] for trip in trips]),
        "left_out": len(windows) - len(trips),
        "sends": [send_calls(windows, send, events) for send in sends(protocol)],
    }


def floors(n: int, protocol: int) -> dict[str, dict[str, float]]:
    """Two round trips of a SUBMIT's bytes through each bare echo server."""
    return {kind: summary(echo.floor(kind, submit_frame(protocol), n)) for kind in echo.SERVERS}


WIDTH = 62


def figures(name: str, row: dict[str, float]) -> str:
    return f"{name:<{WIDTH}} {row['median_us']:7.1f} {row['p90_us']:7.1f} {row['mean_us']:7.1f}"


def table(result: dict[str, Any]) -> str:
    spin = "the defaults" if result["busy_poll"] is None else f"{result['busy_poll']:g} s"
    lines = [
        f"{result['n']:,} round trips, one at a time: worker {result['worker']},"
        f" protocol {result['protocol']}, busy poll {spin}"
        f" ({result['left_out']} left out: not cut at every point)",
        "",
        f"{'hop (↳: a point inside it, from its start)':<{WIDTH}}"
        f" {'median':>7} {'p90':>7} {'mean':>7}  (µs)",
    ]
    for row in result["hops"]:
        lines.append(figures(("  ↳ " if row["inside"] else "") + row["hop"], row))
    lines.append(figures("round trip", result["total"]))
    lines += ["", f"{'send call':<{WIDTH}} {'median':>7} {'p90':>7} {'mean':>7}  reader first"]
    for row in result["sends"]:
        lines.append(f"{figures(row['send'], row)}  {row['reader_first']:11.0%}")
    lines += ["", "floor: two round trips through a bare echo server"]
    for kind, row in result["floor"].items():
        lines.append(figures(f"  {kind}", row))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.hops", description="A one-task round trip, hop by hop."
    )
    parser.add_argument("--n", type=int, default=2000, help="round trips (default 2,000)")
    parser.add_argument("--quick", action="store_true", help="200 round trips")
    parser.add_argument("--worker", choices=sorted(WORKERS), default="noop")
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=1)
    parser.add_argument(
        "--busy-poll",
        type=float,
        nargs="?",
        const=BUSY_POLL,
        metavar="SECONDS",
        help=f"the daemon's and the worker's (default: theirs; alone: {BUSY_POLL:g})",
    )
    parser.add_argument("--json-out", type=Path, help="write the figures to this file too")
    args = parser.parse_args(argv)
    n = 200 if args.quick else args.n
    result: dict[str, Any] = {
        "n": n,
        "worker": args.worker,
        "protocol": args.protocol,
        "busy_poll": args.busy_poll,
        "floor": floors(n, args.protocol),
        **traced_round_trips(n, args.worker, args.protocol, args.busy_poll),
    }
    print(table(result))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
