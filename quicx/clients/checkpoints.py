"""
A worker connection's checkpoints on their way to the daemon, sans-I/O.

A handler's C{context.checkpoint(state)} becomes a CHECKPOINT quoting its
delivery's token; the daemon answers each with a CHECKPOINT that names the
task and the token (L{quicx.protocol.checkpoints}).  L{Saves} makes the
frames and hands each answer to whoever waits for it: the Twisted worker
(L{quicx.clients.leases}) and the asyncio one (L{quicx.aio.slot}) wrap it
in a Deferred or a future.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from quicx.protocol import checkpoints, wire
from quicx.protocol.errors import ConnectionLost, QuicxError, error_from
from quicx.protocol.taskflow import Result

Answered = Callable[[Exception | None], None]
"""Told C{None} once the daemon holds the state durably, else the error that refused it."""


class Saves:
    """
    The checkpoints a connection sent and the daemon has not answered, by
    task and token, oldest first.

    @ivar limit: the largest state the daemon takes (its HELLO's
        C{max_checkpoint}); C{None}: it takes no checkpoints.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._waiting: dict[tuple[int, int], deque[Answered]] = {}

    def frame(self, task_id: int, token: int, state: object, answered: Answered) -> bytes:
        """
        The CHECKPOINT of C{state} (bytes, a string, or JSON-serialisable)
        for delivery C{token} of C{task_id}; C{answered} is told its answer.

        @raise TypeError: C{state} is none of those.
        @raise ValueError: it is larger than the daemon takes.
        @raise QuicxError: the daemon takes no checkpoints.
        """
        saved = Result.of(state)
        if self.limit is None:
            raise QuicxError("the daemon takes no checkpoints (no 'checkpoints' capability)")
        if len(saved.data) > self.limit:
            raise ValueError(
                f"a checkpoint of {len(saved.data)} bytes exceeds the daemon's"
                f" max_checkpoint ({self.limit} bytes)"
            )
        self._waiting.setdefault((task_id, token), deque()).append(answered)
        return checkpoints.encode_checkpoint(task_id, token, saved)

    def answered(self, payload: bytes) -> None:
        """
        The daemon's answer (a CHECKPOINT's payload): tell the oldest
        checkpoint of its task and token.

        @raise MalformedMessage: it is not an answer.
        """
        answer = checkpoints.decode_checkpointed(payload)
        key = (answer.task_id, answer.token)
        waiting = self._waiting.get(key)
        if not waiting:
            return  # a daemon's mistake: nothing waits for it
        answered = waiting.popleft()
        if not waiting:
            del self._waiting[key]
        answered(None if answer.kept else error_from(wire.Error(answer.code, answer.reason)))

    def lost(self, why: str) -> None:
        """The connection closed: every checkpoint still unanswered may or may not be kept."""
        waiting, self._waiting = self._waiting, {}
        for answers in waiting.values():
            for answered in answers:
                answered(ConnectionLost(f"closed before the checkpoint's answer ({why})"))
