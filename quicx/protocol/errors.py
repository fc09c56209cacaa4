"""
Exceptions clients raise, and the mapping from ERROR codes to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quicx.protocol import wire
from quicx.protocol.wire import ErrorCode


class QuicxError(Exception):
    """Base class of every error a Quicx client raises."""


class DaemonError(QuicxError):
    """
    The daemon answered ERROR.

    @ivar code: the protocol's error code.
    @ivar message: the daemon's explanation.
    @ivar results: on the error L{QuicxClient.submit_many} raises, the
        results of every task it was given (ids, and errors in their places;
        a L{ClusterClient}'s: task refs, and errors).
    """

    code: int = 0
    results: list[Any]

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class QueueFull(DaemonError):
    """ERROR 0x01: the daemon's pool has no room for the payload right now."""

    code = ErrorCode.QUEUE_FULL


class InvalidMessage(DaemonError):
    """ERROR 0x02: the daemon refused a message as malformed or out of place."""

    code = ErrorCode.INVALID_MESSAGE


class PayloadTooLarge(DaemonError):
    """ERROR 0x03: the payload exceeds the daemon's largest size class."""

    code = ErrorCode.PAYLOAD_TOO_LARGE


class UnknownTaskType(DaemonError):
    """ERROR 0x04: the daemon does not accept this task type."""

    code = ErrorCode.UNKNOWN_TASK_TYPE


class NotFound(DaemonError):
    """ERROR 0x05 (version 2): no such task or queue (unknown, or finished)."""

    code = 0x05


class Forbidden(DaemonError):
    """ERROR 0x06 (version 2): the action needs the admin role."""

    code = 0x06


class Conflict(DaemonError):
    """ERROR 0x07 (version 2): the task's state does not allow it (it is running)."""

    code = 0x07


class UnknownParent(DaemonError):
    """
    ERROR 0x09 (version 2): a parent the SUBMIT names (C{after}) is unknown --
    never submitted, not yet accepted, or finished with no outcome kept -- or
    its C{after_group} names a group the daemon does not know.
    """

    code = 0x09


class Unsteerable(DaemonError):
    """ERROR 0x0A (version 2): the worker speaks version 1, so cannot be told to quiet or stop."""

    code = 0x0A


class Busy(DaemonError):
    """ERROR 0x0B (version 2): as many bulk actions run as C{[bulk] max_running} allows."""

    code = 0x0B


class NotPrimary(DaemonError):
    """
    ERROR 0x0C (version 2): this daemon is not its shard's primary (a
    standby, or a former primary that was fenced).  The message is the
    primary's C{host:port}, or empty while no primary is known: try again
    there (a SUBMIT refused so was not admitted, so it is safe to send again).
    """

    code = 0x0C

    @property
    def primary(self) -> str:
        """The primary's C{host:port}, or C{""} when the daemon knows none."""
        return self.message


_BY_CODE: dict[int, type[DaemonError]] = {
    cls.code: cls
    for cls in (
        QueueFull,
        InvalidMessage,
        PayloadTooLarge,
        UnknownTaskType,
        NotFound,
        Forbidden,
        Conflict,
        UnknownParent,
        Unsteerable,
        Busy,
        NotPrimary,
    )
}


def error_from(reply: wire.Error) -> DaemonError:
    """The exception for an ERROR reply (a plain L{DaemonError} for unknown codes)."""
    return _BY_CODE.get(reply.code, DaemonError)(reply.message, reply.code)


class TaskFailed(QuicxError):
    """
    A worker reported the task FAILED.

    @ivar task_id: the task.
    @ivar reason: the worker's reason, verbatim.
    """

    def __init__(self, task_id: int, reason: str) -> None:
        super().__init__(f"task {task_id} failed: {reason}")
        self.task_id = task_id
        self.reason = reason


class TaskCancelled(QuicxError):
    """
    The task was cancelled (or its queue purged) before a worker took it.

    @ivar task_id: the task.
    """

    def __init__(self, task_id: int) -> None:
        super().__init__(f"task {task_id} was cancelled")
        self.task_id = task_id


class TaskDead(TaskFailed):
    """
    The task failed for good and is in its queue's dead-letter set (what
    AWAIT says of it; its producer hears a plain FAILED).
    """

    def __init__(self, task_id: int, reason: str) -> None:
        super().__init__(task_id, reason)
        self.args = (f"task {task_id} is dead: {reason}",)


class TaskExpired(QuicxError):
    """
    The task was not started before its deadline (its C{expires_in} or
    C{expires_at}, or its queue's C{expires}): it never ran.

    @ivar task_id: the task.
    @ivar reason: the daemon's words.
    """

    def __init__(self, task_id: int, reason: str = "") -> None:
        super().__init__(f"task {task_id} expired: not started before its deadline")
        self.task_id = task_id
        self.reason = reason


class OutcomeForgotten(QuicxError):
    """
    The task's outcome was kept, and no longer is: its TTL ran out, or the
    daemon evicted it for room.

    @ivar task_id: the task.
    @ivar eviction: why the daemon evicted it before its TTL (C{""}: it
        expired, or the daemon does not say).
    """

    def __init__(self, task_id: int, eviction: str = "") -> None:
        if eviction:
            message = f"the outcome of task {task_id} was kept, and was {eviction}"
        else:
            message = f"the outcome of task {task_id} was kept, and is forgotten (its TTL ran out)"
        super().__init__(message)
        self.task_id = task_id
        self.eviction = eviction


class TaskUnknown(QuicxError):
    """
    The daemon knows no such task: never submitted, or finished without its
    outcome kept (see C{keep_result}).

    @ivar task_id: the task.
    """

    def __init__(self, task_id: int) -> None:
        super().__init__(f"no task {task_id}, or its outcome was not kept")
        self.task_id = task_id


class NotSubmittedHere(QuicxError, KeyError):
    """
    A wait for an outcome this client does not expect: the task was not
    submitted by it (on its current connection), or its outcome was taken
    already, or forgotten (past C{keep_outcomes} unclaimed).  A C{KeyError}
    too, as this was before it had a name.

    @ivar task_id: the task.
    """

    def __init__(self, task_id: int) -> None:
        super().__init__(
            f"task {task_id} was not submitted by this client, or its outcome was already"
            f" taken; result({task_id}) reads an outcome the daemon kept (keep_result=True)"
        )
        self.task_id = task_id

    def __str__(self) -> str:
        # Not KeyError's repr() of its argument.
        return str(self.args[0])


class GroupUnknown(QuicxError):
    """
    The daemon knows no such group: never opened, or finished longer ago
    than its C{[groups] ttl}.

    @ivar group: the group.
    """

    def __init__(self, group: int) -> None:
        super().__init__(f"no group {group}, or it finished too long ago to be remembered")
        self.group = group


class NotFinished(QuicxError, TimeoutError):
    """
    A wait for a task's outcome or a group's end ran out first: the task or
    group is still going, and may be waited for again.  A C{TimeoutError}.

    @ivar state: for a group, its state when the wait ended (a dict with
        C{group}, C{state}, C{members}, C{done}, C{failed}, C{cancelled},
        C{pending}); C{None} for a task.
    """

    def __init__(self, message: str, state: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.state = state


class NeedsVersion2(QuicxError):
    """The call needs protocol version 2, and the daemon speaks only version 1."""


class OutcomeUnknown(QuicxError):
    """
    The connection closed before the task's outcome arrived.

    The task itself is not lost: the daemon still holds it and a worker will
    run it (at least once), but its outcome can no longer reach this client.
    """

    def __init__(self, task_id: int) -> None:
        super().__init__(f"connection closed before the outcome of task {task_id} arrived")
        self.task_id = task_id


class ConnectionLost(QuicxError):
    """
    The connection closed before the daemon answered a request.

    A SUBMIT that was sent but not answered may or may not have been
    accepted: resubmitting it can run the task twice.

    @ivar results: on the error L{QuicxClient.submit_many} raises, the
        answers read before the connection closed (ids, and errors in their
        places), in the order of its tasks: the tasks after them were not
        acknowledged; of those, the ones past its C{sent} (how many may have
        reached the daemon) were not sent.  Empty on the errors of other calls.
    """

    def __init__(self, message: str, results: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.results = list(results)


class NotAcknowledged(ConnectionLost):
    """
    A daemon of a cluster went away before it answered a SUBMIT that had no
    idempotency key.  It may have accepted it, and would then run it: so the
    client sent it to no other daemon.  Resubmit it only if running it twice
    does no harm, or give such tasks keys (see docs/clients.md, "Many daemons").

    @ivar daemon: the daemon's address.
    """

    def __init__(self, daemon: str) -> None:
        super().__init__(
            f"{daemon} went away before it answered this submit: it may have accepted it"
        )
        self.daemon = daemon
