"""
Version 2's ROLE (0x36): an admin asks a daemon of a shard to step down, or to be the primary.

C{[action u8]}: 1 steps down (the primary gives the lease store's key up, a
standby in sync takes it), 2 promotes (the daemon campaigns for the key now).
The daemon answers an INFO document of its role, epoch and primary
(L{quicx.protocol.link}), or ERROR.  docs/protocol.md has the layout.  Sans I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

from attrs import frozen

from quicx.protocol.codec import MessageType, bad, frame


class RoleAction(IntEnum):
    """What a ROLE asks of the daemon."""

    STEP_DOWN = 1
    """Give the primary's role up (a primary only)."""
    PROMOTE = 2
    """Campaign for the primary's role now."""


ROLE_SIZE = 1
"""ROLE's payload: its action."""


@frozen
class Role:
    """ROLE: do C{action}."""

    action: RoleAction


def encode_role(action: RoleAction | int) -> bytes:
    """C{[action u8]}. @raise ValueError: an unknown action."""
    return frame(MessageType.ROLE, bytes((RoleAction(action),)))


def decode_role(payload: bytes) -> Role:
    kind = MessageType.ROLE
    if len(payload) != ROLE_SIZE:
        raise bad(kind, f"is {ROLE_SIZE} byte (its action), not {len(payload)}")
    try:
        return Role(RoleAction(payload[0]))
    except ValueError:
        raise bad(kind, f"has unknown action {payload[0]} (1: step down, 2: promote)") from None


Message = Role

DECODERS: dict[int, Callable[[bytes], Message]] = {MessageType.ROLE: decode_role}
