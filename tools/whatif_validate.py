"""
The capacity what-if against real runs: record a workload with 2 workers,
predict its queue waits with 1 and 4, run it with 1 and 4, and compare.

    python -m tools.whatif_validate --seconds 20

Each run is a real daemon (C{tools.launcher}) writing lifecycle events,
C{quicx worker} processes as a user starts them (one each, its default
concurrency, its credits chosen by itself, the handler placed by itself),
and a producer that submits the same Poisson arrivals (the same seed) of
tasks whose handler sleeps a known time (5 to 20 ms), at C{--load} of 2
workers.  The prediction is the
model's (L{quicx.report.whatif}) over the 2-worker run's events; the
measurement, each run's own events read the same way.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from attrs import frozen

from quicx.clients.blocking import QuicxClient
from quicx.clients.worker import Worker
from quicx.daemon.control import fetch_status
from quicx.model.dispatch import percentile, simulate
from quicx.report.whatif import Workload, workload
from tools.launcher import DaemonProcess, start_workers, stop_all

RECORDED = 2
PREDICTED = (1, 4)
RUN_MS = (5, 20)
PRIORITIES = (0, 5)
QUICK = 2
"""Quick tasks (no work) that arrive with each sleeping one."""

worker = Worker()


def sleep(payload: bytes) -> None:
    time.sleep(int(payload) / 1000)


def quick(payload: bytes) -> None:
    """A handler short enough to run on the worker's reactor, several held at once."""


worker.register("sleep", sleep)
worker.register("quick", quick)


@frozen
class Arrival:
    at: float  # seconds from the start
    run_ms: int  # 0: a quick task
    priority: int


def arrivals(seconds: float, load: float, seed: int) -> list[Arrival]:
    """Poisson arrivals keeping C{RECORDED} workers C{load} busy on average."""
    rng = random.Random(seed)
    mean_run = sum(RUN_MS) / 2
    rate = load * RECORDED / (mean_run / 1000)  # tasks a second
    at, out = 0.0, list[Arrival]()
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            return out
        out.append(Arrival(at, rng.randint(*RUN_MS), rng.choice(PRIORITIES)))
        for _ in range(QUICK):
            out.append(Arrival(at, 0, rng.choice(PRIORITIES)))


def record(workers: int, tasks: list[Arrival], directory: Path) -> list[dict[str, Any]]:
    """Run C{tasks} through a daemon with C{workers} workers; its events."""
    directory.mkdir(parents=True)
    events = directory / "events"
    with DaemonProcess(directory, [f"--events={events}", "--drain-timeout=0"]) as daemon:
        processes = start_workers(
            "tools.whatif_validate:worker",
            workers,
            [f"--connect={daemon.client_address}"],
            directory,
        )
        try:
            control = str(daemon.control_path)
            deadline = time.monotonic() + 30
            while fetch_status(control)["connections"]["workers"] < workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{workers} workers did not connect")
                time.sleep(0.05)
            with QuicxClient(daemon.client_address) as client:
                start = time.monotonic()
                for task in tasks:
                    pause = start + task.at - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    kind = "sleep" if task.run_ms else "quick"
                    client.submit(kind, b"%d" % task.run_ms, priority=task.priority)
            deadline = time.monotonic() + 60 + sum(t.run_ms for t in tasks) / 1000
            while fetch_status(control)["tasks"]["completed"] < len(tasks):
                if time.monotonic() > deadline:
                    raise RuntimeError("the tasks did not finish")
                time.sleep(0.05)
        finally:
            stop_all(processes)
    return [
        json.loads(line)
        for path in sorted(events.glob("events-*.ndjson"))
        for line in path.read_text().splitlines()
    ]


def most_held(records: list[dict[str, Any]]) -> int:
    """The most deliveries the workers held at once (the daemon's view)."""
    changes = sorted(
        (r["t"], -1 if r["event"] != "dispatched" else 1)
        for r in records
        if r["event"] in ("dispatched", "done", "failed", "retrying", "requeued")
    )
    held = most = 0
    for _, change in changes:
        held += change
        most = max(most, held)
    return most


def waits_of(work: Workload, workers: int | None = None) -> list[int]:
    """The waits measured (C{workers} C{None}) or predicted for C{workers}."""
    if workers is None:
        return list(work.measured.values())
    return [wait for _, _, wait in simulate(work, workers).waits]


@frozen
class Comparison:
    workers: int
    predicted: tuple[float, float, float]
    measured: tuple[float, float, float]
    held: int  # the most deliveries the run's workers held at once
    read: int  # the workers the model reads in the run's events

    @property
    def p95_error(self) -> float:
        """The predicted p95 less the measured, relative to the measured."""
        return (self.predicted[1] - self.measured[1]) / max(self.measured[1], 1.0)


def validate(seconds: float, load: float, seed: int, directory: Path) -> list[Comparison]:
    """Record at C{RECORDED} workers, predict and run C{PREDICTED}; compare."""
    tasks = arrivals(seconds, load, seed)
    events = {RECORDED: record(RECORDED, tasks, directory / f"w{RECORDED}")}
    recorded = workload(events[RECORDED])
    out = []
    for workers in (RECORDED, *PREDICTED):
        if workers not in events:
            events[workers] = record(workers, tasks, directory / f"w{workers}")
        run = workload(events[workers])
        predicted, measured = waits_of(recorded, workers), waits_of(run)
        out.append(
            Comparison(
                workers,
                tuple(percentile(predicted, p) for p in (0.5, 0.95, 0.99)),  # type: ignore[arg-type]
                tuple(percentile(measured, p) for p in (0.5, 0.95, 0.99)),  # type: ignore[arg-type]
                most_held(events[workers]),
                run.slots,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="of arrivals per run (20)")
    parser.add_argument("--load", type=float, default=0.7, help="of 2 workers (0.7)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="whatif-") as directory:
        comparisons = validate(args.seconds, args.load, args.seed, Path(directory))
    print(
        "| workers | predicted p50 / p95 / p99 ms | measured p50 / p95 / p99 ms | p95 error"
        " | held at most | workers read |"
    )
    print("|---|---|---|---|---|---|")
    for c in comparisons:
        kind = " (recorded)" if c.workers == RECORDED else ""
        print(
            f"| {c.workers}{kind} | {' / '.join(f'{v:.0f}' for v in c.predicted)}"
            f" | {' / '.join(f'{v:.0f}' for v in c.measured)} | {c.p95_error:+.0%}"
            f" | {c.held} | {c.read} |"
        )


if __name__ == "__main__":
    main()
