"""
The JSON API under C{/api/} that the pages use (docs/operations.md lists it).

GET reads: the session, the overview, the history, queues, a task, dead
letters, connections, schedules, the cluster view, and the live stream.  POST acts: pause,
resume and purge a queue; replay one dead task, or every dead task (of a
queue); purge the dead tasks (of a queue); retry, cancel or delete a task;
quiet or terminate a worker, or quiet them all (as STEER does); a bulk action
by a filter, or its dry run (as BULK does).  An action needs the admin role,
its session's CSRF token and the dashboard's own origin (L{auth}); it calls
the queue core's method that the wire's admin message calls, so it is
journaled and logged as that is, and it is answered once the journal holds
it (with C{fsync = always}).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import NOT_DONE_YET, Request

from quicx import __version__
from quicx.daemon.observe import task_history
from quicx.daemon.observe.task_history import TaskHistory
from quicx.daemon.observe.web import views
from quicx.daemon.observe.web.auth import Gate, Role, Visitor, same_origin
from quicx.daemon.observe.web.history import History, Sample
from quicx.daemon.observe.web.stream import Streams, event
from quicx.daemon.queue.bulk import BulkActions
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.daemon.queue.workers import workers_of
from quicx.documents.status import Replication
from quicx.protocol import bulk
from quicx.protocol.admin import MAX_DEAD_LIST
from quicx.protocol.codec import ErrorCode, check_queue

CSRF_HEADER = b"x-quicx-csrf"
"""The header an action echoes its session's CSRF token in."""

DEFAULT_DEAD_LIST = 100
MAX_TASK_ID = 0xFFFFFFFF
MAX_WORKER_ID = 0xFFFFFFFF

_STATUS = {ErrorCode.NOT_FOUND: 404, ErrorCode.FORBIDDEN: 403, ErrorCode.BUSY: 429}
"""The HTTP status of a refusal by the core, by its error code (else 409): busy (as
many bulk actions run as C{[bulk] max_running} allows) is 429, try again later."""


class BadRequest(Exception):
    """A path or argument the API cannot use (answered 400)."""


@frozen
class Action:
    """A POST: what the log calls it, and the core call that does it."""

    name: str
    call: Callable[[], dict[str, Any] | Deferred[dict[str, Any]]]


def answer(request: Request, status: int, document: object) -> bytes:
    """Set C{status} and the headers of a JSON answer; its body."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json; charset=utf-8")
    request.setHeader(b"cache-control", b"no-store")
    return json.dumps(document).encode() + b"\n"


def refusal(request: Request, status: int, message: str) -> bytes:
    return answer(request, status, {"error": message})


def _argument(request: Request, name: str) -> str | None:
    values = (request.args or {}).get(name.encode())
    return values[0].decode("utf-8", "replace") if values else None


def _queue_argument(request: Request) -> str | None:
    """The C{?queue=} argument (C{None}: none, or empty), checked."""
    name = _argument(request, "queue")
    return _queue_name(name) if name else None


def _queue_name(name: str) -> str:
    try:
        check_queue(name)
    except ValueError as e:
        raise BadRequest(str(e)) from None
    return name


SEARCHED = ("id", "key", "type", "queue", "state", "before", "limit")
"""The arguments of C{/api/finished}."""
DEFAULT_PAGE = 50
MAX_PAGE = 500
MAX_CURSOR = (1 << 53) - 1
"""The largest cursor (a record's sequence number) a page may send: JavaScript's largest integer."""


def _search(request: Request) -> tuple[task_history.Search, int | None, int]:
    """C{/api/finished}'s arguments: what to look for, and the page (its cursor, limit)."""
    given = {name: _argument(request, name) or None for name in SEARCHED}
    state = given["state"]
    if state is not None and state not in task_history.STATES:
        raise BadRequest(f"state is one of {', '.join(task_history.STATES)}, not {state!r}")
    key, task_type = given["key"], given["type"]
    search = task_history.Search(
        task_id=_number(given["id"], "a task id", 1, MAX_TASK_ID),
        key=None if key is None else key.encode(),
        task_type=None if task_type is None else task_type.encode(),
        queue=None if given["queue"] is None else _queue_name(given["queue"]),
        state=state,
    )
    before = given["before"]
    cursor = None if before is None else _number(before, "before", 0, MAX_CURSOR)
    return search, cursor, _number(given["limit"], "limit", 1, MAX_PAGE, DEFAULT_PAGE)


BULK_ACTIONS = tuple(a.name.lower() for a in bulk.BulkAction)
"""The bulk actions, as C{/api/bulk/ACTION} names them."""
BULK_ARGUMENTS = ("queue", "type", "key", "older", "newer", "reason", "to", "dry_run")
"""The arguments of C{/api/bulk/ACTION} besides its C{states}."""


def _bulk(request: Request, action: str) -> bulk.Bulk:
    """
    C{/api/bulk/ACTION}'s filter, from its arguments: C{queue}, C{type},
    C{key} (a prefix), C{states} (repeated, or with commas), C{older} and
    C{newer} (seconds, or as C{10m}), C{reason} (contained), C{to} (a
    move's queue), C{dry_run=1}: as the wire's BULK checks it.
    """
    given = {name: _argument(request, name) or None for name in BULK_ARGUMENTS}
    states = [
        state
        for value in (request.args or {}).get(b"states", [])
        for state in value.decode("utf-8", "replace").split(",")
        if state
    ]
    try:
        made = bulk.request(
            action,
            given["dry_run"] == "1",
            queue=given["queue"],
            task_type=given["type"],
            key_prefix=given["key"],
            states=states,
            older_than=given["older"] or 0.0,
            newer_than=given["newer"] or 0.0,
            reason=given["reason"],
            to=given["to"],
        )
        bulk.encode_bulk(made)  # every field and rule checked as a client's BULK is
    except ValueError as e:
        raise BadRequest(str(e)) from None
    return made


def _number(text: str | None, what: str, low: int, high: int, default: int = 0) -> int:
    """C{text} as a number from C{low} to C{high}; C{default} for none."""
    if text is None:
        return default
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(high))
    if not digits or not low <= int(text) <= high:
        raise BadRequest(f"{what} is a number from {low} to {high}, not {text!r}")
    return int(text)


class Api:
    """Answers the requests under C{/api/} of visitors the gate let in."""

    log = Logger()

    def __init__(
        self,
        queue: QueueService,
        schedules: ScheduleBook,
        history: History,
        streams: Streams,
        gate: Gate,
        cluster: Callable[[], dict[str, Any]] | None = None,
        tasks: TaskHistory | None = None,
        terminate_grace: float = 5.0,
        bulk_actions: BulkActions | None = None,
        replication: Callable[[], Replication] | None = None,
    ) -> None:
        self.replication = replication
        self.bulk = bulk_actions
        self.terminate_grace = terminate_grace
        self.cluster = cluster
        self.tasks = tasks
        self.queue = queue
        self.schedules = schedules
        self.history = history
        self.streams = streams
        self.gate = gate

    def render(self, request: Request, visitor: Visitor, path: list[str]) -> bytes | int:
        """Answer C{request} for C{/api/PATH...}."""
        try:
            if request.method == b"POST":
                action = self._action(request, path)
                if action is None:
                    return self._unknown(request, visitor, path)
                return self._act(request, visitor, action)
            if request.method in (b"GET", b"HEAD"):
                read = self._read(request, visitor, path)
                if read is None:
                    return self._unknown(request, visitor, path)
                return read()
        except BadRequest as e:
            return refusal(request, 400, str(e))
        except Refused as e:
            return refusal(request, _STATUS.get(e.code, 409), str(e))
        request.setHeader(b"allow", b"GET, HEAD, POST")
        return refusal(request, 405, f"{request.method.decode()} is not used here")

    def _unknown(self, request: Request, visitor: Visitor, path: list[str]) -> bytes:
        """404, or 405 when the path is there for the other method."""
        if request.method == b"POST" and self._read(request, visitor, path) is not None:
            request.setHeader(b"allow", b"GET, HEAD")
            return refusal(request, 405, "this is read with GET")
        if request.method != b"POST" and self._action(request, path) is not None:
            request.setHeader(b"allow", b"POST")
            return refusal(request, 405, "this is an action: POST it")
        return refusal(request, 404, f"no such API: /api/{'/'.join(path)}")

    def _read(
        self, request: Request, visitor: Visitor, path: list[str]
    ) -> Callable[[], bytes | int] | None:
        """What answers a GET of C{path}, if anything does."""
        queue = self.queue

        def document(make: Callable[[], object]) -> Callable[[], bytes]:
            return lambda: answer(request, 200, make())

        match path:
            case ["session"]:
                return document(lambda: self._session(visitor))
            case ["overview"]:
                return document(lambda: self._overview(self.history.latest))
            case ["history"]:
                return document(self.history.as_dict)
            case ["queues"]:
                return document(lambda: views.queues(queue))
            case ["tasks", task_id]:
                found = _number(task_id, "a task id", 1, MAX_TASK_ID)
                return document(lambda: self._task(found))
            case ["finished"]:
                search, cursor, limit = _search(request)
                return document(lambda: self._finished(search, cursor, limit))
            case ["dead"]:
                name = _queue_argument(request)
                limit = _number(
                    _argument(request, "limit"), "limit", 1, MAX_DEAD_LIST, DEFAULT_DEAD_LIST
                )
                return document(lambda: queue.dead_tasks(name, limit))
            case ["workers"]:
                return document(lambda: views.connections(queue))
            case ["schedules"]:
                return document(self.schedules.describe)
            case ["cluster"]:
                return lambda: self._cluster(request)
            case ["stream"] if request.method == b"GET":
                return lambda: self._stream(request)
        return None

    def _task(self, task_id: int) -> dict[str, Any]:
        """
        Task C{task_id} as it is now, with its records in the history (and a
        preview of its payload, and of its checkpoint if small and text);
        a live one's parents and children (L{views.relatives}).
        """
        document = views.lookup(self.queue, task_id)
        live = document["found"] == "live"
        if live:
            task = self.queue.task(task_id)
            document["task"]["dependencies"] = views.relatives(self.queue, task)
        tasks = self.tasks
        if tasks is None:
            return document
        document["history"] = [task_history.render(record) for record in tasks.of(task_id)]
        if live and tasks.preview:
            document["payload"] = task_history.payload_view(
                self.queue.pool.head(task.block, tasks.preview), task.size
            )
            text = views.checkpoint_text(task, tasks.preview)
            if text is not None:
                document["task"]["checkpoint"]["text"] = text
        return document

    def _finished(
        self, search: task_history.Search, cursor: int | None, limit: int
    ) -> dict[str, Any]:
        """The finished tasks that match C{search}: C{/api/finished}."""
        if self.tasks is None:
            raise BadRequest("no history of finished tasks: [web] task_history is 0")
        return self.tasks.search(search, cursor, limit)

    def _overview(self, sample: Sample | None) -> dict[str, Any]:
        """The overview, with the live streams' own figures."""
        streams = self.streams
        document = views.overview(self.queue, sample)
        document["streams"] = {"open": len(streams.open), "dropped": streams.dropped}
        if self.replication is not None:
            document["replication"] = self.replication().summary
        return document

    def _cluster(self, request: Request) -> bytes:
        """The cluster view of C{[cluster] peers} as last polled; 404 without peers."""
        if self.cluster is None:
            return refusal(request, 404, "no cluster view: [cluster] peers is not set")
        return answer(request, 200, self.cluster())

    def _stream(self, request: Request) -> bytes | int:
        streams = self.streams
        if streams.full:
            return refusal(request, 503, f"{streams.limit} live streams are open (max_streams)")
        streams.start(request, event(self._overview(self.history.latest)))
        return NOT_DONE_YET

    def publish(self, sample: Sample) -> None:
        """Send each open stream the overview with C{sample} (built once, if one is open)."""
        if self.streams.open:
            self.streams.publish(event(self._overview(sample)))

    def _session(self, visitor: Visitor) -> dict[str, Any]:
        return {
            "role": visitor.role.value,
            "csrf": visitor.csrf,
            "version": __version__,
            "history": self.history.samples.maxlen,
        }

    def _action(self, request: Request, path: list[str]) -> Action | None:
        """What a POST of C{path} does, if anything."""
        queue = self.queue
        match path:
            case ["queues", name, "pause" | "resume" as verb]:
                paused = verb == "pause"
                return Action(
                    f"{verb} queue {name}", lambda: queue.set_paused(_queue_name(name), paused)
                )
            case ["queues", name, "purge"]:
                return Action(f"purge queue {name}", lambda: queue.purge(_queue_name(name)))
            case ["dead", task_id, "replay"]:
                found = _number(task_id, "a task id", 1, MAX_TASK_ID)
                return Action(f"replay dead task {found}", lambda: queue.replay(found, None))
            case ["tasks", task_id, "retry" | "cancel" | "delete" as verb]:
                found = _number(task_id, "a task id", 1, MAX_TASK_ID)
                return Action(f"{verb} task {found}", lambda: self._task_action(verb, found))
            case ["dead", "replay" | "purge" as verb]:
                named = _queue_argument(request)
                what = f"{verb} the dead tasks of " + (f"queue {named}" if named else "every queue")
                if verb == "replay":
                    return Action(what, lambda: queue.replay(0, named))
                return Action(what, lambda: queue.purge_dead(named))
            case ["bulk", verb] if verb in BULK_ACTIONS:
                dry = _argument(request, "dry_run") == "1"
                return Action(
                    f"bulk {verb}" + " (dry run)" * dry, lambda: self._bulk(_bulk(request, verb))
                )
            case ["workers", "quiet"]:
                return Action("quiet every worker", lambda: self._steer("quiet", 0))
            case ["workers", worker_id, "quiet" | "terminate" as verb]:
                found = _number(worker_id, "a worker id", 1, MAX_WORKER_ID)
                return Action(f"{verb} worker {found}", lambda: self._steer(verb, found))
        return None

    def _steer(self, verb: str, worker: int) -> dict[str, Any]:
        """Quiet or terminate worker C{worker} (0: every one), as STEER does; what STEER answers."""
        steering = workers_of(self.queue)
        if verb == "quiet":
            steered = steering.quiet(worker)
        else:
            steered = steering.terminate(worker, self.terminate_grace)
        return {"action": verb, "workers": steered}

    def _bulk(self, request: bulk.Bulk) -> Deferred[dict[str, Any]]:
        """Start bulk action C{request}; its counts once it is over and journaled."""
        if self.bulk is None:
            raise BadRequest("no bulk actions here")
        return self.bulk.run(request)

    def _task_action(self, verb: str, task_id: int) -> dict[str, Any]:
        """Retry (replay) a dead task, cancel a queued or delayed one, delete (purge) a dead one."""
        queue = self.queue
        if verb == "retry":
            return queue.replay(task_id, None)
        if verb == "delete":
            return queue.graveyard.purge_task(task_id)
        return queue.manage.cancel_task(queue.task(task_id), "cancelled from the dashboard")

    def _act(self, request: Request, visitor: Visitor, action: Action) -> bytes | int:
        if visitor.role is not Role.ADMIN:
            return refusal(request, 403, f"{action.name}: the {visitor.role.value} role reads only")
        scheme = "https" if request.isSecure() else "http"
        if not same_origin(
            header(request, b"origin"),
            header(request, b"referer"),
            scheme,
            header(request, b"host") or "",
        ):
            return refusal(request, 403, f"{action.name}: not from this dashboard's own pages")
        if not self.gate.csrf_ok(visitor, header(request, CSRF_HEADER)):
            return refusal(
                request, 403, f"{action.name}: the session's CSRF token is missing or wrong"
            )
        if self.replication is not None and (role := self.replication()).role != "primary":
            where = f"the primary is at {role.primary}" if role.primary else "no primary is known"
            return refusal(request, 503, f"{action.name}: this daemon is not the primary ({where})")
        done = action.call()
        if isinstance(done, Deferred):
            return self._when(request, done, lambda found: self._done(visitor, action, found))
        self._done(visitor, action, done)
        durable = self.queue.journal.durable()
        if durable is None:
            return answer(request, 200, done)
        return self._when(request, durable, lambda _: done)

    def _done(self, visitor: Visitor, action: Action, done: dict[str, Any]) -> dict[str, Any]:
        """Log what C{action} did; what it answers."""
        self.log.info(
            "dashboard: {action} (by {how}, {role}): {answer}",
            log_id="web.action",
            action=action.name,
            how=visitor.how,
            role=visitor.role.value,
            answer=", ".join(
                f"{key} {len(value) if isinstance(value, list) else value}"
                for key, value in done.items()
            ),
        )
        return done

    def _when(
        self,
        request: Request,
        durable: Deferred[Any],
        then: Callable[[Any], dict[str, Any]],
    ) -> int:
        """Answer C{request} with C{then}'s document once C{durable} fires (500 if it fails)."""
        gone: list[Failure] = []
        request.notifyFinish().addErrback(gone.append)

        def decided(result: object) -> None:
            if gone:
                return
            if isinstance(result, Failure):
                body = refusal(
                    request,
                    500,
                    f"done, but not journaled ({result.getErrorMessage()}): a restart may undo it",
                )
            else:
                body = answer(request, 200, then(result))
            request.write(body)
            request.finish()

        durable.addBoth(decided)
        return NOT_DONE_YET


def header(request: Request, name: bytes) -> str | None:
    """A request header's value, as text."""
    value = request.getHeader(name)
    if value is None or isinstance(value, str):
        return value
    return value.decode("latin-1")
