"""
Every message of the protocol by version and type: the registry, and the one decode().

Version 1's decoders are L{wire.DECODERS}; version 2's are those of its
message modules, each of which registers the types it defines (L{taskflow},
L{outcomes}, L{admin}, L{shared_data}, L{monitor}, L{link}, L{checkpoints},
L{replication}).  A type is in exactly one of them, and every opcode of L{codec.MessageType} has a
decoder: this module refuses to load otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from quicx.protocol import (
    admin,
    bulk,
    checkpoints,
    link,
    monitor,
    outcomes,
    replication,
    role,
    shared_data,
    taskflow,
    wire,
    workers,
)
from quicx.protocol.codec import VERSION, MalformedMessage, MessageType

Message = (
    wire.Message
    | taskflow.Message
    | outcomes.Message
    | admin.Message
    | shared_data.Message
    | monitor.Message
    | link.Message
    | checkpoints.Message
    | workers.Message
    | bulk.Message
    | replication.Message
    | role.Message
)
"""Any message, of either version."""

Decoders = Mapping[int, Callable[[bytes], Message]]


def _registry(*tables: Decoders) -> dict[int, Callable[[bytes], Message]]:
    registry: dict[int, Callable[[bytes], Message]] = {}
    for table in tables:
        twice = registry.keys() & table.keys()
        if twice:
            raise ValueError(f"message types registered twice: {sorted(twice)}")
        registry.update(table)
    missing = set(MessageType) - registry.keys()
    if missing:
        raise ValueError(f"message types without a decoder: {sorted(missing)}")
    return registry


DECODERS: dict[int, Decoders] = {
    wire.PROTOCOL_VERSION: wire.DECODERS,
    VERSION: _registry(
        taskflow.DECODERS,
        outcomes.DECODERS,
        admin.DECODERS,
        shared_data.DECODERS,
        monitor.DECODERS,
        link.DECODERS,
        checkpoints.DECODERS,
        workers.DECODERS,
        bulk.DECODERS,
        replication.DECODERS,
        role.DECODERS,
    ),
}
"""Each version's decoders, by message type."""


def decode(message_type: int, payload: bytes, version: int = VERSION) -> Message:
    """
    Decode the payload of a frame of C{message_type} (of version 2, or C{version}).

    @raise MalformedMessage: the type is unknown or the payload has the
        wrong layout for it.
    """
    decoder = DECODERS[version].get(message_type)
    if decoder is None:
        raise MalformedMessage(message_type, f"unknown message type 0x{message_type:02x}")
    return decoder(payload)
