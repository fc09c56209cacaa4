"""
Raw sockets and C{struct}: what the interop suite speaks to a daemon with.

Nothing here imports the C{quicx} package, so the suite checks the daemon
against docs/protocol.md and not against the project's own codec.  Every
layout below is hand-packed from that page.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

# Message types (both versions; 0x0D and up are version 2's).
SUBMIT, OK, ERROR, READY, TASK, DONE, FAILED, WAIT = range(1, 9)
HEARTBEAT, PONG, STATS, STATS_RESPONSE = 9, 10, 11, 12
HELLO, CANCEL, CANCELLED, PAUSE, RESUME, PURGE, QUEUES, PEEK, INSPECT, INFO = range(13, 23)
# Version 2's part 2: retries, dead letters, leases and schedules.
ACK, NACK, TOUCH, RETRYING, DEAD, REPLAY, DEAD_PURGE = range(0x17, 0x1E)
SCHEDULES, SCHEDULE, UNSCHEDULE = 0x1E, 0x1F, 0x20
# Version 2's part 3: results, progress, shared data and groups.
AWAIT, OUTCOME, PROGRESS, PUBLISH, SHARED, FOLLOW, GROUP, GROUP_STATE = range(0x21, 0x29)
# Version 2's part 4: live events.
WATCH, EVENTS = 0x29, 0x2A

# SUBMIT option tags, also the tags of a version-2 TASK's context.
QUEUE, PRIORITY, KEY, FAIRNESS = 1, 2, 3, 4
# SUBMIT option tags of part 2.
DELAY, RUN_AT, RETRIES, BACKOFF = 5, 6, 7, 8
# SUBMIT option tags of part 3.
RESULT, WANT_PROGRESS, IN_GROUP = 9, 10, 11
# TASK context tags of part 2: the delivery's token and lease, its retries.
TOKEN, LEASE, RETRY_COUNTS = 0x20, 0x21, 0x22


def frame(message_type: int, payload: bytes = b"", version: int = 2) -> bytes:
    return struct.pack(">BBI", version, message_type, len(payload)) + payload


def option(tag: int, value: bytes) -> bytes:
    """One TLV item: a SUBMIT option, a HELLO field or a context item."""
    return bytes([tag, len(value)]) + value


def submit(task_type: bytes, payload: bytes, *options: bytes) -> bytes:
    """A version-2 SUBMIT: C{[type_len][type][opts_len u16][options][payload]}."""
    opts = b"".join(options)
    return frame(
        SUBMIT, bytes([len(task_type)]) + task_type + struct.pack(">H", len(opts)) + opts + payload
    )


def submit_v1(task_type: bytes, payload: bytes) -> bytes:
    """A version-1 SUBMIT: C{[type_len][type][payload]}."""
    return frame(SUBMIT, bytes([len(task_type)]) + task_type + payload, version=1)


def name(queue: bytes) -> bytes:
    return bytes([len(queue)]) + queue


def ready(credits: int = 1, *queues: bytes) -> bytes:
    """A version-2 READY with credits, and a subscription if C{queues} are given."""
    body = struct.pack(">H", credits)
    if queues:
        body += bytes([len(queues)]) + b"".join(name(q) for q in queues)
    return frame(READY, body)


def task_id_frame(message_type: int, task_id: int, version: int = 2) -> bytes:
    return frame(message_type, struct.pack(">I", task_id), version)


def peek(count: int, queue: bytes) -> bytes:
    return frame(PEEK, struct.pack(">H", count) + name(queue))


def ack(task_id: int, token: int, result: bytes = b"") -> bytes:
    """ACK C{[task_id u32][token u64]}, then C{result} (C{[kind u8][data]}) if given."""
    return frame(ACK, struct.pack(">IQ", task_id, token) + result)


def nack(task_id: int, token: int, reason: bytes = b"", flags: int = 0) -> bytes:
    """NACK C{[task_id u32][token u64][flags u8][reason UTF-8]}."""
    return frame(NACK, struct.pack(">IQB", task_id, token, flags) + reason)


def touch(task_id: int, token: int, seconds: int) -> bytes:
    """TOUCH C{[task_id u32][token u64][seconds u32]}."""
    return frame(TOUCH, struct.pack(">IQI", task_id, token, seconds))


def token_of(task: dict[str, Any]) -> int:
    """The fencing token of a parsed TASK (context item 0x20, a u64)."""
    (token,) = struct.unpack(">Q", task["context"][TOKEN])
    return int(token)


def parse_task(body: bytes) -> dict[str, Any]:
    """A version-2 TASK, laid out as the page says."""
    task_id, attempt, priority, enqueued_ms = struct.unpack_from(">IHBQ", body)
    offset = 15
    queue = body[offset + 1 : offset + 1 + body[offset]]
    offset += 1 + body[offset]
    task_type = body[offset + 1 : offset + 1 + body[offset]]
    offset += 1 + body[offset]
    (context_length,) = struct.unpack_from(">H", body, offset)
    offset += 2
    context, end = {}, offset + context_length
    while offset < end:
        tag, length = body[offset], body[offset + 1]
        context[tag] = body[offset + 2 : offset + 2 + length]
        offset += 2 + length
    assert offset == end, "context items run past ctx_len"
    return {
        "id": task_id,
        "attempt": attempt,
        "priority": priority,
        "enqueued_ms": enqueued_ms,
        "queue": queue,
        "type": task_type,
        "context": context,
        "payload": body[end:],
    }


class Wire:
    """
    A raw connection (TCP, or a UNIX socket given as a path) that reads whole
    frames, each checked to carry the connection's C{version}; a TCP one
    asks for a C{receive_buffer} of that many bytes (0: the system's).

    @ivar tokens: the fencing token of each version-2 TASK read by L{task},
        by task id: what its ACK must quote.
    """

    def __init__(
        self, address: tuple[str, int] | str, version: int = 2, receive_buffer: int = 0
    ) -> None:
        self.version = version
        self.tokens: dict[int, int] = {}
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(5)
            self.sock.connect(address)
        else:
            self.sock = socket.socket(socket.AF_INET)
            if receive_buffer:  # before the connection, so the window stays small
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            self.sock.settimeout(5)
            self.sock.connect(address)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> tuple[int, bytes]:
        """The next frame's type and payload; its version must be the connection's."""
        version, message_type, length = struct.unpack(">BBI", self._exactly(6))
        body = self._exactly(length)
        assert version == self.version, (version, message_type, body)
        return message_type, body

    def ask(self, data: bytes) -> tuple[int, bytes]:
        self.send(data)
        return self.read()

    def info(self, data: bytes) -> Any:
        """Send C{data}; the answer must be INFO, its JSON document decoded."""
        kind, body = self.ask(data)
        assert kind == INFO, (kind, body)
        return json.loads(body.decode("utf-8"))

    def ok(self, data: bytes) -> tuple[int, int]:
        """Send a version-2 SUBMIT; the answer must be OK C{[task_id u32][flags u8]}."""
        kind, body = self.ask(data)
        assert (kind, len(body)) == (OK, 5), (kind, body)
        task_id, flags = struct.unpack(">IB", body)
        return task_id, flags

    def ok_v1(self, data: bytes) -> int:
        """Send a version-1 SUBMIT; the answer must be OK C{[task_id u32]}."""
        kind, body = self.ask(data)
        assert (kind, len(body)) == (OK, 4), (kind, body)
        (task_id,) = struct.unpack(">I", body)
        return task_id

    def error(self, data: bytes) -> tuple[int, str]:
        """Send C{data}; the answer must be ERROR: its code and message."""
        kind, body = self.ask(data)
        assert kind == ERROR, (kind, body)
        return body[0], body[1:].decode("utf-8")

    def task(self, data: bytes = b"") -> dict[str, Any]:
        """Send C{data} (if any), then read a version-2 TASK."""
        if data:
            self.send(data)
        kind, body = self.read()
        assert kind == TASK, (kind, body)
        task = parse_task(body)
        if TOKEN in task["context"]:
            self.tokens[task["id"]] = token_of(task)
        return task

    def alive(self) -> bool:
        """The connection is usable: a HEARTBEAT gets its PONG."""
        return self.ask(frame(HEARTBEAT, version=self.version)) == (PONG, b"")

    def silent_for(self, seconds: float) -> bool:
        """True if nothing arrives within C{seconds}."""
        self.sock.settimeout(seconds)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(5)
        return False

    def close(self) -> None:
        self.sock.close()
