"""
What the configuration says about queues, keys, progress, shared data and subscribers.

What the configuration says about queues: each declared queue's policy, and
the limits on queues, keys and the deduplication window; and about progress
reports and shared data.  Plain data: the settings build it, the queue core
reads it.  And about live event subscribers.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import field, frozen

from quicx.daemon.queue.dispatch import DispatchSettings
from quicx.daemon.queue.groups import GroupLimits
from quicx.daemon.queue.results import ResultLimits
from quicx.protocol.codec import DEFAULT_QUEUE
from quicx.protocol.taskflow import Backoff

DEFAULT_BACKOFF = Backoff()
"""Exponential from 1 s, doubling up to 5 minutes, no jitter."""


@frozen
class QueuePolicy:
    """
    One queue's settings (a C{[queue NAME]} section, or the defaults).

    @ivar max_depth: the most tasks it may hold queued (0: only the pool bounds it).
    @ivar priority: the priority of a task submitted without one (0-255).
    @ivar timeout: seconds a worker may hold one of its tasks before it is
        requeued; C{None}: C{[tasks] timeout}.
    @ivar key_concurrency: the most tasks of one fairness key running at
        once (0: no limit).
    @ivar rate: tasks per second the queue may start (0: no limit), with
        C{burst} tokens of bucket (0: one second's worth).
    @ivar key_rate: the same per fairness key, with C{key_burst}.
    @ivar retries: how many times a failed task is retried (0: never).
    @ivar backoff: the wait before each retry, with its jitter.
    @ivar keep_results: keep every task's outcome (and result) after it
        finishes, as if its SUBMIT had asked.
    @ivar result_ttl: seconds an outcome is kept when the queue keeps it;
        C{None}: C{[results] ttl}.
    @ivar aging: the starvation bound C{W}: seconds after which a lower
        priority's next task goes before higher ones (0: strict priority
        order; see L{quicx.daemon.queue.aging}).
    @ivar expires: seconds a task may wait to start, from when it is due,
        unless its SUBMIT gives its own deadline (0: no deadline).
    @ivar expired_dead: an expired task goes to the dead-letter set.
    """

    max_depth: int = 0
    priority: int = 0
    timeout: float | None = None
    key_concurrency: int = 0
    rate: float = 0.0
    burst: int = 0
    key_rate: float = 0.0
    key_burst: int = 0
    retries: int = 0
    backoff: Backoff = DEFAULT_BACKOFF
    keep_results: bool = False
    result_ttl: float | None = None
    aging: float = 5.0
    expires: float = 0.0
    expired_dead: bool = False


@frozen
class DependencyLimits:
    """
    The C{[dependencies]} settings.

    @ivar max_parents: the most parents one SUBMIT may name (the wire carries 63).
    @ivar max_waiting: the most tasks waiting at once.
    @ivar max_results: the most bytes of its parents' results (or its group
        members') a task is handed; past it, outcomes come without their data.
    """

    max_parents: int = 32
    max_waiting: int = 100_000
    max_results: int = 16_384


@frozen
class QueueLimits:
    """
    The limits on queues and keys across the daemon (C{[protocol]} and
    C{[queues]}), and how tasks are dealt to workers.

    @ivar versions: the protocol versions the daemon accepts.
    @ivar default_queue: where a SUBMIT without a queue goes, and what a
        worker without a subscription serves (version-1 clients always).
    @ivar max_queues: the most queues that may exist at once.
    @ivar max_key_length: the longest idempotency or fairness key (bytes).
    @ivar dedup_window: seconds an idempotency key is remembered after its
        task was submitted.
    @ivar max_dedup_keys: the most keys of finished tasks remembered (the
        keys of live tasks are always kept; the pool bounds those).
    @ivar max_fairness_keys: the most fairness keys with state (queued or
        running tasks, or a rate bucket) across all queues.
    @ivar max_delay: the furthest ahead a task may be delayed (seconds).
    @ivar max_delayed: the most tasks delayed at once (delays and retries).
    @ivar max_lease: the longest a TOUCH may extend a lease (seconds).
    @ivar count_lost: a task taken back from a lost or too-slow worker counts
        as a failed attempt.
    @ivar dead_max_count: the most tasks kept in dead-letter sets (0: none).
    @ivar dead_max_age: seconds a dead task is kept (0: until pushed out).
    @ivar declared: the C{[queue NAME]} sections, by name.
    @ivar defaults: the policy of a queue without a section.
    @ivar results: the bounds on kept outcomes, results and waits.
    @ivar groups: the bounds on groups.
    @ivar dependencies: the bounds on tasks that wait for others.
    @ivar dispatch: which idle worker is offered a task first.
    """

    versions: frozenset[int] = frozenset({1, 2})
    default_queue: str = DEFAULT_QUEUE
    max_queues: int = 1000
    max_key_length: int = 255
    dedup_window: float = 3600.0
    max_dedup_keys: int = 100_000
    max_fairness_keys: int = 10_000
    max_delay: float = 365 * 86400.0
    max_delayed: int = 1_000_000
    max_lease: float = 86400.0
    count_lost: bool = False
    dead_max_count: int = 10_000
    dead_max_age: float = 7 * 86400.0
    declared: Mapping[str, QueuePolicy] = field(factory=dict)
    defaults: QueuePolicy = QueuePolicy()
    results: ResultLimits = field(factory=ResultLimits)
    groups: GroupLimits = field(factory=GroupLimits)
    dependencies: DependencyLimits = field(factory=DependencyLimits)
    dispatch: DispatchSettings = field(factory=DispatchSettings)

    def policy(self, name: str) -> QueuePolicy:
        return self.declared.get(name, self.defaults)

    @property
    def outcomes_claimable(self) -> bool:
        """A producer may come back for its outcomes: version 2 is spoken."""
        return 2 in self.versions


@frozen
class ProgressSettings:
    """
    The C{[progress]} settings.

    @ivar interval: the least time between two reports of one task that go
        out (seconds; 0: every report goes out).
    @ivar max_message: the longest message a report may carry (bytes).
    """

    interval: float = 0.1
    max_message: int = 256


@frozen
class SharedLimits:
    """
    The C{[shared]} settings.

    @ivar max_size: the most data one version may have (bytes).
    @ivar max_names: the most names that may exist at once; a follower may
        follow at most as many.
    @ivar max_memory: the most data all names may have together (bytes).
    """

    max_size: int = 1 << 20
    max_names: int = 64
    max_memory: int = 16 << 20


@frozen
class SubscriberLimits:
    """
    The C{[events]} limits on live subscribers (connections that sent WATCH).

    @ivar max_subscribers: connections that may watch at once.
    @ivar max_held: events held for one subscriber whose output is backed up.
    """

    max_subscribers: int = 16
    max_held: int = 10_000
