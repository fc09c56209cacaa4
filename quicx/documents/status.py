"""
The status document, typed: what C{quicx status}, STATUS and the dashboard read.

The status document (docs/operations.md, "The control socket"): the daemon
builds a L{StatusDocument} from its state and writes it with L{as_json} --
the same JSON, key for key and in the same order, over the control socket
and in answer to STATUS; its readers (C{quicx status}, C{--watch}, the
cluster view) make one again with L{read_status}.  Each class's fields are
the keys of one part of the document, in the order they are written.  A
reader copes with another version's document: keys it does not know are
left out, a missing key takes its field's default (as an older daemon that
did not send it meant), and only C{uptime} is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from attrs import frozen

from quicx.documents.latency import LATENCY_BUCKETS
from quicx.documents.typed import as_json, read

STATUS_FORMAT = "quicx-status/1"
"""The status document's C{format}: a reader refuses a document of another."""


@frozen
class Tasks:
    """
    C{"tasks"}: the totals since start (the kernel's C{Counters}, same
    names), the dead tasks kept now, the tasks queued and running now, the
    progress reports coalesced, and the queued tasks set aside that no
    connected worker runs (C{unroutable}: see L{quicx.daemon.queue.routing});
    the tasks that ended expired and the SUBMITs folded by a debounce since
    start, and the tasks waiting for others now (C{waiting}: see
    L{quicx.daemon.queue.dependencies}).
    """

    submitted: int = 0
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    requeued: int = 0
    timed_out: int = 0
    given_up: int = 0
    late_outcomes: int = 0
    cancelled: int = 0
    duplicates: int = 0
    retried: int = 0
    dead: int = 0
    dead_dropped: int = 0
    dead_now: int = 0
    stale_outcomes: int = 0
    delayed: int = 0
    results_kept: int = 0
    results_evicted: int = 0
    results_expired: int = 0
    queued: int = 0
    running: int = 0
    progress_coalesced: int = 0
    unroutable: int = 0
    expired: int = 0
    debounced: int = 0
    waiting: int = 0


@frozen
class Connections:
    """C{"connections"}: open, producers, paused (not reading), workers and idle ones."""

    total: int = 0
    producers: int = 0
    paused: int = 0
    workers: int = 0
    idle_workers: int = 0
    quiet_workers: int = 0


@frozen
class Client:
    """One of C{"clients"}: the connections of one client name, version and role."""

    client: str
    protocol: int
    role: str
    connections: int


@frozen
class Queue:
    """One of C{"queues"} (also QUEUES' answer): a named queue now."""

    name: str
    depth: int = 0
    paused: bool = False
    workers: int = 0
    idle_workers: int = 0
    running: int = 0
    delayed: int = 0
    dead: int = 0
    priorities: dict[str, int] = attrs.Factory(dict)
    oldest_age: float | None = None
    declared: bool = False
    drain_rate: float = 0.0
    promoted: int = 0


@frozen
class Keys:
    """C{"keys"}: the idempotency keys remembered, evicted, and how long they are."""

    remembered: int = 0
    evicted: int = 0
    window: float = 0.0


@frozen
class Results:
    """C{"results"}: the outcomes kept now, their pool bytes and bound, the waits waiting."""

    kept: int = 0
    memory: int = 0
    max_memory: int = 0
    waiters: int = 0


@frozen
class Groups:
    """C{"groups"}: the groups known, and those not finished."""

    total: int = 0
    unfinished: int = 0


@frozen
class Checkpoints:
    """C{"checkpoints"}: the running tasks' checkpoints kept now, their bytes and bound."""

    kept: int = 0
    bytes: int = 0
    max_memory: int = 0


@frozen
class Memory:
    """C{"memory"}: the pool's bytes in use and its size."""

    used: int = 0
    total: int = 0


@frozen
class Shared:
    """C{"shared"}: the shared-data names, their bytes, versions published, followers."""

    names: int = 0
    bytes: int = 0
    published: int = 0
    followers: int = 0


@frozen
class SizeClass:
    """One of C{"classes"}: a pool size class's blocks."""

    size: int
    blocks_used: int
    blocks_total: int


@frozen
class Histogram:
    """A latency histogram: counts per bucket (the last one unbounded), their sum in seconds."""

    counts: tuple[int, ...]
    sum: float = 0.0


@frozen
class Tally:
    """One of C{"telemetry"}'s C{"tallies"}: one (queue, task type)'s counts since start."""

    queue: str
    type: str
    submitted: int = 0
    done: int = 0
    failed: int = 0
    dead: int = 0
    cancelled: int = 0
    retried: int = 0
    requeued: int = 0
    expired: int = 0
    debounced: int = 0
    wait: Histogram = attrs.field(kw_only=True)
    run: Histogram = attrs.field(kw_only=True)

    @property
    def key(self) -> tuple[str, str]:
        return self.queue, self.type


@frozen
class Telemetry:
    """C{"telemetry"}: the latency buckets' bounds, every tally, the rejections by error code."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    tallies: tuple[Tally, ...] = ()
    rejected: dict[str, int] = attrs.Factory(dict)


@frozen
class Journal:
    """C{"journal"} (C{null} without one): its file, policy, sizes, syncs, compactions."""

    path: str
    fsync: str
    file_bytes: int = 0
    live_bytes: int = 0
    syncs: int = 0
    compactions: int = 0
    broken: str | None = None


@frozen
class Events:
    """C{"events"}: the events files (C{directory} C{null} without), live subscribers, drops."""

    directory: str | None = None
    written: int = 0
    broken: str | None = None
    subscribers: int = 0
    dropped: int = 0


@frozen
class Replication:
    """
    C{"replication"} (C{null} without C{[replication]}): this daemon's role
    in its shard (C{primary}, C{standby}, C{candidate} or C{fenced}), the
    epoch, the primary's client address, its name, the shard, the policy in
    force (C{mode}, C{standby_lost}), the lag (batches not yet acknowledged
    or applied, and the oldest one's age) and a primary's in-sync standbys.
    """

    role: str
    epoch: int = 0
    primary: str = ""
    name: str = ""
    shard: str = ""
    mode: str = "sync"
    standby_lost: str = "wait"
    lag_batches: int = 0
    lag_seconds: float = 0.0
    in_sync_standbys: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """
        One line: the role, of what, the policy in force, the in-sync
        standbys and the lag (C{quicx status} and the dashboard show it).
        """
        if self.role == "primary":
            standbys = ", ".join(self.in_sync_standbys) or "none"
            what = f"primary of shard {self.shard} at epoch {self.epoch}; in sync: {standbys}"
        elif self.role == "standby":
            what = f"standby of {self.primary} (shard {self.shard}) at epoch {self.epoch}"
        else:
            what = f"{self.role} in shard {self.shard}, epoch {self.epoch}"
        policy = self.mode if self.mode == "async" else f"sync, standby_lost {self.standby_lost}"
        lag = f"lag {self.lag_batches} batches, {self.lag_seconds:.3g} s"
        return f"{self.name}: {what} ({policy}); {lag}"


@frozen
class StatusDocument:
    """
    The whole document.  A reader's defaults are what an older daemon that
    did not send a key meant (no queues, no shared data, no telemetry);
    C{protocols} then is C{None}: see L{versions}.  Only C{uptime} is
    required (keyword-only, so that it is written in its place).
    """

    format: str = STATUS_FORMAT
    version: str | None = None
    protocol: int = 1
    protocols: tuple[int, ...] | None = None
    pid: int | None = None
    started_at: float | None = None
    uptime: float = attrs.field(kw_only=True)
    config: str | None = None
    listening: tuple[str, ...] = ()
    control: str | None = None
    tasks: Tasks = Tasks()
    connections: Connections = Connections()
    clients: tuple[Client, ...] = ()
    queues: tuple[Queue, ...] = ()
    keys: Keys = Keys()
    results: Results = Results()
    groups: Groups = Groups()
    checkpoints: Checkpoints = Checkpoints()
    memory: Memory = Memory()
    shared: Shared | None = None
    classes: tuple[SizeClass, ...] = ()
    telemetry: Telemetry = Telemetry()
    journal: Journal | None = None
    events: Events = Events()
    replication: Replication | None = None

    @property
    def versions(self) -> tuple[int, ...]:
        """The protocol versions it speaks (a daemon that did not say: its C{protocol})."""
        return self.protocols if self.protocols is not None else (self.protocol,)

    def as_json(self) -> dict[str, Any]:
        """The document as a JSON-ready dict, its keys in the order the daemon writes them."""
        return as_json(self)


def read_status(document: StatusDocument | Mapping[str, Any]) -> StatusDocument:
    """
    C{document} as a L{StatusDocument}: as it is if it is one, else read
    from the JSON (see L{quicx.documents.typed.read}).

    @raise quicx.documents.typed.DocumentError: it cannot be read.
    """
    if isinstance(document, StatusDocument):
        return document
    return read(StatusDocument, document)
