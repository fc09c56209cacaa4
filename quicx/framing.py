"""
Framing: cutting a byte stream into Quicx frames.

L{FrameParser} is sans-I/O (bytes in, frames out) so the daemon, the Twisted
clients and the blocking client share one implementation.  L{FrameReceiver}
is the Twisted L{Protocol} base class on top of it, in the spirit of
L{twisted.protocols.basic.Int32StringReceiver} but with two differences that
matter for a server facing untrusted peers:

  - the buffer is never re-concatenated per read, so a large frame split into
    many reads costs linear, not quadratic, time;
  - a frame that is too long, or has a bad version or unknown type, is
    reported at once and its payload is I{skipped} as it arrives, never
    buffered, so the connection stays usable and memory stays bounded.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, NamedTuple

from attrs import frozen
from twisted.internet import tcp, unix
from twisted.internet.protocol import Protocol

from quicx.wire import HEADER, HEADER_SIZE, KNOWN_TYPES, PROTOCOL_VERSION, ErrorCode


class Frame(NamedTuple):
    """
    A well-formed frame: its type and payload.  (A named tuple, not an attrs
    class: the parser makes one per frame, and a tuple is built in C.)
    """

    message_type: int
    payload: bytes


@frozen
class RejectedFrame:
    """
    A header the parser refused; its C{length} payload bytes are skipped.

    @ivar code: the L{ErrorCode} to answer with.
    @ivar reason: a human-readable explanation, sent as the ERROR message.
    """

    code: ErrorCode
    reason: str


class FrameParser:
    """
    Incremental parser of version-1 frames.

    @ivar max_length: the largest payload accepted; a longer one yields a
        L{RejectedFrame} with L{ErrorCode.PAYLOAD_TOO_LARGE}.
    @ivar check_types: whether an unknown message type is rejected at the
        header (the daemon does; clients pass frames on to their decoder).
    """

    def __init__(self, max_length: int, check_types: bool = True) -> None:
        self.max_length = max_length
        self.check_types = check_types
        self._buffer = bytearray()
        self._skip = 0

    @property
    def buffered(self) -> int:
        """How many bytes are held while waiting for the rest of a frame."""
        return len(self._buffer)

    def _reject(self, version: int, message_type: int, length: int) -> RejectedFrame | None:
        if version != PROTOCOL_VERSION:
            return RejectedFrame(
                ErrorCode.INVALID_MESSAGE, f"unsupported protocol version {version}"
            )
        if self.check_types and message_type not in KNOWN_TYPES:
            return RejectedFrame(
                ErrorCode.INVALID_MESSAGE, f"unknown message type 0x{message_type:02x}"
            )
        if length > self.max_length:
            return RejectedFrame(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"payload of {length} bytes exceeds the limit of {self.max_length}",
            )
        return None

    def feed(self, data: bytes) -> list[Frame | RejectedFrame]:
        """Consume C{data}; return the frames (and rejections) it completes."""
        events: list[Frame | RejectedFrame] = []
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return events
            data = data[self._skip :]
            self._skip = 0
        buffer = self._buffer
        # Parse straight out of the new bytes when nothing is pending: the
        # common case of whole frames costs no extra copy.
        source: bytes | bytearray = data
        if buffer:
            buffer += data
            source = buffer
        end = len(source)
        offset = 0
        unpack = HEADER.unpack_from
        with memoryview(source) as view:
            while end - offset >= HEADER_SIZE:
                version, message_type, length = unpack(source, offset)
                body = offset + HEADER_SIZE
                if (
                    version != PROTOCOL_VERSION
                    or length > self.max_length
                    or (self.check_types and message_type not in KNOWN_TYPES)
                ):
                    events.append(self._reject(version, message_type, length))  # type: ignore[arg-type]
                    if end - body < length:
                        self._skip = length - (end - body)
                        offset = end
                        break
                    offset = body + length
                    continue
                if end - body < length:
                    break
                offset = body + length
                events.append(Frame(message_type, bytes(view[body:offset])))
        if source is buffer:
            del buffer[:offset]
        elif offset < end:
            buffer += data[offset:]
        return events


def set_no_delay(transport: object) -> None:
    """
    Turn Nagle's algorithm off: frames are small and latency matters.  UNIX
    sockets have no such option.
    """
    with suppress(AttributeError, OSError):
        transport.setTcpNoDelay(True)  # type: ignore[attr-defined]


_SOCKET_TRANSPORTS = frozenset({tcp.Server, tcp.Client, unix.Server, unix.Client})


def write_now(transport: Any, data: bytes) -> None:
    """
    Write C{data}, sending it at once when the transport has nothing queued.

    C{transport.write} always queues and registers the socket with the
    reactor for writability, and unregisters it once sent: two C{epoll_ctl}
    calls per write, a third of the daemon's time under load.  A plain TCP or
    UNIX transport with an empty buffer can take a direct C{send} instead;
    whatever the kernel does not take goes through C{transport.write} as
    usual, so ordering and back-pressure are unchanged.  TLS transports and
    others always use C{transport.write}.
    """
    # Only the socket transport itself: a TLS wrapper forwards attribute
    # lookups (socket, TLS) to the transport beneath it.
    if (
        type(transport) in _SOCKET_TRANSPORTS
        and not transport.TLS
        and transport.connected
        and not transport.disconnecting
        and not transport.dataBuffer
        and not transport._tempDataBuffer
    ):
        try:
            sent = transport.socket.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            sent = 0  # transport.write meets the error and closes properly
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)


class OutputBatcher:
    """
    Gathers the frames written to many connections while the reactor handles
    one round of ready sockets, then writes each connection's frames with
    one call.

    A burst of SUBMITs read in one go gets its OKs in one C{send}, and every
    DONE that reached a producer in one round travels together.  The flush
    runs as a C{callLater(0)}: right after the reactor has handled every
    socket that was ready, before it polls again.  While a connection's
    input is handled (between L{hold} and L{release}) nothing is scheduled,
    so a request whose only reply is flushed at once costs no extra round.
    """

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor
        # Insertion-ordered, and an output that flushes early leaves in O(1).
        self._dirty: dict[BatchedOutput, None] = {}
        self._held = False
        self._scheduled = False

    def output(self, transport: Any) -> BatchedOutput:
        """A sender of frames to C{transport}, batched by this batcher."""
        return BatchedOutput(self, transport)

    def hold(self) -> None:
        self._held = True

    def release(self) -> None:
        self._held = False
        if self._dirty and not self._scheduled:
            self._schedule()

    def _mark(self, output: BatchedOutput) -> None:
        self._dirty[output] = None
        if not self._held and not self._scheduled:
            self._schedule()

    def _schedule(self) -> None:
        self._scheduled = True
        self._reactor.callLater(0, self.flush)

    def flush(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, {}
        for output in dirty:
            output.write()


class BatchedOutput:
    """One connection's frames waiting for the end of the round."""

    __slots__ = ("batcher", "frames", "transport")

    def __init__(self, batcher: OutputBatcher, transport: Any) -> None:
        self.batcher = batcher
        self.transport = transport
        self.frames: list[bytes] = []

    def send(self, data: bytes) -> None:
        frames = self.frames
        if not frames:
            self.batcher._mark(self)
        frames.append(data)

    def flush(self) -> None:
        """Write what is waiting now, ahead of the batcher's flush."""
        if self.frames:
            self.batcher._dirty.pop(self, None)
            self.write()

    def write(self) -> None:
        frames = self.frames
        if frames:
            self.frames = []
            write_now(self.transport, frames[0] if len(frames) == 1 else b"".join(frames))


class FrameReceiver(Protocol):
    """
    A protocol that receives Quicx frames.

    Subclasses implement L{frameReceived} and L{frameRejected}.

    @ivar maxLength: the largest payload accepted, read when the connection
        is made.
    """

    maxLength: int = 1 << 20
    checkTypes: bool = True
    _parser: FrameParser

    def connectionMade(self) -> None:
        self._parser = FrameParser(self.maxLength, self.checkTypes)

    def dataReceived(self, data: bytes) -> None:
        transport = self.transport
        for event in self._parser.feed(data):
            if transport.disconnecting:  # type: ignore[union-attr]
                return
            if type(event) is Frame:
                self.frameReceived(event.message_type, event.payload)
            else:
                self.frameRejected(event.code, event.reason)  # type: ignore[union-attr]

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        """Called with each well-formed frame."""
        raise NotImplementedError

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        """
        Called when a header is refused; its payload will be skipped and the
        connection stays usable.
        """
        raise NotImplementedError
