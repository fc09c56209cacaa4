"""
Handlers of a shard's roles: ROLE, the refusals of a daemon that is not the primary, epoch fencing.

Only with C{[replication]} on: the daemon's role (L{Roles},
L{quicx.daemon.replication.node.Node}) swaps its listeners' handler tables,
so that a daemon without replication pays nothing for any of this.  While
not the primary, every request is answered C{ERROR 0x0C} (version 2, with
the primary's address) or C{ERROR 0x01} (version 1), but HELLO (so that a
client learns the role), STATUS (monitors) and a PONG.  As the primary, the reports that quote
a delivery's token (ACK, NACK, TOUCH, PROGRESS, CHECKPOINT) are refused as
stale when the token is of another primary's epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attrs import define
from twisted.python.failure import Failure

from quicx.daemon.handlers.connection import Connection, Handler, Roles
from quicx.daemon.queue.dispatcher import EPOCH_SHIFT, token_epoch
from quicx.daemon.queue.model import Refused
from quicx.protocol import checkpoints, codec, link, wire
from quicx.protocol.codec import ErrorCode, MessageType
from quicx.protocol.outcomes import ID_TOKEN
from quicx.protocol.role import decode_role

# -- while not the primary ------------------------------------------------------------


def not_primary_v2(roles: Roles, conn: Connection, payload: bytes) -> None:
    conn.reply(link.encode_error(ErrorCode.NOT_PRIMARY, roles.state.primary))


def not_primary_v1(roles: Roles, conn: Connection, payload: bytes) -> None:
    primary = roles.state.primary
    where = f"the primary is at {primary}" if primary else "no primary is known yet"
    conn.reply(wire.encode_error(wire.ErrorCode.QUEUE_FULL, f"not the primary: {where}"))


ANSWERED_V2 = frozenset({MessageType.HELLO, MessageType.PONG, MessageType.STATUS})
"""
What a daemon that is not the primary answers as the primary would (version
2): HELLO (its role), a PONG, and STATUS (a monitor's, the cluster view's).
"""
ANSWERED_ADMIN = ANSWERED_V2 | {MessageType.ROLE}
"""...and on the control socket, ROLE (promote a standby)."""
ANSWERED_V1 = frozenset({wire.MessageType.PONG})


def refusing(
    table: Mapping[int, Handler], answered: frozenset[int], refuse: Handler
) -> dict[int, Handler]:
    """C{table} with every handler but those of C{answered} replaced by C{refuse}."""
    return {kind: handler if kind in answered else refuse for kind, handler in table.items()}


# -- as the primary: tokens of another epoch are stale --------------------------------


def _checkpoint_refused(conn: Connection, task_id: int, token: int, refusal: Refused) -> None:
    # As the CHECKPOINT handler answers a refusal: a CHECKPOINT with its code.
    conn.reply(checkpoints.encode_checkpointed(task_id, token, refusal.code, str(refusal)))


FENCED_REPORTS: dict[int, str] = {
    MessageType.ACK: "outcome",
    MessageType.NACK: "outcome",
    MessageType.TOUCH: "TOUCH",
    MessageType.PROGRESS: "PROGRESS",
    MessageType.CHECKPOINT: "CHECKPOINT",
}
"""The reports that quote a delivery's token (C{[task_id u32][token u64]} first), by name."""


def epoch_fenced(handler: Handler, epoch: int, what: str) -> Handler:
    """
    C{handler}, but for a report quoting a token that primary C{epoch}
    did not hand out: counted and refused as stale (C{ERROR 0x08}; a
    CHECKPOINT is answered as a refused one), never applied.
    """
    mine = token_epoch(epoch)
    refused: Callable[[Connection, int, int, Refused], None] | None = (
        _checkpoint_refused if what == "CHECKPOINT" else None
    )

    def fenced(conn: Connection, payload: bytes) -> None:
        if len(payload) >= ID_TOKEN.size:
            task_id, token = ID_TOKEN.unpack_from(payload)
            theirs = token >> EPOCH_SHIFT
            if theirs != mine:
                session = conn.session
                assert session is not None
                try:
                    conn.queue.leases.refuse_stale(
                        session,
                        task_id,
                        token,
                        what,
                        f"it was handed out at epoch {theirs}, by another primary than this"
                        f" one, of epoch {epoch}",
                    )
                except Refused as e:
                    if refused is None:
                        raise
                    refused(conn, task_id, token, e)
                    return
        handler(conn, payload)

    return fenced


def serving(table: Mapping[int, Handler], epoch: int) -> dict[int, Handler]:
    """Version 2's C{table} as primary C{epoch} serves it: its token reports epoch-fenced."""
    return {
        kind: epoch_fenced(handler, epoch, FENCED_REPORTS[kind])
        if kind in FENCED_REPORTS
        else handler
        for kind, handler in table.items()
    }


# -- ROLE -------------------------------------------------------------------------------


@define
class _Answer:
    """ROLE's answer, decided once the action is done (see L{Session.wait_for})."""

    reply: bytes | None = None


def role(conn: Connection, payload: bytes) -> None:
    request = decode_role(payload)
    conn.require_admin("ROLE")
    roles, session = conn.replication, conn.session
    assert session is not None
    if roles is None:
        raise Refused(
            codec.ErrorCode.NOT_FOUND,
            "this daemon is not one of a shard ([replication] etcd is not set)",
        )
    done = roles.act(request.action)
    answer = _Answer()
    session.wait_for(answer)

    def decided(result: dict[str, Any] | Failure) -> None:
        if isinstance(result, Failure):
            refusal = result.value
            if isinstance(refusal, Refused):
                answer.reply = link.encode_error(refusal.code, str(refusal))
            else:
                answer.reply = link.encode_error(
                    ErrorCode.QUEUE_FULL,
                    f"{request.action.name.lower().replace('_', ' ')} failed:"
                    f" {result.getErrorMessage()}",
                )
        else:
            answer.reply = link.encode_info(result)
        session.send_decided()

    done.addBoth(decided)
