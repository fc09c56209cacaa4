"""
The autoscaling signal against scaling by queue length, replayed over a recorded bursty workload.

    python -m tools.autoscale_sim --record /tmp/bursty   # record one, then compare
    python -m tools.autoscale_sim /tmp/bursty/events     # compare over a recording

C{--record} runs a real daemon writing lifecycle events, C{--workers}
C{quicx worker} processes and a producer of bursts: a steady trickle of
I/O-bound tasks (their handler sleeps 100 to 300 ms) with, every 15 s, a
burst of 60 in one second (the recording is L{tools.whatif_validate}'s).

The comparison replays the recording (L{quicx.report.whatif.workload}) through
the dispatch model (L{quicx.model.dispatch.simulate}) with a number of
workers that an autoscaler changes every C{--interval} seconds:

  - I{signal}: the daemon's estimate (L{quicx.model.sizing}) over the last
    C{--window} seconds of arrivals and their run times, as C{/autoscale}
    publishes it;
  - I{queue length}: KEDA's default, C{ceil(tasks queued / per_worker)},
    for each C{per_worker} of L{PER_WORKER}.

Both have one worker at least and C{--max-workers} at most, and take effect
at once (no start-up delay).  Printed for each: the p95 wait it gave, whether
that holds C{--target}, and the worker-seconds it used.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Mapping
from pathlib import Path

from attrs import define, field

from quicx.model.dispatch import percentile, simulate
from quicx.model.sizing import workers_needed
from quicx.report.whatif import Workload, workload
from tools.whatif_validate import Arrival, record

PER_WORKER = (1, 2, 3, 5, 8, 12, 20, 40)
"""The queue-length policies tried: tasks queued per worker."""


def bursty(seconds: float, seed: int) -> list[Arrival]:
    """A trickle of 5 tasks a second, and every 15 s a burst of 60 in one second."""
    rng = random.Random(seed)
    found, at = [], 0.0
    while at < seconds:
        at += rng.expovariate(5.0)
        found.append(Arrival(at, rng.randint(100, 300), 0))
    for start in range(5, int(seconds), 15):
        found += [Arrival(start + rng.random(), rng.randint(100, 300), 0) for _ in range(60)]
    return sorted((a for a in found if a.at < seconds), key=lambda a: a.at)


@define
class Policy:
    """A scaler for L{simulate}: its decisions, kept to count the worker-seconds."""

    every: int
    most: int
    decisions: list[tuple[int, int]] = field(factory=list)

    def __call__(self, now: int, queued: Mapping[str, int]) -> int:
        workers = max(1, min(self.most, self.decide(now, queued)))
        self.decisions.append((now, workers))
        return workers

    def decide(self, now: int, queued: Mapping[str, int]) -> int:
        raise NotImplementedError

    def worker_seconds(self) -> float:
        times = [t for t, _ in self.decisions] + [self.decisions[-1][0] + self.every]
        return sum(n * (times[i + 1] - t) for i, (t, n) in enumerate(self.decisions)) / 1000


@define
class QueueLength(Policy):
    per_worker: int = 1

    def decide(self, now: int, queued: Mapping[str, int]) -> int:
        return math.ceil(sum(queued.values()) / self.per_worker)


@define
class Signal(Policy):
    work: Workload | None = None
    window: int = 60_000
    target: float = 1000.0

    def decide(self, now: int, queued: Mapping[str, int]) -> int:
        assert self.work is not None
        recent = [job for job in self.work.jobs if now - self.window <= job.ready <= now]
        runs = [step.run for job in recent for step in job.steps]
        arrivals = [job.ready for job in recent]
        backlog = sum(queued.values())
        needed = workers_needed(arrivals, runs, self.target, self.most, backlog, now)
        return needed.workers


def replay(work: Workload, policy: Policy) -> tuple[float, float]:
    """The p95 wait (s) and worker-seconds of C{work} scaled by C{policy}."""
    waits = [wait for _, _, wait in simulate(work, 1, scaler=policy).waits]
    return percentile(waits, 0.95) / 1000, policy.worker_seconds()


def compare(work: Workload, args: argparse.Namespace) -> list[str]:
    every, target = int(args.interval * 1000), args.target * 1000
    lines = [
        f"{len(work.jobs)} tasks over {(work.jobs[-1].ready - work.jobs[0].ready) / 1000:.0f} s,"
        f" recorded with {work.slots} workers; target p95 wait {args.target:g} s,"
        f" a decision every {args.interval:g} s",
        f"{'policy':<28}{'p95 wait':>10}{'holds':>7}{'worker-s':>10}",
    ]
    signal = Signal(every, args.max_workers, work=work, window=int(args.window * 1000),
                    target=target)  # fmt: skip
    started = time.perf_counter()
    policies: list[tuple[str, Policy]] = [(f"signal (window {args.window:g} s)", signal)]
    policies += [
        (f"queue length / {n}", QueueLength(every, args.max_workers, per_worker=n))
        for n in PER_WORKER
    ]
    for name, policy in policies:
        p95, cost = replay(work, policy)
        holds = "yes" if p95 <= args.target else "no"
        lines.append(f"{name:<28}{p95:>9.2f}s{holds:>7}{cost:>10.0f}")
        if policy is signal:
            per = (time.perf_counter() - started) / len(signal.decisions) * 1000
            lines.append(
                f"  (the signal: {per:.1f} ms a decision, {len(signal.decisions)} of them)"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events", nargs="?", type=Path, help="a recording's events directory")
    parser.add_argument("--record", type=Path, help="record a bursty workload here first")
    parser.add_argument("--seconds", type=float, default=60.0, help="of the recording")
    parser.add_argument("--workers", type=int, default=3, help="quicx worker processes recording")
    parser.add_argument("--target", type=float, default=1.0, help="the p95 wait (s) to hold")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between decisions")
    parser.add_argument("--window", type=float, default=5.0, help="the signal's window (s)")
    parser.add_argument("--max-workers", type=int, default=64)
    args = parser.parse_args(argv)
    if args.record is not None:
        records = record(args.workers, bursty(args.seconds, 1), args.record)
        events = args.record / "events"
    elif args.events is not None:
        events = args.events
        records = [
            json.loads(line)
            for path in sorted(events.glob("events-*.ndjson"))
            for line in path.read_text().splitlines()
        ]
    else:
        parser.error("give an events directory, or --record DIR")
    print(f"events: {events}")
    print("\n".join(compare(workload(records), args)))


if __name__ == "__main__":
    main()
