"""
Which handler answers each message type a client may send, for each protocol version.

A type missing from a version's table is one the daemon sends, not
receives: the shell answers it ERROR.  Each entry is the handler function
itself, so a frame costs one dict lookup and one call.
"""

from __future__ import annotations

from quicx.daemon.handlers import (
    admin,
    bulk,
    link,
    monitor,
    outcomes,
    roles,
    shared_data,
    taskflow,
    workers,
)
from quicx.daemon.handlers.connection import Handler
from quicx.protocol import codec, wire

V1: dict[int, Handler] = {
    wire.MessageType.SUBMIT: taskflow.submit_v1,
    wire.MessageType.READY: taskflow.ready_v1,
    wire.MessageType.DONE: taskflow.done,
    wire.MessageType.FAILED: taskflow.failed,
    wire.MessageType.HEARTBEAT: link.heartbeat_v1,
    wire.MessageType.PONG: link.pong,
    wire.MessageType.STATS: monitor.stats_v1,
}
"""Version 1: the protocol page's messages."""

V2: dict[int, Handler] = {
    codec.MessageType.SUBMIT: taskflow.submit_v2,
    codec.MessageType.READY: taskflow.ready_v2,
    codec.MessageType.DONE: taskflow.unfenced,
    codec.MessageType.FAILED: taskflow.unfenced,
    codec.MessageType.ACK: taskflow.ack,
    codec.MessageType.NACK: taskflow.nack,
    codec.MessageType.TOUCH: outcomes.touch,
    codec.MessageType.PROGRESS: outcomes.progress,
    codec.MessageType.CHECKPOINT: outcomes.checkpoint,
    codec.MessageType.AWAIT: outcomes.await_outcome,
    codec.MessageType.GROUP: outcomes.group,
    codec.MessageType.CANCEL: admin.cancel,
    codec.MessageType.PAUSE: admin.pause,
    codec.MessageType.RESUME: admin.resume,
    codec.MessageType.PURGE: admin.purge,
    codec.MessageType.QUEUES: admin.queues,
    codec.MessageType.PEEK: admin.peek,
    codec.MessageType.INSPECT: admin.inspect,
    codec.MessageType.DEAD: admin.dead,
    codec.MessageType.REPLAY: admin.replay,
    codec.MessageType.DEAD_PURGE: admin.dead_purge,
    codec.MessageType.SCHEDULES: admin.schedules,
    codec.MessageType.SCHEDULE: admin.schedule,
    codec.MessageType.UNSCHEDULE: admin.unschedule,
    codec.MessageType.PUBLISH: shared_data.publish,
    codec.MessageType.FOLLOW: shared_data.follow,
    codec.MessageType.WATCH: monitor.watch,
    codec.MessageType.STATUS: monitor.status,
    codec.MessageType.HELLO: link.hello,
    codec.MessageType.HEARTBEAT: link.heartbeat_v2,
    codec.MessageType.PONG: link.pong,
    codec.MessageType.STATS: monitor.stats_v2,
    codec.MessageType.ANNOUNCE: workers.announce,
    codec.MessageType.WORKERS: workers.list_workers,
    codec.MessageType.STEER: workers.steer,
    codec.MessageType.BULK: bulk.bulk,
    codec.MessageType.ROLE: roles.role,
}
"""Version 2: every message a client may send."""
