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
    buffered, so the connection stays usable and memory stays bounded;
  - a large frame (past L{LARGE_FRAME}) is gathered as it arrives in an
    anonymous mapping of its exact size, not in the connection's growing
    buffer: its memory goes back to the system the moment the frame is
    complete or the connection is lost, whatever the C allocator would have
    kept of a buffer grown and freed (a few hundred connections that each
    sent most of a 1 MiB frame and left pinned hundreds of MiB).
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping
from functools import partial
from typing import NamedTuple, final

from attrs import frozen

from quicx.protocol import codec
from quicx.protocol.codec import HEADER, HEADER_SIZE
from quicx.protocol.wire import KNOWN_TYPES, PROTOCOL_VERSION, ErrorCode, MessageType


@final
class Frame(NamedTuple):
    """
    A well-formed frame: its type and payload.  (A named tuple, not an attrs
    class: the parser makes one per frame, and a tuple is built in C.)
    """

    message_type: int
    payload: bytes


_new_frame = partial(tuple.__new__, Frame)
"""C{Frame(message_type, payload)}, for a pair: without the named tuple's own C{__new__}."""

LARGE_FRAME = 64 << 10
"""A payload longer than this is gathered in a mapping of its own (see above)."""


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
    Incremental parser of the frames of one connection.

    A connection speaks one protocol version, set by its first frame whose
    version this parser accepts (L{version}); a frame of another version
    after that is rejected.

    @ivar max_length: the largest version-1 payload accepted; a longer one
        yields a L{RejectedFrame} with L{ErrorCode.PAYLOAD_TOO_LARGE}.
    @ivar v2_max_length: the same for version 2; C{None} when version 2 is
        not accepted (its frames are rejected as a bad version).
    @ivar v2_type_limits: the limits of some version-2 message types, by
        type, in place of C{v2_max_length}: longer (a PUBLISH carries shared
        data) or shorter (a PUBLISH may carry no more than that data).
    @ivar check_types: whether an unknown message type is rejected at the
        header (the daemon does; clients pass frames on to their decoder).
    @ivar max_payload: the largest task payload the daemon takes, if this
        parser is the daemon's: a SUBMIT refused at its header names it (the
        frame's limit also counts the type and options around the payload).
    @ivar version: the connection's version, once its first frame set it.
    @ivar large_frame: a payload longer than this is gathered in a mapping
        of its own size (L{LARGE_FRAME}; tests lower it).
    """

    def __init__(
        self,
        max_length: int,
        check_types: bool = True,
        v2_max_length: int | None = None,
        v2_type_limits: Mapping[int, int] | None = None,
        max_payload: int | None = None,
        large_frame: int = LARGE_FRAME,
    ) -> None:
        self.max_length = max_length
        self.max_payload = max_payload
        self.v2_max_length = v2_max_length
        self.v2_type_limits = v2_type_limits or {}
        self.check_types = check_types
        self.version: int | None = None
        self._known: frozenset[int] = KNOWN_TYPES
        self._limits = self._by_type(max_length, {})
        self.large_frame = large_frame
        self._buffer = bytearray()
        self._skip = 0
        # A large frame being gathered: its payload so far, and its type.
        self._large: mmap.mmap | None = None
        self._large_type = 0

    @property
    def buffered(self) -> int:
        """How many bytes are held while waiting for the rest of a frame."""
        if self._large is not None:
            return HEADER_SIZE + self._large.tell()
        return len(self._buffer)

    @property
    def awaited(self) -> int:
        """
        How many bytes the parser takes next without decoding a frame from
        them: the rest of a large frame being gathered, or of a refused
        frame's payload being skipped.
        """
        if self._large is not None:
            return len(self._large) - self._large.tell()
        return self._skip

    def release(self) -> None:
        """
        Drop what is held of an unfinished frame (the connection is gone): a
        frame's bytes go back at once, not when the parser itself is freed.
        """
        self._buffer = bytearray()
        self._skip = 0
        if self._large is not None:
            self._large.close()
            self._large = None

    def _gather(self, data: bytes, events: list[Frame | RejectedFrame]) -> bytes:
        """Add C{data} to the large frame; return what follows it once it is whole."""
        large = self._large
        assert large is not None
        room = len(large) - large.tell()
        if len(data) < room:
            large.write(data)
            return b""
        with memoryview(data) as view:
            large.write(view[:room])
        events.append(_new_frame((self._large_type, large[:])))
        large.close()
        self._large = None
        return data[room:]

    def _by_type(self, limit: int, type_limits: Mapping[int, int]) -> tuple[int, ...]:
        """
        The longest payload of each message type (0 to 255), one lookup per
        header; -1 for a type to refuse (unknown, when types are checked).
        """
        return tuple(
            type_limits.get(message_type, limit)
            if message_type in self._known or not self.check_types
            else -1
            for message_type in range(256)
        )

    def _settle(self, version: int) -> bool:
        """Let the connection's first frame of an accepted version set its version."""
        if self.version is None and (
            version == PROTOCOL_VERSION or (version == codec.VERSION and self.v2_max_length)
        ):
            self.version = version
            if version == codec.VERSION:
                assert self.v2_max_length is not None
                self._known = codec.KNOWN_TYPES
                self._limits = self._by_type(self.v2_max_length, self.v2_type_limits)
        return version == self.version

    def _reject(self, version: int, message_type: int, length: int) -> RejectedFrame | None:
        """Why a header that fails one of L{feed}'s checks is refused (C{None}: it is not)."""
        if not self._settle(version):
            if self.version is not None and version in (PROTOCOL_VERSION, codec.VERSION):
                return RejectedFrame(
                    ErrorCode.INVALID_MESSAGE,
                    f"a version-{version} frame on a version-{self.version} connection:"
                    " a connection keeps the version of its first frame",
                )
            return RejectedFrame(
                ErrorCode.INVALID_MESSAGE, f"unsupported protocol version {version}"
            )
        if self.check_types and message_type not in self._known:
            return RejectedFrame(
                ErrorCode.INVALID_MESSAGE, f"unknown message type 0x{message_type:02x}"
            )
        limit = self._limits[message_type]
        if length > limit:
            if message_type == MessageType.SUBMIT and self.max_payload is not None:
                return RejectedFrame(
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"a SUBMIT of {length:,} bytes: its payload exceeds the largest size class"
                    f" ({self.max_payload} bytes); a larger [allocator] class takes it",
                )
            return RejectedFrame(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"payload of {length} bytes exceeds the limit of {limit}",
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
        if self._large is not None and not (data := self._gather(data, events)):
            return events
        buffer = self._buffer
        # Parse straight out of the new bytes when nothing is pending: the
        # common case of whole frames costs no extra copy.
        source: bytes | bytearray = data
        if buffer:
            buffer += data
            source = buffer
        end = len(source)
        offset = 0
        # A payload is sliced straight from the bytes read (one copy); from
        # the buffer, through a view (a bytearray's slice is no bytes).
        whole = type(source) is bytes
        unpack = HEADER.unpack_from
        # Locals, not attributes, in the loop; _reject may change them.
        expected, limits = self.version, self._limits
        with memoryview(source) as view:
            while end - offset >= HEADER_SIZE:
                version, message_type, length = unpack(source, offset)
                body = offset + HEADER_SIZE
                if (version != expected or length > limits[message_type]) and (
                    rejected := self._reject(version, message_type, length)
                ) is not None:
                    expected, limits = self.version, self._limits
                    events.append(rejected)
                    if end - body < length:
                        self._skip = length - (end - body)
                        offset = end
                        break
                    offset = body + length
                    continue
                if version != expected:  # the first frame set the version
                    expected, limits = self.version, self._limits
                if end - body < length:
                    break
                offset = body + length
                payload = source[body:offset] if whole else bytes(view[body:offset])
                events.append(_new_frame((message_type, payload)))
            if end - offset >= HEADER_SIZE and length > self.large_frame:
                # The loop stopped at this large frame's header: gather it apart.
                self._large = large = mmap.mmap(-1, length)
                self._large_type = message_type
                large.write(view[offset + HEADER_SIZE :])
                offset = end
        if source is buffer:
            del buffer[:offset]
        elif offset < end:
            buffer += data[offset:]
        return events
