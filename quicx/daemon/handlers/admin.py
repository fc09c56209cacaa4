"""
Handlers of administration: CANCEL, PAUSE, RESUME, PURGE, QUEUES, PEEK,
INSPECT, dead letters and schedules.

Reading (QUEUES, PEEK, INSPECT, DEAD, SCHEDULES) is a monitor query;
changing needs the admin role, but for CANCEL, which the queue checks
against the task's owner.  A change is answered once it is journaled.
"""

from __future__ import annotations

from quicx.daemon.handlers.connection import Connection
from quicx.daemon.queue import introspect
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.protocol import admin, codec, link


def cancel(conn: Connection, payload: bytes) -> None:
    task_id = admin.decode_cancel(payload).task_id
    session = conn.session
    assert session is not None
    conn.learn_identity()
    conn.reply_when_durable(link.encode_info(conn.queue.cancel(session, task_id)))


def _queue_action(conn: Connection, payload: bytes, action: codec.MessageType) -> None:
    name = admin.decode_queue_action(action, payload).queue
    session = conn.session
    assert session is not None
    conn.require_admin(action.name)
    if action is codec.MessageType.PURGE:
        answer = conn.queue.purge(name)
    else:
        answer = conn.queue.set_paused(name, action is codec.MessageType.PAUSE)
    conn.reply_when_durable(link.encode_info(answer))


def pause(conn: Connection, payload: bytes) -> None:
    _queue_action(conn, payload, codec.MessageType.PAUSE)


def resume(conn: Connection, payload: bytes) -> None:
    _queue_action(conn, payload, codec.MessageType.RESUME)


def purge(conn: Connection, payload: bytes) -> None:
    _queue_action(conn, payload, codec.MessageType.PURGE)


def queues(conn: Connection, payload: bytes) -> None:
    admin.decode_queues(payload)
    conn.monitor_query()
    conn.reply(link.encode_info(introspect.queues(conn.queue)))


def peek(conn: Connection, payload: bytes) -> None:
    message = admin.decode_peek(payload)
    conn.monitor_query()
    conn.reply(link.encode_info(introspect.peek(conn.queue, message.queue, message.count)))


def inspect(conn: Connection, payload: bytes) -> None:
    task_id = admin.decode_inspect(payload).task_id
    conn.monitor_query()
    conn.reply(link.encode_info(introspect.inspect(conn.queue, task_id)))


# -- dead letters ---------------------------------------------------------------------


def dead(conn: Connection, payload: bytes) -> None:
    message = admin.decode_dead(payload)
    conn.monitor_query()
    conn.reply(link.encode_info(conn.queue.dead_tasks(message.queue, message.limit)))


def replay(conn: Connection, payload: bytes) -> None:
    message = admin.decode_replay(payload)
    conn.require_admin("REPLAY")
    answer = conn.queue.replay(message.task_id, message.queue)
    conn.reply_when_durable(link.encode_info(answer))


def dead_purge(conn: Connection, payload: bytes) -> None:
    message = admin.decode_dead_purge(payload)
    conn.require_admin("DEAD_PURGE")
    conn.reply_when_durable(link.encode_info(conn.queue.purge_dead(message.queue)))


# -- schedules --------------------------------------------------------------------------


def schedules(conn: Connection, payload: bytes) -> None:
    admin.decode_schedules(payload)
    conn.monitor_query()
    book = conn.queue.schedules
    described = book.describe() if isinstance(book, ScheduleBook) else []
    conn.reply(link.encode_info(described))


def schedule(conn: Connection, payload: bytes) -> None:
    message = admin.decode_schedule(payload)
    conn.require_admin("SCHEDULE")
    conn.reply_when_durable(link.encode_info(_book(conn).add(message, payload)))


def unschedule(conn: Connection, payload: bytes) -> None:
    name = admin.decode_unschedule(payload).name
    conn.require_admin("UNSCHEDULE")
    conn.reply_when_durable(link.encode_info(_book(conn).remove(name)))


def _book(conn: Connection) -> ScheduleBook:
    book = conn.queue.schedules
    if not isinstance(book, ScheduleBook):
        raise Refused(codec.ErrorCode.NOT_FOUND, "this daemon runs no schedules")
    return book
