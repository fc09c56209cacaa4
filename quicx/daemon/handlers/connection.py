"""
What a message handler sees of the connection its frame came on: its
session, the queue, its limits, its replies.

L{quicx.daemon.server.QuicxServerProtocol} is the one implementation; the
handlers (this package's other modules) see only this interface, so they
import nothing above them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

from twisted.internet.defer import Deferred

from quicx.daemon.config import Limits
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.bulk import BulkActions
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.fastpath import FastPath
from quicx.daemon.queue.model import Session
from quicx.daemon.replication.interfaces import RoleState
from quicx.protocol.role import RoleAction


class Roles(Protocol):
    """This daemon's role in its shard, as the handlers see it (a replication C{Node})."""

    @property
    def state(self) -> RoleState: ...

    def describe(self) -> dict[str, Any]:
        """C{role}, C{epoch} and C{primary}: what HELLO's INFO and ROLE's answer add."""

    def act(self, action: RoleAction) -> Deferred[dict[str, Any]]:
        """
        Step down or campaign now: L{describe} once done.

        @raise Refused: (conflict) the action makes no sense in this role.
        """


class NotAuthorized(Exception):
    """The peer's identity may not take the role it asked for (ERROR, then closed)."""


class Connection(Protocol):
    """
    One client connection, as its handlers see it.

    @ivar session: its session (C{None} once it is lost, or if it was
        refused: no frame is handled then).
    @ivar queue: the queue it submits to and works for.
    @ivar admission: what takes its SUBMITs into the queue.
    @ivar fast: what takes its plain SUBMITs, DONEs and ACKs (the general
        path's steps for the common case, in one call each).
    @ivar now: when the frames being handled were read (one clock reading
        a read: its plain tasks' submit time).
    @ivar limits: what it is held to.
    @ivar max_type: its limits' C{max_type_length}, one attribute away.
    @ivar status: makes the daemon's status document (STATUS); C{None}:
        this listener serves none.
    @ivar bulk: the daemon's bulk actions (BULK).
    @ivar replication: its role in its shard (ROLE, HELLO), when replication is on.
    """

    @property
    def session(self) -> Session | None: ...

    @property
    def queue(self) -> QueueService: ...

    @property
    def admission(self) -> Admission: ...

    @property
    def fast(self) -> FastPath: ...

    @property
    def now(self) -> float: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def max_type(self) -> int: ...

    @property
    def status(self) -> Callable[[], dict[str, Any]] | None: ...

    @property
    def bulk(self) -> BulkActions | None:
        """The daemon's bulk actions; C{None}: this listener runs none."""

    @property
    def replication(self) -> Roles | None:
        """This daemon's role in its shard; C{None}: replication is off."""

    def reply(self, frame: bytes) -> None:
        """Answer this peer's request, in order with its other answers."""

    def reply_when_durable(
        self, frame: bytes, failed: Callable[[str], bytes] | None = None
    ) -> None:
        """
        Answer once the journal holds what the request changed, in order;
        if it could not be written, C{ERROR 0x01}, or C{failed(why)} (the write's error).
        """

    def producer(
        self, task_type: bytes, key: bytes | None = None, fairness: bytes | None = None
    ) -> Session:
        """
        Its session, taking the producer role if it is new, to submit a task
        of C{task_type} with these keys.

        @raise ProtocolViolation: the type or a key is too long, or the
            connection is a worker.
        @raise NotAuthorized: its identity may not produce.
        """

    def authorize(self, *roles: str) -> None:
        """@raise NotAuthorized: its identity may act as none of C{roles}."""

    def learn_identity(self) -> None:
        """Learn its certificate identity (and whether it is an admin), once."""

    def require_admin(self, what: str) -> None:
        """@raise Refused: it is no admin, so may not ask for C{what}."""

    def monitor_query(self) -> None:
        """A monitor query begins: check the peer may ask; the turn may end once answered."""


Handler: TypeAlias = Callable[[Connection, bytes], None]
"""What answers one message type: called with the connection and the frame's payload."""
