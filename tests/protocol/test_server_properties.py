"""
Property tests against a real daemon: streams of good, bad, oversized and
unknown frames, cut at arbitrary points, over a real socket.  Every frame
gets its answer (or, for PONG, none), a frame after a skipped oversized one is
still handled, the daemon survives, and its memory does not grow with what
it was sent.
"""

from __future__ import annotations

import itertools
import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quicx.protocol import wire
from quicx.protocol.wire import ErrorCode, MessageType
from tests.peer import Peer
from tools.launcher import rss

LIMIT = 1024 + wire.SUBMIT_TYPE_OVERHEAD  # the default pool's frame limit
HEADER = struct.Struct(">BBI")

# Each strategy gives (bytes on the wire, the reply expected: a message
# class, an ERROR code, or None for no reply).
stats = st.just((wire.encode_stats(), wire.StatsResponse))
heartbeat = st.just((wire.encode_heartbeat(), wire.Pong))
pong = st.just((wire.encode_pong(), None))
submit = st.builds(
    lambda t, p: (wire.encode_submit(t, p), wire.Ok),
    st.binary(min_size=1, max_size=16),
    st.binary(max_size=200),
)
oversized = st.builds(
    lambda extra, fill: (
        HEADER.pack(1, MessageType.SUBMIT, LIMIT + extra) + fill * (LIMIT + extra),
        ErrorCode.PAYLOAD_TOO_LARGE,
    ),
    st.integers(1, 3000),
    st.sampled_from([b"\x00", b"\x01", b"\xff"]),
)
bad_version = st.builds(
    lambda version, body: (HEADER.pack(version, MessageType.STATS, len(body)) + body,
                           ErrorCode.INVALID_MESSAGE),
    st.integers(3, 255) | st.just(0),
    st.binary(max_size=100),
)  # fmt: skip
unknown_type = st.builds(
    lambda kind, body: (HEADER.pack(1, kind, len(body)) + body, ErrorCode.INVALID_MESSAGE),
    st.integers(0x0D, 0xFF) | st.just(0),
    st.binary(max_size=100),
)
daemon_only = st.builds(
    lambda kind, body: (HEADER.pack(1, kind, len(body)) + body, ErrorCode.INVALID_MESSAGE),
    st.sampled_from([MessageType.OK, MessageType.TASK, MessageType.WAIT, MessageType.ERROR]),
    st.binary(max_size=50),
)
malformed = st.builds(
    lambda body: (HEADER.pack(1, MessageType.DONE, len(body)) + body, ErrorCode.INVALID_MESSAGE),
    st.binary(max_size=12).filter(lambda b: len(b) != 4),
)

frames = st.lists(
    st.one_of(stats, heartbeat, pong, submit, oversized, bad_version, unknown_type,
              daemon_only, malformed),
    max_size=25,
)  # fmt: skip


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """C{data} in pieces, cut at C{points} (fractions of its length, in per-mille)."""
    offsets = sorted({p * len(data) // 1000 for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(offsets) if b > a]


def test_any_stream_of_frames_cut_anywhere_is_answered_in_order(daemon) -> None:
    assert daemon.process is not None
    start = rss(daemon.process.pid)

    @settings(
        max_examples=80,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(frames, st.lists(st.integers(0, 1000), max_size=12))
    def check(stream: list[tuple[bytes, object]], points: list[int]) -> None:
        # A final STATS proves everything before it was parsed past.
        stream = [*stream, (wire.encode_stats(), wire.StatsResponse)]
        data = b"".join(frame for frame, _ in stream)
        with Peer(daemon.address) as peer:
            for piece in cut(data, points):
                peer.send(piece)
            for frame, expected in stream:
                if expected is None:
                    continue
                reply = peer.receive(10)
                if isinstance(expected, ErrorCode):
                    assert isinstance(reply, wire.Error) and reply.code == expected, (
                        frame[:12],
                        reply,
                    )
                elif expected is wire.Ok:
                    # A SUBMIT is accepted, or refused only for a full queue.
                    assert isinstance(reply, wire.Ok) or (
                        isinstance(reply, wire.Error) and reply.code == ErrorCode.QUEUE_FULL
                    ), reply
                else:
                    assert isinstance(reply, expected), (expected, reply)  # type: ignore[arg-type]
            assert peer.nothing_for(0.05)

    check()
    # Megabytes of oversized payloads went by: none of it was kept.
    assert daemon.process.poll() is None
    assert rss(daemon.process.pid) - start < 32 * 1024 * 1024


def test_random_garbage_never_crashes_the_daemon(daemon) -> None:
    assert daemon.process is not None

    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(st.binary(min_size=1, max_size=4000))
    def check(garbage: bytes) -> None:
        with socket.create_connection(daemon.address) as sock:
            sock.sendall(garbage)
        # Whatever it made of that, the daemon answers others.
        with Peer(daemon.address) as other:
            assert isinstance(other.request(wire.encode_stats()), wire.StatsResponse)

    check()
    assert daemon.process.poll() is None
