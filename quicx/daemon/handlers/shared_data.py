"""
Handlers of shared data: PUBLISH (a producer or an admin sets a name) and
FOLLOW (a worker follows names).
"""

from __future__ import annotations

from quicx.daemon.handlers.connection import Connection, NotAuthorized
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.shared import SharedData
from quicx.protocol import codec, link, shared_data
from quicx.protocol.session import Role


def publish(conn: Connection, payload: bytes) -> None:
    message = shared_data.decode_publish(payload)
    session = conn.session
    assert session is not None
    conn.learn_identity()
    if not session.admin:
        try:
            conn.authorize("producer")
        except NotAuthorized as e:
            raise Refused(
                codec.ErrorCode.FORBIDDEN, f"{e}: PUBLISH needs the producer or admin role"
            ) from None
    answer = kept(conn.queue).publish(session, message.name, message.data, message.delete)
    conn.reply_when_durable(link.encode_info(answer))


def follow(conn: Connection, payload: bytes) -> None:
    names = shared_data.decode_follow(payload).names
    session = conn.session
    assert session is not None
    if session.role is not Role.WORKER:
        conn.authorize("worker")
    conn.reply(link.encode_info(kept(conn.queue).follow(session, names)))


def kept(queue: QueueService) -> SharedData:
    """
    The queue's shared data.

    @raise Refused: (NOT_FOUND) the daemon keeps none.
    """
    shared = queue.shared
    if not isinstance(shared, SharedData):
        raise Refused(codec.ErrorCode.NOT_FOUND, "this daemon keeps no shared data")
    return shared
