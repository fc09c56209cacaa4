"""
The blocking client, for code without a reactor: scripts, Django or Flask
views, Spark executors.

    with QuicxClient("tcp:127.0.0.1:16381") as client:
        task_id = client.submit("send_email", b'{"to": "user@gmail.com"}')
        client.wait(task_id, timeout=30)       # raises TaskFailed on FAILED
        ids = client.submit_many(("resize", p) for p in pictures)

One client keeps one connection open and reuses it; it reconnects on the next
call after the connection drops.  Calls are serialized by a lock, so one
client may be shared by threads; threads that submit in parallel are faster
with a client each.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterable

from service_identity import VerificationError

from quicx.clients.address import CLIENT_MAX_LENGTH, DEFAULT_ADDRESS, as_bytes, parse_address
from quicx.clients.outcomes import DEFAULT_KEEP, OutcomeBook, outcome_of
from quicx.protocol import wire
from quicx.protocol.errors import ConnectionLost, DaemonError, QuicxError, error_from
from quicx.protocol.frames import Frame, FrameParser

DEFAULT_WINDOW = 1000
"""SUBMITs sent ahead of their OKs by L{QuicxClient.submit_many}."""


class QuicxClient:
    """
    A blocking producer and monitor client.

    @ivar timeout: seconds any one call may wait for the daemon.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        timeout: float = 30.0,
        keep_outcomes: int = DEFAULT_KEEP,
    ) -> None:
        self.address = address
        _, self._sockaddr, self._tls = parse_address(address)
        self._context = self._tls.context() if self._tls is not None else None
        self.timeout = timeout
        self._keep = keep_outcomes
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._parser = FrameParser(CLIENT_MAX_LENGTH, check_types=False)
        self._inbox: deque[wire.Message] = deque()
        self._book = OutcomeBook(keep_outcomes)

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
            self._parser = FrameParser(CLIENT_MAX_LENGTH, check_types=False)
            self._inbox.clear()
        return self._sock

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

    def _next_reply(self, deadline: float) -> wire.Message:
        """The next message that answers a request."""
        while (message := self._pump(deadline)) is None:
            pass
        return message

    def _pump(self, deadline: float) -> wire.Message | None:
        """
        Read one message: file an outcome, answer a heartbeat (and return
        C{None}), or return anything else.
        """
        message = self._read(deadline)
        settled = outcome_of(message)
        if settled is not None:
            self._book.arrived(*settled)
        elif isinstance(message, wire.Heartbeat):
            self._send(wire.PONG_FRAME)
        elif not isinstance(message, wire.Pong):
            return message
        return None

    def _read(self, deadline: float) -> wire.Message:
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
                self._inbox.append(wire.decode(event.message_type, event.payload))
        return self._inbox.popleft()

    # -- requests ----------------------------------------------------------------------

    def submit(self, task_type: str | bytes, payload: str | bytes) -> int:
        """
        Submit one task; return its id.

        @raise QueueFull, PayloadTooLarge, UnknownTaskType, InvalidMessage:
            the daemon refused it.
        @raise ConnectionLost: the daemon could not be reached or went away.
        """
        with self._lock:
            self._send_submits([(task_type, payload)])
            (result,) = self._read_replies(1)
        if isinstance(result, Exception):
            raise result
        return result

    def submit_many(
        self,
        tasks: Iterable[tuple[str | bytes, str | bytes]],
        return_exceptions: bool = False,
        window: int = DEFAULT_WINDOW,
    ) -> list[int | DaemonError]:
        """
        Submit many tasks over the one connection, pipelined: SUBMITs go in
        batches of C{window}, and each batch is sent before the OKs of the one
        before it are read, so the daemon and this client work at once.

        @param return_exceptions: put each refused task's L{DaemonError} in
            its place in the result instead of raising the first one.
        @return: task ids (or errors), in the order of C{tasks}.
        @raise DaemonError: the first refusal, after every reply was read;
            its C{results} attribute holds the whole list.
        """
        results: list[int | DaemonError] = []
        batch: list[tuple[str | bytes, str | bytes]] = []
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

    def _send_submits(self, batch: list[tuple[str | bytes, str | bytes]]) -> None:
        self._send(b"".join(wire.encode_submit(as_bytes(t), as_bytes(p)) for t, p in batch))

    def _read_replies(self, count: int) -> list[int | DaemonError]:
        """Read the answers to C{count} SUBMITs: task ids, or the refusals."""
        deadline = time.monotonic() + self.timeout
        results: list[int | DaemonError] = []
        for _ in range(count):
            reply = self._next_reply(deadline)
            if isinstance(reply, wire.Ok):
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
            self._send(wire.STATS_FRAME)
            reply = self._next_reply(time.monotonic() + self.timeout)
        if not isinstance(reply, wire.StatsResponse):
            raise QuicxError(f"unexpected {type(reply).__name__} for STATS")
        return reply
