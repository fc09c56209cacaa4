"""
The replication stream's two sides as the daemon drives them: the primary's and the standby's.

L{quicx.daemon.replication.node.Node} starts one through L{Sides} at each
change of role: L{serve_standbys} once the journal is recovered (the
primary's side, attached to the journal and listening on C{[replication]
listen}), L{follow} for each primary it is told of (the standby's side,
writing into this daemon's journal file).
"""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import define
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from quicx.daemon.config.sections import ReplicationSettings
from quicx.daemon.journal.writer import Journal
from quicx.daemon.replication.interfaces import Leader
from quicx.daemon.replication.node import IReplicationSide, ReplicationFigures, Sides
from quicx.daemon.replication.primary import RecordInSync, ReplicationPrimary
from quicx.daemon.replication.standby import ReplicationStandby


@implementer(IReplicationSide)
@define
class PrimarySide:
    """The primary's side: its standbys served, each group-commit batch shipped to them."""

    log: ClassVar[Logger] = Logger()

    primary: ReplicationPrimary
    listening: Deferred[IListeningPort | None]

    def figures(self) -> ReplicationFigures:
        standbys = [s for s in self.primary.figures() if s.in_sync]
        return ReplicationFigures(
            max((s.lag_batches for s in standbys), default=0),
            max((s.lag_seconds for s in standbys), default=0.0),
            tuple(sorted(s.name for s in standbys)),
        )

    def stop(self) -> Deferred[None]:
        """
        Fenced: nothing waiting is acknowledged, nothing more shipped (it
        stays the journal's replica, so a record written from now on fails
        its ship and is acknowledged to no one); the listener closed.
        """
        self.primary.fence("no longer the primary")
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        port = await self.listening
        stopped = port.stopListening() if port is not None else None
        if stopped is not None:
            await stopped


@implementer(IReplicationSide)
@define
class StandbySide:
    """The standby's side: the primary's snapshot and batches written into its journal file."""

    standby: ReplicationStandby

    def figures(self) -> ReplicationFigures:
        holding = self.standby.holding()
        return ReplicationFigures(holding.lag_batches, holding.lag_seconds)

    def stop(self) -> Deferred[None]:
        return self.standby.stop()


def _not_listening(failure: Failure, endpoint: str) -> None:
    PrimarySide.log.critical(
        "cannot serve the standbys on {endpoint}: {reason}; no standby can follow this primary",
        log_id="replication.not_listening",
        endpoint=endpoint,
        reason=failure.getErrorMessage(),
    )


def sides(
    settings: ReplicationSettings,
    journal: Journal,
    record_in_sync: RecordInSync,
    reactor: Any,
) -> Sides:
    """How a daemon of C{settings}' shard, writing C{journal}, starts each side."""

    def serve_standbys(epoch: int) -> IReplicationSide:
        primary = ReplicationPrimary(
            epoch,
            journal,
            record_in_sync,
            settings.mode.value,
            settings.standby_lost.value,
            settings.standby_timeout,
            settings.max_backlog,
            reactor,
            settings.max_batch,
        )
        journal.replica = primary
        listening: Deferred[IListeningPort | None] = serverFromString(
            reactor, settings.listen
        ).listen(primary)
        listening.addErrback(_not_listening, settings.listen)
        return PrimarySide(primary, listening)

    def follow(leader: Leader) -> IReplicationSide:
        standby = ReplicationStandby(journal.path, settings.member, reactor, settings.max_batch)
        standby.follow(leader)
        return StandbySide(standby)

    return Sides(primary=serve_standbys, standby=follow)
