"""
The daemon's state as Prometheus metrics, read when scraped.

The daemon's state as Prometheus metrics: a collector that reads it when
scraped (see docs/operations.md#prometheus-metrics for every metric).

Nothing is counted here: the counts and latencies per queue and task type
are L{quicx.daemon.observe.telemetry}'s, the rest are the parts of the
status document (L{quicx.daemon.observe.status}) as they stand, on the
reactor thread: the figures C{quicx status} shows, under the same names.
The collector is used alone (C{generate_latest} takes it as its registry),
not through C{prometheus_client}'s global registry, so a second daemon in
the same process (as in the tests) has its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from attrs import define
from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from quicx import __version__
from quicx.daemon.journal.writer import Journal
from quicx.daemon.observe import status as parts
from quicx.daemon.observe.autoscale import Autoscaler
from quicx.daemon.observe.eventbus import EventBus
from quicx.daemon.observe.telemetry import Histogram, Tally
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.shared import SharedData
from quicx.documents import status as document
from quicx.protocol.session import Role


def buckets(histogram: Histogram) -> list[tuple[str, float]]:
    """C{histogram}'s counts as Prometheus buckets: cumulative, C{+Inf} last."""
    found, seen = [], 0
    bounds = [*map(floatToGoString, histogram.bounds), "+Inf"]
    for bound, count in zip(bounds, list(histogram.counts), strict=True):
        seen += count
        found.append((bound, float(seen)))
    return found


@define
class Snapshot:
    """
    The metrics as they stood at one moment: the small families built, the
    tallies copied.  Its L{collect} builds the tallies' families -- most of a
    scrape's work when there are many (queue, type) pairs -- and may run on
    any thread.
    """

    families: list[Metric]
    tallies: list[Tally]
    rejected: dict[str, int]

    def collect(self) -> Iterator[Metric]:
        yield from self.families
        yield from task_families(self.tallies, self.rejected)

    def text(self) -> bytes:
        """
        What C{generate_latest(self)} writes, built L{TALLIES_PER_CHUNK}
        tallies at a time: C{prometheus_client} holds each sample of a family
        as an object (about 24 KiB a tally), so a family of thousands of
        tallies built whole took tens of MiB, kept by the allocators after.
        Each family's C{# HELP} and C{# TYPE} lines are written once.
        """
        parts = [generate_latest(_Families(self.families))]
        for built, family in enumerate(TALLY_FAMILIES):
            if built == REJECTED_AFTER:
                parts.append(generate_latest(_Families([rejected_family(self.rejected)])))
            for start in range(0, len(self.tallies) or 1, TALLIES_PER_CHUNK):
                text = generate_latest(
                    _Families([family(self.tallies[start : start + TALLIES_PER_CHUNK])])
                )
                parts.append(text.split(b"\n", 2)[2] if start else text)
        return b"".join(parts)


TALLIES_PER_CHUNK = 100
"""Tallies whose samples are built at once, by L{Snapshot.text}."""


@define
class _Families:
    """Metric families as a registry, for C{generate_latest}."""

    families: list[Metric]

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class QuicxCollector(Collector):
    """
    Every metric of one daemon, read at each scrape.

    @ivar journal: the journal, or C{None} without one (no journal metrics).
    @ivar events: the event bus, or C{None} (no event metrics).
    @ivar cluster: makes the cluster view of C{[cluster] peers} (see
        L{quicx.documents.cluster}), or C{None} (no C{quicx_cluster_*} metrics).
    @ivar autoscale: the autoscaling signal, or C{None} (no C{quicx_autoscale_*} metrics).
    @ivar replication: makes the status document's C{replication} part, or
        C{None} without C{[replication]} (no C{quicx_replication_*} metrics).
    """

    def __init__(
        self,
        queue: QueueService,
        shared: SharedData,
        journal: Journal | None,
        events: EventBus | None = None,
        cluster: Callable[[], dict[str, Any]] | None = None,
        autoscale: Autoscaler | None = None,
        replication: Callable[[], document.Replication] | None = None,
    ) -> None:
        self.autoscale = autoscale
        self.replication = replication
        self.cluster = cluster
        self.queue = queue
        self.shared = shared
        self.journal = journal
        self.events = events

    def collect(self) -> Iterator[Metric]:
        return self.snapshot().collect()

    def snapshot(self) -> Snapshot:
        """(The reactor's thread.) The state now, for a scrape to format anywhere."""
        families = [
            *self._process(),
            *self._queues(),
            *self._connections(),
            *self._pool(),
            *self._kept(),
        ]
        if self.journal is not None:
            families.extend(self._journal(self.journal))
        if self.events is not None:
            families.extend(self._events(self.events))
        if self.cluster is not None:
            families.extend(cluster_families(self.cluster()))
        if self.autoscale is not None:
            families.extend(autoscale_families(self.autoscale))
        if self.replication is not None:
            families.extend(replication_families(self.replication()))
        telemetry = self.queue.telemetry
        tallies = [telemetry.tallies[key].copy() for key in sorted(telemetry.tallies)]
        return Snapshot(families, tallies, dict(telemetry.rejected))

    def _process(self) -> Iterator[Metric]:
        queue = self.queue
        info = InfoMetricFamily(
            "quicx_build", "The daemon's version and protocol versions.", labels=["version"]
        )
        info.add_metric(
            [__version__],
            {"protocols": ",".join(map(str, sorted(queue.limits.versions)))},
        )
        yield info
        yield GaugeMetricFamily(
            "quicx_start_time_seconds",
            "When the daemon started (Unix time).",
            value=queue.started_at,
        )
        yield GaugeMetricFamily(
            "quicx_uptime_seconds",
            "Seconds since the daemon started.",
            value=queue.clock() - queue.started_at,
        )

    def _queues(self) -> Iterator[Metric]:
        queues = [self.queue.queues[name] for name in sorted(self.queue.queues)]
        depth = GaugeMetricFamily(
            "quicx_queue_depth",
            "Tasks queued, by priority (the queue's default priority always, others while they"
            " have tasks).",
            labels=["queue", "priority"],
        )
        for queue in queues:
            levels = queue.by_priority()
            levels.setdefault(str(queue.priority), 0)
            for priority, count in sorted(levels.items(), key=lambda item: int(item[0])):
                depth.add_metric([queue.name, priority], count)
        yield depth
        for name, text, attribute in (
            ("quicx_queue_delayed", "Tasks waiting for their time (delays, retries).", "delayed"),
            ("quicx_queue_running", "Tasks held by workers (in flight).", "running"),
            ("quicx_queue_dead_letters", "Tasks in the dead-letter set.", "dead"),
            ("quicx_queue_workers", "Workers subscribed.", "subscribers"),
            ("quicx_queue_paused", "1 while the queue is paused.", "paused"),
        ):
            gauge = GaugeMetricFamily(name, text, labels=["queue"])
            for queue in queues:
                gauge.add_metric([queue.name], int(getattr(queue, attribute)))
            yield gauge
        promoted = CounterMetricFamily(
            "quicx_queue_promoted",
            "Tasks dealt before a higher priority's because they waited [queues] aging.",
            labels=["queue"],
        )
        for queue in queues:
            promoted.add_metric([queue.name], 0 if queue.aging is None else queue.aging.promoted)
        yield promoted

    def _connections(self) -> Iterator[Metric]:
        queue = self.queue
        roles = Counter(session.role for session in queue.sessions.values())
        connections = GaugeMetricFamily(
            "quicx_connections",
            "Open connections, by role (new: no SUBMIT or READY yet, as a monitor).",
            labels=["role"],
        )
        for role in Role:
            connections.add_metric([role.value], roles[role])
        yield connections
        yield GaugeMetricFamily(
            "quicx_workers_idle",
            "Workers with a credit free.",
            value=parts.connections(queue).idle_workers,
        )

    def _pool(self) -> Iterator[Metric]:
        pool = self.queue.pool
        memory = parts.memory(pool)
        yield GaugeMetricFamily(
            "quicx_pool_size_bytes", "The memory pool's size.", value=memory.total
        )
        yield GaugeMetricFamily(
            "quicx_pool_used_bytes",
            "Pool bytes in use (blocks with their headers, and the lookup table).",
            value=memory.used,
        )
        blocks = GaugeMetricFamily(
            "quicx_pool_class_blocks", "Blocks of each size class.", labels=["size"]
        )
        used = GaugeMetricFamily(
            "quicx_pool_class_used_blocks", "Blocks in use, by size class.", labels=["size"]
        )
        for size_class in parts.classes(pool):
            blocks.add_metric([str(size_class.size)], size_class.blocks_total)
            used.add_metric([str(size_class.size)], size_class.blocks_used)
        yield from (blocks, used)

    def _kept(self) -> Iterator[Metric]:
        results = parts.results(self.queue)
        groups = parts.groups(self.queue)
        checkpoints = parts.checkpoints(self.queue)
        shared = parts.shared_data(self.shared)
        for name, text, value in (
            ("quicx_results_kept", "Task outcomes kept for AWAIT.", results.kept),
            ("quicx_results_kept_bytes", "Pool bytes the kept outcomes take.", results.memory),
            ("quicx_result_waiters", "AWAITs and group WAITs waiting.", results.waiters),
            ("quicx_groups", "Groups known (open, closed or finished).", groups.total),
            ("quicx_groups_unfinished", "Groups not finished yet.", groups.unfinished),
            (
                "quicx_tasks_waiting",
                "Tasks waiting for their parents or their group.",
                len(self.queue.dependencies.waiters),
            ),
            ("quicx_checkpoints", "Running tasks' checkpoints kept.", checkpoints.kept),
            ("quicx_checkpoints_bytes", "Bytes of the checkpoints kept.", checkpoints.bytes),
            ("quicx_shared_names", "Shared-data names.", shared.names),
            ("quicx_shared_bytes", "Bytes of the shared data's current versions.", shared.bytes),
        ):
            yield GaugeMetricFamily(name, text, value=value)

    def _events(self, events: EventBus) -> Iterator[Metric]:
        counted = parts.events_status(events)
        yield GaugeMetricFamily(
            "quicx_event_subscribers",
            "Connections watching live events (WATCH).",
            value=counted.subscribers,
        )
        yield CounterMetricFamily(
            "quicx_events_dropped",
            "Live events not sent to a subscriber that read too slowly.",
            value=counted.dropped,
        )
        yield CounterMetricFamily(
            "quicx_events_written",
            "Events written to the events files.",
            value=counted.written,
        )

    def _journal(self, journal: Journal) -> Iterator[Metric]:
        counted = parts.journal_status(journal)
        yield GaugeMetricFamily(
            "quicx_journal_file_bytes", "The journal file's size.", value=counted.file_bytes
        )
        yield CounterMetricFamily(
            "quicx_journal_compactions",
            "Compactions since start.",
            value=counted.compactions,
        )
        yield GaugeMetricFamily(
            "quicx_journal_broken",
            "1 once a write failed: new tasks are refused until restart.",
            value=int(bool(counted.broken)),
        )
        yield latencies(
            "quicx_journal_append_seconds",
            "Writing one batch of records (a group commit, its sync left out).",
            [],
            [([], journal.append_latency)],
        )
        yield latencies(
            "quicx_journal_fsync_seconds",
            "One sync of appended records (group commit or once a second).",
            [],
            [([], journal.fsync_latency)],
        )


CLUSTER_GAUGES = (
    ("queued", "quicx_cluster_queued", "Tasks queued in the daemon."),
    ("running", "quicx_cluster_running", "Tasks held by the daemon's workers."),
    ("delayed", "quicx_cluster_delayed", "Tasks waiting for their time in the daemon."),
    ("dead", "quicx_cluster_dead_letters", "Tasks in the daemon's dead-letter set."),
    ("workers", "quicx_cluster_workers", "The daemon's workers."),
    ("idle_workers", "quicx_cluster_workers_idle", "The daemon's workers with a credit free."),
    ("connections", "quicx_cluster_connections", "The daemon's open connections."),
)
"""The cluster view's figures of each daemon up, as gauges: key, name, help."""


def autoscale_families(autoscale: Autoscaler) -> Iterator[Metric]:
    """The autoscaling signal: each queue's workers needed, and the wait it keeps under."""
    yield GaugeMetricFamily(
        "quicx_autoscale_target_seconds",
        "The p95 queue wait the workers needed keep under ([autoscale] target).",
        value=autoscale.settings.target,
    )
    needed = GaugeMetricFamily(
        "quicx_autoscale_workers_needed",
        "Workers needed to keep the queue's p95 wait under the target, from its recent"
        " arrivals and run times.",
        labels=["queue"],
    )
    p95 = GaugeMetricFamily(
        "quicx_autoscale_p95_wait_seconds",
        "The p95 queue wait the model predicts with the workers needed.",
        labels=["queue"],
    )
    for name, found in autoscale.document()["queues"].items():
        needed.add_metric([name], found["workers"])
        p95.add_metric([name], found["p95_wait_seconds"])
    yield needed
    yield p95
    yield GaugeMetricFamily(
        "quicx_autoscale_longest_step_seconds",
        "The longest one step of an estimate held the reactor, since start.",
        value=autoscale.longest_step,
    )


ROLES = ("candidate", "standby", "primary", "fenced")
"""The roles C{quicx_replication_role} has a sample for (1: the one held)."""


def replication_families(part: document.Replication) -> Iterator[Metric]:
    """This daemon's role in its shard, its epoch, its lag and its in-sync standbys."""
    role = GaugeMetricFamily(
        "quicx_replication_role",
        "1 for the role this daemon holds in its shard, 0 for the others.",
        labels=["role"],
    )
    for name in ROLES:
        role.add_metric([name], int(part.role == name))
    yield role
    for name, text, value in (
        ("quicx_replication_epoch", "The epoch of the primary it is or follows.", part.epoch),
        (
            "quicx_replication_lag_batches",
            "Batches an in-sync standby has not acknowledged (a primary) or applied (a standby).",
            part.lag_batches,
        ),
        (
            "quicx_replication_lag_seconds",
            "The age of the oldest of those batches.",
            part.lag_seconds,
        ),
        (
            "quicx_replication_in_sync_standbys",
            "A primary's in-sync standbys (0 on a standby).",
            len(part.in_sync_standbys),
        ),
    ):
        yield GaugeMetricFamily(name, text, value=value)


def cluster_families(view: Mapping[str, Any]) -> Iterator[Metric]:
    """
    The cluster view (L{quicx.documents.cluster.cluster_view}) as gauges with a
    C{daemon} label: the peer's address, or C{self}.  Their names are their
    own, so that summing the daemons' own series never counts them again.
    """
    daemons = view["daemons"]
    up = [row for row in daemons if row["up"]]
    alive = GaugeMetricFamily(
        "quicx_cluster_up", "1 if the daemon answered its last poll, else 0.", labels=["daemon"]
    )
    for row in daemons:
        alive.add_metric([row["address"]], int(row["up"]))
    yield alive
    submitted = GaugeMetricFamily(
        "quicx_cluster_tasks_submitted",
        "Tasks the daemon accepted since it started.",
        labels=["daemon"],
    )
    finished = GaugeMetricFamily(
        "quicx_cluster_tasks_finished",
        "Tasks the daemon finished since it started, by outcome: done, failed (dead ones"
        " too) or cancelled.",
        labels=["daemon", "outcome"],
    )
    for row in up:
        submitted.add_metric([row["address"]], row["tasks"]["submitted"])
        for outcome in ("done", "failed", "cancelled"):
            finished.add_metric([row["address"], outcome], row["tasks"][outcome])
    yield from (submitted, finished)
    for key, name, text in CLUSTER_GAUGES:
        gauge = GaugeMetricFamily(name, text, labels=["daemon"])
        for row in up:
            gauge.add_metric([row["address"]], row[key])
        yield gauge
    for key, name, text in (
        ("used", "quicx_cluster_pool_used_bytes", "The daemon's pool bytes in use."),
        ("total", "quicx_cluster_pool_size_bytes", "The daemon's pool size."),
    ):
        gauge = GaugeMetricFamily(name, text, labels=["daemon"])
        for row in up:
            gauge.add_metric([row["address"]], row["memory"][key])
        yield gauge


def _counts(
    name: str,
    text: str,
    count: Callable[[Tally], Iterable[tuple[list[str], float]]],
    extra: Sequence[str] = (),
) -> Callable[[Sequence[Tally]], Metric]:
    """
    A family of counters per queue and type (and the C{extra} labels);
    C{count} gives a tally's (values of the extra labels, count) pairs.
    """

    def family(tallies: Sequence[Tally]) -> Metric:
        found = CounterMetricFamily(name, text, labels=["queue", "type", *extra])
        for tally in tallies:
            for values, value in count(tally):
                found.add_metric([tally.queue, tally.task_type, *values], value)
        return found

    return family


def _latencies(
    name: str, text: str, histogram: Callable[[Tally], Histogram]
) -> Callable[[Sequence[Tally]], Metric]:
    """A family of latency histograms per queue and type."""

    def family(tallies: Sequence[Tally]) -> Metric:
        return latencies(
            name,
            text,
            ["queue", "type"],
            (([tally.queue, tally.task_type], histogram(tally)) for tally in tallies),
        )

    return family


TALLY_FAMILIES: tuple[Callable[[Sequence[Tally]], Metric], ...] = (
    _counts("quicx_tasks_submitted", "Tasks accepted (OK sent).", lambda t: [([], t.submitted)]),
    _counts(
        "quicx_tasks_finished",
        "Tasks finished, by outcome: done, failed (for good), dead (into the"
        " dead letters), cancelled or expired (not started before its deadline).",
        lambda t: [([outcome], getattr(t, outcome)) for outcome in Tally.OUTCOMES],
        extra=["outcome"],
    ),
    _counts(
        "quicx_tasks_retried",
        "Failed attempts that run again after a backoff.",
        lambda t: [([], t.retried)],
    ),
    _counts(
        "quicx_tasks_requeued",
        "Deliveries taken back and queued again (a worker lost, a timeout).",
        lambda t: [([], t.requeued)],
    ),
    _counts(
        "quicx_tasks_debounced",
        "SUBMITs folded into a queued task of their key by its debounce.",
        lambda t: [([], t.debounced)],
    ),
    _latencies(
        "quicx_task_wait_seconds",
        "From ready to run (queued, due, or requeued) to dispatched.",
        lambda t: t.wait,
    ),
    _latencies(
        "quicx_task_run_seconds", "From dispatched to the worker's outcome.", lambda t: t.run
    ),
)
"""The families of the counts and latencies per queue and type, in their order."""

REJECTED_AFTER = 4
"""The rejections' family comes after this many of L{TALLY_FAMILIES}."""


def rejected_family(rejected_by_code: dict[str, int]) -> Metric:
    """The family of SUBMITs refused, by error code."""
    rejected = CounterMetricFamily(
        "quicx_tasks_rejected", "SUBMITs refused, by error code.", labels=["code"]
    )
    for code, count in sorted(rejected_by_code.items()):
        rejected.add_metric([code], count)
    return rejected


def task_families(tallies: list[Tally], rejected_by_code: dict[str, int]) -> Iterator[Metric]:
    """The families of the counts and latencies per queue and type, and of rejections."""
    for built, family in enumerate(TALLY_FAMILIES):
        if built == REJECTED_AFTER:
            yield rejected_family(rejected_by_code)
        yield family(tallies)


def latencies(
    name: str, text: str, labels: Sequence[str], series: Iterable[tuple[list[str], Histogram]]
) -> HistogramMetricFamily:
    """A histogram family of C{series}: (label values, L{Histogram}) pairs."""
    family = HistogramMetricFamily(name, text, labels=labels)
    for values, histogram in series:
        family.add_metric(values, buckets(histogram), histogram.total)
    return family
