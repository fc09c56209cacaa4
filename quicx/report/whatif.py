"""
The capacity what-if: the recorded workload replayed for other numbers of workers.

The capacity what-if: the recorded workload replayed through a model of the
daemon's dispatch, for other numbers of workers.

Sans-I/O and Spark-free: L{workload} reads one history's lifecycle events
(one daemon run's, for one group of queues that share workers) into
L{Job}s; L{simulate} replays them through C{slots} workers and gives each
task's queue wait and each queue's backlog over time.  The Spark job
(L{quicx.report.capacity}) runs one simulation per scenario and history.

The model is L{quicx.model.dispatch} (its docstring says what of the
daemon's dispatch it keeps), which the daemon's autoscaling signal shares.

A worker is one connection running one delivery at a time, in the order
of its reports (as C{quicx worker} runs what it holds: short handlers one
after another on its event loop, a long one in a thread holding its only
credit): a delivery runs from its dispatch or its worker's report before,
whichever is later (L{_starts}), and the recording has as many workers as
connections at once, whatever credits they held.  Which idle worker is
offered a task (lifo, fifo, the failing-worker guard, the retry's other
worker) changes nothing here: the workers are alike, and a
task's run time is its own, as recorded.  Left out: fairness keys' turns,
rate and concurrency limits, paused queues, the credit a timed-out delivery
keeps until its worker reports, and workers that come and go.

Times are the events' milliseconds.  A task's wait is the start of its
first run less the time it became ready to run: its SUBMIT, or its due
time for a delayed task.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from attrs import define, field, frozen

from quicx.model.dispatch import Backlog, Job, Step, simulate

FREED_WITHIN = 1
"""
Milliseconds: a dispatch this soon after an outcome from the same worker
took a task that was waiting (the outcome freed the credit).  A dispatch to
a worker with a credit free for longer is of a task that was not ready
before: a delayed task, or a retry, at its due time.
"""
DUE_SAID = 3
"""The events schema from which a delayed task's submitted event says when it is due."""
OUTCOMES = frozenset({"done", "failed", "retrying", "requeued"})
"""The events that end a delivery."""
TIMED_OUT = "held for"
"""How the cause of a requeue at the task timeout begins (it queues at the tail)."""


def parse_workers(text: str) -> tuple[int, ...]:
    """
    The worker counts of C{--what-if workers=1,2,4,8}, ascending.

    @raise ValueError: the text is not C{workers=} and counts from 1 to 10,000.
    """
    name, _, values = text.partition("=")
    try:
        if name.strip() != "workers":
            raise ValueError
        counts = sorted({int(value) for value in values.split(",")})
    except ValueError:
        raise ValueError(
            f"expected workers=N[,N...] (e.g. workers=1,2,4,8), not {text!r}"
        ) from None
    if not 1 <= counts[0] <= counts[-1] <= 10_000:
        raise ValueError(f"worker counts go from 1 to 10000, not {text!r}")
    return tuple(counts)


@frozen
class Workload:
    """
    One history to replay.

    @ivar queues: the queues, in the order workers serve them.
    @ivar jobs: the tasks, by when they became ready.
    @ivar slots: the most workers (connections) at once in the recording.
    @ivar measured: each dispatched task's recorded wait (ms) until its
        first run began, by task id.
    @ivar backlog: (time, queue, +1 or -1) as tasks were queued and taken
        in the recording.
    """

    queues: tuple[str, ...]
    jobs: tuple[Job, ...]
    slots: int
    measured: Mapping[int, int]
    backlog: tuple[tuple[int, str, int], ...]


@define
class _Task:
    """What L{workload} gathers of one task from its events."""

    queue: str
    priority: int
    submitted: int | None = None
    due: int | None = None  # when it was due, if it said (schema 3: a delayed task's `due`)
    cancelled: int | None = None
    dispatches: dict[int, tuple[int, int | None]] = field(factory=dict)  # attempt: (t, worker)
    ends: dict[int, tuple[int, str, str]] = field(factory=dict)  # attempt: (t, event, cause)


def workload(records: Iterable[Mapping[str, Any]]) -> Workload:
    """
    The jobs of one history: C{records} are its task events as the files
    hold them (C{t}, C{event}, C{task}, C{worker}, C{attempt}, C{queue},
    C{priority}, C{cause}), in any order.

    Each delivery's run time is its outcome (done, failed, retrying or
    requeued) less its dispatch.  The events do not say when a delayed task
    or a retry became due; a dispatch to a worker with a credit free (see
    L{FREED_WITHIN}) is taken as the moment it did.  A retry whose dispatch
    waited for a worker is taken as due after the shortest backoff seen for
    its queue and attempt.  A task with no recorded run time (it never ran,
    or its worker never reported) runs for the median of its queue's runs.
    """
    tasks, freed = _gather(records)
    history = _History(tasks, _waiting(tasks, freed), _starts(tasks))
    jobs: list[Job] = []
    for task_id, task in tasks.items():
        if task.submitted is not None:  # else submitted before the history began
            jobs.append(history.job(task_id, task))
    jobs.sort(key=lambda job: (job.ready, job.task))
    return Workload(
        tuple(sorted({task.queue for task in tasks.values()})),
        tuple(jobs),
        _most_workers(tasks),
        history.measured,
        tuple(sorted(history.backlog)),
    )


def _gather(records: Iterable[Mapping[str, Any]]) -> tuple[dict[int, _Task], dict[int, set[int]]]:
    """Each task's events, by task id; and each worker's times its deliveries ended."""
    tasks: dict[int, _Task] = {}
    freed: dict[int, set[int]] = defaultdict(set)
    for r in records:
        task = tasks.get(r["task"])
        if task is None:
            task = tasks[r["task"]] = _Task(r["queue"], r["priority"] or 0)
        event, t, worker = r["event"], r["t"], r.get("worker")
        if event == "submitted":
            task.submitted = t
            if (r.get("v") or 1) >= DUE_SAID:
                task.due = max(t, r.get("due") or t)
        elif event == "dispatched":
            task.dispatches[r["attempt"]] = (t, worker)
        elif event in OUTCOMES:
            if r["attempt"] not in task.ends:
                task.ends[r["attempt"]] = (t, event, r.get("cause") or "")
            if worker is not None and event != "requeued":
                freed[worker].add(t)
        elif event in ("cancelled", "expired"):  # left the queue without running
            task.cancelled = t
        elif event == "moved":  # replayed as if in its new queue all along
            task.queue = r["queue"]
    return tasks, freed


def _waiting(
    tasks: Mapping[int, _Task], freed: Mapping[int, set[int]]
) -> dict[tuple[int, int], bool]:
    """
    Whether each delivery, by (task, attempt), took a credit just freed (or
    a new worker's): its task was waiting for a worker, not due only then.
    """

    def was_waiting(dispatch: tuple[int, int | None], seen: set[int]) -> bool:
        t, worker = dispatch
        times = freed.get(worker) if worker is not None else None
        if worker not in seen or not times:
            return True  # the worker's first task: its READY is not recorded
        return any(t - back in times for back in range(FREED_WITHIN + 1))

    # Which workers had dispatches before each one: a worker's first is ambiguous.
    order = sorted(
        (t, worker, task_id, attempt)
        for task_id, task in tasks.items()
        for attempt, (t, worker) in task.dispatches.items()
    )
    seen: set[int] = set()
    waiting: dict[tuple[int, int], bool] = {}
    for t, worker, task_id, attempt in order:
        waiting[task_id, attempt] = was_waiting((t, worker), seen)
        if worker is not None:
            seen.add(worker)
    return waiting


class _History:
    """
    What L{workload} makes each task's L{Job} from: which deliveries waited
    for a worker, when each began to run, the shortest backoff seen per queue
    and attempt (a retry that waited was due no sooner), each queue's median
    run; and, as the jobs are made, the waits measured and the backlog's steps.
    """

    def __init__(
        self,
        tasks: Mapping[int, _Task],
        waiting: Mapping[tuple[int, int], bool],
        started: Mapping[tuple[int, int], int],
    ) -> None:
        self.waiting = waiting
        self.started = started
        self.backoffs: dict[tuple[str, int], int] = {}
        runs: dict[str, list[int]] = defaultdict(list)
        for task_id, task in tasks.items():
            for attempt, (t, _) in task.dispatches.items():
                end = task.ends.get(attempt)
                if end is not None:
                    runs[task.queue].append(end[0] - started.get((task_id, attempt), t))
                before = task.ends.get(attempt - 1)
                if before is not None and before[1] == "retrying":
                    key = (task.queue, attempt)
                    self.backoffs[key] = min(self.backoffs.get(key, t - before[0]), t - before[0])
        every = [run for queue_runs in runs.values() for run in queue_runs]
        self.median = {queue: round(statistics.median(r)) for queue, r in runs.items()}
        self.overall = round(statistics.median(every)) if every else 0
        self.measured: dict[int, int] = {}
        self.backlog: list[tuple[int, str, int]] = []

    def job(self, task_id: int, task: _Task) -> Job:
        """The job of a task submitted in the history: its deliveries, as steps."""
        assert task.submitted is not None
        first_ready = ready = task.submitted
        steps: list[Step] = []
        attempt = 1
        while attempt in task.dispatches:
            t, _ = task.dispatches[attempt]
            ready = self._ready(task_id, task, attempt, t)
            start = self.started.get((task_id, attempt), t)
            if attempt == 1:
                first_ready = ready
                self.measured[task_id] = start - ready
            else:
                # The step before waits from its end to this one's ready time.
                end_t, event, cause = task.ends[attempt - 1]
                head = event == "requeued" and not cause.startswith(TIMED_OUT)
                steps[-1] = Step(steps[-1].run, ready - end_t, head)
            self.backlog += [(ready, task.queue, 1), (t, task.queue, -1)]
            end = task.ends.get(attempt)
            if end is None:
                steps.append(Step(self.median.get(task.queue, self.overall)))
                break
            steps.append(Step(end[0] - start))
            attempt += 1
        if not steps:
            # Never dispatched: still queued at the end, dropped, or cancelled.
            steps.append(Step(self.median.get(task.queue, self.overall)))
            self.backlog.append((ready, task.queue, 1))
            if task.cancelled is not None:
                self.backlog.append((task.cancelled, task.queue, -1))
        return Job(task_id, task.queue, task.priority, first_ready, tuple(steps), task.cancelled)

    def _ready(self, task_id: int, task: _Task, attempt: int, t: int) -> int:
        """When the delivery C{attempt} of a task, dispatched at C{t}, became ready to run."""
        waited = self.waiting[task_id, attempt]
        if attempt > 1:
            before = task.ends[attempt - 1]
            if before[1] != "retrying":
                return before[0]
            return min(t, before[0] + self.backoffs[task.queue, attempt]) if waited else t
        if task.due is not None:
            return task.due  # it said when it was due
        assert task.submitted is not None
        return task.submitted if waited else t  # delayed: due when it went to a free worker


def _starts(tasks: Mapping[int, _Task]) -> dict[tuple[int, int], int]:
    """
    When each delivery a worker reported began to run, by (task, attempt):
    a worker runs what it holds one at a time, so a delivery starts at its
    dispatch, or when the worker reported the one before (by the order of
    its reports), whichever is later.  Deliveries with no report of their
    worker (taken back) start at their dispatch.
    """
    reports: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    for task_id, task in tasks.items():
        for attempt, (t, worker) in task.dispatches.items():
            end = task.ends.get(attempt)
            if worker is not None and end is not None and end[1] != "requeued":
                reports[worker].append((end[0], t, task_id, attempt))
    starts: dict[tuple[int, int], int] = {}
    for ends in reports.values():
        free: int | None = None
        for reported, t, task_id, attempt in sorted(ends):
            starts[task_id, attempt] = t if free is None else max(t, free)
            free = reported
    return starts


def _most_workers(tasks: Mapping[int, _Task]) -> int:
    """
    The most workers at once: a worker (a connection) counts from its first
    dispatch to its last outcome (ends before starts at the same time).
    """
    spans: dict[int, list[int]] = {}
    for task in tasks.values():
        for attempt, (t, worker) in task.dispatches.items():
            if worker is None:
                continue
            end = task.ends.get(attempt)
            span = spans.setdefault(worker, [t, t])
            span[0] = min(span[0], t)
            span[1] = max(span[1], t if end is None else end[0])
    changes = sorted(
        change for first, last in spans.values() for change in ((first, 1), (last, -1))
    )
    workers = most = 0
    for _, change in changes:
        workers += change
        most = max(most, workers)
    return most


def measured_backlog(
    work: Workload, origin: int, bucket_ms: int
) -> tuple[tuple[str, int, int], ...]:
    """The recording's own backlog over time, as L{Outcome.backlog} gives it."""
    backlog = Backlog(origin, bucket_ms)
    for t, queue, by in work.backlog:
        backlog.change(t, queue, by)
    return backlog.finish()


Row = tuple[str, int, str, str, int, int]
"""(scenario, workers, queue, kind, time or bucket, value): see L{rows}."""


def rows(work: Workload, slots: int | None, origin: int, bucket_ms: int) -> Iterator[Row]:
    """
    The recording's results (C{slots} C{None}), or those of a simulation
    with C{slots} workers, as flat rows for the Spark job: scenario
    C{recorded} or C{simulated}, the workers, the queue, and kind C{wait}
    (time: when the task became ready, value: its wait in ms) or
    C{backlog} (a bucket, and the most tasks queued in it).
    """
    ready = {job.task: (job.queue, job.ready) for job in work.jobs}
    if slots is None:
        scenario, slots = "recorded", work.slots
        waits: Iterable[tuple[int, str, int]] = [
            (task, ready[task][0], wait) for task, wait in work.measured.items()
        ]
        backlog = measured_backlog(work, origin, bucket_ms)
    else:
        scenario = "simulated"
        outcome = simulate(work, slots, origin, bucket_ms)
        waits, backlog = outcome.waits, outcome.backlog
    for task, queue, wait in waits:
        yield (scenario, slots, queue, "wait", ready[task][1], wait)
    for queue, bucket, most in backlog:
        yield (scenario, slots, queue, "backlog", bucket, most)
