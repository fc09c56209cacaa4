"""
Version 2's dependencies: the SUBMIT options that make a task wait for others, and their outcomes.

A SUBMIT's C{after} option (tag 0x0D) names the tasks it waits for, its
C{on-parent-failure} option (0x0E) says what a parent that did not finish
done does to it (L{ParentPolicy}), its C{after-group} option (0x0F) makes it
a group's callback (it waits until the group finishes, as Celery's chord).
Once every parent has an outcome, the task is due; its TASK carries the
parents' outcomes in its context (tag 0x23, L{Parents}).  docs/protocol.md,
"Version 2: dependencies", has the layouts.  Sans I/O.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from attrs import frozen

from quicx.protocol.codec import MAX_OPTION, MAX_TASK_ID, TASK_ID, MessageType, bad, chunked, joined

AFTER = 0x0D
"""The SUBMIT option that names the parents."""
ON_PARENT_FAILURE = 0x0E
"""The SUBMIT option of the failure policy (L{ParentPolicy})."""
AFTER_GROUP = 0x0F
"""The SUBMIT option that names the group the task is the callback of."""
PARENTS = 0x23
"""The TASK context item (repeated, its values concatenated) of the parents' outcomes."""

MAX_PARENTS = (MAX_OPTION - 1) // 4
"""The most parents one C{after} option names (63: a count and 4-byte ids in 255 bytes)."""
MAX_CONTEXT = 60_000
"""The most bytes of parents' outcomes one TASK carries (what a u16 context length leaves)."""


class ParentPolicy(IntEnum):
    """What a parent that finished other than done (failed, dead, cancelled) does to its child."""

    FAIL = 0
    """The child fails, never run (the default)."""
    IGNORE = 1
    """The child runs; that parent is left out of its context."""
    CONTINUE = 2
    """The child runs; that parent is listed in its context with its outcome and reason."""


POLICY_NAMES = {policy.name.lower(): policy for policy in ParentPolicy}


def encode_after(parents: tuple[int, ...]) -> bytes:
    """
    The C{after} option: C{[0x0D][len][count u8][task id u32]...}.

    @raise ValueError: no parent, too many, an id out of range or repeated.
    """
    if not 1 <= len(parents) <= MAX_PARENTS:
        raise ValueError(f"a task waits for 1 to {MAX_PARENTS} parents, not {len(parents)}")
    if len(set(parents)) != len(parents):
        raise ValueError("a parent is named twice")
    for parent in parents:
        if not 1 <= parent <= MAX_TASK_ID:
            raise ValueError(f"a parent's task id is 1 to {MAX_TASK_ID}, not {parent}")
    body = bytes((len(parents),)) + b"".join(TASK_ID.pack(parent) for parent in parents)
    return bytes((AFTER, len(body))) + body


def encode_dependency_options(
    after: tuple[int, ...] | None, policy: int | None, group: int | None
) -> bytes:
    """
    The three options, those given.

    @raise ValueError: one is out of range, or a policy is given with neither parents nor a group.
    """
    options = b"" if after is None else encode_after(after)
    if policy is not None:
        if after is None and group is None:
            raise ValueError("on_parent_failure needs after or after_group")
        options += bytes((ON_PARENT_FAILURE, 1, ParentPolicy(policy)))
    if group is not None:
        if not 1 <= group <= MAX_TASK_ID:
            raise ValueError(f"a group id is 1 to {MAX_TASK_ID}, not {group}")
        options += bytes((AFTER_GROUP, 4)) + TASK_ID.pack(group)
    return options


def decode_after(value: bytes) -> tuple[int, ...]:
    """@raise MalformedMessage: not a count and that many distinct, non-zero ids."""
    if not value or len(value) != 1 + 4 * value[0] or not value[0]:
        raise bad(MessageType.SUBMIT, "after must be a count (1 or more) and that many 4-byte ids")
    parents = struct.unpack(f">{value[0]}I", value[1:])
    if 0 in parents:
        raise bad(MessageType.SUBMIT, "after names task 0")
    if len(set(parents)) != len(parents):
        raise bad(MessageType.SUBMIT, "after names a parent twice")
    return parents


def decode_policy(value: bytes) -> int:
    """@raise MalformedMessage: not one byte of a known policy."""
    if len(value) != 1 or value[0] not in _POLICIES:
        raise bad(MessageType.SUBMIT, "on-parent-failure must be 1 byte: 0, 1 or 2")
    return ParentPolicy(value[0])


_POLICIES = frozenset(ParentPolicy)


def decode_after_group(value: bytes) -> int:
    """@raise MalformedMessage: not a 4-byte, non-zero group id."""
    if len(value) != 4:
        raise bad(MessageType.SUBMIT, f"after-group must be 4 bytes, not {len(value)}")
    group: int = TASK_ID.unpack(value)[0]
    if not group:
        raise bad(MessageType.SUBMIT, "after-group names group 0")
    return group


# -- the parents' outcomes in a TASK ----------------------------------------------


@frozen
class ParentOutcome:
    """
    One parent's outcome, as its child gets it.

    @ivar state: its L{quicx.protocol.outcomes.OutcomeState}: done (1),
        failed (2), cancelled (3), dead (4), unknown (6: lost, as a parent
        whose outcome a restart could not tell) or expired (7: not started
        before its deadline).  (A plain int here: the
        outcomes module builds on this one's.)
    @ivar kind: its result's kind (L{quicx.protocol.taskflow.ResultKind}), or
        0: C{data} is the reason it failed (or nothing).
    @ivar data: its result, or its failure's reason.
    """

    task_id: int
    state: int
    kind: int = 0
    data: bytes = b""


@frozen
class GroupCounts:
    """A finished group's counts, as its callback gets them."""

    group_id: int
    members: int
    done: int
    failed: int
    cancelled: int


@frozen
class Parents:
    """
    What a TASK's context tag 0x23 carries: the parents' (or the group
    members') outcomes, the group's counts for a group callback, and how
    many outcomes were left out (the daemon's C{[dependencies] max_results}).
    """

    outcomes: tuple[ParentOutcome, ...] = ()
    group: GroupCounts | None = None
    left_out: int = 0


_HEAD = struct.Struct(">BIH")  # flags, left out, count
_GROUP = struct.Struct(">IIIII")
_ENTRY = struct.Struct(">IBBI")  # task id, state, result kind, data length
_STATES = frozenset({1, 2, 3, 4, 6, 7})  # (7: expired, a parent not started in time)


def encode_parents(parents: Parents) -> bytes:
    """
    The TASK context items of C{parents}: the block
    C{[flags u8][left out u32][count u16]}, then (flag 1) the group's
    C{[group u32][members u32][done u32][failed u32][cancelled u32]}, then
    each outcome C{[task id u32][state u8][kind u8][len u32][data]}; cut into
    items of tag 0x23 of up to 255 bytes each.
    """
    group = parents.group
    block = _HEAD.pack(int(group is not None), parents.left_out, len(parents.outcomes))
    if group is not None:
        block += _GROUP.pack(
            group.group_id, group.members, group.done, group.failed, group.cancelled
        )
    block += b"".join(
        _ENTRY.pack(o.task_id, o.state, o.kind, len(o.data)) + o.data for o in parents.outcomes
    )
    return chunked(PARENTS, block)


def decode_parents(block: bytes) -> Parents:
    """
    The concatenated values of a TASK's 0x23 items.

    @raise MalformedMessage: they are not a block of L{encode_parents}.
    """
    try:
        flags, left_out, count = _HEAD.unpack_from(block)
        offset = _HEAD.size
        group = None
        if flags & 1:
            group = GroupCounts(*_GROUP.unpack_from(block, offset))
            offset += _GROUP.size
        outcomes = []
        for _ in range(count):
            task_id, state, kind, length = _ENTRY.unpack_from(block, offset)
            offset += _ENTRY.size
            if state not in _STATES or offset + length > len(block):
                raise struct.error("bad entry")
            outcomes.append(ParentOutcome(task_id, state, kind, block[offset : offset + length]))
            offset += length
    except struct.error:
        raise bad(MessageType.TASK, "parents context is malformed") from None
    if offset != len(block) or flags > 1:
        raise bad(MessageType.TASK, "parents context is malformed")
    return Parents(tuple(outcomes), group, left_out)


def parents_in(context: bytes, start: int, end: int) -> Parents | None:
    """
    The parents' outcomes among a TASK's context items C{context[start:end]}
    (whose framing the context's decoder has checked), if it has any.

    @raise MalformedMessage: they are not a block of L{encode_parents}.
    """
    block = joined(context, start, end, PARENTS)
    return None if block is None else decode_parents(block)
