"""
The role state machine: this daemon's role in its shard (candidate, standby, primary, fenced).

Who is primary comes from the lease store; the role is kept current.

A candidate reads the leader key: someone holds it, so it follows them as a
standby; no one does and this daemon may take it (L{eligible}), so it
campaigns, and once it won and wrote the shard's History it is the primary.
A primary renews its lease every C{renew_interval}; it fences itself (tells
its listener, resigns, and campaigns for none of one C{ttl}) when no renewal
was confirmed by its deadline:
the send time of the last confirmed renewal + C{ttl} - C{margin}, checked on
a timer, before a renewal is taken as confirmed, and whenever its state is
read (a process stopped past its lease fences itself first thing on waking).
A standby polls the leader key and follows each new primary; it keeps
following the one it knew while the lease store does not answer.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

from attrs import Factory, field, frozen, validators
from twisted.internet.defer import CancelledError, Deferred, TimeoutError, ensureDeferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from quicx.daemon.replication.interfaces import (
    History,
    ILeaseStore,
    IRoleListener,
    Leader,
    LeaseStoreUnavailable,
    RoleState,
)
from quicx.net.twisted_types import Service

T = TypeVar("T")


def _fraction(part: float) -> Any:
    return Factory(lambda options: options.ttl * part, takes_self=True)


def _positive(_: Any, attribute: Any, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be more than 0, not {value!r}")


@frozen
class RoleOptions:
    """
    The role manager's timings, in seconds: all but C{ttl} derived from it by default.

    @ivar ttl: the lease's time to live (C{[replication] lease_ttl}).
    @ivar renew_interval: a primary renews its lease this often.
    @ivar poll_interval: a standby or candidate reads the leader key this often.
    @ivar margin: a primary fences itself this long before its lease could lapse.
    @ivar call_timeout: a lease store call with no answer by then failed.
    """

    ttl: float = field(validator=_positive)
    renew_interval: float = field(default=_fraction(1 / 3), validator=_positive)
    poll_interval: float = field(default=_fraction(1 / 3), validator=_positive)
    margin: float = field(default=_fraction(1 / 5), validator=validators.ge(0))
    call_timeout: float = field(default=_fraction(1 / 5), validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.margin >= self.ttl or self.renew_interval >= self.ttl - self.margin:
            raise ValueError("a lease must be renewed (renew_interval) before ttl - margin")


def eligible(history: History | None, name: str) -> bool:
    """
    Whether the daemon C{name} may take the shard's key: it was the last
    primary or in its in-sync set (it holds all it acknowledged), or the
    shard never had a primary.
    """
    return history is None or name == history.primary or name in history.in_sync


class RoleManager(Service):
    """
    This daemon's role in its shard, driven by C{clock} and the lease store.

    @ivar me: this daemon, as the leader key names it.
    """

    log = Logger()

    def __init__(
        self,
        store: ILeaseStore,
        me: Leader,
        options: RoleOptions,
        listener: IRoleListener,
        clock: IReactorTime,
    ) -> None:
        self.me = me
        self.options = options
        self._store = store
        self._listener = listener
        self._clock = clock
        self._state = RoleState()
        self._following: Leader | None = None
        # Bumped at each change of role: what a call started before finds is dropped.
        self._term = 0
        self._busy = False
        self._force = False
        self._next: IDelayedCall | None = None
        self._deadline = 0.0
        self._deadline_call: IDelayedCall | None = None
        self._hold_until = -math.inf
        self._waiting = ""
        self._unavailable = False

    @property
    def state(self) -> RoleState:
        """The role now (a primary past its deadline is fenced first)."""
        self._check_deadline()
        return self._state

    # -- the public API ------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._schedule(0)

    def stopService(self) -> Deferred[None]:
        super().stopService()
        self._cancel_next()
        if self._state.role == "primary":
            return self._fence("the daemon is stopping")
        return succeed(None)

    def step_down(self) -> Deferred[None]:
        """
        A primary gives up the key (its listener told first) and does not
        campaign for one C{ttl}: fires once it resigned (or failed to).
        """
        if self._state.role != "primary":
            return succeed(None)
        return self._fence("stepped down")

    def in_sync(self, names: frozenset[str]) -> Deferred[bool]:
        """
        Write the shard's History with C{names} as the in-sync standbys: C{False}
        when this daemon is not primary or it could not be written.
        """
        return ensureDeferred(self._record_in_sync(names))

    def campaign_now(self) -> None:
        """A standby or candidate that may take the key campaigns now, not at its next poll."""
        if self._state.role not in ("candidate", "standby"):
            return
        self._force = True
        if not self._busy and self.running:
            self._cancel_next()
            self._step()

    # -- the steps -----------------------------------------------------------------------------

    def _schedule(self, delay: float) -> None:
        self._cancel_next()
        self._next = self._clock.callLater(delay, self._step)

    def _cancel_next(self) -> None:
        if self._next is not None and self._next.active():
            self._next.cancel()
        self._next = None

    def _step(self) -> None:
        self._next = None
        if self._busy or not self.running:
            return
        self._busy = True
        stepping = ensureDeferred(self._one_step())
        stepping.addErrback(
            lambda failure: self.log.failure("role step", failure, log_id="role.failed")
        )
        stepping.addBoth(self._stepped)

    def _stepped(self, _: object) -> None:
        self._busy = False
        role = self._state.role
        if not self.running or role == "fenced":
            return  # the resignation schedules the next step
        if self._force:
            self._schedule(0)
        elif role == "primary":
            self._schedule(self.options.renew_interval)
        else:
            self._schedule(self.options.poll_interval)

    async def _one_step(self) -> None:
        if self._state.role == "primary":
            await self._renew()
        elif self._state.role in ("candidate", "standby"):
            force, self._force = self._force, False
            await self._follow_or_campaign(force)

    async def _ask(self, call: Deferred[T]) -> T:
        """C{call}'s result, or L{LeaseStoreUnavailable} after C{call_timeout}."""
        try:
            result = await call.addTimeout(self.options.call_timeout, self._clock)
        except (TimeoutError, CancelledError):
            raise LeaseStoreUnavailable(
                f"no answer within {self.options.call_timeout:g} s"
            ) from None
        if self._unavailable:
            self._unavailable = False
            self.log.info("the lease store answers again", log_id="role.store_back")
        return result

    def _store_unavailable(self, error: LeaseStoreUnavailable) -> None:
        if not self._unavailable:
            self._unavailable = True
            self.log.warn(
                "the lease store does not answer ({error}): {role} {epoch} as before",
                log_id="role.store_unavailable",
                error=str(error),
                role=self._state.role,
                epoch=self._state.epoch,
            )

    async def _follow_or_campaign(self, force: bool) -> None:
        term = self._term
        try:
            leader = await self._ask(self._store.leader())
            if term != self._term:
                return
            if leader is not None:
                self._follow(leader)
                return
            if not force and self._clock.seconds() < self._hold_until:
                self._wait("fenced or stepped down: no campaign for one lease_ttl")
                return
            history = await self._ask(self._store.history())
            if term != self._term:
                return
            if not eligible(history, self.me.name):
                assert history is not None
                self._wait(
                    f"not eligible: the last primary (epoch {history.epoch})"
                    f" was {history.primary!r}, its in-sync standbys {sorted(history.in_sync)}"
                )
                return
            await self._campaign(term)
        except LeaseStoreUnavailable as e:
            self._store_unavailable(e)

    def _follow(self, leader: Leader) -> None:
        if leader.name == self.me.name:
            # This daemon's own key, from before a restart: it is nobody's until it lapses.
            self._wait(f"the key holds this daemon's former lease (epoch {leader.epoch})")
        elif self._state.role != "standby" or leader != self._following:
            self._change("standby", leader.epoch, leader.client)
            self._following = leader
            self.log.info(
                "standby of {leader} (epoch {epoch}, clients at {client})",
                log_id="role.standby",
                leader=leader.name,
                epoch=leader.epoch,
                client=leader.client,
            )
            self._listener.became_standby(leader)

    def _wait(self, why: str) -> None:
        if why != self._waiting:
            self._waiting = why
            self.log.info("not campaigning: {why}", log_id="role.waiting", why=why)

    async def _campaign(self, term: int) -> None:
        sent = self._clock.seconds()
        epoch = await self._ask(self._store.campaign(self.me, self.options.ttl))
        if epoch is None:
            self._force = True  # read who won, now
            return
        self._deadline = sent + self.options.ttl - self.options.margin
        first = History(epoch, self.me.name, frozenset())
        try:
            recorded = await self._ask(self._store.record(first))
        except LeaseStoreUnavailable:
            recorded = False
        if not recorded or term != self._term or self._clock.seconds() >= self._deadline:
            self.log.warn(
                "won epoch {epoch} but could not write the shard's history in time: resigning",
                log_id="role.abandoned",
                epoch=epoch,
            )
            await self._resign_quietly()
            return
        self._change("primary", epoch, "")
        self._arm_deadline()
        self.log.info("primary at epoch {epoch}", log_id="role.primary", epoch=epoch)
        self._listener.became_primary(epoch)

    async def _renew(self) -> None:
        term = self._term
        sent = self._clock.seconds()
        try:
            alive = await self._ask(self._store.renew())
        except LeaseStoreUnavailable as e:
            self._store_unavailable(e)
            return  # the deadline fences it if no renewal gets through in time
        if term != self._term or self._check_deadline():
            return
        if not alive:
            self._fence("its lease is gone (lapsed or revoked)")
            return
        self._deadline = sent + self.options.ttl - self.options.margin
        self._arm_deadline()

    async def _record_in_sync(self, names: frozenset[str]) -> bool:
        if self._state.role != "primary":
            return False
        term, epoch = self._term, self._state.epoch
        try:
            recorded = await self._ask(self._store.record(History(epoch, self.me.name, names)))
        except LeaseStoreUnavailable as e:
            self._store_unavailable(e)
            return False
        if recorded and term == self._term:
            self.log.info(
                "in-sync standbys at epoch {epoch}: {names}",
                log_id="role.in_sync",
                epoch=epoch,
                names=sorted(names),
            )
            return True
        return False

    # -- fencing -------------------------------------------------------------------------------

    def _arm_deadline(self) -> None:
        if self._deadline_call is not None and self._deadline_call.active():
            self._deadline_call.cancel()
        delay = max(0.0, self._deadline - self._clock.seconds())
        self._deadline_call = self._clock.callLater(delay, self._check_deadline)

    def _check_deadline(self) -> bool:
        """Fence a primary past its deadline: whether it was fenced now."""
        now = self._clock.seconds()
        if self._state.role != "primary" or now < self._deadline:
            return False
        self._fence(
            f"no renewal of its lease confirmed by its deadline ({now - self._deadline:.1f} s ago)"
        )
        return True

    def _fence(self, reason: str) -> Deferred[None]:
        """
        Stop being primary, the listener told first; then resign, then look
        again, but campaign for none of one C{ttl}: the standbys in sync get
        the key first (a primary cut off from renewing it only would take it
        back each time).
        """
        self._hold_until = self._clock.seconds() + self.options.ttl
        if self._deadline_call is not None and self._deadline_call.active():
            self._deadline_call.cancel()
        self._cancel_next()
        epoch = self._state.epoch
        self._change("fenced", epoch, "")
        self.log.warn(
            "fenced at epoch {epoch}: {reason}", log_id="role.fenced", epoch=epoch, reason=reason
        )
        self._listener.fenced(reason)
        return ensureDeferred(self._resign_then_look(self._term))

    async def _resign_then_look(self, term: int) -> None:
        await self._resign_quietly()
        if term == self._term:
            self._change("candidate", self._state.epoch, "")
            self.log.info("candidate", log_id="role.candidate")
            if self.running:
                self._schedule(0)

    async def _resign_quietly(self) -> None:
        try:
            await self._ask(self._store.resign())
        except LeaseStoreUnavailable as e:
            self.log.warn(
                "could not resign ({error}): the lease lapses by itself",
                log_id="role.resign_failed",
                error=str(e),
            )

    def _change(self, role: str, epoch: int, primary: str) -> None:
        self._term += 1
        self._waiting = ""
        self._state.role, self._state.epoch, self._state.primary = role, epoch, primary
