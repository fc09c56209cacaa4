"""
How a worker follows shared data: one of its connections follows, for all.

A worker that follows shared data (C{follow}: names) has one connection,
the first whose daemon has shared data, send FOLLOW (before its READY, so
that the data comes before any task); the others hold their READYs until
the answer has come, so that no handler runs without the data.  The
follower's SHARED frames update the worker's one mapping, which every
task's context reads.  When the follower closes, another open connection
follows.  Nothing here does I/O: the worker runners (Twisted's, in
L{quicx.clients.worker}, and asyncio's, in L{quicx.aio.worker}) call it
as their connections are answered, close and read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

from quicx.protocol import shared_data


class Slot(Protocol):
    """A worker connection, as following needs it."""

    stopping: bool
    capabilities: frozenset[str]

    @property
    def _greeted(self) -> bool: ...

    def follow(self) -> None:
        """Send FOLLOW for the worker's names."""

    def _ready(self) -> None:
        """Send READY: it may take tasks now."""


F = TypeVar("F", bound=Slot)


class Following(Generic[F]):
    """
    Which connection follows the shared data, which wait for it, and its
    newest versions (in C{shared}, the mapping the handlers read).

    @ivar follower: the connection that follows (C{None}: none yet).
    @ivar known: whether the follower's FOLLOW was answered.
    """

    def __init__(self, shared: dict[str, bytes]) -> None:
        self.shared = shared
        self.follower: F | None = None
        self.known = False
        self._held: list[F] = []

    def greeted(self, slot: F) -> bool:
        """
        C{slot}'s daemon has shared data: the first such slot follows it.

        @return: whether C{slot} may send READY now (not before the data has come).
        """
        if self.follower is None:
            self.follower = slot
            slot.follow()
            return True
        if self.known:
            return True
        self._held.append(slot)
        return False

    def lost(self, slot: F, others: Iterable[F]) -> None:
        """C{slot} closed: another of the open C{others} follows, if it followed."""
        if slot in self._held:
            self._held.remove(slot)
        if self.follower is not slot:
            return
        self.follower = None
        for other in others:
            if other._greeted and "shared" in other.capabilities and not other.stopping:
                self.follower = other
                other.follow()
                return

    def followed(self, following: object, slot: F) -> None:
        """
        The follower's FOLLOW was answered (C{following}: each name's current
        version, 0 for none): forget the names that no longer exist; the
        held slots may now ask for tasks.
        """
        if slot is not self.follower:
            return
        if isinstance(following, dict):
            for name, version in following.items():
                if not version:
                    self.shared.pop(name, None)
        self.known = True
        held, self._held = self._held, []
        for other in held:
            other._ready()

    def arrived(self, shared: shared_data.Shared, slot: F) -> None:
        """
        C{slot} got a version of shared data: if it is the follower's, the
        newest, as the daemon sends them in order (versions count again
        from 1 after a delete, or after a restart without a journal);
        version 0 deletes the name.
        """
        if slot is not self.follower:
            return
        if shared.version:
            self.shared[shared.name] = shared.data
        else:
            self.shared.pop(shared.name, None)
