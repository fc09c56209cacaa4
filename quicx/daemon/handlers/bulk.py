"""
Handlers of bulk actions: BULK (cancel, retry, replay, purge or move by a filter; admin only).

The action runs over many turns of the event loop (L{quicx.daemon.queue.bulk});
its answer, an INFO document of its counts, waits until it is over and
journaled, and this connection's later answers wait behind it.
"""

from __future__ import annotations

from typing import Any

from attrs import define
from twisted.python.failure import Failure

from quicx.daemon.handlers.connection import Connection
from quicx.daemon.queue.model import Refused
from quicx.protocol import bulk as protocol
from quicx.protocol import link
from quicx.protocol.codec import ErrorCode


@define
class _Answer:
    """BULK's answer, decided once the action is over (see L{Session.wait_for})."""

    reply: bytes | None = None


def bulk(conn: Connection, payload: bytes) -> None:
    request = protocol.decode_bulk(payload)
    conn.require_admin("BULK")
    actions, session = conn.bulk, conn.session
    assert session is not None
    if actions is None:
        raise Refused(ErrorCode.NOT_FOUND, "this listener runs no bulk actions")
    finished = actions.run(request)
    answer = _Answer()
    session.wait_for(answer)

    def decided(result: dict[str, Any] | Failure) -> None:
        if isinstance(result, Failure):
            answer.reply = link.encode_error(
                ErrorCode.QUEUE_FULL,
                f"done, but not journaled ({result.getErrorMessage()}): a restart may undo it",
            )
        else:
            answer.reply = link.encode_info(result)
        session.send_decided()

    finished.addBoth(decided)
