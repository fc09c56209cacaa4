"""
Addresses: how a client names the daemon it talks to.

An address is a Twisted endpoint string (C{tcp:HOST:PORT}, C{unix:PATH},
C{tls:HOST:PORT[:trustRoots=PEM][:certificate=PEM][:privateKey=PEM]}) or a
bare C{HOST:PORT}.  Both clients and the C{quicx} command read them here;
nothing in this module imports Twisted.
"""

from __future__ import annotations

import os

# Re-exported: the clients' names for them since before they moved down.
from quicx.net.addresses import ENDPOINT_KINDS as ENDPOINT_KINDS
from quicx.net.addresses import TlsOptions as TlsOptions
from quicx.net.addresses import normalize_address as normalize_address
from quicx.net.addresses import parse_address as parse_address
from quicx.net.addresses import split_addresses as split_addresses
from quicx.protocol import codec, monitor, taskflow

ADDRESS_VARIABLE = "QUICX_ADDRESS"
"""The environment variable naming the daemon's address (see L{default_address})."""

DEFAULT_ADDRESS = "tcp:127.0.0.1:16381"

CLIENT_MAX_LENGTH = codec.MAX_PAYLOAD + taskflow.SUBMIT_OVERHEAD + taskflow.MAX_TASK_CONTEXT
"""The largest frame a client accepts: a version-2 TASK of the largest possible
class, with its queue and the longest context (a checkpoint and parents' results)."""
CLIENT_TYPE_LIMITS: dict[int, int] = {codec.MessageType.EVENTS: monitor.MAX_EVENTS_FRAME}
"""Larger limits for some version-2 frames: EVENTS with one long line."""


def as_bytes(value: str | bytes) -> bytes:
    """Task types and payloads may be given as text (encoded UTF-8) or bytes."""
    return value.encode("utf-8") if isinstance(value, str) else value


def payload_bytes(value: str | bytes) -> bytes:
    """
    A payload given as text (encoded UTF-8) or bytes (or another buffer:
    a C{bytearray}, a C{memoryview}).

    @raise TypeError: it is neither (a C{dict}, say): the daemon carries
        bytes, and which encoding the handler reads is the caller's choice.
    """
    if type(value) is bytes:  # the common case, at one test
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return value
    raise TypeError(
        f"a task's payload is bytes or str, not {type(value).__name__}: encode it first,"
        " for example json.dumps(payload), and decode it in the handler"
    )


def one_address(address: str, who: str, several: str) -> str:
    """
    C{address}, which must name one daemon: C{who} talks to one.

    @param several: what to use for several instead.
    @raise ValueError: it names several (or none).
    """
    count = len(split_addresses(address))
    if count > 1:
        raise ValueError(
            f"{address!r} names {count} daemons, and {who} talks to one: use {several} for several"
        )
    return address


def default_address() -> str:
    """
    C{$QUICX_ADDRESS} if set, else L{DEFAULT_ADDRESS}: one address, or a
    list of them (see L{split_addresses}).
    """
    return os.environ.get(ADDRESS_VARIABLE) or DEFAULT_ADDRESS
