"""
The speaker: how the queue's answers are spelled for one connection's protocol version.

The kernel never branches on a version and never calls an encoder: each
L{quicx.daemon.queue.model.Session} carries the L{Speaker} its first frame
chose (the Twisted shell's L{quicx.daemon.speakers} has the two), whose
attributes are plain functions with one signature for both versions, and
whose flags say what the kernel may send it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from quicx.daemon.queue.extras import Extras, Home
from quicx.protocol.outcomes import GroupState, OutcomeState
from quicx.protocol.taskflow import Result


class Delivered(Protocol):
    """What a TASK says of the task it delivers (a L{quicx.daemon.queue.model.Task})."""

    task_id: int
    task_type: bytes
    priority: int
    attempts: int
    enqueued_at: float
    token: int
    extras: Extras | None

    @property
    def home(self) -> Home: ...


class Speaker(Protocol):
    """
    One protocol version's replies, and what a peer speaking it can hear.

    @ivar version: the protocol version (for the status views).
    @ivar fenced: its deliveries carry a fencing token and a lease.
    @ivar hears_lifecycle: it hears RETRYING and PROGRESS of its tasks.
    @ivar claims_outcomes: its producer's outcomes can be claimed after
        it reconnects (so they are kept when it is cut off).
    @ivar wait: the WAIT frame; C{heartbeat}: the HEARTBEAT frame.
    """

    @property
    def version(self) -> int: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def hears_lifecycle(self) -> bool: ...

    @property
    def claims_outcomes(self) -> bool: ...

    @property
    def wait(self) -> bytes: ...

    @property
    def heartbeat(self) -> bytes: ...

    @property
    def ok(self) -> Callable[[int], bytes]:
        """C{ok(task_id)}: a SUBMIT's OK, for a task it made."""

    @property
    def duplicate_ok(self) -> Callable[[int], bytes]:
        """C{duplicate_ok(task_id)}: the OK of a SUBMIT whose key names a task made before."""

    @property
    def error(self) -> Callable[[int, str], bytes]:
        """C{error(code, message)}: an ERROR."""

    @property
    def done(self) -> Callable[[int], bytes]:
        """C{done(task_id)}: a task's DONE, without a result."""

    @property
    def done_with(self) -> Callable[[int, Result], bytes]:
        """C{done_with(task_id, result)}: a task's DONE with its result (version 1: without)."""

    @property
    def failed(self) -> Callable[[int, str], bytes]:
        """C{failed(task_id, reason)}: a task's FAILED."""

    @property
    def cancelled(self) -> Callable[[int], bytes]:
        """C{cancelled(task_id)}: version 1 hears FAILED C{cancelled}."""

    @property
    def delivery(self) -> Callable[[Delivered, bytes, bytes, float], bytes]:
        """C{delivery(task, payload, queue_header, timeout)}: a fenced TASK (if L{fenced})."""

    @property
    def task(self) -> Callable[[int, bytes, bytes], bytes]:
        """C{task(task_id, task_type, payload)}: an unfenced TASK (unless L{fenced})."""

    @property
    def retrying(self) -> Callable[[int, int, int, str], bytes]:
        """C{retrying(task_id, attempt, due_ms, reason)} (only if L{hears_lifecycle})."""

    @property
    def progress(self) -> Callable[[int, int, int, str], bytes]:
        """C{progress(task_id, token, fraction, message)} (only if L{hears_lifecycle})."""

    @property
    def outcome(self) -> Callable[[int, OutcomeState, Result | None, str | bytes], bytes]:
        """C{outcome(task_id, state, result, reason)}: an OUTCOME."""

    @property
    def group_state(self) -> Callable[[GroupState], bytes]:
        """C{group_state(state)}: a GROUP_STATE."""
