"""
The capacity what-if: its model of the daemon's dispatch against the real
queue core (in-process, on a L{Clock}), the Spark job over a small history,
and the C{--what-if} option.
"""

from __future__ import annotations

import heapq
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from attrs import frozen
from twisted.internet.task import Clock

from quicx.daemon.observe.events import format_events
from quicx.model.dispatch import percentile, simulate
from quicx.protocol import taskflow, wire
from quicx.protocol.taskflow import Backoff, BackoffKind
from quicx.report.whatif import measured_backlog, parse_workers, workload
from tests.fakes import FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of

QUEUES = ("a", "b")
BACKOFF = Backoff(BackoffKind.FIXED, 7, 7, 0)
START_MS = 1_000_000


class Recorder:
    """The core's lifecycle events, as the event files' lines would hold them."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.records: list[dict[str, Any]] = []

    def record(self, kind: str, *fields: Any) -> None:
        # The files hold whole milliseconds; the test's times are whole
        # milliseconds already, less a float's rounding.
        when = (round(self.clock.seconds() * 1000) + 0.5) / 1000
        (line,) = format_events([(when, kind, *fields)])
        self.records.append(json.loads(line))

    def forget(self, session: object) -> None:
        pass

    def caught_up(self, session: object) -> None:
        pass


@frozen
class Spec:
    """A task: when it is submitted (ms), where, and how long each attempt runs."""

    arrival: int
    queue: str
    priority: int
    runs: tuple[int, ...]  # every attempt but the last fails


def specs(count: int, seed: int, gap_ms: float) -> list[Spec]:
    rng = random.Random(seed)
    at = 0.0
    tasks = []
    for _ in range(count):
        at += rng.expovariate(1 / gap_ms)
        runs = tuple(rng.randint(3, 17) for _ in range(2 if rng.random() < 0.1 else 1))
        tasks.append(Spec(round(at), rng.choice(QUEUES), rng.randint(0, 2), runs))
    return tasks


def run_core(
    tasks: list[Spec], workers: int, credits: int = 1
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """
    Run C{tasks} through the real queue core with C{workers} workers of
    C{credits} credits, each running the tasks it holds one at a time, in
    the order it got them (as C{quicx worker} does); the events it recorded
    and each task's wait (ms) until its first run started.  At one
    millisecond: retries due first, then SUBMITs, then outcomes.
    """
    clock = Clock()
    clock.advance(START_MS / 1000)
    queue = make_queue(clock)
    recorder = Recorder(clock)
    queue.events = recorder
    producer = v2_producer_of(queue)
    peers = [v2_worker_of(queue, credits, queues=QUEUES, name=f"w{n}") for n in range(workers)]
    free_at = dict.fromkeys(peers, 0)  # when each worker finishes what it holds
    plan: list[tuple[int, int, int, Any]] = [(s.arrival, 1, n, s) for n, s in enumerate(tasks)]
    heapq.heapify(plan)
    spec_of: dict[int, Spec] = {}
    first: dict[int, int] = {}
    sequence = len(tasks)

    def collect(now: int) -> None:
        nonlocal sequence
        for peer in peers:
            for message in peer.take():
                if isinstance(message, wire.Wait):
                    continue
                assert isinstance(message, taskflow.Task)
                spec = spec_of[message.task_id]
                start = max(now, free_at[peer])
                first.setdefault(message.task_id, start)
                free_at[peer] = start + spec.runs[message.attempt - 1]
                heapq.heappush(plan, (free_at[peer], 2, sequence, (peer, message)))
                sequence += 1

    while plan:
        now, _, _, action = heapq.heappop(plan)
        clock.advance((START_MS + now) / 1000 + 1e-7 - clock.seconds())  # retries due
        collect(now)
        if isinstance(action, Spec):
            submit_to(
                queue,
                producer.session,
                b"t",
                b"x",
                action.queue,
                action.priority,
                retries=len(action.runs) - 1,
                backoff=BACKOFF,
            )
            (ok,) = [m for m in producer.take() if isinstance(m, taskflow.Ok)]
            spec_of[ok.task_id] = action
        elif action is not None:
            peer, task = action
            assert isinstance(peer, FakePeer)
            if task.attempt < len(spec_of[task.task_id].runs):
                queue.nack(peer.session, task.task_id, task.token, "again", False)
                heapq.heappush(plan, (now + BACKOFF.base_ms, 0, sequence, None))
                sequence += 1
            else:
                queue.ack(peer.session, task.task_id, task.token)
        collect(now)
    assert len(first) == len(tasks) and queue.queued == 0
    waits = {task_id: at - spec_of[task_id].arrival for task_id, at in first.items()}
    return recorder.records, waits


WORKLOAD = specs(300, seed=7, gap_ms=5.8)  # about 85 % busy at 2 workers


def test_the_model_predicts_the_cores_waits_exactly() -> None:
    """
    Recorded at 2 workers, the model gives each task the wait the real core
    gave it at 1, 2 and 4 workers: priorities, two queues, retries.
    """
    records, waits = run_core(WORKLOAD, 2)
    work = workload(records)
    assert work.slots == 2 and work.queues == QUEUES
    assert dict(work.measured) == waits
    assert max(waits.values()) > 50  # tasks did queue
    for workers in (1, 2, 4):
        truth = waits if workers == 2 else run_core(WORKLOAD, workers)[1]
        predicted = {task: wait for task, _, wait in simulate(work, workers).waits}
        assert predicted == truth, workers


def test_a_worker_holding_several_tasks_is_one_worker_running_one_at_a_time() -> None:
    """
    Workers that hold 8 tasks at once and run them one after another (the
    default C{quicx worker}'s choice of credits, for short handlers): the
    recording has 2 workers, not the 16 deliveries held, each run lasts
    what the task ran (not its time held behind others), and its wait
    runs until its run began.
    """
    records, waits = run_core(WORKLOAD, 2, credits=8)
    work = workload(records)
    held = max(
        sum(1 for r in records if r["event"] == "dispatched" and r["t"] <= t)
        - sum(1 for r in records if r["event"] in ("done", "retrying") and r["t"] <= t)
        for t in {r["t"] for r in records}
    )
    assert held > 2 and work.slots == 2
    assert dict(work.measured) == waits
    spec_of = {
        job.task: spec
        for job, spec in zip(sorted(work.jobs, key=lambda j: j.task), WORKLOAD, strict=True)
    }
    for job in work.jobs:
        assert tuple(step.run for step in job.steps) == spec_of[job.task].runs, job.task


def test_the_simulated_backlog_is_the_recorded_one_at_the_recorded_count() -> None:
    records, _ = run_core(WORKLOAD, 2)
    work = workload(records)
    origin = min(job.ready for job in work.jobs)
    simulated = simulate(work, 2, origin, 50).backlog
    assert simulated == measured_backlog(work, origin, 50)
    assert max(most for _, _, most in simulated) > 3


def test_parse_workers() -> None:
    assert parse_workers("workers=8,1,2,4,2") == (1, 2, 4, 8)
    for bad in ("workers=", "workers=0", "workers=2,x", "slots=1", "workers=100000"):
        with pytest.raises(ValueError, match="workers"):
            parse_workers(bad)


@pytest.mark.slow
def test_the_report_replays_the_history_in_spark(tmp_path: Path, spark: Any) -> None:
    """
    C{build_report(what_if=...)}: per queue and worker count, the waits the
    model gives (as percentiles) and the recording's own, in Parquet and on
    the page, with a backlog chart.
    """
    from quicx.report.pipeline import build_report, render_html

    records, _ = run_core(WORKLOAD[:120], 2)
    events = tmp_path / "events"
    events.mkdir()
    (events / "events-20250101T000000-4242-0001.ndjson").write_text(
        "".join(json.dumps(r) + "\n" for r in records)
    )
    report = build_report(spark, [str(events)], str(tmp_path / "out"), what_if=(1, 4))
    work = workload(records)
    expected: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for task, wait in work.measured.items():
        queue = next(job.queue for job in work.jobs if job.task == task)
        expected["recorded", 2, queue].append(wait)
    for workers in (1, 4):
        for _, queue, wait in simulate(work, workers).waits:
            expected["simulated", workers, queue].append(wait)
    for key, waits in list(expected.items()):
        expected[key[0], key[1], "*"] += waits
    table = {(r["scenario"], r["workers"], r["queue"]): r for r in report.what_if.table}
    assert set(table) == set(expected)
    for key, waits in expected.items():
        row = table[key]
        assert row["tasks"] == len(waits)
        assert row["wait_p95_ms"] == pytest.approx(percentile(waits, 0.95)), key
        assert row["wait_p99_ms"] == pytest.approx(percentile(waits, 0.99)), key
    assert table["simulated", 1, "*"]["max_backlog"] > table["recorded", 2, "*"]["max_backlog"]
    assert spark.read.parquet(str(tmp_path / "out" / "whatif")).count() == len(table)
    assert spark.read.parquet(str(tmp_path / "out" / "whatif_backlog")).count() > 0
    page = render_html(report)
    assert "<h2>Capacity what-if</h2>" in page and page.count("<polyline") >= 3


P95_BOUND = 0.25
"""The predicted p95 wait is within this much of the measured..."""
P95_FLOOR_MS = 5.0
"""...or within this many milliseconds (at 4 workers waits are a few ms)."""


@pytest.mark.slow
def test_predictions_from_a_real_run_at_2_workers_hold_at_1_and_4(tmp_path: Path) -> None:
    """
    Real daemons and workers (about 15 s): recorded with 2 workers, the
    p95 wait predicted for 1 and 4 is within L{P95_BOUND} of what runs with
    1 and 4 measure, or within L{P95_FLOOR_MS}.
    """
    from tools.whatif_validate import validate

    comparisons = validate(seconds=2.0, load=0.7, seed=3, directory=tmp_path)
    assert [c.workers for c in comparisons] == [2, 1, 4]
    for c in comparisons:
        allowed = max(P95_BOUND * c.measured[1], P95_FLOOR_MS)
        assert abs(c.predicted[1] - c.measured[1]) <= allowed, c
    assert comparisons[1].measured[1] > 10 * max(comparisons[2].measured[1], 1)  # 1 is overloaded


def expired_and_moved() -> tuple[list[dict[str, Any]], int, int]:
    """
    Recorded by the real core: two tasks in queue a, no worker; a bulk move
    takes both to queue b; the first expires there. The records, the
    expired task's id, the other's.
    """
    from quicx.daemon.queue.bulk import BulkActions, BulkSettings
    from quicx.protocol.bulk import request
    from quicx.protocol.start_options import Expires

    clock = Clock()
    clock.advance(START_MS / 1000)
    queue = make_queue(clock)
    recorder = Recorder(clock)
    queue.events = recorder
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "a", expires=Expires(5))
    submit_to(queue, producer.session, b"t", b"x", "a")
    expiring, moving = [m.task_id for m in producer.take() if isinstance(m, taskflow.Ok)]
    moved: list[Any] = []
    bulk = BulkActions(queue, BulkSettings(), turns=clock)
    bulk.run(request("move", queue="a", to="b")).addCallback(moved.append)
    clock.advance(0.001)
    clock.advance(0.01)  # past the first task's deadline
    assert moved and moved[0]["acted"] == 2
    assert [r["event"] for r in recorder.records if r["task"] == expiring][-1] == "expired"
    return recorder.records, expiring, moving


def test_an_expired_task_leaves_the_backlog_and_a_moved_one_counts_in_its_new_queue() -> None:
    """
    A task that expired before any worker took it leaves the backlog when it
    expired (as a cancelled one does); a task a bulk action moved is
    replayed in the queue it was moved to.
    """
    records, expiring, moving = expired_and_moved()
    work = workload(records)
    jobs = {job.task: job for job in work.jobs}
    assert jobs[moving].queue == "b" and jobs[moving].cancelled is None
    expired_at = next(r["t"] for r in records if r["event"] == "expired")
    assert jobs[expiring].cancelled == expired_at
    assert (expired_at, "b", -1) in work.backlog


def test_the_report_counts_an_expired_task_as_ended_and_a_moved_one_where_it_went(
    tmp_path: Path, spark: Any
) -> None:
    from quicx.report.pipeline import build_report

    records, _, moving = expired_and_moved()
    events = tmp_path / "events"
    events.mkdir()
    (events / "events-20250101T000000-4242-0001.ndjson").write_text(
        "".join(json.dumps(r) + "\n" for r in records)
    )
    report = build_report(spark, [str(events)], str(tmp_path / "out"))
    assert [(r["queue"], r["submitted"], r["never_completed"]) for r in report.queues] == [
        ("b", 2, 1)
    ]
    never = spark.read.parquet(str(tmp_path / "out" / "never_completed")).collect()
    assert [row["task"] for row in never] == [moving]
