"""
The matrix's load, in threads of the matrix's process: producers that submit
with idempotency keys at a steady rate and follow the primary, raw version-2
workers that record every delivery and every outcome's answer, a poller of
each daemon's role, and the final read of every acknowledged task.

Everything appends to one L{Trace}.  Producers and workers follow the
primary themselves (an C{ERROR 0x0C} names it; a connection that fails
moves on to the next address of the shard), so what is measured is the
shard, whatever the stock clients do.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from attrs import define, field

from quicx.clients.blocking import QuicxClient
from quicx.clients.connection import client_parser
from quicx.protocol import codec, link, outcomes, registry, taskflow, wire
from quicx.protocol.errors import (
    NotFinished,
    NotPrimary,
    QuicxError,
    TaskUnknown,
)
from quicx.protocol.frames import Frame
from tools.failover.trace import (
    APPLIED,
    DONE,
    OTHER,
    PENDING,
    REFUSED,
    STALE,
    UNANSWERED,
    UNKNOWN,
    Ack,
    Delivery,
    Final,
    Outcome,
    RoleSample,
    Trace,
)

TASK_TYPE = "matrix"
QUEUE = "matrix"
PROBE = codec.frame(codec.MessageType.STATS)
"""Sent after each ACK: its answer comes after the ACK's error, if the ACK had one."""


@define
class Follower:
    """Which of the shard's addresses to use next: the named primary, else the next one."""

    addresses: Sequence[str]
    current: str = ""
    index: int = 0

    def __attrs_post_init__(self) -> None:
        self.current = self.addresses[0]

    def redirect(self, primary: str) -> None:
        """An C{ERROR 0x0C}: go to C{primary} (C{host:port}), or on to the next address."""
        if primary:
            self.current = f"tcp:{primary}"
        else:
            self.rotate()

    def rotate(self) -> None:
        self.index = (self.index + 1) % len(self.addresses)
        self.current = self.addresses[self.index]


class Producer(threading.Thread):
    """
    Submits C{key}s C{prefix.0}, C{prefix.1}, ... at C{rate} per second, each
    with its key as idempotency key and payload, again until acknowledged.
    """

    def __init__(
        self,
        prefix: str,
        addresses: Sequence[str],
        rate: float,
        trace: Trace,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"producer-{prefix}", daemon=True)
        self.prefix, self.rate, self.trace, self.stop = prefix, rate, trace, stop
        self.follower = Follower(addresses)
        self.errors: deque[str] = deque(maxlen=20)

    def run(self) -> None:
        client: QuicxClient | None = None
        sequence = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            key = f"{self.prefix}.{sequence}"
            while not self.stop.is_set():
                try:
                    if client is None:
                        client = QuicxClient(self.follower.current, timeout=2.0)
                    task_id = client.submit(TASK_TYPE, key, queue=QUEUE, key=key, keep_result=True)
                except NotPrimary as e:
                    self.follower.redirect(e.primary)
                except (QuicxError, OSError) as e:
                    self.errors.append(f"{self.follower.current}: {e}")
                    self.follower.rotate()
                else:
                    self.trace.acks.append(Ack(key, task_id, time.time()))
                    break
                if client is not None:
                    client.close()
                    client = None
                self.stop.wait(0.05)
            sequence += 1
            next_at += 1 / self.rate
            self.stop.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - 1.0)  # no burst to catch up a long outage
        if client is not None:
            client.close()


@define
class Sent:
    """An ACK sent, waiting for its probe's answer."""

    key: str
    task_id: int
    token: int
    sent: float
    error: int | None = None


@define
class Held:
    """A task this worker holds, and when its work is done."""

    task: taskflow.Task
    due: float


class Disconnect(Exception):
    """Leave this connection (an C{ERROR 0x0C}): go to C{primary}, or on when it is empty."""

    def __init__(self, primary: str) -> None:
        self.primary = primary


@define(eq=False)
class Worker:
    """
    A raw version-2 worker: HELLO, READY on the matrix's queue, and for each
    TASK (recorded as a L{Delivery}) an ACK after C{work} seconds, its result
    C{"KEY TOKEN"} (the task's key, the delivery's token), followed by a
    STATS probe: an ERROR before the probe's answer is the ACK's (L{STALE}
    for 0x08, else L{REFUSED}); none, and the ACK was L{APPLIED}; the
    connection gone first, L{UNANSWERED}.
    """

    name: str
    addresses: Sequence[str]
    trace: Trace
    stop: threading.Event
    work: float = 0.02
    credits: int = 4
    idle: float = 8.0
    follower: Follower = field(init=False)
    errors: deque[str] = field(factory=lambda: deque(maxlen=20))
    thread: threading.Thread | None = None

    def __attrs_post_init__(self) -> None:
        self.follower = Follower(self.addresses)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name=f"worker-{self.name}", daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with socket.create_connection(self._address(), timeout=2.0) as sock:
                    self._serve(sock)
                    continue
            except Disconnect as leave:
                self.follower.redirect(leave.primary)
                if leave.primary:
                    continue  # straight to the primary named
                self.stop.wait(0.1)  # no primary known: not a busy loop over the shard
                continue
            except OSError as e:
                self.errors.append(f"{self.follower.current}: {e}")
            self.follower.rotate()
            self.stop.wait(0.1)

    def _address(self) -> tuple[str, int]:
        host, _, port = self.follower.current.removeprefix("tcp:").rpartition(":")
        return host, int(port)

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(0.05)
        parser = client_parser()
        sent: deque[Sent] = deque()
        held: list[Held] = []
        greeted = False
        sock.sendall(link.encode_hello(name=f"matrix-{self.name}"))
        heard = time.monotonic()
        try:
            while not self.stop.is_set():
                try:
                    data = sock.recv(1 << 16)
                except TimeoutError:
                    data = None
                if data == b"":
                    raise ConnectionError("the daemon closed the connection")
                if data:
                    heard = time.monotonic()
                    for event in parser.feed(data):
                        if isinstance(event, Frame):
                            message = registry.decode(event.message_type, event.payload)
                            if self._take(sock, message, sent, held, greeted):
                                greeted = True
                now = time.monotonic()
                due = [h for h in held if h.due <= now]
                for h in due:
                    held.remove(h)
                    self._ack(sock, h.task, sent)
                if not sent and now - heard > self.idle:
                    return  # a silent connection: open another (to the same address)
        except OSError as e:
            self.errors.append(f"{self.follower.current}: {e}")
            raise
        finally:
            answered = time.time()
            for s in sent:
                self._outcome(s, answered, UNANSWERED)

    def _take(
        self,
        sock: socket.socket,
        message: object,
        sent: deque[Sent],
        held: list[Held],
        greeted: bool,
    ) -> bool:
        """Handle one message; whether the handshake is done (HELLO answered)."""
        if isinstance(message, link.Info) and not greeted:
            sock.sendall(taskflow.encode_ready(self.credits, [QUEUE]))
            return True
        if isinstance(message, taskflow.Task):
            key = bytes(message.payload).decode()
            self.trace.deliveries.append(
                Delivery(key, message.task_id, message.token, time.time(), self.name)
            )
            held.append(Held(message, time.monotonic() + self.work))
        elif isinstance(message, wire.Heartbeat):
            sock.sendall(link.PONG_FRAME)
        elif isinstance(message, wire.Error):
            if not sent:
                if message.code == codec.ErrorCode.NOT_PRIMARY:
                    raise Disconnect(message.message)
                self.errors.append(f"{self.follower.current}: {message.message}")
            elif sent[0].error is None:
                sent[0].error = message.code
            else:  # the probe refused too: the ACK's answer was its error
                self._resolve(sent.popleft())
        elif isinstance(message, wire.StatsResponse) and sent:
            self._resolve(sent.popleft())
        return greeted

    def _ack(self, sock: socket.socket, task: taskflow.Task, sent: deque[Sent]) -> None:
        key = bytes(task.payload).decode()
        result = taskflow.Result(taskflow.ResultKind.TEXT, f"{key} {task.token}".encode())
        sent.append(Sent(key, task.task_id, task.token, time.time()))
        sock.sendall(outcomes.encode_ack(task.task_id, task.token, result) + PROBE)

    def _resolve(self, s: Sent) -> None:
        if s.error is None:
            verdict = APPLIED
        else:
            verdict = STALE if s.error == codec.ErrorCode.STALE else REFUSED
        self._outcome(s, time.time(), verdict)

    def _outcome(self, s: Sent, answered: float, verdict: str) -> None:
        self.trace.outcomes.append(
            Outcome(s.key, s.task_id, s.token, s.sent, answered, verdict, self.name)
        )


class RolePoller(threading.Thread):
    """Every C{interval} seconds, each daemon's role (C{roles()}: name → role), into the trace."""

    def __init__(
        self,
        roles: Callable[[], dict[str, str]],
        trace: Trace,
        stop: threading.Event,
        interval: float = 0.2,
    ) -> None:
        super().__init__(name="roles", daemon=True)
        self.roles, self.trace, self.stop, self.interval = roles, trace, stop, interval

    def run(self) -> None:
        while not self.stop.is_set():
            for daemon, role in self.roles().items():
                self.trace.roles.append(RoleSample(daemon, role, time.time()))
            self.stop.wait(self.interval)


def final_state(client: QuicxClient, key: str, task_ids: Sequence[int]) -> tuple[str, int]:
    """
    What the primary says of C{key}, acknowledged under C{task_ids} (more
    than one when a retried SUBMIT was acknowledged again under a new id):
    done, and the token of its kept result, if any is (a result names its
    key: an id that now names another task's outcome is no sign of this
    one), else pending if any is, else unknown.
    """
    states = []
    for task_id in task_ids:
        try:
            result = client.result(task_id, timeout=0)
        except TaskUnknown:
            states.append(UNKNOWN)
        except NotFinished:
            states.append(PENDING)
        except QuicxError as e:
            if isinstance(e, OSError | NotPrimary):
                raise
            states.append(OTHER)
        else:
            named, _, token = str(result).rpartition(" ")
            if named == key:
                return DONE, int(token)
            states.append(UNKNOWN)
    for state in (PENDING, OTHER):
        if state in states:
            return state, 0
    return UNKNOWN, 0


def owned_ids(acks: Sequence[Ack]) -> dict[str, list[int]]:
    """
    Each acknowledged key's task ids, each id given to the key acknowledged
    last under it: a daemon that gave an id twice had forgotten the first
    task (the earlier key keeps no id, and is lost).
    """
    owner = {ack.task_id: ack.key for ack in sorted(acks, key=lambda a: a.at)}
    ids: dict[str, list[int]] = {ack.key: [] for ack in acks}
    for task_id, key in owner.items():
        ids[key].append(task_id)
    return ids


def read_finals(trace: Trace, address: str, deadline: float) -> None:
    """
    Fill C{trace.finals} from the primary at C{address}, asking again for
    the pending ones (the workers still drain) until none is, or C{deadline}
    (a C{time.monotonic()}).
    """
    ids = owned_ids(trace.acks)
    waiting = list(ids)
    with QuicxClient(address, timeout=10.0) as client:
        while waiting:
            for key in waiting:
                state, token = final_state(client, key, ids[key])
                trace.finals[key] = Final(key, state, token)
            waiting = [k for k in waiting if trace.finals[k].state == PENDING]
            if not waiting or time.monotonic() > deadline:
                return
            time.sleep(0.5)


@define(eq=False)
class Load:
    """
    The whole load on a shard: C{producers} at C{rate} each, C{workers}, the
    role poller; L{start} and L{finish} (producers stop, the workers drain,
    the final state is read) and L{close}.
    """

    row: str
    addresses: Sequence[str]
    roles: Callable[[], dict[str, str]]
    producers: int = 2
    rate: float = 40.0
    workers: int = 3
    work: float = 0.02
    """Seconds each worker holds each task before its ACK."""
    trace: Trace = field(factory=Trace)
    started: float = 0.0
    stopped: float = 0.0
    _producing: threading.Event = field(init=False, factory=threading.Event)
    _working: threading.Event = field(init=False, factory=threading.Event)
    _threads: list[Producer] = field(init=False, factory=list)
    _workers: list[Worker] = field(init=False, factory=list)
    _poller: RolePoller | None = field(init=False, default=None)

    def start(self) -> None:
        self.started = time.time()
        self._poller = RolePoller(self.roles, self.trace, self._working)
        self._poller.start()
        for n in range(self.workers):
            worker = Worker(f"w{n}", self.addresses, self.trace, self._working, self.work)
            worker.start()
            self._workers.append(worker)
        for n in range(self.producers):
            producer = Producer(f"{self.row}.p{n}", self.addresses, self.rate, self.trace,
                                self._producing)  # fmt: skip
            producer.start()
            self._threads.append(producer)

    def stop_producing(self) -> None:
        if not self._producing.is_set():
            self._producing.set()
            for producer in self._threads:
                producer.join(30)
            self.stopped = time.time()

    def finish(self, primary: str, drain: float = 60.0) -> None:
        """Stop producing; read every task's final state from C{primary} while the workers drain."""
        self.stop_producing()
        read_finals(self.trace, primary, time.monotonic() + drain)

    def close(self) -> None:
        """Stop every thread (the producers first)."""
        self.stop_producing()
        self._working.set()
        for worker in self._workers:
            if worker.thread is not None:
                worker.thread.join(30)
        if self._poller is not None:
            self._poller.join(30)

    def errors(self) -> list[str]:
        """The last errors producers and workers met (for a row's notes)."""
        found = [e for producer in self._threads for e in producer.errors]
        return found + [e for worker in self._workers for e in worker.errors]
