"""
This daemon's role in its shard: the role manager's listener; it serves only as the primary.

With C{[replication]} on, the daemon starts as a candidate: its journal is
not restored, its listeners answer every request C{ERROR 0x0C} (version 2)
or C{ERROR 0x01} (version 1), HELLO excepted.  The role manager (the lease
store's side) tells the L{Node} what it becomes:

  - C{became_primary(epoch)}: the standby side stops (its journal file is
    whole and synced), the journal is recovered into the queue and opened
    exactly as at start (L{quicx.daemon.service.restore}: no replay code of
    its own), the primary side of replication is attached to it, tokens
    carry the epoch, and the listeners serve;
  - C{became_standby(leader)}: the standby side follows C{leader};
  - C{fenced(reason)}: client connections are dropped at once and every new
    request is refused.

A daemon that has served as the primary and is then fenced or told that
another is the primary holds queue state the new primary's snapshot must
replace: it leaves (exit status L{EXIT_DEMOTED}) and its supervisor starts
it again, as a standby (C{Restart=always}: docs/operations.md).  Rebuilding
the queue in place would mean rebuilding every part that holds it (the
server's factories, schedules, shared data, event bus, bulk actions, the
dashboard and metrics): a restart is the one way that is correct whatever
state the old queue was in.

The seams the other parts of replication plug into (see L{Sides} and
L{RoleControl}): the role manager calls this listener and is asked by
ROLE (L{act}); the replication stream's sides are started through L{Sides}
and report their figures through L{IReplicationSide}.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from attrs import frozen
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface, implementer

from quicx.daemon.config.sections import ReplicationSettings
from quicx.daemon.handlers import roles, tables
from quicx.daemon.handlers.connection import Connection, Handler
from quicx.daemon.journal.writer import Journal
from quicx.daemon.queue.dispatcher import Dispatcher
from quicx.daemon.queue.model import Refused
from quicx.daemon.replication.interfaces import IRoleListener, Leader, RoleState
from quicx.daemon.server import QuicxServerFactory
from quicx.documents import status as document
from quicx.net.twisted_types import Service
from quicx.protocol.codec import ErrorCode
from quicx.protocol.role import RoleAction

EXIT_DEMOTED = 75
"""
The exit status of a daemon that served as the primary and no longer may
(fenced, stepped down, or another took the key): C{EX_TEMPFAIL}, start it again.
"""


@frozen
class ReplicationFigures:
    """
    How replication stands, as a side of the stream reports it.

    @ivar lag_batches: a primary: the most batches an in-sync standby has
        not acknowledged; a standby: the batches it knows the primary sent
        that it has not applied.
    @ivar lag_seconds: the age of the oldest of those batches.
    @ivar in_sync_standbys: a primary: the names of its in-sync standbys.
    """

    lag_batches: int = 0
    lag_seconds: float = 0.0
    in_sync_standbys: tuple[str, ...] = ()


class IReplicationSide(Interface):
    """
    One side of the replication stream, as the daemon drives it: the
    primary's (serving C{[replication] listen}, attached to the journal as
    its C{replica}) or the standby's (following the primary into this
    daemon's journal file).  Implemented by the stream's classes.
    """

    def figures() -> ReplicationFigures:
        """How it stands now (read by C{quicx status}, the metrics and the dashboard)."""

    def stop() -> Deferred[None] | None:
        """
        Stop: a standby's once its journal file holds every batch it
        acknowledged, synced and closed (the primary's journal recovery reads it next).
        """


class RoleControl(Protocol):
    """
    What the daemon asks of the role manager (the lease store's side,
    C{RoleManager}): its view of the role, a step-down, a campaign now.
    """

    @property
    def state(self) -> RoleState: ...

    def step_down(self) -> Deferred[None]: ...

    def campaign_now(self) -> object:
        """Campaign for the key now (a Deferred, or nothing to wait for)."""


@frozen
class Sides:
    """
    How the daemon starts each side of the replication stream (the seam
    the stream's classes plug into).

    @ivar primary: given the epoch, once the journal is recovered and open:
        attach the primary's side to the journal (C{Journal.replica}) and
        serve the standbys on C{[replication] listen}; its side.
    @ivar standby: given the primary: follow it, writing its snapshot and
        batches into this daemon's journal file; its side.
    """

    primary: Callable[[int], IReplicationSide]
    standby: Callable[[Leader], IReplicationSide]


class JournalSlot(Service):
    """
    The journal's place among the daemon's services while it is not yet
    the primary (named C{journal}): the journal is neither restored nor
    open then (a standby's side writes the file), and starts only with
    L{open}; it is stopped where it would have been (after the queue).
    """

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.name = "journal"

    def open(self) -> None:
        """The journal is recovered and open: start it (its writer thread, its syncs)."""
        self.journal.startService()

    def stopService(self) -> Deferred[None] | None:
        super().stopService()
        return self.journal.stopService() if self.journal.running else None


@implementer(IRoleListener)
class Node:
    """
    This daemon's role (an C{IRoleListener}), and the listeners it swaps:
    C{clients} (the task listeners' factory: refused while not the primary,
    its connections closed at each change of role) and C{admin} (the
    control socket's: it also answers STATUS and ROLE while not the
    primary, and keeps its connections).

    @ivar state: the role now, as C{quicx status} and HELLO tell it.
    @ivar manager: the role manager, once the daemon has one (ROLE asks it).
    @ivar side: the replication stream's side now running, if any.
    """

    log = Logger()

    def __init__(
        self,
        settings: ReplicationSettings,
        client_address: str,
        recover: Callable[[], None],
        dispatcher: Dispatcher,
        factories: Sequence[QuicxServerFactory],
        leave: Callable[[int], None],
        sides: Sides | None = None,
    ) -> None:
        self.settings = settings
        self.client_address = client_address
        self.state = RoleState()
        self.manager: RoleControl | None = None
        self.side: IReplicationSide | None = None
        self._recover = recover
        self._dispatcher = dispatcher
        self._factories = tuple(factories)
        self._leave = leave
        self._sides = sides
        self._served = False  # the queue holds the journal's state
        self._pending: int | None = None  # the epoch served once the side stops
        self._following: Leader | None = None
        self._steps: Deferred[object] = succeed(None)  # the changes of side, in order
        # A step-down asked by ROLE: its answer goes out before the daemon leaves.
        self._stepping_down = False
        self._leave_after_answer = False
        self._refusing = [self._refusing_tables(f.admin) for f in self._factories]
        for factory in self._factories:
            factory.replication = self
        self._swap(serving=None)

    # -- IRoleListener ---------------------------------------------------------------

    def became_primary(self, epoch: int) -> None:
        if self.state.role == "primary":
            if epoch != self.state.epoch:
                self._demoted(f"the key was taken again, at epoch {epoch}")
            return
        if self._served:
            self._demoted(f"primary again at epoch {epoch}, after a fence")
            return
        if self._pending == epoch:
            return  # told again while the standby side stops
        self._pending, self._following = epoch, None
        self._after_side(
            lambda: self._serve(epoch), lambda failure: self._not_served(failure, epoch)
        )

    def became_standby(self, leader: Leader) -> None:
        if self._served:
            self._demoted(f"{leader.name} is the primary now (epoch {leader.epoch})")
            return
        self.state = RoleState("standby", leader.epoch, leader.client)
        self._pending = None
        if leader == self._following:
            return
        self.log.info(
            "standby of {name} ({client}), epoch {epoch}",
            log_id="replication.standby",
            name=leader.name,
            client=leader.client,
            epoch=leader.epoch,
        )
        self._following = leader
        self._after_side(lambda: self._follow(leader), self._broken)

    def fenced(self, reason: str) -> None:
        self._pending = None
        self._swap(serving=None)
        closed = self._close_clients()
        if self._served:
            self.state = RoleState("fenced", self.state.epoch, "")
            self.log.error(
                "fenced: {reason}; {closed} client connections dropped, nothing more is"
                " acknowledged; exiting (status {status}) to start again as a standby",
                log_id="replication.fenced",
                reason=reason,
                closed=closed,
                status=EXIT_DEMOTED,
            )
            self._stop_side()
            if self._stepping_down:
                self._leave_after_answer = True
            else:
                self._leave(EXIT_DEMOTED)
            return
        self.state = RoleState("candidate", self.state.epoch, "")
        self.log.warn("fenced: {reason}", log_id="replication.fenced_standby", reason=reason)

    # -- ROLE ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """C{role}, C{epoch} and C{primary} (this daemon's client address when it is)."""
        state = self.state
        primary = self.client_address if state.serving else state.primary
        return {"role": state.role, "epoch": state.epoch, "primary": primary}

    def act(self, action: RoleAction) -> Deferred[dict[str, Any]]:
        """
        Step down (the primary only) or campaign now: L{describe} once the
        role manager is done.

        @raise Refused: (conflict) a step-down of a daemon that is not the
            primary; (not found) no role manager is plugged in.
        """
        manager = self.manager
        if manager is None:
            raise Refused(ErrorCode.NOT_FOUND, "this daemon has no role manager")
        if action is RoleAction.STEP_DOWN:
            if not self.state.serving:
                primary = self.state.primary or "none known"
                raise Refused(
                    ErrorCode.CONFLICT,
                    f"this daemon is {self.state.role}, not the primary ({primary}):"
                    " step down on the primary",
                )
            self._stepping_down = True
            done: Deferred[Any] = manager.step_down()
            done.addBoth(self._stepped_down)
        elif self.state.serving:
            done = succeed(None)
        else:
            done = maybeDeferred(manager.campaign_now)
        return done.addCallback(lambda _: self.describe())

    def _stepped_down(self, result: object) -> object:
        """
        Resigned (or failed to): leave if fenced, one reactor turn on
        (C{leave}), so the ROLE answer made after this callback is sent first.
        """
        self._stepping_down = False
        if self._leave_after_answer:
            self._leave_after_answer = False
            self._leave(EXIT_DEMOTED)
        return result

    def status(self) -> document.Replication:
        """The status document's C{"replication"}."""
        settings, state = self.settings, self.state
        figures = ReplicationFigures() if self.side is None else self.side.figures()
        return document.Replication(
            role=state.role,
            epoch=state.epoch,
            primary=self.describe()["primary"],
            name=settings.member,
            shard=settings.shard,
            mode=settings.mode.value,
            standby_lost=settings.standby_lost.value,
            lag_batches=figures.lag_batches,
            lag_seconds=figures.lag_seconds,
            in_sync_standbys=tuple(sorted(figures.in_sync_standbys)),
        )

    # -- the changes ----------------------------------------------------------------------

    def _after_side(self, step: Callable[[], None], failed: Callable[[Failure], None]) -> None:
        """
        Run C{step} once the side now running has stopped (a standby's
        journal file is whole then), after the steps asked for before it;
        C{failed} instead if it could not stop.
        """
        side, self.side = self.side, None
        if side is not None:
            self._steps.addCallback(lambda _: side.stop())
        self._steps.addCallbacks(lambda _: step(), failed)
        self._steps.addErrback(self._broken)

    def _not_served(self, failure: Failure, epoch: int) -> None:
        """The standby side did not stop cleanly: its journal file cannot be trusted."""
        if self._pending == epoch:
            self._pending = None
            self._cannot_serve(failure, epoch)

    def _serve(self, epoch: int) -> None:
        """Recover the journal, attach the primary's side, serve (one reactor turn)."""
        if self._pending != epoch:
            return  # fenced, or told of another primary, while the side stopped
        self._pending = None
        try:
            self._recover()
        except SystemExit as e:
            self._cannot_serve(Failure(e), epoch)
            return
        self._served = True
        self._dispatcher.set_epoch(epoch)
        if self._sides is not None:
            self.side = self._sides.primary(epoch)
        self.state = RoleState("primary", epoch, "")
        self._swap(serving=epoch)
        closed = self._close_clients()
        self.log.info(
            "primary of shard {shard} at epoch {epoch}: serving ({closed} connections of"
            " the standby closed)",
            log_id="replication.primary",
            shard=self.settings.shard,
            epoch=epoch,
            closed=closed,
        )

    def _follow(self, leader: Leader) -> None:
        if self._sides is not None and leader == self._following:
            self.side = self._sides.standby(leader)

    def _demoted(self, why: str) -> None:
        """This daemon served and may no longer: refuse everything, drop clients, leave."""
        self._swap(serving=None)
        closed = self._close_clients()
        self.state = RoleState("fenced", self.state.epoch, "")
        self.log.warn(
            "no longer the primary: {why}; {closed} client connections dropped; exiting"
            " (status {status}) to start again as a standby",
            log_id="replication.demoted",
            why=why,
            closed=closed,
            status=EXIT_DEMOTED,
        )
        self._stop_side()
        self._leave(EXIT_DEMOTED)

    def _stop_side(self) -> None:
        """No longer the primary: its side acknowledges and ships nothing more (at once)."""
        side, self.side = self.side, None
        if side is not None:
            side.stop()

    def _cannot_serve(self, failure: Failure, epoch: int) -> None:
        self.log.error(
            "cannot take the primary's role at epoch {epoch}: {error}",
            log_id="replication.cannot_serve",
            epoch=epoch,
            error=failure.getErrorMessage() or repr(failure.value),
        )
        self._leave(1)

    def _broken(self, failure: Failure) -> None:
        self.log.failure("a change of role failed", failure, log_id="replication.broken")

    def _refusing_tables(self, admin: bool) -> tuple[dict[int, Handler], dict[int, Handler]]:
        v1 = roles.refusing(tables.V1, roles.ANSWERED_V1, self._refuse_v1)
        answered = roles.ANSWERED_ADMIN if admin else roles.ANSWERED_V2
        return v1, roles.refusing(tables.V2, answered, self._refuse_v2)

    def _refuse_v1(self, conn: Connection, payload: bytes) -> None:
        roles.not_primary_v1(self, conn, payload)

    def _refuse_v2(self, conn: Connection, payload: bytes) -> None:
        roles.not_primary_v2(self, conn, payload)

    def _swap(self, serving: int | None) -> None:
        """The listeners' tables: the primary's of epoch C{serving}, or refusing (C{None})."""
        v2 = None if serving is None else roles.serving(tables.V2, serving)
        for factory, refusing in zip(self._factories, self._refusing, strict=True):
            if v2 is None:
                factory.handlers_v1, factory.handlers_v2 = refusing
            else:
                factory.handlers_v1, factory.handlers_v2 = tables.V1, v2

    def _close_clients(self) -> int:
        """Close the task listeners' connections (not the control socket's)."""
        return sum(f.close_connections() for f in self._factories if not f.admin)
