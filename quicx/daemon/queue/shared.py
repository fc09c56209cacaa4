"""
Shared data: named, versioned blobs that producers publish and workers follow.

A PUBLISH stores the next version of a name (versions count from 1; a name
deleted and published again starts again from 1) in the daemon's memory,
outside the pool, bounded by L{SharedLimits}; each version is journaled.
A FOLLOW makes its connection a worker that is sent the current version of
each name it lists at once, then every later version once, as SHARED (a
deletion: version 0, no data).

A follower whose output is backed up (its unsent output passed
C{max_output_buffer}: its session is C{paused} until that drains) is not
written each version: the names that changed are remembered, and when it
catches up (L{SharedData.output_drained}) it is sent the newest version of each,
not a backlog.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import define, field, frozen
from twisted.logger import Logger

from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused, Session
from quicx.daemon.queue.policy import SharedLimits
from quicx.protocol import shared_data
from quicx.protocol.codec import ErrorCode
from quicx.protocol.session import Role

MAX_VERSION = 0xFFFFFFFF
"""A version is a u32 on the wire; after the last one comes 1 again."""


@frozen
class _Version:
    number: int
    data: bytes


@define(eq=False)
class _Follower:
    """
    A connection that follows C{names}; C{behind}: those that changed while
    its output was backed up.
    """

    session: Session
    names: dict[str, None] = field(factory=dict)
    behind: dict[str, None] = field(factory=dict)


class SharedData:
    """
    The shared data of C{queue}'s daemon (handed to it: see C{QueueService.plug}).

    @ivar size: the bytes of data of every name's current version.
    @ivar published: versions published since start, deletions included.
    """

    log = Logger()

    def __init__(self, queue: QueueService, limits: SharedLimits | None = None) -> None:
        self.queue = queue
        self.limits = limits or SharedLimits()
        self._versions: dict[str, _Version] = {}
        self._followers: dict[int, _Follower] = {}
        # Each name's followers, by session id.
        self._following: dict[str, dict[int, _Follower]] = {}
        self.size = 0
        self.published = 0

    @property
    def names(self) -> int:
        """How many names exist."""
        return len(self._versions)

    @property
    def followers(self) -> int:
        """How many connections follow shared data."""
        return len(self._followers)

    def restore(self, versions: Mapping[str, tuple[int, bytes]]) -> None:
        """Take back the versions a journal kept (whatever the limits are now)."""
        for name, (number, data) in versions.items():
            self._versions[name] = _Version(number, data)
            self.size += len(data)
        if self.size > self.limits.max_memory or self.names > self.limits.max_names:
            self.log.warn(
                "the journal kept {names} shared names of {size} bytes, past [shared]"
                " max_names or max_memory: new names and more data are refused until some are"
                " deleted",
                log_id="shared.over_limits",
                names=self.names,
                size=self.size,
            )

    # -- PUBLISH ---------------------------------------------------------------------

    def publish(self, session: Session, name: str, data: bytes, delete: bool) -> dict[str, Any]:
        """
        Store C{data} as the next version of C{name}, or delete C{name};
        journal it and send it to its followers.

        @raise Refused: (forbidden) C{session} is a worker and no admin;
            (not found) deleting an unknown name; (too large) C{data} is
            past C{max_size}; (queue full) a new name past C{max_names},
            data past C{max_memory}, or the journal is broken.
        """
        if session.role is Role.WORKER and not session.admin:
            raise Refused(
                ErrorCode.FORBIDDEN,
                "a worker connection may not publish shared data: publish from a producer's"
                " or an admin's connection",
            )
        journal = self.queue.journal
        if journal.broken:
            raise Refused(ErrorCode.QUEUE_FULL, f"journal unavailable: {journal.broken}")
        old = self._versions.get(name)
        if delete:
            if old is None:
                raise Refused(ErrorCode.NOT_FOUND, f"no shared data named {name!r}")
            del self._versions[name]
            self.size -= len(old.data)
            number = 0
        else:
            self._check(name, data, old)
            number = old.number % MAX_VERSION + 1 if old is not None else 1
            self._versions[name] = _Version(number, data)
            self.size += len(data) - (len(old.data) if old is not None else 0)
        self.published += 1
        journal.record_shared(name, number, data)
        followers = self._following.get(name, {})
        if followers:
            frame = shared_data.encode_shared(name, number, data)
            durable = journal.durable()
            if durable is None:
                self._send(name, frame)
            else:
                # Followers see a version once the journal has it (with fsync
                # = always): a crash never takes back one a worker has used.
                durable.addCallbacks(lambda _: self._send(name, frame), lambda _: None)
        answer: dict[str, Any] = {
            "name": name,
            "version": number,
            "size": len(data),
            "followers": len(followers),
        }
        if delete:
            answer["deleted"] = True
        return answer

    def _send(self, name: str, frame: bytes) -> None:
        """Send a version of C{name} to its followers; one backed up is sent the newest later."""
        for follower in self._following.get(name, {}).values():
            if follower.session.paused:
                follower.behind[name] = None
            else:
                follower.session.peer.sendFrame(frame)

    def _check(self, name: str, data: bytes, old: _Version | None) -> None:
        """@raise Refused: C{data} may not be the next version of C{name}."""
        limits = self.limits
        if len(data) > limits.max_size:
            raise Refused(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"shared data of {len(data)} bytes exceeds [shared] max_size ({limits.max_size})",
            )
        if old is None and self.names >= limits.max_names:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"too many shared names (max_names = {limits.max_names}); {name!r} is new",
                log_id="limit.shared",
            )
        total = self.size + len(data) - (0 if old is None else len(old.data))
        if total > limits.max_memory:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"shared data would take {total} bytes, past [shared] max_memory"
                f" ({limits.max_memory})",
                log_id="limit.shared",
            )

    # -- FOLLOW ------------------------------------------------------------------------

    def follow(self, session: Session, names: tuple[str, ...]) -> dict[str, Any]:
        """
        Make C{session} a worker that follows C{names} too, and send it
        the current version of each of them that exists.

        @raise ProtocolViolation: it is a producer.
        @raise Refused: (queue full) it would follow more than C{max_names}.
        """
        self.queue.claim_role(session, Role.WORKER)
        follower = self._followers.get(session.session_id)
        known = follower.names if follower is not None else {}
        added = [name for name in names if name not in known]
        if len(known) + len(added) > self.limits.max_names:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"a connection follows at most {self.limits.max_names} shared names"
                " ([shared] max_names)",
                log_id="limit.shared",
            )
        if follower is None:
            follower = self._followers[session.session_id] = _Follower(session)
        for name in added:
            follower.names[name] = None
            self._following.setdefault(name, {})[session.session_id] = follower
        for name in names:
            version = self._versions.get(name)
            if version is not None:
                follower.behind.pop(name, None)
                session.peer.sendFrame(
                    shared_data.encode_shared(name, version.number, version.data)
                )
        return {"following": {name: self._number(name) for name in follower.names}}

    def _number(self, name: str) -> int:
        version = self._versions.get(name)
        return 0 if version is None else version.number

    def output_drained(self, session: Session) -> None:
        """(A kernel hook.) Send C{session} the newest version of each name it missed."""
        follower = self._followers.get(session.session_id)
        if follower is None or not follower.behind:
            return
        behind, follower.behind = follower.behind, {}
        for name in behind:
            version = self._versions.get(name)
            session.peer.sendFrame(
                shared_data.encode_shared(name, 0)
                if version is None
                else shared_data.encode_shared(name, version.number, version.data)
            )

    def session_closed(self, session: Session) -> None:
        """(A kernel hook.) Forget a connection that closed."""
        follower = self._followers.pop(session.session_id, None)
        if follower is None:
            return
        for name in follower.names:
            followers = self._following[name]
            del followers[session.session_id]
            if not followers:
                del self._following[name]

    # -- the journal's snapshot --------------------------------------------------------

    def versions(self) -> list[tuple[str, int, bytes]]:
        return [(name, version.number, version.data) for name, version in self._versions.items()]
