"""
The Twisted side of framing: a L{Protocol} base, and output with few system calls.

The Twisted side of framing: a L{Protocol} base class that feeds
L{quicx.protocol.frames.FrameParser}, and the output helpers that write
frames with as few system calls as possible.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import suppress
from typing import Any

from twisted.internet import tcp, unix
from twisted.internet.interfaces import IConsumer, IPushProducer, ITransport
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from zope.interface import Attribute

from quicx.net.private import has_unsent_output
from quicx.protocol.frames import Frame, FrameParser, RejectedFrame
from quicx.protocol.wire import ErrorCode


class IStreamTransport(ITransport, IConsumer, IPushProducer):
    """
    What the protocols here use of their transport.  TCP, UNIX and TLS
    transports all provide it, though no one Twisted interface lists it all.
    """

    disconnecting = Attribute("Whether the connection is closing (a bool).")
    bufferSize = Attribute("How much unsent output pauses a streaming producer.")

    def abortConnection() -> None:
        """Close at once, dropping any unsent output."""


def set_no_delay(transport: Any) -> None:
    """
    Turn Nagle's algorithm off: frames are small and latency matters.  UNIX
    sockets have no such option.
    """
    with suppress(AttributeError, OSError):
        transport.setTcpNoDelay(True)


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
        and not has_unsent_output(transport)
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
    @ivar v2MaxLength: the same for protocol version 2; C{None} when the
        connection speaks version 1 only.
    @ivar v2TypeLimits: the limits of some version-2 message types, in place
        of C{v2MaxLength}.
    @ivar maxPayload: the largest task payload taken (the daemon's): named
        when a SUBMIT is refused at its header.
    @ivar checkTurn: set by a frame's handler to have L{turnEnded} asked,
        once the frame is handled, whether the rest of the read waits for a
        later turn of the reactor.
    """

    maxLength: int = 1 << 20
    v2MaxLength: int | None = None
    v2TypeLimits: Mapping[int, int] | None = None
    maxPayload: int | None = None
    checkTypes: bool = True
    checkTurn: bool = False
    transport: IStreamTransport  # set by makeConnection, before connectionMade
    _parser: FrameParser

    def connectionMade(self) -> None:
        self._parser = FrameParser(
            self.maxLength, self.checkTypes, self.v2MaxLength, self.v2TypeLimits, self.maxPayload
        )

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._parser.release()

    def dataReceived(self, data: bytes) -> None:
        self.deliverFrames(self._parser.feed(data))

    def deliverFrames(self, events: list[Frame | RejectedFrame]) -> None:
        """Handle frames (and rejections) read, in order, until the turn ends."""
        transport = self.transport
        remaining = iter(events)
        for event in remaining:
            if transport.disconnecting:
                return
            if type(event) is Frame:
                self.frameReceived(event.message_type, event.payload)
            else:
                self.frameRejected(event.code, event.reason)
            if self.checkTurn and self.turnOver(remaining):
                return

    def turnOver(self, remaining: Iterator[Frame | RejectedFrame]) -> bool:
        """
        L{checkTurn} was set (and is cleared): whether the turn ended with
        frames of the read still to handle, now deferred (L{framesDeferred}).
        """
        self.checkTurn = False
        if self.turnEnded() and (rest := list(remaining)):
            self.framesDeferred(rest)
            return True
        return False

    def turnEnded(self) -> bool:
        """Whether this read has had its share of the reactor (see L{checkTurn})."""
        return False

    def framesDeferred(self, events: list[Frame | RejectedFrame]) -> None:
        """
        The turn ended before these frames of the read were handled: the
        protocol handles them later (L{deliverFrames}), before any read after.
        """
        raise NotImplementedError

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        """Called with each well-formed frame."""
        raise NotImplementedError

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        """
        Called when a header is refused; its payload will be skipped and the
        connection stays usable.
        """
        raise NotImplementedError
