"""
The daemon's status document, built from its state: one function per part.

The status document (L{quicx.documents.status}) of one daemon, built from
its queue, shared data, event bus and journal as they stand.  Each part has
its builder here, so that the metrics (L{quicx.daemon.observe.metrics}) and
the dashboard read the very figures C{quicx status} shows, under the same
names, and build only the parts they show.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

import attrs

from quicx import __version__
from quicx.daemon.journal.writer import Journal
from quicx.daemon.observe.eventbus import EventBus
from quicx.daemon.queue import introspect, routing
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.pmad import Pmad
from quicx.daemon.queue.shared import SharedData
from quicx.documents import status as document
from quicx.protocol import wire


@attrs.frozen
class Where:
    """
    How the daemon was started and is reached: its configuration file, the
    addresses its task listeners bound, its control socket (or C{None}).
    """

    config: str
    listening: Sequence[str]
    control: str | None


def status(
    queue: QueueService,
    shared: SharedData,
    events: EventBus,
    journal: Journal | None,
    where: Where,
    replication: document.Replication | None = None,
) -> document.StatusDocument:
    """Everything C{quicx status} shows (see docs/operations.md)."""
    return document.StatusDocument(
        version=__version__,
        protocol=wire.PROTOCOL_VERSION,
        protocols=tuple(sorted(queue.limits.versions)),
        pid=os.getpid(),
        started_at=queue.started_at,
        uptime=queue.clock() - queue.started_at,
        config=where.config,
        listening=tuple(where.listening),
        control=where.control,
        tasks=tasks(queue),
        connections=connections(queue),
        clients=clients(queue),
        queues=introspect.queue_states(queue),
        keys=document.Keys(len(queue.keys), queue.keys.evicted, queue.keys.window),
        results=results(queue),
        groups=groups(queue),
        checkpoints=checkpoints(queue),
        memory=memory(queue.pool),
        shared=shared_data(shared),
        classes=classes(queue.pool),
        telemetry=queue.telemetry.document(),
        journal=None if journal is None else journal_status(journal),
        events=events_status(events),
        replication=replication,
    )


def tasks(queue: QueueService) -> document.Tasks:
    """The totals since start (the kernel's counters), and what is queued, running, waiting now."""
    total = queue.telemetry.total()
    return document.Tasks(
        **attrs.asdict(queue.counters(total)),
        dead_now=len(queue.dead_letters),
        queued=queue.queued,
        running=queue.tasks_running,
        progress_coalesced=queue.progress.coalesced,
        unroutable=sum(
            sum(by_type.values())
            for by_type in routing.unroutable(
                queue.sessions.values(), queue.queues.values()
            ).values()
        ),
        expired=total.expired,
        debounced=total.debounced,
        waiting=len(queue.dependencies.waiters),
    )


def connections(queue: QueueService) -> document.Connections:
    sessions = queue.sessions.values()
    stats = queue.stats()
    return document.Connections(
        total=len(queue.sessions),
        producers=sum(1 for session in sessions if session.role.value == "producer"),
        paused=sum(1 for session in sessions if session.paused),
        workers=stats.workers_total,
        idle_workers=stats.workers_idle,
        quiet_workers=sum(1 for session in sessions if routing.steered(session)),
    )


def clients(queue: QueueService) -> tuple[document.Client, ...]:
    """The connections that said who they are (HELLO), by name and version."""
    found = Counter(
        (session.client, session.version, session.role.value)
        for session in queue.sessions.values()
        if session.client
    )
    return tuple(
        document.Client(client, version, role, count)
        for (client, version, role), count in sorted(found.items())
    )


def results(queue: QueueService) -> document.Results:
    kept = queue.kept
    return document.Results(len(kept), kept.memory, kept.max_memory, queue.waits.count)


def groups(queue: QueueService) -> document.Groups:
    return document.Groups(len(queue.groups), queue.groups.unfinished)


def checkpoints(queue: QueueService) -> document.Checkpoints:
    kept = queue.checkpoints
    return document.Checkpoints(kept.held, kept.bytes, kept.settings.max_memory)


def memory(pool: Pmad) -> document.Memory:
    return document.Memory(pool.bytes_used, pool.bytes_total)


def classes(pool: Pmad) -> tuple[document.SizeClass, ...]:
    return tuple(document.SizeClass(u.size, u.blocks_used, u.blocks_total) for u in pool.usage())


def shared_data(shared: SharedData) -> document.Shared:
    return document.Shared(shared.names, shared.size, shared.published, shared.followers)


def journal_status(journal: Journal) -> document.Journal:
    stats = journal.stats
    return document.Journal(
        journal.path,
        journal.policy.value,
        stats.file_bytes,
        stats.live_bytes,
        stats.syncs,
        stats.compactions,
        journal.broken or None,
    )


def events_status(events: EventBus) -> document.Events:
    log = events.log
    return document.Events(
        directory=None if log is None else log.settings.directory,
        written=0 if log is None else log.written,
        broken=None if log is None else log.broken or None,
        subscribers=events.live.count,
        dropped=events.dropped,
    )
