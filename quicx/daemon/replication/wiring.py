"""
How a daemon of a shard is put together: its L{Node}, and the seams of the other parts.

Called by L{quicx.daemon.service.build_daemon} when C{[replication] etcd}
is set, after the listeners; for a daemon without it, nothing is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

from twisted.application.service import IService

from quicx.daemon.config import Config
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.daemon.replication.etcd import EtcdLeaseStore
from quicx.daemon.replication.interfaces import Leader
from quicx.daemon.replication.node import JournalSlot, Node
from quicx.daemon.replication.role import RoleManager, RoleOptions
from quicx.daemon.replication.sides import sides
from quicx.daemon.server import QuicxServerFactory


class ShardDaemon(Protocol):
    """What of the daemon (L{quicx.daemon.service.QuicxDaemon}) its role needs."""

    config: Config
    reactor: Any
    queue: QueueService
    control_factory: QuicxServerFactory | None
    leaving: bool

    def getServiceNamed(self, name: str) -> Any: ...

    def addService(self, service: IService) -> Any: ...


def add_replication(
    daemon: ShardDaemon,
    factory: QuicxServerFactory,
    schedules: ScheduleBook,
    recover_state: Callable[[Any, ScheduleBook], None],
) -> Node:
    """
    Make C{daemon} one of a shard: it serves only as the primary, and
    recovers its journal (C{recover_state}, as at start) only then; its node.
    """
    config, reactor = daemon.config, daemon.reactor
    slot = daemon.getServiceNamed("journal")
    assert isinstance(slot, JournalSlot)

    def recover() -> None:
        # As at start: the missed firings of its schedules fire once restored.
        schedules.scheduler.stop()
        recover_state(daemon, schedules)
        slot.open()
        schedules.scheduler.start()

    def leave(status: int) -> None:
        # Without the drain (the queue is no longer this daemon's to run),
        # after this turn's answers, and with C{status} once stopped.
        daemon.leaving = True
        reactor.addSystemEventTrigger("after", "shutdown", os._exit, status)
        reactor.callLater(0, reactor.stop)

    settings = config.replication
    Node.log.info(
        "{name} of shard {shard}: not serving until it is the primary (lease store {etcd});"
        " journal {path} not restored until then",
        log_id="replication.start",
        name=settings.member,
        shard=settings.shard,
        etcd=", ".join(settings.endpoints),
        path=config.journal.path,
    )
    node = Node(
        settings,
        settings.client(config.server.endpoints),
        recover,
        daemon.queue.dispatcher,
        [f for f in (factory, daemon.control_factory) if f is not None],
        leave,
        sides(settings, slot.journal, lambda names: manager.in_sync(names), reactor),
    )
    options = RoleOptions(settings.lease_ttl)
    store = EtcdLeaseStore(
        settings.etcd, settings.shard, options.call_timeout, reactor, settings.key_prefix
    )
    me = Leader(settings.member, node.client_address, settings.replication_address)
    manager = RoleManager(store, me, options, node, reactor)
    node.manager = manager
    # After the listeners: a primary serves once they listen.
    daemon.addService(manager)
    return node
