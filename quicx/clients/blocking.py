"""
The blocking client, for code without a reactor: scripts, Django or Flask
views, Spark executors.

    with QuicxClient("tcp:127.0.0.1:16381") as client:
        task_id = client.submit("send_email", b'{"to": "user@gmail.com"}')
        client.wait(task_id, timeout=30)       # raises TaskFailed on FAILED
        ids = client.submit_many(("resize", p) for p in pictures)
        client.submit("charge", b"...", queue="billing", priority=9, key="order-42")

One client keeps one connection open and reuses it; it reconnects on the next
call after the connection drops.  It speaks protocol version 2, or version 1
with a daemon that speaks only that (see L{quicx.clients.requests}).  Calls
are serialized by a lock, so one client may be shared by threads; threads that
submit in parallel are faster with a client each.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from service_identity import VerificationError

from quicx.clients import requests
from quicx.clients.address import CLIENT_MAX_LENGTH, DEFAULT_ADDRESS, parse_address
from quicx.clients.outcomes import DEFAULT_KEEP, OutcomeBook, outcome_of
from quicx.clients.requests import Options
from quicx.protocol import v2, wire
from quicx.protocol.errors import ConnectionLost, DaemonError, QuicxError, error_from
from quicx.protocol.frames import Frame, FrameParser

Task = tuple[str | bytes, str | bytes] | tuple[str | bytes, str | bytes, Options]
"""What L{QuicxClient.submit_many} takes: C{(type, payload)}, or with L{Options}."""

DEFAULT_WINDOW = 1000
"""SUBMITs sent ahead of their OKs by L{QuicxClient.submit_many}."""


class QuicxClient:
    """
    A blocking producer and monitor client.

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
        if protocol not in (1, 2):
            raise ValueError(f"protocol is 1 or 2, not {protocol}")
        self.address = address
        self.protocol = protocol
        self.version = protocol
        self.server: dict[str, object] = {}
        _, self._sockaddr, self._tls = parse_address(address)
        self._context = self._tls.context() if self._tls is not None else None
        self.timeout = timeout
        self._keep = keep_outcomes
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._parser = self._new_parser()
        self._inbox: deque[object] = deque()
        self._book = OutcomeBook(keep_outcomes)

    @staticmethod
    def _new_parser() -> FrameParser:
        return FrameParser(CLIENT_MAX_LENGTH, check_types=False, v2_max_length=CLIENT_MAX_LENGTH)

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
            self._parser = self._new_parser()
            self._inbox.clear()
            if self.protocol == v2.VERSION:
                self._hello()
        return self._sock

    def _hello(self) -> None:
        """Open a version-2 connection with HELLO; fall back to 1 if refused."""
        self._send(requests.HELLO)
        answer = self._read(time.monotonic() + self.timeout)
        if requests.refuses_version_2(self._parser.version, answer):
            self.version = wire.PROTOCOL_VERSION
        elif isinstance(answer, v2.Info) and isinstance(answer.document, dict):
            self.version = v2.VERSION
            self.server = answer.document
        else:
            self._drop()
            raise QuicxError(f"unexpected {type(answer).__name__} for HELLO")

    def _drop(self) -> None:
        """Forget the connection; pending outcomes become unknown."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._book.lose_all()

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

    def _next_reply(self, deadline: float) -> object:
        """The next message that answers a request."""
        while (message := self._pump(deadline)) is None:
            pass
        return message

    def _pump(self, deadline: float) -> object | None:
        """
        Read one message: file an outcome, answer a heartbeat (and return
        C{None}), or return anything else.
        """
        message = self._read(deadline)
        settled = outcome_of(message)
        if settled is not None:
            self._book.arrived(*settled)
        elif isinstance(message, wire.Heartbeat):
            self._send(v2.PONG_FRAME if self._parser.version == v2.VERSION else wire.PONG_FRAME)
        elif not isinstance(message, wire.Pong):
            return message
        return None

    def _read(self, deadline: float) -> object:
        while not self._inbox:
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
            for event in self._parser.feed(data):
                if not isinstance(event, Frame):
                    self._drop()
                    raise QuicxError(f"{self.address} sent a bad frame: {event.reason}")
                self._inbox.append(
                    requests.decode(self._parser.version, event.message_type, event.payload)
                )
        return self._inbox.popleft()

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
        @raise QueueFull, PayloadTooLarge, UnknownTaskType, InvalidMessage:
            the daemon refused it.
        @raise NeedsVersion2: an option was given to a version-1 daemon.
        @raise ConnectionLost: the daemon could not be reached or went away.
        """
        options = Options(queue, priority, key, fairness_key)
        with self._lock:
            self._send_submits([(task_type, payload, options)])
            (result,) = self._read_replies(1)
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

        @param tasks: C{(type, payload)}, or C{(type, payload, Options(...))}
            for a queue, priority or keys.
        @param return_exceptions: put each refused task's L{DaemonError} in
            its place in the result instead of raising the first one.
        @return: task ids (or errors), in the order of C{tasks}.
        @raise DaemonError: the first refusal, after every reply was read;
            its C{results} attribute holds the whole list.
        """
        results: list[int | DaemonError] = []
        batch: list[Task] = []
        unanswered = 0  # SUBMITs of the previous batch, sent and not yet read
        with self._lock:
            for task in tasks:
                batch.append(task)
                if len(batch) == window:
                    self._send_submits(batch)
                    results += self._read_replies(unanswered)
                    unanswered, batch = len(batch), []
            if batch:
                self._send_submits(batch)
            results += self._read_replies(unanswered + len(batch))
        if not return_exceptions:
            for result in results:
                if isinstance(result, DaemonError):
                    result.results = results
                    raise result
        return results

    def _send_submits(self, batch: list[Task]) -> None:
        self._connection()  # its version decides the encoding
        self._send(requests.submit_frames(self.version, batch))

    def _read_replies(self, count: int) -> list[int | DaemonError]:
        """Read the answers to C{count} SUBMITs: task ids, or the refusals."""
        deadline = time.monotonic() + self.timeout
        results: list[int | DaemonError] = []
        for _ in range(count):
            reply = self._next_reply(deadline)
            if isinstance(reply, requests.OK_TYPES):
                self._book.expect(reply.task_id)
                results.append(reply.task_id)
            elif isinstance(reply, wire.Error):
                results.append(error_from(reply))
            else:
                self._drop()
                raise QuicxError(f"unexpected {type(reply).__name__} for a SUBMIT")
        return results

    def wait(self, task_id: int, timeout: float | None = None) -> None:
        """
        Block until the outcome of C{task_id} (submitted by this client)
        arrives.

        @raise TaskFailed: a worker reported it FAILED (C{.reason}).
        @raise OutcomeUnknown: the connection dropped before the outcome came.
        @raise TimeoutError: no outcome within C{timeout} (default: the
            client's); the task is still pending and may be waited for again.
        @raise KeyError: this client did not submit C{task_id}, or its
            outcome was already taken.
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._lock:
            while self._book.pending(task_id):
                # Nothing but outcomes and heartbeats is owed to us here.
                try:
                    unexpected = self._pump(deadline)
                except ConnectionLost:
                    break  # the outcome is now filed as unknown
                if unexpected is not None:
                    self._drop()
                    raise QuicxError(f"unexpected {type(unexpected).__name__} while waiting")
            outcome = self._book.take(task_id)
        if outcome is not None:
            raise outcome

    def submit_and_wait(
        self, task_type: str | bytes, payload: str | bytes, timeout: float | None = None
    ) -> int:
        """Submit a task, wait for its outcome, return its id."""
        task_id = self.submit(task_type, payload)
        self.wait(task_id, timeout)
        return task_id

    def stats(self) -> wire.StatsResponse:
        """The daemon's 28-byte STATS_RESPONSE, decoded."""
        with self._lock:
            self._connection()
            self._send(v2.STATS_FRAME if self.version == v2.VERSION else wire.STATS_FRAME)
            reply = self._next_reply(time.monotonic() + self.timeout)
        if not isinstance(reply, wire.StatsResponse):
            raise QuicxError(f"unexpected {type(reply).__name__} for STATS")
        return reply

    # -- version 2 ----------------------------------------------------------------------

    def _info(self, what: str, frame: bytes) -> Any:
        """Send a version-2 request; its INFO document, or the error it got."""
        with self._lock:
            self._connection()
            requests.needs_version_2(self.version, what)
            self._send(frame)
            reply = self._next_reply(time.monotonic() + self.timeout)
        if isinstance(reply, v2.Info):
            return reply.document
        if isinstance(reply, wire.Error):
            raise error_from(reply)
        raise QuicxError(f"unexpected {type(reply).__name__} for {what}")

    def cancel(self, task_id: int) -> dict[str, Any]:
        """
        Cancel a queued task (its producer hears CANCELLED).

        @raise NotFound: no such queued or running task.
        @raise Conflict: a worker is running it (it is not interrupted).
        @raise Forbidden: another client submitted it and this one is no admin.
        """
        document: dict[str, Any] = self._info("cancel", v2.encode_cancel(task_id))
        return document

    def queues(self) -> list[dict[str, Any]]:
        """Every queue: name, depth, paused, workers, priorities, oldest_age..."""
        found: list[dict[str, Any]] = self._info("queues", v2.QUEUES_FRAME)
        return found

    def peek(self, queue: str, count: int = 10) -> list[dict[str, Any]]:
        """The next C{count} tasks of C{queue}, in dispatch order, without taking them."""
        found: list[dict[str, Any]] = self._info("peek", v2.encode_peek(queue, count))
        return found

    def task(self, task_id: int) -> dict[str, Any]:
        """One task's state and, while it waits, why (see docs/protocol.md)."""
        document: dict[str, Any] = self._info("task", v2.encode_inspect(task_id))
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
        frame = v2.encode_queue_action(requests.QUEUE_ACTIONS[action], queue)
        document: dict[str, Any] = self._info(action, frame)
        return document
