"""
What the clients send and read, in either protocol version: sans-I/O, shared
by the blocking client, the Twisted client and the worker runner.

A client speaks version 2 unless told otherwise.  It opens each connection
with HELLO: a daemon that answers ERROR in a version-1 header speaks only
version 1 (the protocol page's daemon, or one with C{[protocol] versions =
1}), and the connection goes on in version 1 -- the daemon ignored the
version-2 frame, so nothing else changes.  Calls that need version 2
(queues, priorities, keys, cancel, introspection) then raise
L{NeedsVersion2}.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from attrs import frozen

import quicx
from quicx.clients.address import as_bytes
from quicx.protocol import v2, wire
from quicx.protocol.errors import NeedsVersion2

CLIENT_NAME = "quicx-python"
HELLO = v2.encode_hello(CLIENT_NAME, quicx.__version__)


@frozen
class Options:
    """A SUBMIT's version-2 options; every one C{None} means none."""

    queue: str | None = None
    priority: int | None = None
    key: str | bytes | None = None
    fairness_key: str | bytes | None = None

    @property
    def any(self) -> bool:
        return not (
            self.queue is None
            and self.priority is None
            and self.key is None
            and self.fairness_key is None
        )

    def encode(self) -> bytes:
        if self.key is None and self.fairness_key is None:
            return _common_options(self.queue, self.priority)
        return v2.submit_options(
            self.queue,
            self.priority,
            None if self.key is None else as_bytes(self.key),
            None if self.fairness_key is None else as_bytes(self.fairness_key),
        )


@functools.lru_cache(maxsize=1024)
def _common_options(queue: str | None, priority: int | None) -> bytes:
    """Options without keys: few combinations, each encoded once."""
    return v2.submit_options(queue, priority)


NO_OPTIONS = Options()


def encode_submit(
    version: int, task_type: str | bytes, payload: str | bytes, options: Options = NO_OPTIONS
) -> bytes:
    """
    A SUBMIT in C{version}.

    @raise NeedsVersion2: options were given and the connection speaks version 1.
    @raise ValueError: a bad option (queue name, priority, key length).
    """
    if version == 1:
        if options.any:
            raise NeedsVersion2(
                "queue, priority and keys need protocol version 2; the daemon speaks version 1"
            )
        return wire.encode_submit(as_bytes(task_type), as_bytes(payload))
    return v2.encode_submit(
        as_bytes(task_type), as_bytes(payload), options.encode() if options.any else b""
    )


def submit_frames(
    version: int,
    tasks: Iterable[tuple[str | bytes, str | bytes] | tuple[str | bytes, str | bytes, Options]],
) -> bytes:
    """One SUBMIT per C{(type, payload)} or C{(type, payload, options)}, joined."""
    plain = wire.encode_submit if version == 1 else v2.encode_submit
    frames = []
    for task in tasks:
        if len(task) == 2:  # the common case, without a call to sort out options
            task_type, payload = task
            frames.append(plain(as_bytes(task_type), as_bytes(payload)))
        else:
            frames.append(encode_submit(version, *task))
    return b"".join(frames)


OK_TYPES = (wire.Ok, v2.Ok)
"""What answers a SUBMIT that was accepted, in either version."""


def needs_version_2(version: int, what: str) -> None:
    """@raise NeedsVersion2: C{version} is 1."""
    if version != v2.VERSION:
        raise NeedsVersion2(f"{what} needs protocol version 2; the daemon speaks version 1 only")


def decode(version: int | None, message_type: int, payload: bytes) -> Any:
    """A frame of C{version} (the parser's), decoded."""
    if version == v2.VERSION:
        return v2.decode(message_type, payload)
    return wire.decode(message_type, payload)


def refuses_version_2(version: int | None, message: object) -> bool:
    """Whether C{message}, the answer to HELLO, says the daemon speaks only version 1."""
    return version == wire.PROTOCOL_VERSION and isinstance(message, wire.Error)


QUEUE_ACTIONS = {
    "pause": v2.MessageType.PAUSE,
    "resume": v2.MessageType.RESUME,
    "purge": v2.MessageType.PURGE,
}
