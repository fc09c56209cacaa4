"""
How long one turn of a bulk action holds the event loop: C{python -m tools.bulk_turns}.

An in-process kernel (a real PMAD pool, no journal) holds N queued tasks of
two types in one queue; a bulk action is started on them and its turns are
run one at a time, each timed from outside with C{perf_counter}.  Printed
first: the one step not cut into turns, an action's copy of the live tasks' ids
(the best of five); then per action: what C{run} itself took (that copy,
and the rest of its start), the number of turns, and the median, 99th
percentile and longest turn, with the longest garbage collection that fell
inside a turn (the daemon's own full collections, which walk every live
object, are not the bulk action's doing).  The most CPU time one turn
took, beside the longest wall time, tells a turn that worked long from one
whose process waited for a CPU (on a loaded machine).

    python -m tools.bulk_turns                        # 200,000 tasks, [bulk]'s defaults
    python -m tools.bulk_turns --tasks 1000000 --batch 1000 --turn-time 0.002

Every action after the first runs on what the one before left: a dry run,
then a move of half (the type filter matches every other task, so each
removal is deep in the queue), then a cancel of the rest.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from twisted.internet.task import Clock
from zope.interface import implementer

from quicx.daemon.queue import pmad
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.bulk import BulkActions, BulkSettings
from quicx.daemon.queue.core import QueueService
from quicx.daemon.speakers import SPEAKERS
from quicx.protocol import bulk
from quicx.protocol.session import IPeer, Role
from quicx.protocol.taskflow import SubmitOptions


@implementer(IPeer)
class _Sink:
    peer_name = "bulk_turns"

    def sendFrame(self, data: bytes) -> None:
        pass

    def disconnect(self) -> None:
        pass


class _Turns(Clock):
    """Runs the calls due now, one turn at a time, and times each."""

    def step(self) -> tuple[float, float] | None:
        """The turn's wall time and its CPU time (which leaves out time the process waited)."""
        due = [call for call in self.calls if call.getTime() <= self.seconds()]
        if not due:
            return None
        started, cpu = time.perf_counter(), time.thread_time()
        for call in due:
            self.calls.remove(call)
            call.called = True
            call.func(*call.args, **call.kw)
        return time.perf_counter() - started, time.thread_time() - cpu


def build(tasks: int) -> QueueService:
    pool = pmad.Pmad(max(64 << 20, tasks * 160), pmad.default_classes())
    kernel = QueueService(pool, scheduler=Clock())
    session = kernel.open_session(_Sink(), SPEAKERS[2])
    kernel.claim_role(session, Role.PRODUCER)
    admission = Admission(kernel)
    options = SubmitOptions(queue="q")
    for i in range(tasks):
        admission.submit(session, b"even" if i % 2 == 0 else b"odd", b"x", options)
    return kernel


def snapshot_ms(kernel: QueueService) -> float:
    """The one step of an action not cut into turns: its copy of the live tasks' ids."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        list(kernel._live)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def measure(kernel: QueueService, settings: BulkSettings, request: bulk.Bulk) -> dict[str, Any]:
    turns = _Turns()
    actions = BulkActions(kernel, settings, turns=turns)
    pauses: list[float] = []
    collecting: list[float] = []

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collecting.append(time.perf_counter())
        elif collecting:
            pauses.append(time.perf_counter() - collecting.pop())

    gc.callbacks.append(timed)
    try:
        started = time.perf_counter()
        answers: list[dict[str, Any]] = []
        actions.run(request).addCallback(answers.append)
        snapshot = time.perf_counter() - started
        times, cpu = [], []
        while (took := turns.step()) is not None:
            times.append(took[0])
            cpu.append(took[1])
    finally:
        gc.callbacks.remove(timed)
    times.sort()
    return {
        "action": request.action.name.lower() + (" (dry run)" if request.dry_run else ""),
        "acted": answers[0]["acted"] if not request.dry_run else answers[0]["matched"],
        "start_ms": snapshot * 1000,
        "turns": len(times),
        "median_ms": statistics.median(times) * 1000,
        "p99_ms": times[int(len(times) * 0.99)] * 1000,
        "max_ms": times[-1] * 1000,
        "cpu_max_ms": max(cpu) * 1000,
        "gc_max_ms": max(pauses, default=0.0) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=BulkSettings().batch)
    parser.add_argument("--turn-time", type=float, default=BulkSettings().turn_time)
    args = parser.parse_args()
    settings = BulkSettings(batch=args.batch, turn_time=args.turn_time)
    kernel = build(args.tasks)
    print(
        f"{kernel.queued:,} queued tasks; [bulk] batch = {args.batch},"
        f" turn_time = {args.turn_time:g}; the start's copy of the live tasks' ids:"
        f" {snapshot_ms(kernel):.2f} ms (the best of 5)"
    )
    for request in (
        bulk.request("cancel", True, queue="q"),
        bulk.request("move", queue="q", task_type="odd", to="elsewhere"),
        bulk.request("cancel", queue="q"),
    ):
        row = measure(kernel, settings, request)
        print(
            f"  {row['action']:<18} {row['acted']:>9,} tasks: start {row['start_ms']:.2f} ms,"
            f" {row['turns']:,} turns: median {row['median_ms']:.3f} ms,"
            f" p99 {row['p99_ms']:.3f} ms, longest {row['max_ms']:.3f} ms;"
            f" the most CPU one turn took {row['cpu_max_ms']:.3f} ms"
            f" (longest GC pause {row['gc_max_ms']:.1f} ms)"
        )


if __name__ == "__main__":
    main()
