"""
The blocking client, for code without a reactor: scripts, Django or Flask
views, Spark executors.

    with QuicxClient("tcp:127.0.0.1:16381") as client:
        task_id = client.submit("send_email", b'{"to": "user@gmail.com"}')
        client.wait(task_id, timeout=30)       # raises TaskFailed on FAILED
        ids = client.submit_many(("resize", p) for p in pictures)
        client.submit("charge", b"...", queue="billing", priority=9, key="order-42")
        client.submit("sync", b"...", delay=30, retries=5, backoff="exponential:1s:5m")
        task_id = client.submit("resize", b"...", keep_result=True)
        client.result(task_id, timeout=60)    # the handler's return value, from any client
        group = client.submit_group(("resize", p) for p in pictures)
        client.wait_group(group, timeout=600)  # {"done": 998, "failed": 2, ...}
        for event in client.events(queues=["mail"], kinds=["failed"]):  # live, each a dict
            print(event["task"], event["reason"])

One client keeps one connection open and reuses it; it reconnects on the next
call after the connection drops.  It speaks protocol version 2, or version 1
with a daemon that speaks only that (see L{quicx.clients.requests}).  Calls
are serialized by a lock, so one client may be shared by threads; threads that
submit in parallel are faster with a client each.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import attrs
from service_identity import VerificationError

from quicx.clients import awaits, requests, watching
from quicx.clients.address import (
    DEFAULT_ADDRESS,
    as_bytes,
    one_address,
    parse_address,
)
from quicx.clients.awaits import Waits
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Event,
    Greeted,
    LiveEvents,
    Progressed,
    Rejected,
    Request,
    Send,
    Unanswered,
)
from quicx.clients.outcomes import DEFAULT_KEEP, RetryNotice, value_of
from quicx.clients.progress import Listener, ProgressReport
from quicx.clients.requests import Options, Task
from quicx.protocol import admin, codec, link, monitor, outcomes, shared_data, taskflow, wire
from quicx.protocol.errors import ConnectionLost, DaemonError, QuicxError, error_from
from quicx.protocol.outcomes import GroupOp

DEFAULT_WINDOW = 1000
"""SUBMITs sent ahead of their OKs by L{QuicxClient.submit_many}."""
FOREVER = 3600.0
"""How long one read waits when a call waits as long as it takes (it reads again)."""

log = logging.getLogger(__name__)
log.addHandler(logging.NullHandler())  # silent unless the application configures logging


class QuicxClient:
    """
    A blocking producer and monitor client: a byte pump around a
    L{ClientConnection}, which owns the handshake, the order of the
    replies, outcomes, waits and progress.

    @ivar timeout: seconds any one call may wait for the daemon.
    @ivar version: the protocol version of the connection (2, unless the
        client was made with C{protocol=1} or the daemon speaks only 1).
    @ivar server: what the daemon said of itself in answer to HELLO.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        timeout: float = 30.0,
        keep_outcomes: int = DEFAULT_KEEP,
        protocol: int = 2,
    ) -> None:
        self._conn = ClientConnection(protocol, keep_outcomes, announce=False)
        self.address = address
        self.protocol = protocol
        several = "open_client or ClusterClient (quicx.clients.blocking_cluster)"
        _, self._sockaddr, self._tls = parse_address(one_address(address, "QuicxClient", several))
        self._context = self._tls.context() if self._tls is not None else None
        self.timeout = timeout
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        # Tells without a syscall's error whether the daemon sent or closed
        # anything since the last call (L{_closed_meanwhile}).
        self._readable = select.poll()
        # What the connection made of the bytes read, not yet handled.
        self._inbox: deque[Event] = deque()
        self._feed = watching.EventFeed()

    @property
    def version(self) -> int:
        return self._conn.version

    @property
    def server(self) -> dict[str, Any]:
        return self._conn.server

    # -- connection -------------------------------------------------------------------

    def _connection(self) -> socket.socket:
        if self._sock is None:
            try:
                sockaddr = self._sockaddr
                if isinstance(sockaddr, str):  # a UNIX socket's path
                    sock = socket.socket(socket.AF_UNIX)
                    sock.settimeout(self.timeout)
                    sock.connect(sockaddr)
                else:
                    sock = socket.create_connection(sockaddr, self.timeout)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    if self._tls is not None:
                        sock = self._tls.wrap(sock, self._context)
            except VerificationError as e:
                raise ConnectionLost(
                    f"cannot connect to {self.address}: its certificate is not for"
                    f" {self._tls.hostname if self._tls else '?'}: {e}"
                ) from None
            except OSError as e:
                raise ConnectionLost(
                    f"cannot connect to {self.address}: {e.strerror or e}"
                ) from None
            self._sock = sock
            self._readable = select.poll()
            self._readable.register(sock, select.POLLIN)
            self._inbox.clear()
            hello = self._conn.connect()
            if hello:
                try:
                    self._hello(hello)
                except BaseException:
                    self._drop()  # its answer may still come, as the answer to another
                    raise
        return self._sock

    def _hello(self, hello: bytes) -> None:
        """Open a version-2 connection with HELLO; fall back to 1 if refused."""
        was = self._conn.version
        self._send(hello)
        deadline = time.monotonic() + self.timeout
        while not isinstance(greeted := self._pump(deadline), Greeted):
            if greeted is not None:
                raise QuicxError(f"unexpected {type(greeted).__name__} for HELLO")
        if greeted.error is not None:
            raise greeted.error
        if greeted.fell_back and was == codec.VERSION:
            log.warning(
                "%s speaks protocol version 1 only: this client speaks version 1 to it"
                " (queues, priorities, keys, cancel and introspection are unavailable)",
                self.address,
            )

    def _begin(self, deadline: float, sends: bool = True) -> None:
        """
        Start a call: connect (anew if the daemon closed the connection
        since the last call, when the call C{sends} a request: one that
        only reads learns of a close as it reads), and read the answers
        owed to calls that gave up (their accepted tasks' outcomes are
        still kept).
        """
        if sends and self._closed_meanwhile():
            self._drop()
        self._connection()
        while self._conn.owed or self._inbox:
            self._pump(deadline)

    def _closed_meanwhile(self) -> bool:
        """
        Whether the daemon closed the connection between calls (an idle
        client past its C{heartbeat_timeout}, a restart), read without
        waiting; what it sent before is filed (outcomes, notices), nothing
        is answered.  Checked before a call sends anything, so that a call
        never sent is sent on a new connection, not lost with the old one.
        """
        sock = self._sock
        if sock is None:
            return False
        # One poll, no waiting: most calls follow another at once, with
        # nothing read since (TLS may hold decrypted bytes poll cannot see).
        if not self._readable.poll(0) and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            return False
        sock.settimeout(0)
        try:
            while data := sock.recv(1 << 18):
                self._take_in(data)
        except (BlockingIOError, ssl.SSLWantReadError):
            sock.settimeout(self.timeout)
            return False  # open, and nothing more to read now
        except OSError:
            pass  # reset
        while self._inbox:
            event = self._inbox.popleft()
            if type(event) is not Send:
                self._handle(event)
        return True

    def _drop(self) -> None:
        """
        Forget the connection; pending outcomes become unknown, waits,
        progress and live events end.
        """
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._conn.connection_lost()
        self._feed.stop()

    def connect(self) -> None:
        """
        Connect now, if not connected (every call connects when it needs to).

        @raise ConnectionLost: the daemon cannot be reached.
        """
        with self._lock:
            self._begin(time.monotonic() + self.timeout)

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> QuicxClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, data: bytes) -> None:
        sock = self._connection()
        try:
            sock.sendall(data)
        except OSError as e:
            self._drop()
            raise ConnectionLost(f"connection to {self.address} failed: {e}") from None

    def _request(self, request: Request) -> None:
        """Send C{request} on the connection L{_begin} made."""
        self._send(self._conn.send(request))

    def _answer(self, request: Request, deadline: float) -> Any:
        """The next answer, which is C{request}'s (L{_begin} read those owed before)."""
        while True:
            event = self._pump(deadline)
            if type(event) is Answer and event.request is request:
                return event.value
            if event is not None:
                self._drop()
                raise QuicxError(f"unexpected {_name(event)} for {request.what}")

    def _pump(self, deadline: float) -> Answer | Unanswered | Greeted | None:
        """
        Read one event: send what it sends, hand a progress report to its
        callback, file live events (and return C{None}); return an answer,
        or anything else that came.
        """
        event = self._read(deadline)
        if isinstance(event, (Answer, Unanswered, Greeted)):
            return event
        if isinstance(event, Send):
            if self._sock is not None:  # a PONG is not worth a new connection
                self._send(event.data)
        elif event is not None:
            self._handle(event)
        return None

    def _handle(self, event: Event) -> None:
        """Hand on what came unasked: progress reports, live events."""
        if type(event) is Progressed:
            self._tell_progress(event.listener, event.report)
        elif type(event) is LiveEvents:
            self._feed.arrived(event.message)

    def _tell_progress(self, listener: Listener, report: ProgressReport) -> None:
        # A callback's mistake is logged: raised here, it would end whichever
        # call happened to read the report.
        try:
            listener(report)
        except Exception:
            log.exception("the progress callback of task %s raised", report.task_id)

    def _read(self, deadline: float) -> Event | None:
        """The next event; C{None} when what was read made none (an outcome, a wait's answer)."""
        if self._inbox:
            return self._inbox.popleft()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer from {self.address} in time")
            sock = self._connection()
            sock.settimeout(remaining)
            try:
                data = sock.recv(1 << 18)
            except TimeoutError:
                continue
            except OSError as e:
                self._drop()
                raise ConnectionLost(f"connection to {self.address} failed: {e}") from None
            if not data:
                self._drop()
                raise ConnectionLost(f"{self.address} closed the connection")
            self._take_in(data)
            return self._inbox.popleft() if self._inbox else None

    def _take_in(self, data: bytes) -> None:
        """Read C{data} from the daemon into the inbox, as events."""
        events = self._conn.receive(data)
        if events and type(events[-1]) is Rejected:
            self._inbox.extend(events[:-1])
            reason = events[-1].reason
            self._drop()
            raise QuicxError(f"{self.address} sent {reason}")
        self._inbox.extend(events)

    # -- requests ----------------------------------------------------------------------

    def submit(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        *,
        queue: str | None = None,
        priority: int | None = None,
        key: str | bytes | None = None,
        fairness_key: str | bytes | None = None,
        delay: float | None = None,
        run_at: datetime | float | None = None,
        retries: int | None = None,
        backoff: str | taskflow.Backoff | None = None,
        keep_result: bool = False,
        result_ttl: float | str | None = None,
        progress: Listener | None = None,
        group: int | None = None,
    ) -> int:
        """
        Submit one task; return its id.

        @param queue: the queue (default: the daemon's default queue).
        @param priority: 0 to 255, higher runs first (default: the queue's).
        @param key: an idempotency key: a second submit with the same key,
            in the same queue, within the daemon's window, returns the first
            task's id and queues nothing.
        @param fairness_key: the tenant or customer the task is for: within
            a queue they take turns, and the queue's per-key limits apply.
        @param delay: seconds from now before it may run; or C{run_at}, the
            time it may run (a C{datetime} with a zone, or Unix seconds).
        @param retries: how many times a failure is retried (default: the queue's).
        @param backoff: the wait before each retry: C{"fixed:10s"},
            C{"exponential:1s:5m"}, either optionally with C{":20%"} of
            jitter, or a L{taskflow.Backoff} (default: the queue's).
        @param keep_result: keep its outcome and result once it finishes, for
            L{result} on any connection, for C{result_ttl} (seconds, or text
            such as C{"1h"}) or the daemon's C{[results] ttl}; a C{result_ttl}
            alone keeps it too (default: as its queue says).
        @param progress: called with a L{ProgressReport} for each progress
            report of its worker's, in order, before its outcome; by
            whichever call of this client reads it (L{wait}, most often).
        @param group: the group it joins (see L{open_group}).
        @raise QueueFull, PayloadTooLarge, UnknownTaskType, InvalidMessage:
            the daemon refused it.
        @raise NotFound, Conflict: C{group} is unknown, or closed.
        @raise NeedsVersion2: an option was given to a version-1 daemon.
        @raise ValueError: an option is out of range, or a backoff malformed.
        @raise ConnectionLost: the daemon could not be reached or went away.
        """
        options = Options(
            queue=queue,
            priority=priority,
            key=key,
            fairness_key=fairness_key,
            delay=delay,
            run_at=run_at,
            retries=retries,
            backoff=backoff,
            keep_result=keep_result,
            result_ttl=result_ttl,
            progress=progress is not None,
            group=group,
        )
        with self._lock:
            deadline = time.monotonic() + self.timeout
            self._begin(deadline)
            request = Request.submit([(task_type, payload, options)], progress)
            self._request(request)
            (result,) = self._read_replies(request)
            if isinstance(result, Exception):
                raise result
        return result

    def submit_many(
        self,
        tasks: Iterable[Task],
        return_exceptions: bool = False,
        window: int = DEFAULT_WINDOW,
    ) -> list[int | DaemonError]:
        """
        Submit many tasks over the one connection, pipelined: SUBMITs go in
        batches of C{window}, and each batch is sent before the OKs of the one
        before it are read, so the daemon and this client work at once.

        Any error raised part-way holds the answers read before it in
        C{results}, for the first tasks, and in C{sent} how many tasks may
        have reached the daemon: those after the answers, up to C{sent}, were
        not acknowledged (and may have been accepted); the others were not sent.

        @param tasks: C{(type, payload)}, or C{(type, payload, Options(...))}
            for a queue, priority or keys.
        @param return_exceptions: put each refused task's L{DaemonError} in
            its place in the result instead of raising the first one.
        @return: task ids (or errors), in the order of C{tasks}.
        @raise DaemonError: the first refusal, after every reply was read;
            its C{results} attribute holds the whole list.
        @raise ConnectionLost, TimeoutError: the connection closed part-way,
            or an answer did not come in time.
        @raise NeedsVersion2, ValueError: a task could not be encoded (an
            option to a version-1 daemon, one out of range): nothing of its
            batch, nor after it, was sent; the answers to the batch before it
            were read first.
        """
        results: list[int | DaemonError] = []
        batch: list[Task] = []
        # The SUBMITs of the previous batch, sent and not yet read.
        unanswered: Request | None = None
        sent = 0  # tasks that may have reached the daemon
        with self._lock:
            try:
                self._begin(time.monotonic() + self.timeout)
                for task in tasks:
                    batch.append(task)
                    if len(batch) == window:
                        request = self._send_submits(batch, unanswered, results)
                        sent += len(batch)
                        self._read_replies(unanswered, results)
                        unanswered, batch = request, []
                if batch:
                    request = self._send_submits(batch, unanswered, results)
                    sent += len(batch)
                    self._read_replies(unanswered, results)
                    unanswered = request
                self._read_replies(unanswered, results)
            except Exception as e:
                e.results = list(results)  # type: ignore[attr-defined]
                e.sent = sent  # type: ignore[attr-defined]
                raise
        if not return_exceptions:
            for result in results:
                if isinstance(result, DaemonError):
                    result.results = results
                    raise result
        return results

    def _send_submits(
        self, batch: list[Task], unanswered: Request | None, results: list[int | DaemonError]
    ) -> Request:
        """
        Send C{batch}, encoded in the version of the connection L{_begin}
        made.  If a task of it cannot be, the answers to the C{unanswered}
        SUBMITs sent before it are read into C{results} before the error
        is raised: they are all that was sent.
        """
        request = Request.submit(batch)
        try:
            data = self._conn.send(request)
        except Exception:
            self._read_replies(unanswered, results)
            raise
        self._send(data)
        return request

    def _read_replies(
        self, request: Request | None, results: list[int | DaemonError] | None = None
    ) -> list[int | DaemonError]:
        """
        Read the answers to C{request}'s SUBMITs (none if C{None}): task
        ids, or the refusals, each added to C{results} (a new list if none)
        as it comes.
        """
        results = [] if results is None else results
        if request is None:
            return results
        deadline = time.monotonic() + self.timeout
        inbox = self._inbox
        for _ in range(request.count):
            # Straight from the inbox, the common case, else through the pump.
            event = inbox[0] if inbox else None
            if type(event) is Answer and event.request is request:
                inbox.popleft()
                value = event.value
            else:
                value = self._answer(request, deadline)
            if type(value) is int or isinstance(value, DaemonError):
                results.append(value)
            else:
                self._drop()
                raise value
        return results

    def wait(
        self,
        task_id: int,
        timeout: float | None = None,
        on_retry: Callable[[RetryNotice], object] | None = None,
    ) -> Any:
        """
        Block until the outcome of C{task_id} (submitted by this client)
        arrives.

        @return: the handler's return value, as it returned it (C{bytes},
            C{str}, or what its JSON holds); C{None} when it gave none.

        @param on_retry: called with a L{RetryNotice} for each failed attempt
            the daemon retries, in order, before the outcome (those that
            came before this call first); without it they are dropped.
        @raise TaskFailed: a worker reported it FAILED (C{.reason}), with no
            retry left.
        @raise TaskCancelled: it was cancelled, or its queue purged, before it ran.
        @raise OutcomeUnknown: the connection dropped before the outcome came.
        @raise TimeoutError: no outcome within C{timeout} (default: the
            client's); the task is still pending and may be waited for again.
        @raise NotSubmittedHere: (a C{KeyError}) this client did not submit
            C{task_id}, or its outcome was already taken.
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._lock:
            book = self._conn.book
            try:
                # What was read before came before the outcome, if that came.
                while self._inbox:
                    self._pump(deadline)
                if book.pending(task_id):
                    self._begin(deadline, sends=False)
                self._tell(task_id, on_retry)
                # Until the outcome, and the reports read with it, are handled.
                while book.pending(task_id) or self._inbox:
                    # Nothing but outcomes, notices and heartbeats is owed to us here.
                    unexpected = self._pump(deadline)
                    if unexpected is not None:
                        self._drop()
                        raise QuicxError(f"unexpected {_name(unexpected)} while waiting")
                    self._tell(task_id, on_retry)
            except ConnectionLost:
                pass  # the outcome is now filed as unknown
            outcome = book.take(task_id)
        return value_of(outcome)

    def _tell(self, task_id: int, on_retry: Callable[[RetryNotice], object] | None) -> None:
        """Hand the retry notices kept for C{task_id} to C{on_retry}."""
        for notice in self._conn.book.notices(task_id):
            if on_retry is not None:
                on_retry(notice)

    def submit_and_wait(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        timeout: float | None = None,
        on_retry: Callable[[RetryNotice], object] | None = None,
    ) -> int:
        """Submit a task, wait for its outcome (see L{wait}), return its id."""
        task_id = self.submit(task_type, payload)
        self.wait(task_id, timeout, on_retry)
        return task_id

    def stats(self) -> wire.StatsResponse:
        """The daemon's 28-byte STATS_RESPONSE, decoded."""
        reply: wire.StatsResponse = self._call(Request.stats())
        return reply

    # -- version 2 ----------------------------------------------------------------------

    def _info(self, what: str, frame: bytes) -> Any:
        """Send a version-2 request; its INFO document, or the error it got."""
        return self._call(Request.info(what, lambda: frame))

    def _call(self, request: Request) -> Any:
        """Send C{request}; its answer, or the error it got."""
        deadline = time.monotonic() + self.timeout
        with self._lock:
            self._begin(deadline)
            self._request(request)
            value = self._answer(request, deadline)
        if isinstance(value, Exception):
            raise value
        return value

    def hello(self, name: str, version: str, capabilities: Iterable[str] = ()) -> dict[str, Any]:
        """
        Say who this client is, now and on every later connection (C{quicx
        status} lists clients by name and version; by default this one is
        C{quicx-python} and the package's version), and ask for
        C{capabilities}.

        @return: the daemon's answer, also kept in C{server}: its version,
            capabilities, the wanted ones it lacks (C{missing}) and limits.
        """
        frame = link.encode_hello(name, version, capabilities)
        with self._lock:
            self._conn.hello = frame
            self._conn.server = self._info("hello", frame)
        return self.server

    def cancel(self, task_id: int) -> dict[str, Any]:
        """
        Cancel a queued task (its producer hears CANCELLED).

        @raise NotFound: no such queued or running task.
        @raise Conflict: a worker is running it (it is not interrupted).
        @raise Forbidden: another client submitted it and this one is no admin.
        """
        document: dict[str, Any] = self._info("cancel", admin.encode_cancel(task_id))
        return document

    def queues(self) -> list[dict[str, Any]]:
        """Every queue: name, depth, paused, workers, priorities, oldest_age..."""
        found: list[dict[str, Any]] = self._info("queues", admin.QUEUES_FRAME)
        return found

    def status(self) -> dict[str, Any]:
        """
        The daemon's status document: what C{quicx status} shows (see
        docs/operations.md); under C{[tls]} role lists, for a monitor.
        """
        document: dict[str, Any] = self._info("status", monitor.STATUS_FRAME)
        return document

    def peek(self, queue: str, count: int = 10) -> list[dict[str, Any]]:
        """The next C{count} tasks of C{queue}, in dispatch order, without taking them."""
        found: list[dict[str, Any]] = self._info("peek", admin.encode_peek(queue, count))
        return found

    def task(self, task_id: int) -> dict[str, Any]:
        """One task's state and, while it waits, why (see docs/protocol.md)."""
        document: dict[str, Any] = self._info("task", admin.encode_inspect(task_id))
        return document

    def pause(self, queue: str) -> dict[str, Any]:
        """Stop dispatching from C{queue} (it still accepts tasks); needs the admin role."""
        return self._queue_action("pause", queue)

    def resume(self, queue: str) -> dict[str, Any]:
        """Dispatch from C{queue} again; needs the admin role."""
        return self._queue_action("resume", queue)

    def purge(self, queue: str) -> dict[str, Any]:
        """Cancel every queued task of C{queue}; needs the admin role."""
        return self._queue_action("purge", queue)

    def _queue_action(self, action: str, queue: str) -> dict[str, Any]:
        frame = admin.encode_queue_action(requests.QUEUE_ACTIONS[action], queue)
        document: dict[str, Any] = self._info(action, frame)
        return document

    # -- dead letters and schedules ----------------------------------------------------

    def dead(self, queue: str | None = None, limit: int = 100) -> dict[str, Any]:
        """
        The dead-letter set, oldest first: C{{"total": N, "tasks": [...]}}, at
        most C{limit} (1 to 1000) of the tasks of C{queue} (C{None}: of every
        queue), each with C{id}, C{queue}, C{type}, C{failures}, C{reason},
        C{worker}, C{died_at}...
        """
        document: dict[str, Any] = self._info("dead", admin.encode_dead(limit, queue))
        return document

    def replay(self, task_id: int = 0, queue: str | None = None) -> dict[str, Any]:
        """
        Put dead task C{task_id} back in its queue, failures reset; or, with
        C{task_id} 0, every dead task of C{queue} (C{None}: of every queue).
        Needs the admin role.

        @return: C{{"replayed": [ids]}}.
        @raise NotFound: C{task_id} is not a dead task.
        @raise ValueError: both a task and a queue.
        """
        document: dict[str, Any] = self._info("replay", admin.encode_replay(task_id, queue))
        return document

    def dead_purge(self, queue: str | None = None) -> dict[str, Any]:
        """
        Drop the dead tasks of C{queue} (C{None}: of every queue); needs the
        admin role.

        @return: C{{"purged": N}}.
        """
        document: dict[str, Any] = self._info("dead_purge", admin.encode_dead_purge(queue))
        return document

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule, by name: its expression or interval, next_fire, last_fire..."""
        found: list[dict[str, Any]] = self._info("schedules", admin.SCHEDULES_FRAME)
        return found

    def schedule(
        self,
        name: str,
        task_type: str | bytes,
        payload: str | bytes = b"",
        *,
        cron: str | None = None,
        every: float | None = None,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int | None = None,
        missed: str | admin.Missed = admin.Missed.ONCE,
        catch_up: int = 100,
    ) -> dict[str, Any]:
        """
        Add, or replace, run-time schedule C{name}: a task of C{task_type}
        with C{payload} into C{queue} (at C{priority}) on C{cron}, a 5-field
        expression in C{timezone}, or C{every} so many seconds.  Needs the
        admin role.

        @param missed: what to fire for times the daemon was down: C{"skip"}
            none, C{"once"} one, C{"all"} each (at most C{catch_up}).
        @return: the schedule, as L{schedules} lists it.
        @raise InvalidMessage: the daemon refused the expression or zone.
        @raise Conflict: a C{[schedule NAME]} section of the configuration
            declares C{name}.
        @raise ValueError: not exactly one of C{cron} and C{every}, or a
            field out of range.
        """
        frame = requests.encode_schedule(
            name,
            task_type,
            payload,
            cron=cron,
            every=every,
            timezone=timezone,
            queue=queue,
            priority=priority,
            missed=missed,
            catch_up=catch_up,
        )
        document: dict[str, Any] = self._info("schedule", frame)
        return document

    def unschedule(self, name: str) -> dict[str, Any]:
        """
        Remove run-time schedule C{name}; needs the admin role.

        @raise NotFound: no such schedule.
        @raise Conflict: the configuration declares it.
        """
        document: dict[str, Any] = self._info("unschedule", admin.encode_unschedule(name))
        return document

    # -- results, shared data and groups ----------------------------------------------

    def _wait_on(
        self,
        what: str,
        waits: Waits[Any],
        key: int,
        timeout: float | None,
        encode: Callable[[int], bytes],
    ) -> Any:
        """
        Send the wait C{encode} makes of its milliseconds, on C{key}, and
        read until its answer: the daemon's wait, and this client's
        C{timeout} more for the answer to come back.
        """
        wait = awaits.wait_seconds(self.timeout if timeout is None else timeout)
        encode(awaits.wait_ms(wait))  # a bad argument is refused before anything is sent
        deadline = time.monotonic() + wait + self.timeout
        request = Request.wait(what, waits, key, wait, encode, deadline)
        with self._lock:
            self._begin(deadline)
            self._request(request)
            waiter = request.waiter
            assert waiter is not None  # sent
            while waiter.answer is None:
                # Nothing else is owed to this call: an ERROR refuses the wait.
                event = self._pump(deadline)
                if event is None:
                    continue
                self._conn.refused(request)
                if type(event) is Unanswered and type(event.message) is wire.Error:
                    raise error_from(event.message)
                self._drop()
                raise QuicxError(f"unexpected {_name(event)} for {what}")
            return waiter.answer

    def result(self, task_id: int, timeout: float | None = None) -> Any:
        """
        The outcome of any task, from any client (AWAIT): at once if it is
        known, else when the task finishes, waiting up to C{timeout} seconds
        (default: the client's; 0: answer now; the daemon cuts it to its
        C{[results] max_wait}).  A finished task's outcome is known while it
        is kept (see C{keep_result}), or to a wait that began before it
        finished.

        @return: the handler's return value (C{None} when it gave none).
        @raise TaskFailed: it failed for good (L{TaskDead}: and is in the
            dead-letter set), with the worker's C{reason}.
        @raise TaskCancelled: it was cancelled before it ran.
        @raise OutcomeExpired: its kept outcome has expired.
        @raise TaskUnknown: no such task, or it finished without its outcome kept.
        @raise NotFinished: it had not finished when the wait ended (a
            C{TimeoutError}); ask again.
        @raise QueueFull: this connection, or the daemon, waits for as many
            tasks as it may.
        """
        outcome = self._wait_on(
            "result",
            self._conn.awaits,
            task_id,
            timeout,
            lambda ms: outcomes.encode_await(task_id, ms),
        )
        return awaits.awaited_value(outcome)

    def publish(self, name: str, data: str | bytes) -> dict[str, Any]:
        """
        Publish C{data} as the next version of shared data C{name}: every
        worker that follows C{name} gets it once (see C{Worker(follow=...)}).

        @return: C{{"name": ..., "version": N, "size": bytes, "followers": N}},
            once the daemon's journal holds it.
        @raise PayloadTooLarge: C{data} is over C{[shared] max_size}.
        @raise QueueFull: a new name past C{max_names}, or past C{max_memory} in all.
        @raise Forbidden: a worker's connection (or an identity without the
            producer or admin role) may not publish.
        """
        with self._lock:
            self._begin(time.monotonic() + self.timeout)  # its HELLO tells the limit
            frame = requests.encode_publish(self.server, name, as_bytes(data))
        document: dict[str, Any] = self._info("publish", frame)
        return document

    def unpublish(self, name: str) -> dict[str, Any]:
        """
        Delete shared data C{name}; its followers hear it is gone.

        @raise NotFound: no such name.
        """
        frame = shared_data.encode_publish(name, delete=True)
        document: dict[str, Any] = self._info("unpublish", frame)
        return document

    def open_group(self) -> int:
        """
        Open a group: tasks join it with C{submit(..., group=id)} until
        L{close_group}; it finishes when it is closed and every member has.

        @return: its id.
        @raise QueueFull: the daemon has C{[groups] max_groups} open.
        """
        document = self._info("open_group", outcomes.encode_group(GroupOp.OPEN))
        group: int = document["group"]
        return group

    def close_group(self, group: int) -> dict[str, Any]:
        """No more members for C{group}; returns its state (see L{group})."""
        document: dict[str, Any] = self._info(
            "close_group", outcomes.encode_group(GroupOp.CLOSE, group)
        )
        return document

    def group(self, group: int) -> dict[str, Any]:
        """
        A group's state now: C{state} (C{"open"}, C{"closed"}, C{"finished"}
        or C{"unknown"}), its C{members} and how many are C{done},
        C{failed} (dead and given up included), C{cancelled} and
        C{pending}, C{opened_at} and C{finished_at} (Unix seconds, or C{None}).
        """
        document: dict[str, Any] = self._info("group", outcomes.encode_group(GroupOp.STATE, group))
        return document

    def wait_group(self, group: int, timeout: float | None = None) -> dict[str, Any]:
        """
        Wait up to C{timeout} seconds (default: the client's) for C{group} to
        finish, from any client.

        @return: its final counts: C{group}, C{state} (C{"finished"}),
            C{members}, C{done}, C{failed}, C{cancelled}, C{pending} (0).
        @raise NotFinished: it had not finished when the wait ended; its
            C{state} has the counts so far.
        @raise GroupUnknown: no such group, or it is forgotten.
        """
        state = self._wait_on(
            "wait_group",
            self._conn.group_waits,
            group,
            timeout,
            lambda ms: outcomes.encode_group(GroupOp.WAIT, group, ms),
        )
        return awaits.finished_group(state)

    def submit_group(self, tasks: Iterable[Task], window: int = DEFAULT_WINDOW) -> int:
        """
        Submit C{tasks} (as L{submit_many} takes them) as one group: open
        it, submit each into it, close it.  Wait for it with L{wait_group}.

        @return: the group's id.
        @raise DaemonError: a task was refused (its C{results} hold every
            task's id or error); the group is closed with the others.
        """
        group = self.open_group()
        plain = Options(group=group)
        try:
            self.submit_many(
                (
                    (task[0], task[1], plain)
                    if len(task) == 2
                    else (task[0], task[1], attrs.evolve(task[2], group=group))
                    for task in tasks
                ),
                window=window,
            )
        finally:
            self.close_group(group)
        return group

    # -- live events --------------------------------------------------------------------

    def events(
        self,
        queues: Iterable[str] = (),
        types: Iterable[str | bytes] = (),
        kinds: Iterable[str] = (),
        timeout: float | None = None,
    ) -> EventStream:
        """
        Watch the daemon's task lifecycle events as they happen, those of
        C{queues}, task C{types} and event C{kinds} (each empty: any; kinds
        are C{quicx.protocol.monitor.EVENT_KINDS}).  The watch starts here.

            with client.events(queues=["mail"], kinds=["failed"]) as events:
                for event in events:
                    print(event["task"], event["reason"])

        @return: an iterator of dicts, each an event as the daemon's events
            files write it (C{t} in epoch milliseconds, C{event}, C{task},
            C{type}, C{queue}, C{worker}...), and C{{"event": "missed",
            "count": N}} when N events were dropped because this client read
            too slowly.  Its C{next()} raises C{TimeoutError} when no event
            comes within C{timeout} seconds (C{None}: it waits as long as it
            takes).  Closing it (or leaving its C{with} block, or dropping
            it) ends the watch; one watch at a time per client.
        @raise QueueFull: the daemon has C{[events] max_subscribers} watching.
        @raise ValueError: a bad queue name, an empty type, an unknown kind.
        @raise NeedsVersion2: the daemon speaks version 1.
        """
        frame = watching.encode_watch(queues, types, kinds)
        with self._lock:
            self._feed.watching = True  # its EVENTS may come before its answer
            try:
                self._info("events", frame)
            except BaseException:
                self._feed.stop()
                raise
        return EventStream(self, timeout)

    def _next_event(self, timeout: float | None) -> dict[str, Any]:
        wait = FOREVER if timeout is None else timeout
        with self._lock:
            deadline = time.monotonic() + wait
            while (item := self._feed.next()) is None:
                if not self._feed.watching:
                    raise QuicxError("this client no longer watches events")
                try:
                    unexpected = self._pump(deadline)
                except TimeoutError:
                    if timeout is not None:
                        raise
                    deadline = time.monotonic() + wait
                    continue
                if unexpected is not None:
                    self._drop()
                    raise QuicxError(f"unexpected {_name(unexpected)} among events")
            return item

    def _unwatch(self) -> None:
        """Stop watching; the daemon's answer is read by the next call."""
        with self._lock:
            was_watching = self._feed.watching
            self._feed.stop()
            if was_watching and self._sock is not None:
                with contextlib.suppress(ConnectionLost):
                    self._request(Request.info("events", lambda: watching.STOP_FRAME))


def _name(event: object) -> str:
    """What came, in a message: the message's type, for a reply nobody asked for."""
    return type(event.message if isinstance(event, Unanswered) else event).__name__


class EventStream:
    """
    The live events of one L{QuicxClient.events} call: an iterator, and a
    context manager that ends the watch.
    """

    def __init__(self, client: QuicxClient, timeout: float | None) -> None:
        self._client = client
        self._timeout = timeout
        self._closed = False

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._closed:
            raise StopIteration
        return self._client._next_event(self._timeout)

    @property
    def waiting(self) -> int:
        """Events read already, that the next C{next()} calls hand out without waiting."""
        return len(self._client._feed)

    def close(self) -> None:
        """End the watch (the client stays connected)."""
        if not self._closed:
            self._closed = True
            self._client._unwatch()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
