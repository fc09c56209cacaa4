"""
A connection's state: its role, its credits, the tasks it holds, its answers' order.

A connection's state, as the protocol defines it: its role, its credits, the
tasks it holds and the order its answers leave in.

Sans-I/O: a L{Session} writes to an L{IPeer} (the server protocol, or a fake
peer in tests) and knows nothing of sockets, reactors or the queue.  The
queue (L{quicx.daemon.queue.core}) owns the sessions and decides what they hold.
"""

from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Generic, Protocol, TypeVar

from attrs import define, field
from zope.interface import Attribute, Interface


class IPeer(Interface):
    """The far end of a connection, as the queue sees it."""

    peer_name = Attribute("A short description of the peer for logs.")

    def sendFrame(data: bytes) -> None:
        """Send one or more encoded frames."""

    def disconnect() -> None:
        """Close the connection; the queue's C{close_session} follows."""


class Role(Enum):
    """
    What a connection is, decided by its first SUBMIT or READY.  A connection
    that has sent neither (a monitor that only asks STATS) stays NEW.
    """

    NEW = "new"
    PRODUCER = "producer"
    WORKER = "worker"


class ProtocolViolation(Exception):
    """A well-formed message that is not allowed now (answered ERROR 0x02)."""


class Pending(Protocol):
    """A request whose answer may not be decided yet: a SUBMIT being journaled."""

    @property
    def reply(self) -> bytes | None:
        """Its answer, once decided."""


T = TypeVar("T", bound=Pending)


@define(eq=False)
class Session(Generic[T]):
    """
    One connection's state.

    @ivar tasks: the tasks this worker holds, by id, oldest first.
    @ivar credits: how many tasks this worker may hold at once (its READY's
        credit count; 1 unless it uses the credit extension).
    @ivar outstanding: how many of this producer's tasks have no outcome yet
        (counting those still waiting for their OK).
    @ivar last_received: when anything last arrived from the peer.
    @ivar heartbeat_sent: when the daemon last sent it a HEARTBEAT.
    @ivar paused: not read from until its unsent output drains.
    @ivar overdue: deliveries to this worker that are no longer its to
        finish (taken back at the task timeout, or finished by another
        worker's outcome first): the task and that delivery's attempt number,
        by task id; each takes one of its credits until it reports the task.
    @ivar replies: answers to this peer's requests that must wait for an
        earlier SUBMIT's answer (its journal record is being synced): frames,
        and requests whose answer is not decided yet.  Empty nearly always.
    """

    session_id: int
    peer: IPeer
    last_received: float
    role: Role = Role.NEW
    tasks: dict[int, T] = field(factory=dict)
    credits: int = 1
    outstanding: int = 0
    heartbeat_sent: float = 0.0
    connected: bool = True
    paused: bool = False
    overdue: dict[int, tuple[T, int]] = field(factory=dict)
    replies: deque[Pending | bytes] = field(factory=deque)

    @property
    def free_credits(self) -> int:
        """How many more tasks this worker may be sent now."""
        return self.credits - len(self.tasks) - len(self.overdue)

    def claim(self, role: Role) -> bool:
        """
        Give a new connection its role, or check it has C{role} already.

        @return: whether the role is new to it.
        @raise ProtocolViolation: the connection has another role.
        """
        if self.role is role:
            return False
        if self.role is not Role.NEW:
            raise ProtocolViolation(f"a {self.role.value} connection cannot act as a {role.value}")
        self.role = role
        return True

    def reply(self, frame: bytes) -> None:
        """
        Answer a request of this peer's.  Answers leave in the order of the
        requests: behind any whose answer is not decided yet.
        """
        if self.replies:
            self.replies.append(frame)
        else:
            self.peer.sendFrame(frame)

    def wait_for(self, request: Pending) -> None:
        """Hold this answer, and every one after it, until C{request}'s is decided."""
        self.replies.append(request)

    def send_decided(self) -> None:
        """Send the waiting answers that are decided, up to the first that is not."""
        if not self.connected:
            return
        replies, send = self.replies, self.peer.sendFrame
        while replies:
            head = replies[0]
            if isinstance(head, bytes):
                send(head)
            else:
                reply = head.reply  # (read once: a task's is made as it is read)
                if reply is None:
                    return
                send(reply)
            replies.popleft()
