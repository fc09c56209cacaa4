"""
The configuration as records: one per C{[section]}, each the object its part of the daemon takes.

L{Config} holds one record per section, under the section's name
(C{config.server}, C{config.journal}, ...), then the C{[queue NAME]} and
C{[schedule NAME]} sections and where it all came from.  A record's field
defaults are the settings' defaults (the declarations in
L{quicx.daemon.config.declarations} read them from here).  Sections that a
subsystem of its own takes are that subsystem's record: C{[limits]} is the
server's L{Limits}, C{[results]} the queue's L{ResultLimits}, C{[progress]},
C{[shared]}, C{[groups]} theirs, C{[events]} the event log's
L{EventSettings} (its live subscribers' limits within), C{[tls]} the
listeners' L{TlsSettings}.  The queue core takes L{QueueLimits}, built by
keyword from C{[protocol]}, C{[tasks]}, C{[queues]}, C{[retries]},
C{[dead_letters]}, C{[results]}, C{[groups]} and the C{[queue NAME]} sections.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Mapping
from enum import Enum
from typing import Any

import attrs
from attrs import Factory, field, frozen

from quicx.daemon.config.endpoints import tcp_address
from quicx.daemon.journal.records import (
    DEFAULT_COMPACT_FACTOR,
    DEFAULT_COMPACT_MIN_SIZE,
    FsyncPolicy,
)
from quicx.daemon.observe.events import EventSettings
from quicx.daemon.observe.logformat import LogFormat
from quicx.daemon.observe.telemetry import DEFAULT_MAX_SERIES, DEFAULT_MAX_TYPES
from quicx.daemon.queue import pmad
from quicx.daemon.queue.bulk import BulkSettings
from quicx.daemon.queue.checkpoints import CheckpointSettings
from quicx.daemon.queue.dispatch import DispatchSettings
from quicx.daemon.queue.groups import GroupLimits
from quicx.daemon.queue.policy import (
    DEFAULT_BACKOFF,
    DependencyLimits,
    ProgressSettings,
    QueueLimits,
    QueuePolicy,
    SharedLimits,
)
from quicx.daemon.queue.results import ResultLimits
from quicx.daemon.queue.schedules import ScheduleSpec
from quicx.net.addresses import split_addresses
from quicx.net.busypoll import DEFAULT_SPIN
from quicx.net.certificates import Authorization
from quicx.net.tls import TlsSettings
from quicx.protocol.codec import DEFAULT_QUEUE, MAX_TYPE_LENGTH
from quicx.protocol.replication import DEFAULT_MAX_BATCH
from quicx.protocol.taskflow import Backoff

DEFAULT_PORT = 16381


def default_runtime_path(port: int, suffix: str) -> str:
    """C{$XDG_RUNTIME_DIR/quicx-PORT.SUFFIX}, or under the temporary directory."""
    directory = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return os.path.join(directory, f"quicx-{port}.{suffix}")


@frozen
class ServerSettings:
    """
    C{[server]}: where the daemon listens, its heartbeats, its control
    socket and pid file, and how it stops.

    C{control}, C{pid_file}: C{""} for the default path (L{control_path},
    L{pid_path}); C{control = none} turns the control socket off.
    """

    port: int = DEFAULT_PORT
    listen: tuple[str, ...] = ()
    heartbeat_interval: float = 30.0
    heartbeat_timeout: float = 90.0
    control: str = ""
    pid_file: str = ""
    drain_timeout: float = 30.0
    spare_busy_workers: bool = False
    busy_poll: float = DEFAULT_SPIN

    @property
    def endpoints(self) -> tuple[str, ...]:
        return self.listen or (f"tcp:{self.port}:interface=127.0.0.1",)

    @property
    def control_path(self) -> str | None:
        """The control socket's path, or C{None} when it is turned off."""
        if self.control.lower() == "none":
            return None
        return self.control or default_runtime_path(self.port, "sock")

    @property
    def pid_path(self) -> str:
        return self.pid_file or default_runtime_path(self.port, "pid")


@frozen
class AllocatorSettings:
    """C{[allocator]}: the PMAD pool's size and its size classes."""

    pool_size: int = pmad.DEFAULT_POOL_SIZE
    classes: tuple[pmad.SizeClass, ...] = tuple(pmad.default_classes())

    def layout(self) -> pmad.Layout:
        """
        The pool these settings describe, laid out without reserving it.

        @raise pmad.LayoutError: they describe no usable pool.
        """
        return pmad.layout(self.pool_size, list(self.classes))

    def pool(self) -> pmad.Pmad:
        """The pool itself, reserved."""
        return pmad.Pmad(self.pool_size, list(self.classes))


@frozen
class TaskSettings:
    """
    C{[tasks]}: which tasks are accepted and how long they may be held.

    @ivar allowed_types: the task types accepted (C{None}: any).
    """

    allowed_types: frozenset[bytes] | None = None
    timeout: float = 0.0
    max_attempts: int = 0
    max_delay: float = 365 * 86400.0
    max_delayed: int = 1_000_000
    max_lease: float = 86400.0


@frozen
class Limits:
    """
    C{[limits]}: what one connection may do (see docs/operations.md, "Limits").

    @ivar max_connections: connections past this are refused with an ERROR.
    @ivar first_frame_timeout: seconds a new connection has to send a whole
        frame before it is closed; 0 turns it off.
    @ivar max_type_length: the longest task type a SUBMIT may name (bytes).
    @ivar max_reason_length: the longest FAILED reason accepted (bytes).
    @ivar max_output_buffer: unsent bytes a connection may have queued before
        the daemon stops reading from it until they drain.
    @ivar max_credits: the most tasks one worker connection may hold at once
        (a READY asking for more is granted this many).
    @ivar monitor_slice: seconds of the reactor one connection's monitor
        queries may hold in a turn; the rest of what it sent waits for the
        next turn, so that other connections are served in between.
    @ivar read_slice: bytes of one connection's input handled in a turn; the
        rest of a read (up to C{max_output_buffer}: Twisted reads its transport's
        buffer size) waits for the next turn, so that a pipelined flood's frames
        are decoded a slice at a time, not a megabyte at once.
    @ivar max_worker_types: the most task types one worker's ANNOUNCE may name.
    @ivar terminate_grace: seconds a terminated worker has to close its
        connection before the daemon closes it.
    """

    max_connections: int = 4096
    first_frame_timeout: float = 10.0
    max_type_length: int = MAX_TYPE_LENGTH
    max_reason_length: int = 1024
    max_output_buffer: int = 1 << 20
    max_credits: int = 1024
    monitor_slice: float = 0.002
    read_slice: int = 1 << 18
    max_worker_types: int = 256
    terminate_grace: float = 5.0


@frozen
class ProtocolSettings:
    """C{[protocol]}: the versions spoken, and the queue of a SUBMIT that names none."""

    versions: frozenset[int] = frozenset({1, 2})
    default_queue: str = DEFAULT_QUEUE


@frozen
class QueuesSettings:
    """
    C{[queues]}: the bounds on queues and keys, the defaults of a queue
    without a C{[queue NAME]} section, and how tasks are dealt to workers.
    """

    max_queues: int = 1000
    max_depth: int = 0
    priority: int = 0
    max_key_length: int = 255
    dedup_window: float = 3600.0
    max_dedup_keys: int = 100_000
    max_fairness_keys: int = 10_000
    dispatch: DispatchSettings = Factory(DispatchSettings)
    aging: float = 5.0


@frozen
class RetrySettings:
    """C{[retries]}: the retries of a queue without its own, and what counts as a failure."""

    retries: int = 0
    backoff: Backoff = DEFAULT_BACKOFF
    count_lost: bool = False


@frozen
class DeadLetterSettings:
    """C{[dead_letters]}: how many dead tasks are kept, and how long."""

    max_count: int = 10_000
    max_age: float = 7 * 86400.0


@frozen
class ScheduleSettings:
    """C{[schedules]}: the bound on schedules."""

    max_schedules: int = 100


@frozen
class MetricsSettings:
    """C{[metrics]}: the Prometheus endpoint (C{""}: off) and its bounds."""

    listen: str = ""
    max_types: int = DEFAULT_MAX_TYPES
    max_series: int = DEFAULT_MAX_SERIES
    max_scrapes: int = 8
    max_connections: int = 16


@frozen
class AutoscaleSettings:
    """
    C{[autoscale]}: the workers-needed signal (C{target} 0: off), from a
    window of each queue's recent arrivals and run times, and its bounds.
    """

    target: float = 0.0
    window: float = 5.0
    interval: float = 5.0
    max_workers: int = 256
    max_jobs: int = 1000
    min_workers: int = 0


@frozen
class WebSettings:
    """C{[web]}: the dashboard's endpoint (C{""}: off), its tokens and bounds."""

    listen: str = ""
    admin_token: str = ""
    monitor_token: str = ""
    history: float = 3600.0
    max_streams: int = 32
    max_connections: int = 64
    task_history: int = 10_000
    task_history_age: float = 3600.0
    task_history_bytes: int = 8 << 20
    search_step: int = 10_000
    payload_preview: int = 256
    failure_text: int = 4096
    preview_done: bool = False


@frozen
class ClusterSettings:
    """C{[cluster]}: the other daemons polled for the cluster view, and how."""

    peers: str = ""
    interval: float = 5.0
    timeout: float = 2.0
    max_status: int = 4 << 20

    @property
    def addresses(self) -> tuple[str, ...]:
        """C{peers}, one address each (none: the cluster view is off)."""
        return split_addresses(self.peers) if self.peers else ()


@frozen
class JournalSettings:
    """C{[journal]}: the write-ahead journal's file (C{""}: none) and its options."""

    path: str = ""
    fsync: FsyncPolicy = FsyncPolicy.EVERYSEC
    compact_factor: float = DEFAULT_COMPACT_FACTOR
    compact_min_size: int = DEFAULT_COMPACT_MIN_SIZE


@frozen
class LogSettings:
    """C{[log]}: the summary of failures and limits hit, and the lines' format."""

    summary_interval: float = 5.0
    format: LogFormat = LogFormat.TEXT


class ReplicationMode(Enum):
    """C{[replication] mode}: what an acknowledgement waits for."""

    SYNC = "sync"
    """The local write and every in-sync standby's."""
    ASYNC = "async"
    """The local write only (a failover may lose the last batches)."""


class StandbyLost(Enum):
    """C{[replication] standby_lost}: a sync primary's answer to a silent in-sync standby."""

    WAIT = "wait"
    """Keep waiting: nothing is acknowledged without a second copy."""
    ASYNC = "async"
    """Take it out of the in-sync set (in the lease store first), go on alone."""


@frozen
class ReplicationSettings:
    """
    C{[replication]}: the shard this daemon is one of, its lease store
    (etcd), its replication listener and the acknowledgement policy.
    C{etcd = ""} (the default): replication is off, the daemon is what it was.

    C{name}, C{advertise}, C{client_address}: C{""} for their defaults
    (L{member}, the listener's bound address, L{client}).
    """

    etcd: str = ""
    shard: str = "default"
    name: str = ""
    listen: str = ""
    advertise: str = ""
    client_address: str = ""
    lease_ttl: float = 5.0
    mode: ReplicationMode = ReplicationMode.SYNC
    standby_lost: StandbyLost = StandbyLost.WAIT
    standby_timeout: float = 2.0
    max_backlog: int = 64 << 20
    max_batch: int = DEFAULT_MAX_BATCH
    key_prefix: str = "/quicx"

    @property
    def enabled(self) -> bool:
        """Whether this daemon is one of a shard (C{etcd} is set)."""
        return bool(self.etcd)

    @property
    def endpoints(self) -> tuple[str, ...]:
        """C{etcd}'s URLs, one each."""
        return tuple(url.strip() for url in self.etcd.split(",") if url.strip())

    @property
    def member(self) -> str:
        """This daemon's name in the shard: C{name}, or the host's."""
        return self.name or socket.gethostname()

    def client(self, endpoints: tuple[str, ...]) -> str:
        """
        The C{host:port} clients reach this daemon at: C{client_address}, or
        the first of its listening C{endpoints} (C{[server]}'s) that is TCP on
        a port of its own (""; none is).
        """
        if self.client_address:
            return self.client_address
        return next(filter(None, map(tcp_address, endpoints)), "")

    @property
    def replication_address(self) -> str:
        """The C{host:port} its standbys reach its listener at: C{advertise}, or C{listen}'s."""
        return self.advertise or tcp_address(self.listen)


@frozen
class Config:
    """
    Everything the daemon is configured with: one record per section, in
    the order of the docs' tables, then the named sections and where it all
    came from.
    """

    server: ServerSettings = Factory(ServerSettings)
    allocator: AllocatorSettings = Factory(AllocatorSettings)
    tasks: TaskSettings = Factory(TaskSettings)
    limits: Limits = Factory(Limits)
    tls: TlsSettings = Factory(TlsSettings)
    protocol: ProtocolSettings = Factory(ProtocolSettings)
    queues: QueuesSettings = Factory(QueuesSettings)
    retries: RetrySettings = Factory(RetrySettings)
    dead_letters: DeadLetterSettings = Factory(DeadLetterSettings)
    schedules: ScheduleSettings = Factory(ScheduleSettings)
    progress: ProgressSettings = Factory(ProgressSettings)
    checkpoints: CheckpointSettings = Factory(CheckpointSettings)
    shared: SharedLimits = Factory(SharedLimits)
    results: ResultLimits = Factory(ResultLimits)
    groups: GroupLimits = Factory(GroupLimits)
    dependencies: DependencyLimits = Factory(DependencyLimits)
    events: EventSettings = Factory(EventSettings)
    metrics: MetricsSettings = Factory(MetricsSettings)
    autoscale: AutoscaleSettings = Factory(AutoscaleSettings)
    web: WebSettings = Factory(WebSettings)
    cluster: ClusterSettings = Factory(ClusterSettings)
    journal: JournalSettings = Factory(JournalSettings)
    log: LogSettings = Factory(LogSettings)
    bulk: BulkSettings = Factory(BulkSettings)
    replication: ReplicationSettings = Factory(ReplicationSettings)
    queue_sections: Mapping[str, Mapping[str, Any]] = field(factory=dict)
    schedule_sections: Mapping[str, ScheduleSpec] = field(factory=dict)
    source: str = "built-in default"

    @property
    def queue_limits(self) -> QueueLimits:
        """The queues' limits; a C{[queue NAME]} key left out takes the C{[queues]} default."""
        queues, retries, tasks = self.queues, self.retries, self.tasks
        defaults = QueuePolicy(
            max_depth=queues.max_depth,
            priority=queues.priority,
            retries=retries.retries,
            backoff=retries.backoff,
            aging=queues.aging,
        )
        return QueueLimits(
            versions=self.protocol.versions,
            default_queue=self.protocol.default_queue,
            max_queues=queues.max_queues,
            max_key_length=queues.max_key_length,
            dedup_window=queues.dedup_window,
            max_dedup_keys=queues.max_dedup_keys,
            max_fairness_keys=queues.max_fairness_keys,
            max_delay=tasks.max_delay,
            max_delayed=tasks.max_delayed,
            max_lease=tasks.max_lease,
            count_lost=retries.count_lost,
            dead_max_count=self.dead_letters.max_count,
            dead_max_age=self.dead_letters.max_age,
            declared={
                name: self._aged(attrs.evolve(defaults, **keys))
                for name, keys in self.queue_sections.items()
            },
            defaults=self._aged(defaults),
            results=self.results,
            groups=self.groups,
            dependencies=self.dependencies,
            dispatch=queues.dispatch,
        )

    def _aged(self, policy: QueuePolicy) -> QueuePolicy:
        """C{policy}, without aging where only version 1 is spoken (the page's strict order)."""
        return policy if 2 in self.protocol.versions else attrs.evolve(policy, aging=0.0)

    @property
    def authorization(self) -> Authorization | None:
        """Who may take each role, when any of C{[tls]}'s lists is set."""
        granted = self.tls.authorization
        return None if granted == Authorization() else granted
