"""
The daemon's dispatch as a model: jobs replayed through a number of workers, each task's wait.

The report's capacity what-if (L{quicx.report.whatif}) replays a recorded
history through it for other numbers of workers; the daemon's autoscaling
signal (L{quicx.daemon.observe.autoscale}, through L{quicx.model.sizing})
replays the last minute's arrivals and run times through it to find the
fewest workers that keep the wait under a target.  One model for both, so
what the what-if was validated against (docs/pipeline.md) holds for the
signal.

The model is the daemon's dispatch (L{quicx.daemon.queue.core}) for workers
that are alike and subscribed to the same queues:

  - a task ready to run goes to a worker with a credit free if there is one
    (there is one only while every queue is empty);
  - a worker that frees a credit takes the next task of the first of its
    queues with tasks, in the order it subscribed (here: by name): the
    highest priority first, first ready first within a priority;
  - a task taken back from a worker that disconnected queues again at the
    head of its priority, one taken back at its timeout at the tail;
  - a retry is ready after its backoff;
  - with a L{Scaler}, the number of workers changes as it says: a new
    worker takes a queued task at once, a worker let go finishes what it
    runs first.

Times are milliseconds.  A task's wait is the start of its first run less
the time it became ready to run.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Protocol

from attrs import frozen


@frozen
class Step:
    """
    One delivery of a task.

    @ivar run: milliseconds it held its worker.
    @ivar gap: milliseconds from its end until the next delivery may start
        (a retry's backoff; 0 for a task taken back).
    @ivar head: the next delivery queues at the head of its priority (its
        worker disconnected), not at the tail.
    """

    run: int
    gap: int = 0
    head: bool = False


@frozen
class Job:
    """
    One task of the workload.

    @ivar ready: when it became ready to run (ms).
    @ivar cancelled: when it was cancelled, if it was (it leaves its queue
        then, unless it started).
    """

    task: int
    queue: str
    priority: int
    ready: int
    steps: tuple[Step, ...]
    cancelled: int | None = None


class Replayable(Protocol):
    """What L{simulate} replays: the queues, in the order workers serve them, and the jobs."""

    @property
    def queues(self) -> Sequence[str]: ...

    @property
    def jobs(self) -> Sequence[Job]: ...


class Scaler(Protocol):
    """Says, every C{every} ms of a simulation, how many workers there are from then on."""

    @property
    def every(self) -> int: ...

    def __call__(self, now: int, queued: Mapping[str, int]) -> int:
        """The workers from C{now}, given the tasks queued now, by queue."""


class _Kind(IntEnum):
    """What happens at a time, in the order things at the same millisecond happen."""

    DUE = 0  # a retry or a requeued task is ready again
    ARRIVAL = 1
    END = 2  # a delivery ends: its worker frees a credit
    CANCEL = 3


@frozen
class Outcome:
    """
    What a simulation predicts.

    @ivar waits: (task id, queue, wait in ms) of each task that ran.
    @ivar backlog: (queue, bucket, most tasks queued in it) for each bucket
        from the first to the last in which the queue had tasks queued
        (buckets of C{bucket_ms} from C{origin}; a bucket not listed had none).
    """

    waits: tuple[tuple[int, str, int], ...]
    backlog: tuple[tuple[str, int, int], ...]


class Backlog:
    """
    The most tasks queued per queue and time bucket, from the changes as
    they happen (in time order).  A queue's depth counts at the end of each
    millisecond: a task queued and taken in the same one is not counted.
    """

    def __init__(self, origin: int, bucket_ms: int) -> None:
        self.origin = origin
        self.bucket_ms = bucket_ms
        self.depth: dict[str, int] = defaultdict(int)
        self._now = origin
        self._changed: set[str] = set()
        self._seen: dict[str, int] = {}  # the depth last counted
        self._bucket: dict[str, int] = {}
        self._most: dict[str, int] = {}
        self.rows: list[tuple[str, int, int]] = []

    def change(self, t: int, queue: str, by: int) -> None:
        if t != self._now:
            self._count()
            self._now = t
        self.depth[queue] += by
        self._changed.add(queue)

    def _count(self) -> None:
        """Count the depth of the queues that changed in the millisecond now over."""
        bucket = (self._now - self.origin) // self.bucket_ms
        for queue in self._changed:
            depth = self.depth[queue]
            seen = self._seen.get(queue, 0)
            current = self._bucket.get(queue)
            if current != bucket:
                if current is not None:
                    self._close(queue, current)
                    # Buckets with no change keep the depth they started with.
                    if seen:
                        self.rows += [(queue, b, seen) for b in range(current + 1, bucket)]
                self._bucket[queue] = bucket
                self._most[queue] = seen
            self._most[queue] = max(self._most[queue], depth)
            self._seen[queue] = depth
        self._changed.clear()

    def _close(self, queue: str, bucket: int) -> None:
        if self._most[queue]:
            self.rows.append((queue, bucket, self._most[queue]))

    def finish(self) -> tuple[tuple[str, int, int], ...]:
        self._count()
        for queue, bucket in self._bucket.items():
            self._close(queue, bucket)
        return tuple(sorted(self.rows))


def simulate(
    work: Replayable,
    slots: int,
    origin: int = 0,
    bucket_ms: int = 1000,
    scaler: Scaler | None = None,
) -> Outcome:
    """
    Replay C{work} through C{slots} workers (see the module's docstring);
    with C{scaler}, through as many as it says from its first decision, at
    the first job's ready time, while there is work left.
    """
    replay = _Replay(work, slots, origin, bucket_ms)
    replay.run(scaler)
    return Outcome(tuple(replay.waits), replay.backlog.finish())


class _Replay:
    """One simulation's state: the events to come, the queues, the workers free."""

    def __init__(self, work: Replayable, slots: int, origin: int, bucket_ms: int) -> None:
        self.queue_names = tuple(work.queues)
        self.events: list[tuple[int, int, int, Job, int]] = []  # (time, kind, seq, job, step)
        self.seq = 0
        for job in work.jobs:
            self._push(job.ready, _Kind.ARRIVAL, job, 0)
            if job.cancelled is not None:
                self._push(job.cancelled, _Kind.CANCEL, job, 0)
        heapq.heapify(self.events)
        self.queued: dict[str, list[tuple[int, int, Job, int]]] = {q: [] for q in work.queues}
        self.waiting: set[int] = set()  # queued tasks, by id (a cancelled one leaves lazily)
        self.head = 0  # decreasing: the latest pushed at the head goes first
        self.slots = slots
        self.free = slots  # idle workers; less than 0: workers to let go as they finish
        self.backlog = Backlog(origin, bucket_ms)
        self.waits: list[tuple[int, str, int]] = []

    def _push(self, when: int, kind: _Kind, job: Job, step: int) -> None:
        self.events.append((when, kind, self.seq, job, step))
        self.seq += 1

    def run(self, scaler: Scaler | None) -> None:
        events = self.events
        decide = events[0][0] if scaler is not None and events else None
        while events:
            if scaler is not None and decide is not None and decide <= events[0][0]:
                self._scale(decide, scaler(decide, self.backlog.depth))
                decide += scaler.every
                continue
            now, kind, _, job, step = heapq.heappop(events)
            if kind is _Kind.END:
                self._ended(now, job, step)
            elif kind is _Kind.CANCEL:
                if job.task in self.waiting:
                    self.waiting.discard(job.task)
                    self.backlog.change(now, job.queue, -1)
            elif self.free > 0:
                self.free -= 1  # a worker is idle: every queue is empty
                self._start(now, job, step)
            else:
                self._queue(now, kind, job, step)

    def _start(self, now: int, job: Job, step: int) -> None:
        if step == 0:
            self.waits.append((job.task, job.queue, now - job.ready))
        heapq.heappush(self.events, (now + job.steps[step].run, _Kind.END, self.seq, job, step))
        self.seq += 1

    def _queue(self, now: int, kind: int, job: Job, step: int) -> None:
        if kind is _Kind.DUE and job.steps[step - 1].head:
            self.head -= 1
            order = self.head
        else:
            order = self.seq
            self.seq += 1
        heapq.heappush(self.queued[job.queue], (-job.priority, order, job, step))
        self.waiting.add(job.task)
        self.backlog.change(now, job.queue, 1)

    def _ended(self, now: int, job: Job, step: int) -> None:
        done = job.steps[step]
        if step + 1 < len(job.steps):
            heapq.heappush(self.events, (now + done.gap, _Kind.DUE, self.seq, job, step + 1))
            self.seq += 1
        if self.free < 0:
            self.free += 1  # a worker let go: it leaves now
        elif not self._take(now):
            self.free += 1

    def _take(self, now: int) -> bool:
        """A free worker takes the next queued task, if any: whether it did."""
        for queue in self.queue_names:
            tasks = self.queued[queue]
            while tasks and tasks[0][2].task not in self.waiting:
                heapq.heappop(tasks)  # cancelled
            if tasks:
                _, _, next_job, next_step = heapq.heappop(tasks)
                self.waiting.discard(next_job.task)
                self.backlog.change(now, queue, -1)
                self._start(now, next_job, next_step)
                return True
        return False

    def _scale(self, now: int, slots: int) -> None:
        """From C{now}, C{slots} workers: new ones take queued tasks at once."""
        self.free += slots - self.slots
        self.slots = slots
        while self.free > 0 and self._take(now):
            self.free -= 1


def percentile(values: Sequence[int], p: float) -> float:
    """The C{p} quantile of C{values}, interpolated between ranks (as Spark's C{percentile})."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)
