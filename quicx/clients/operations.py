"""
What a client may ask the daemon, declared once for every client (sans-I/O).

Each operation is a function that returns a L{Request}: the frame to send
(made when it is sent, or earlier by L{Request.prepare}), the answer it
expects, and how that answer becomes the value the client's call returns.
A client's method is one line around it: the blocking client sends it and
reads until its answer (C{self._call(operations.cancel(task_id))}), the
Twisted client sends it and returns a L{Deferred} of the same value
(C{self._request(operations.cancel(task_id))}), the next client likewise.
What is not the same in every client (how long a wait lasts, whether it is
fenced: see L{Request.wait}) comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from functools import partial
from operator import itemgetter
from typing import Any, TypedDict

import attrs

from quicx.clients import awaits, requests, tracing, watching
from quicx.clients.address import as_bytes
from quicx.clients.connection import ClientConnection, Request
from quicx.clients.progress import Listener
from quicx.clients.requests import Options, Task
from quicx.protocol import (
    admin,
    link,
    monitor,
    outcomes,
    shared_data,
    start_options,
    taskflow,
    wire,
)
from quicx.protocol import bulk as protocol_bulk
from quicx.protocol import role as protocol_role
from quicx.protocol import workers as worker_messages
from quicx.protocol.outcomes import GroupOp

Document = dict[str, Any]
Documents = list[dict[str, Any]]


class SubmitKeywords(TypedDict, total=False):
    """The options a client's C{submit} takes, by keyword (see L{Options})."""

    queue: str | None
    priority: int | None
    key: str | bytes | None
    fairness_key: str | bytes | None
    delay: float | None
    run_at: datetime | float | None
    retries: int | None
    backoff: str | taskflow.Backoff | None
    keep_result: bool
    result_ttl: float | str | None
    progress: Listener | None
    group: int | None
    after: Iterable[int] | None
    on_parent_failure: str | None
    after_group: int | None
    debounce: str | start_options.Debounce | None
    expires_in: float | None
    expires_at: datetime | float | None


SUBMIT_KEYWORDS = SubmitKeywords.__optional_keys__


def check_keywords(keywords: SubmitKeywords) -> None:
    """@raise TypeError: a keyword C{submit} does not take, as Python says it."""
    for name in keywords.keys() - SUBMIT_KEYWORDS:
        raise TypeError(f"submit() got an unexpected keyword argument {name!r}")


def submit(
    task_type: str | bytes,
    payload: str | bytes,
    keywords: SubmitKeywords,
    traced: tuple[ClientConnection, bytes] | None = None,
) -> Request[int]:
    """
    One SUBMIT, its options as the clients' C{submit} takes them: the one
    place they become the L{taskflow.SubmitOptions} the codec encodes.  Its task id.

    @param traced: the client's connection and the trace option of the
        producer's span (L{quicx.clients.tracing}): carried when the daemon
        says it takes it (the C{trace} capability), known once it is sent.
    @raise TypeError: an unknown keyword, or an option of the wrong type.
    @raise ValueError: a malformed backoff or TTL, a naive C{datetime}.
    """
    if traced is not None:
        return _traced_submit(task_type, payload, keywords, *traced)
    if not keywords:  # the common case: no options to sort out
        return Request.submit([(task_type, payload)])
    if keywords.keys() <= _QUEUE_AND_PRIORITY:  # the next most common: made once each
        options = requests.common_options(keywords.get("queue"), keywords.get("priority"))
        return Request.submit([(task_type, payload, options)])
    check_keywords(keywords)
    fields: dict[str, Any] = dict(keywords)
    progress: Listener | None = fields.pop("progress", None)
    options = Options(**fields, progress=progress is not None).wire()
    return Request.submit([(task_type, payload, options)], progress)


_QUEUE_AND_PRIORITY = frozenset(("queue", "priority"))


def _traced_submit(
    task_type: str | bytes,
    payload: str | bytes,
    keywords: SubmitKeywords,
    connection: ClientConnection,
    trace: bytes,
) -> Request[int]:
    """L{submit}, with C{trace} in its options if C{connection}'s daemon takes it."""
    check_keywords(keywords)
    fields: dict[str, Any] = dict(keywords)
    progress: Listener | None = fields.pop("progress", None)
    options = Options(**fields, progress=progress is not None).wire()
    traced = attrs.evolve(options, trace=trace)
    request = Request.submit([(task_type, payload, options)], progress)

    def encode(version: int) -> bytes:
        takes = tracing.CAPABILITY in connection.server.get("capabilities", ())
        return requests.submit_frames(version, [(task_type, payload, traced if takes else options)])

    request.encode = encode
    return request


def into_group(tasks: Iterable[Task], group: int) -> Iterator[Task]:
    """C{tasks} (as C{submit_many} takes them), each made a member of C{group}."""
    plain = Options(group=group)
    for task in tasks:
        if len(task) == 2:
            yield task[0], task[1], plain
        else:
            yield task[0], task[1], attrs.evolve(task[2], group=group)


def stats() -> Request[wire.StatsResponse]:
    """STATS: the daemon's L{wire.StatsResponse}."""
    return Request.stats()


def hello(
    connection: ClientConnection, name: str, version: str, capabilities: Iterable[str]
) -> Request[Document]:
    """HELLO again, saying who the client is: the daemon's answer, kept as C{server}."""

    def keep(document: Document) -> Document:
        connection.server = document
        return document

    return Request.info("hello", lambda: link.encode_hello(name, version, capabilities), keep)


def cancel(task_id: int) -> Request[Document]:
    return Request.info("cancel", partial(admin.encode_cancel, task_id))


def queues() -> Request[Documents]:
    return Request.info("queues", lambda: admin.QUEUES_FRAME)


def status() -> Request[Document]:
    return Request.info("status", lambda: monitor.STATUS_FRAME)


def peek(queue: str, count: int) -> Request[Documents]:
    return Request.info("peek", partial(admin.encode_peek, queue, count))


def task(task_id: int) -> Request[Document]:
    return Request.info("task", partial(admin.encode_inspect, task_id))


def queue_action(action: str, queue: str) -> Request[Document]:
    """PAUSE, RESUME or PURGE (C{action}, by name) of C{queue}."""
    make = partial(admin.encode_queue_action, requests.QUEUE_ACTIONS[action], queue)
    return Request.info(action, make)


@attrs.define
class WorkerPages:
    """
    WORKERS a page at a time (docs/protocol.md): send L{request} until
    L{take} of its answer says that was the last page; then L{found} holds
    every connected worker's record, by id.
    """

    found: list[dict[str, Any]] = attrs.Factory(list)
    after: int = 0

    def request(self) -> Request[Document]:
        return Request.info("workers", partial(worker_messages.encode_workers, self.after))

    def take(self, page: Document) -> bool:
        self.found += page["workers"]
        if page["next"] is None:
            return True
        self.after = page["next"]
        return False


def steer(action: str, worker: int) -> Request[Document]:
    """STEER: C{quiet} or C{terminate} (C{action}) worker C{worker}, or all (0)."""
    make = partial(worker_messages.encode_steer, worker_messages.Steer[action.upper()], worker)
    return Request.info(action, make)


def dead(queue: str | None, limit: int) -> Request[Document]:
    return Request.info("dead", partial(admin.encode_dead, limit, queue))


def replay(task_id: int, queue: str | None) -> Request[Document]:
    return Request.info("replay", partial(admin.encode_replay, task_id, queue))


def dead_purge(queue: str | None) -> Request[Document]:
    return Request.info("dead_purge", partial(admin.encode_dead_purge, queue))


class BulkKeywords(TypedDict, total=False):
    """A bulk action's filter and target, by keyword (see L{bulk})."""

    queue: str | None
    task_type: str | bytes | None
    key_prefix: str | bytes | None
    states: Iterable[str]
    older_than: float | str
    newer_than: float | str
    reason: str | None
    to: str | None


def bulk(action: str, dry_run: bool, where: BulkKeywords) -> Request[Document]:
    """
    BULK: C{action} (C{cancel}, C{retry}, C{replay}, C{purge} or C{move})
    on the tasks that match C{where}'s fields, all of them; C{states} by
    name (C{queued}, C{delayed}, C{dead}), ages in seconds or as C{10m}.
    Its counts: C{matched}, C{acted}, C{skipped}, C{sample} (ids)...

    @raise ValueError: an unknown action, state or field, or a filter the
        action cannot take (a state it does not act on, a move without C{to}).
    """
    for name in where.keys() - BulkKeywords.__optional_keys__:
        raise TypeError(f"bulk() got an unexpected keyword argument {name!r}")
    request = protocol_bulk.request(action, dry_run, **where)
    return Request.info("bulk", partial(protocol_bulk.encode_bulk, request))


def role(action: str) -> Request[Document]:
    """
    ROLE: C{step-down} or C{promote} this daemon of a shard; its role,
    epoch and primary after it (C{{"role": ..., "epoch": N, "primary": ...}}).

    @raise ValueError: an unknown action.
    """
    try:
        chosen = protocol_role.RoleAction[action.upper().replace("-", "_")]
    except KeyError:
        raise ValueError(f"unknown role action {action!r} (step-down or promote)") from None
    return Request.info("role", partial(protocol_role.encode_role, chosen))


def schedules() -> Request[Documents]:
    return Request.info("schedules", lambda: admin.SCHEDULES_FRAME)


def schedule(
    name: str, task_type: str | bytes, payload: str | bytes, fields: dict[str, Any]
) -> Request[Document]:
    """SCHEDULE, C{fields} the keywords of L{requests.encode_schedule}."""
    return Request.info(
        "schedule", lambda: requests.encode_schedule(name, task_type, payload, **fields)
    )


def unschedule(name: str) -> Request[Document]:
    return Request.info("unschedule", partial(admin.encode_unschedule, name))


def publish(connection: ClientConnection, name: str, data: str | bytes) -> Request[Document]:
    """PUBLISH, checked against the limit the daemon's answer to HELLO gave."""
    return Request.info(
        "publish", lambda: requests.encode_publish(connection.server, name, as_bytes(data))
    )


def unpublish(name: str) -> Request[Document]:
    return Request.info("unpublish", partial(shared_data.encode_publish, name, delete=True))


def open_group() -> Request[int]:
    """GROUP OPEN: the new group's id."""
    return Request.info("open_group", partial(outcomes.encode_group, GroupOp.OPEN), _group_id)


_group_id: Callable[[Document], int] = itemgetter("group")


def close_group(group: int) -> Request[Document]:
    return Request.info("close_group", partial(outcomes.encode_group, GroupOp.CLOSE, group))


def group(group: int) -> Request[Document]:
    return Request.info("group", partial(outcomes.encode_group, GroupOp.STATE, group))


def result(
    connection: ClientConnection,
    task_id: int,
    seconds: float,
    deadline: float,
    then: Callable[[Any], object] | None = None,
    fenced: bool = False,
) -> Request[Any]:
    """AWAIT C{task_id} for C{seconds}: the handler's return value (see L{Request.wait})."""
    make = partial(outcomes.encode_await, task_id)
    waits = connection.awaits
    finish = awaits.awaited_value
    return Request.wait("result", waits, task_id, seconds, make, deadline, then, fenced, finish)


def wait_group(
    connection: ClientConnection,
    group: int,
    seconds: float,
    deadline: float,
    then: Callable[[Any], object] | None = None,
    fenced: bool = False,
) -> Request[Document]:
    """GROUP WAIT on C{group} for C{seconds}: its final counts (see L{Request.wait})."""
    make = partial(outcomes.encode_group, GroupOp.WAIT, group)
    waits = connection.group_waits
    finish = awaits.finished_group
    return Request.wait("wait_group", waits, group, seconds, make, deadline, then, fenced, finish)


def watch(
    queues: Iterable[str], types: Iterable[str | bytes], kinds: Iterable[str], what: str = "watch"
) -> Request[Document]:
    """WATCH live events: the filter the daemon took."""
    make = partial(watching.encode_watch, queues, types, kinds)
    return Request.info(what, make, _watching)


_watching: Callable[[Document], Document] = itemgetter("watching")


def follow(names: tuple[str, ...]) -> Request[Document]:
    """FOLLOW shared data C{names} (a worker's): each one's current version."""
    return Request.info("follow", partial(shared_data.encode_follow, names))


def unwatch(what: str = "unwatch") -> Request[None]:
    """Stop watching live events."""
    return Request.info(what, lambda: watching.STOP_FRAME, _nothing)


def _nothing(document: object) -> None:
    return None
