"""A replication connection's framing: the version-2 frames its end takes; a bad one ends it."""

from __future__ import annotations

from collections.abc import Mapping

from twisted.logger import Logger

from quicx.net.framer import FrameReceiver
from quicx.protocol import codec, link, replication
from quicx.protocol.codec import ErrorCode, MalformedMessage, MessageType
from quicx.protocol.wire import ErrorCode as HeaderError


class ReplicationLink(FrameReceiver):
    """
    One end of a replication connection.  Subclasses say which message
    types they take (L{takes}) and handle each decoded one
    (L{messageReceived}).  A frame refused at its header (too long for its
    type, another version, a type this end does not take) or malformed is
    answered with ERROR and ends the connection: a peer is a daemon of the
    shard, and one that says something wrong starts over.
    """

    log = Logger()
    takes: frozenset[int] = frozenset()

    def __init__(self, max_batch: int) -> None:
        limits = replication.type_limits(max_batch)
        self.maxLength = 0
        self.v2MaxLength = 1  # (none would turn version 2 off; every type has its limit below)
        # A type this end does not take: refused from its header unless empty.
        self.v2TypeLimits: Mapping[int, int] = {
            t: limits[t] if t in self.takes else 0 for t in codec.MessageType
        }

    @property
    def connected_now(self) -> bool:
        return bool(self.connected) and not self.transport.disconnecting

    def frameRejected(self, code: HeaderError, reason: str) -> None:
        self.refuse(code, reason)

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        if self._parser.version != codec.VERSION:
            self.refuse(ErrorCode.INVALID_MESSAGE, "replication speaks protocol version 2 only")
        elif message_type not in self.takes:
            name = MessageType(message_type).name
            self.refuse(ErrorCode.INVALID_MESSAGE, f"{name} is not sent to this end")
        else:
            try:
                message = replication.DECODERS[message_type](payload)
            except MalformedMessage as e:
                self.refuse(ErrorCode.INVALID_MESSAGE, str(e))
                return
            self.messageReceived(message)

    def messageReceived(self, message: replication.Message) -> None:
        raise NotImplementedError

    def refuse(self, code: int, reason: str) -> None:
        """Answer ERROR C{code} and end the connection."""
        if not self.connected_now:
            return
        peer = self.transport.getPeer()
        self.log.warn(
            "replication peer {peer}: {reason}; closing",
            log_id="replication.refused",
            peer=str(peer),
            reason=reason,
        )
        self.transport.write(link.encode_error(code, reason))
        self.transport.loseConnection()
