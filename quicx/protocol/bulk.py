"""
Version 2's bulk actions: cancel, retry, replay, purge or move the tasks that match a filter.

One message, BULK (0x31): an action, flags (a dry run), and TLV filter
fields (queue, type, key prefix, states, age, failure reason) ANDed, and
the target queue of a move.  The daemon answers it with an INFO document
(L{quicx.protocol.link}) once the action has gone over every task that
matched when it started, a bounded number per turn of its event loop.
docs/protocol.md has the layout.  Sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from enum import IntEnum, IntFlag

from attrs import Factory, frozen

from quicx.protocol.codec import (
    MAX_OPTION,
    U64,
    MessageType,
    bad,
    check_queue,
    frame,
    option,
    queue_name,
    text,
    tlv,
)
from quicx.protocol.durations import parse_duration

_HEAD = struct.Struct(">BBH")
"""Action, flags, then the length of the filter's fields."""
DRY_RUN = 0x01
"""BULK's flag: count (and sample) the matches, change nothing."""
SAMPLE = 10
"""The most matching task ids an answer lists."""
MAX_AGE_MS = (1 << 63) - 1


class BulkAction(IntEnum):
    """What a BULK does to each task it matches."""

    CANCEL = 1
    """Cancel queued and delayed tasks (their producers hear CANCELLED)."""
    RETRY = 2
    """Run now: replay dead tasks, and queue tasks waiting out a retry's backoff."""
    REPLAY = 3
    """Put dead tasks back in their queues, their failures reset."""
    PURGE = 4
    """Delete queued, delayed and dead tasks."""
    MOVE = 5
    """Move queued, delayed and dead tasks to another queue, keeping their ids."""


class BulkState(IntFlag):
    """The states a filter may name (a task running is never acted on)."""

    QUEUED = 0x01
    DELAYED = 0x02
    DEAD = 0x04
    WAITING = 0x08
    """Waiting for its parents (C{after}): cancel and purge act on it, a move does not."""


NO_STATES = BulkState(0)
"""A filter's states when it names none: every state the action acts on."""
ALL_STATES = BulkState.QUEUED | BulkState.DELAYED | BulkState.DEAD | BulkState.WAITING

ACTS_ON: dict[BulkAction, BulkState] = {
    BulkAction.CANCEL: BulkState.QUEUED | BulkState.DELAYED | BulkState.WAITING,
    BulkAction.RETRY: BulkState.DELAYED | BulkState.DEAD,
    BulkAction.REPLAY: BulkState.DEAD,
    BulkAction.PURGE: ALL_STATES,
    BulkAction.MOVE: BulkState.QUEUED | BulkState.DELAYED | BulkState.DEAD,
}
"""The states each action acts on: a filter's states must be among them."""


class BulkField(IntEnum):
    """BULK's TLV tags."""

    QUEUE = 0x01
    TYPE = 0x02
    KEY_PREFIX = 0x03
    STATES = 0x04
    OLDER_THAN = 0x05
    NEWER_THAN = 0x06
    REASON = 0x07
    TARGET = 0x08


MAX_BULK = _HEAD.size + len(BulkField) * (2 + MAX_OPTION)
"""The longest BULK: its head, each field once at its longest (longer: refused at its header)."""


@frozen
class BulkFilter:
    """
    Which tasks a bulk action acts on: every field given must match (AND).

    @ivar queue: the task's queue.
    @ivar task_type: the task's type, exactly.
    @ivar key_prefix: its idempotency key starts with these bytes (a task
        without a key does not match).
    @ivar states: the states it may be in (0: every state the action acts on).
    @ivar older_than: submitted at least this many seconds ago (0: any).
    @ivar newer_than: submitted less than this many seconds ago (0: any).
    @ivar reason: its failure reason (a dead task's) contains this text; a
        task without one does not match.
    """

    queue: str | None = None
    task_type: bytes | None = None
    key_prefix: bytes | None = None
    states: BulkState = NO_STATES
    older_than: float = 0.0
    newer_than: float = 0.0
    reason: str | None = None


@frozen
class Bulk:
    """
    BULK: do C{action} to every task that matches C{filter}; with
    C{dry_run}, only count them.  C{target}: a move's queue (only a move
    has one).
    """

    action: BulkAction
    filter: BulkFilter = Factory(BulkFilter)
    dry_run: bool = False
    target: str | None = None


def problem(request: Bulk) -> str:
    """What is wrong with C{request} beyond its layout ('' if nothing)."""
    action, states = request.action, request.filter.states
    acts_on = ACTS_ON[action]
    if int(states) & ~int(acts_on):
        named = ", ".join(str(s.name).lower() for s in BulkState if s & states & ~acts_on)
        return f"{action.name.lower()} does not act on {named} tasks"
    if (action is BulkAction.MOVE) != (request.target is not None):
        return "a move names its target queue, and only a move"
    if request.target is not None and request.target == request.filter.queue:
        return f"the tasks of queue {request.target} are in it already"
    ages = request.filter
    if ages.older_than and ages.newer_than and ages.newer_than <= ages.older_than:
        return "no task is older than older_than and newer than a shorter newer_than"
    return ""


def request(
    action: str | BulkAction,
    dry_run: bool = False,
    *,
    queue: str | None = None,
    task_type: str | bytes | None = None,
    key_prefix: str | bytes | None = None,
    states: Iterable[str] = (),
    older_than: float | str = 0.0,
    newer_than: float | str = 0.0,
    reason: str | None = None,
    to: str | None = None,
) -> Bulk:
    """
    A L{Bulk} from names and text, as a client or the command line gives
    them: C{action} and C{states} by name, ages in seconds or as C{10m}.

    @raise ValueError: an unknown action or state, a malformed age.
    """
    if isinstance(action, str):
        try:
            action = BulkAction[action.upper()]
        except KeyError:
            actions = ", ".join(a.name.lower() for a in BulkAction)
            raise ValueError(f"unknown bulk action {action!r} (one of {actions})") from None
    flags = NO_STATES
    for state in states:
        try:
            flags |= BulkState[state.upper()]
        except KeyError:
            raise ValueError(f"unknown state {state!r} (queued, delayed or dead)") from None
    return Bulk(
        action,
        BulkFilter(
            queue,
            task_type.encode("utf-8") if isinstance(task_type, str) else task_type,
            key_prefix.encode("utf-8") if isinstance(key_prefix, str) else key_prefix,
            flags,
            _seconds(older_than),
            _seconds(newer_than),
            reason,
        ),
        dry_run,
        to,
    )


def _seconds(age: float | str) -> float:
    return parse_duration(age) if isinstance(age, str) else float(age)


# -- encoding ---------------------------------------------------------------------


def _milliseconds(seconds: float, what: str) -> bytes:
    if not 0 <= seconds * 1000 <= MAX_AGE_MS:
        raise ValueError(f"{what} is 0 or more seconds, not {seconds}")
    return U64.pack(round(seconds * 1000))


def encode_bulk(request: Bulk) -> bytes:
    """
    C{[action u8][flags u8][fields_len u16][TLV fields]}.

    @raise ValueError: a field is out of range, or the request makes no sense.
    """
    where = request.filter
    fields = b""
    if where.queue is not None:
        fields += option(BulkField.QUEUE, check_queue(where.queue))
    if where.task_type is not None:
        fields += option(BulkField.TYPE, where.task_type)
    if where.key_prefix is not None:
        fields += option(BulkField.KEY_PREFIX, where.key_prefix)
    if where.states:
        if int(where.states) & ~int(ALL_STATES):
            raise ValueError(f"unknown states 0x{int(where.states):02x}")
        fields += option(BulkField.STATES, bytes((where.states,)))
    if where.older_than:
        fields += option(BulkField.OLDER_THAN, _milliseconds(where.older_than, "older_than"))
    if where.newer_than:
        fields += option(BulkField.NEWER_THAN, _milliseconds(where.newer_than, "newer_than"))
    if where.reason is not None:
        fields += option(BulkField.REASON, where.reason.encode("utf-8"))
    if request.target is not None:
        fields += option(BulkField.TARGET, check_queue(request.target))
    wrong = problem(request)
    if wrong:
        raise ValueError(wrong)
    head = _HEAD.pack(request.action, DRY_RUN if request.dry_run else 0, len(fields))
    return frame(MessageType.BULK, head + fields)


# -- decoding ---------------------------------------------------------------------

_KNOWN = frozenset(BulkField)
_ACTIONS = frozenset(BulkAction)


def _age(raw: bytes, what: str) -> float:
    kind = MessageType.BULK
    if len(raw) != U64.size:
        raise bad(kind, f"{what} must be 8 bytes of milliseconds")
    milliseconds: int = U64.unpack(raw)[0]
    if milliseconds > MAX_AGE_MS:
        raise bad(kind, f"{what} is past {MAX_AGE_MS} ms")
    return milliseconds / 1000


def decode_bulk(payload: bytes) -> Bulk:
    kind = MessageType.BULK
    if len(payload) < _HEAD.size:
        raise bad(kind, f"is shorter than its {_HEAD.size}-byte head")
    action, flags, length = _HEAD.unpack_from(payload)
    if action not in _ACTIONS:
        raise bad(kind, f"has unknown action {action}")
    if flags & ~DRY_RUN:
        raise bad(kind, f"has unknown flags 0x{flags:02x}")
    if _HEAD.size + length != len(payload):
        raise bad(kind, f"fields of {length} bytes do not end the {len(payload)}-byte payload")
    items = tlv(kind, payload, _HEAD.size, len(payload))
    unknown = set(items) - _KNOWN
    if unknown:
        raise bad(kind, f"has unknown field 0x{min(unknown):02x}")
    states = NO_STATES
    if BulkField.STATES in items:
        raw = items[BulkField.STATES]
        if len(raw) != 1 or not raw[0] or raw[0] & ~int(ALL_STATES):
            raise bad(kind, "states must be 1 byte of the bits 0x01, 0x02, 0x04 and 0x08")
        states = BulkState(raw[0])
    reason = None
    if BulkField.REASON in items:
        reason = text(kind, items[BulkField.REASON], "reason")
    request = Bulk(
        BulkAction(action),
        BulkFilter(
            queue_name(kind, items[BulkField.QUEUE]) if BulkField.QUEUE in items else None,
            items.get(BulkField.TYPE),
            items.get(BulkField.KEY_PREFIX),
            states,
            _age(items[BulkField.OLDER_THAN], "older_than")
            if BulkField.OLDER_THAN in items
            else 0.0,
            _age(items[BulkField.NEWER_THAN], "newer_than")
            if BulkField.NEWER_THAN in items
            else 0.0,
            reason,
        ),
        bool(flags & DRY_RUN),
        queue_name(kind, items[BulkField.TARGET]) if BulkField.TARGET in items else None,
    )
    wrong = problem(request)
    if wrong:
        raise bad(kind, wrong)
    return request


Message = Bulk

DECODERS: dict[int, Callable[[bytes], Message]] = {MessageType.BULK: decode_bulk}
