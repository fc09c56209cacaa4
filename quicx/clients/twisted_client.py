"""
The Twisted producer client.

    from twisted.internet.endpoints import clientFromString
    from quicx.clients.twisted_client import connect

    client = await connect(reactor, "tcp:127.0.0.1:16381")
    task_id = await client.submit("send_email", b'{"to": "user@gmail.com"}')
    await client.outcome(task_id)        # its result; raises TaskFailed if a worker failed it
    await client.result(task_id, timeout=60)   # any task's, kept or running, from any client
    await client.watch(print, kinds=["failed"])  # live lifecycle events, each a dict

Every call returns a L{Deferred}.  Any number of requests may be outstanding
on one connection: the daemon answers them in order.  For a long-lived service
that must survive daemon restarts, use L{ProducerService}.

The connection speaks protocol version 2 (queues, priorities, keys, delays,
retries, cancel, introspection, dead letters, schedules, results, shared
data, groups), or version 1 with a daemon that speaks only that: it opens
with HELLO, and requests made before the answer wait for it.

A wait on the daemon (L{QuicxClientProtocol.result}, C{wait_group}) is
answered at once or much later, between other answers; only a refusal
(ERROR) comes in order.  To tell a refusal of the wait from one of the next
request, each wait is sent with a HEARTBEAT behind it, whose PONG (in order)
says the wait was taken.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar, Unpack, cast

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.endpoints import connectProtocol
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory, connectionDone
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from quicx.clients import awaits, failover, operations, tracing, watching
from quicx.clients.address import (
    CLIENT_MAX_LENGTH,
    CLIENT_TYPE_LIMITS,
    DEFAULT_ADDRESS,
    one_address,
)
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Event,
    Greeted,
    LiveEvents,
    Progressed,
    Rejected,
    Request,
    Retried,
    Send,
    Settled,
    Unanswered,
    same,
)
from quicx.clients.failover import FAILOVER_DEADLINE, Shard
from quicx.clients.operations import SubmitKeywords
from quicx.clients.outcomes import (
    DEFAULT_KEEP,
    OutcomeBook,
    RetryListener,
    RetryNotice,
    value_of,
)
from quicx.clients.progress import Listener, ProgressReport
from quicx.clients.requests import Options
from quicx.net.framer import FrameReceiver, set_no_delay

# Re-exported: the clients' name for it since before it moved down.
from quicx.net.tls import client_endpoint as endpoint_for
from quicx.protocol import codec, monitor, wire
from quicx.protocol.errors import ConnectionLost, NotPrimary, QuicxError
from quicx.protocol.wire import ErrorCode

T = TypeVar("T")

EventListener = Callable[[dict[str, Any]], object]
"""What L{QuicxClientProtocol.watch} calls with each live event."""


class QuicxClientProtocol(FrameReceiver):
    """
    A producer (and monitor) connection: a pump of frames into a
    L{ClientConnection}, which owns the handshake, the order of the
    replies, outcomes, waits and progress; its events fire Deferreds.

    @ivar keep_outcomes: how many outcomes nobody has asked for are kept.
    @ivar version: the protocol version of the connection, once HELLO is
        answered (until then, the one asked for).
    @ivar server: what the daemon said of itself in answer to HELLO.
    """

    log = Logger()
    maxLength = CLIENT_MAX_LENGTH
    v2MaxLength = CLIENT_MAX_LENGTH
    v2TypeLimits = CLIENT_TYPE_LIMITS
    checkTypes = False

    def __init__(self, keep_outcomes: int = DEFAULT_KEEP, protocol: int = 2) -> None:
        self._conn = ClientConnection(protocol, keep_outcomes)
        # The Deferred of each request sent or held, until its answer.
        self._replies: dict[Request[Any], Deferred[Any]] = {}
        # Waiting for the answer to HELLO (see greeted).
        self._greeters: list[Deferred[QuicxClientProtocol]] = []
        self._waiters: dict[int, list[Deferred[Any]]] = {}
        self._watchers: dict[int, list[RetryListener]] = {}
        # The answers of the waits sent (result, wait_group), until they fire.
        self._answers: set[Deferred[Any]] = set()
        # Called with each live event while this connection watches them.
        self._event_listener: EventListener | None = None
        self._closed: Failure | None = None

    @property
    def version(self) -> int:
        return self._conn.version

    @property
    def server(self) -> dict[str, Any]:
        return self._conn.server

    @property
    def _book(self) -> OutcomeBook:
        return self._conn.book

    def connectionMade(self) -> None:
        super().connectionMade()
        set_no_delay(self.transport)
        hello = self._conn.connect()
        if hello:
            self.transport.write(hello)

    def greeted(self) -> Deferred[QuicxClientProtocol]:
        """
        Fires with this protocol once its version is known (HELLO answered:
        see C{version} and C{server}); fails with L{ConnectionLost} if the
        connection closes first.
        """
        if self._closed is not None:
            return fail(self._closed)
        if self._conn.greeted:
            return succeed(self)
        greeter: Deferred[QuicxClientProtocol] = Deferred()
        self._greeters.append(greeter)
        return greeter

    # -- requests -----------------------------------------------------------------

    def _request(self, request: Request[T]) -> Deferred[T]:
        """
        Send C{request} (or hold it until HELLO is answered); fires with
        the value it makes of its answer.
        """
        reply = self._send(request)
        return reply if request.finish is same else reply.addCallback(request.finish)

    def _send(self, request: Request[Any]) -> Deferred[Any]:
        """Send C{request} (or hold it until HELLO is answered); fires with its answer."""
        if self._closed is not None:
            return fail(self._closed)
        try:
            data = self._conn.send(request)
        except (QuicxError, ValueError, TypeError) as e:
            return fail(e)
        reply: Deferred[Any] = Deferred()
        self._replies[request] = reply
        if data:
            self.transport.write(data)
        return reply

    def submit(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        **options: Unpack[SubmitKeywords],
    ) -> Deferred[int]:
        """
        Submit a task (options as L{quicx.clients.blocking.QuicxClient.submit};
        C{progress} is called on the reactor thread).

        @return: fires with the task id, or fails with L{QueueFull},
            L{PayloadTooLarge}, L{UnknownTaskType}, L{InvalidMessage},
            L{NotFound} or L{Conflict} (an unknown or closed C{group}),
            L{NeedsVersion2}, L{ConnectionLost}, or C{ValueError} for an
            option out of range or a malformed backoff.
        """
        operations.check_keywords(options)  # as Python does, at once
        span = tracing.submit_span(task_type, options.get("queue"))
        try:
            traced = None if span is None else (self._conn, span.trace)
            request = operations.submit(task_type, payload, options, traced)
        except (ValueError, TypeError) as e:
            if span is not None:
                span.refused(e)
            return fail(e)
        if span is None:
            return self._request(request)
        return self._request(request).addCallbacks(span.submitted, _refused, errbackArgs=(span,))

    def outcome(self, task_id: int, on_retry: RetryListener | None = None) -> Deferred[Any]:
        """
        The outcome of a task submitted on this connection.

        @param on_retry: called with a L{RetryNotice} for each failed attempt
            the daemon retries, in order (those that came before this call
            at once); the Deferred fires once, with the final outcome.
        @return: fires on DONE with the handler's return value (C{None} when
            it gave none); fails with L{TaskFailed} carrying the worker's
            reason, L{TaskCancelled}, or L{OutcomeUnknown} if the connection
            closes first.  An outcome that arrived before this call is kept
            (up to C{keep_outcomes} of them) and delivered at once.
        @raise NotSubmittedHere: (a C{KeyError}) C{task_id} was not submitted
            on this connection, or its outcome was already taken or forgotten.
        """
        kept = self._book.notices(task_id)
        if self._book.pending(task_id):
            waiter: Deferred[Any] = Deferred()
            self._waiters.setdefault(task_id, []).append(waiter)
            if on_retry is not None:
                self._watchers.setdefault(task_id, []).append(on_retry)
            result: Deferred[Any] = waiter
        else:
            outcome = self._book.take(task_id)
            try:
                result = succeed(value_of(outcome))
            except QuicxError as e:
                result = fail(e)
        if on_retry is not None:
            for notice in kept:
                self._tell(on_retry, notice)
        return result

    async def submit_and_wait(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        on_retry: RetryListener | None = None,
        **options: Any,
    ) -> int:
        """Submit a task and wait for its outcome (see L{outcome}); return its id."""
        task_id = await self.submit(task_type, payload, **options)
        await self.outcome(task_id, on_retry)
        return task_id

    def _wait(self, declare: Callable[..., Request[T]], timeout: float) -> Deferred[T]:
        """
        Send the wait C{declare} makes of its seconds, deadline and what
        its answer calls, fenced; fires with the value it makes of the answer.
        """
        timeout = awaits.wait_seconds(timeout)
        answer: Deferred[Any] = Deferred()
        wait = declare(timeout, time.monotonic() + timeout, answer.callback, True)

        def refused(failure: Failure) -> None:
            if not answer.called:
                answer.errback(failure)

        self._answers.add(answer)
        answer.addBoth(self._answered, answer)
        self._send(wait).addCallbacks(lambda _: None, refused)
        return answer.addCallback(wait.finish)

    def _answered(self, result: object, answer: Deferred[Any]) -> object:
        self._answers.discard(answer)
        return result

    def result(self, task_id: int, timeout: float = 0.0) -> Deferred[Any]:
        """
        The outcome of any task, from any client: at once if known, else
        when it finishes, within C{timeout} seconds (0: answer now). As
        L{quicx.clients.blocking.QuicxClient.result}.

        @return: fires with the handler's return value; fails with
            L{TaskFailed} (L{TaskDead}), L{TaskCancelled}, L{OutcomeForgotten},
            L{TaskUnknown}, L{NotFinished}, L{QueueFull} (too many waits),
            L{NeedsVersion2} or L{ConnectionLost}.
        """
        return self._wait(partial(operations.result, self._conn, task_id), timeout)

    def publish(self, name: str, data: str | bytes) -> Deferred[dict[str, Any]]:
        """Publish shared data (see L{quicx.clients.blocking.QuicxClient.publish})."""
        return self._request(operations.publish(self._conn, name, data))

    def unpublish(self, name: str) -> Deferred[dict[str, Any]]:
        """Delete shared data C{name}."""
        return self._request(operations.unpublish(name))

    def open_group(self) -> Deferred[int]:
        """Open a group; fires with its id (as L{quicx.clients.blocking.QuicxClient.open_group})."""
        return self._request(operations.open_group())

    def close_group(self, group: int) -> Deferred[dict[str, Any]]:
        """No more members for C{group}; fires with its state."""
        return self._request(operations.close_group(group))

    def group(self, group: int) -> Deferred[dict[str, Any]]:
        """A group's state now (see L{quicx.clients.blocking.QuicxClient.group})."""
        return self._request(operations.group(group))

    def wait_group(self, group: int, timeout: float = 0.0) -> Deferred[dict[str, Any]]:
        """
        Wait up to C{timeout} seconds for C{group} to finish; fires with its
        final counts, or fails with L{NotFinished} (with the counts so far)
        or L{GroupUnknown}.
        """
        return self._wait(partial(operations.wait_group, self._conn, group), timeout)

    async def submit_group(
        self,
        tasks: Iterable[tuple[str | bytes, str | bytes] | tuple[str | bytes, str | bytes, Options]],
    ) -> int:
        """
        Submit C{tasks}, C{(type, payload)} or C{(type, payload, Options)},
        as one group: open it, submit each into it (pipelined), close it.

        @return: the group's id.
        @raise DaemonError: a task was refused (the first refusal; the group
            is closed with the others).
        """
        group = await self.open_group()
        submits: list[Deferred[Any]] = [
            self._request(Request.submit([task])) for task in operations.into_group(tasks, group)
        ]
        answers = await DeferredList(submits, consumeErrors=True)
        await self.close_group(group)
        for ok, answer in answers:
            if not ok:
                answer.raiseException()
        return group

    def stats(self) -> Deferred[wire.StatsResponse]:
        """Fires with the daemon's L{wire.StatsResponse}."""
        return self._request(operations.stats())

    def hello(
        self, name: str, version: str, capabilities: Iterable[str] = ()
    ) -> Deferred[dict[str, Any]]:
        """
        Say who this client is (as L{quicx.clients.blocking.QuicxClient.hello},
        for this connection); fires with the daemon's answer, also kept in C{server}.
        """
        return self._request(operations.hello(self._conn, name, version, capabilities))

    def cancel(self, task_id: int) -> Deferred[dict[str, Any]]:
        """Cancel a queued task (see L{quicx.clients.blocking.QuicxClient.cancel})."""
        return self._request(operations.cancel(task_id))

    def queues(self) -> Deferred[list[dict[str, Any]]]:
        return self._request(operations.queues())

    def status(self) -> Deferred[dict[str, Any]]:
        """The daemon's status document (as L{quicx.clients.blocking.QuicxClient.status})."""
        return self._request(operations.status())

    def peek(self, queue: str, count: int = 10) -> Deferred[list[dict[str, Any]]]:
        return self._request(operations.peek(queue, count))

    def task(self, task_id: int) -> Deferred[dict[str, Any]]:
        return self._request(operations.task(task_id))

    def workers(self) -> Deferred[list[dict[str, Any]]]:
        """The connected workers (as L{quicx.clients.blocking.QuicxClient.workers})."""
        return Deferred.fromCoroutine(self._workers())

    async def _workers(self) -> list[dict[str, Any]]:
        pages = operations.WorkerPages()
        while not pages.take(await self._request(pages.request())):
            pass
        return pages.found

    def quiet(self, worker: int = 0) -> Deferred[dict[str, Any]]:
        """Quiet worker C{worker}, or all (0); needs the admin role (as the blocking client's)."""
        return self._request(operations.steer("quiet", worker))

    def terminate(self, worker: int = 0) -> Deferred[dict[str, Any]]:
        """Terminate worker C{worker}, or all (0); needs the admin role (as the blocking one)."""
        return self._request(operations.steer("terminate", worker))

    def pause(self, queue: str) -> Deferred[dict[str, Any]]:
        """Stop dispatching from C{queue}; needs the admin role (as the blocking client's)."""
        return self._request(operations.queue_action("pause", queue))

    def resume(self, queue: str) -> Deferred[dict[str, Any]]:
        return self._request(operations.queue_action("resume", queue))

    def purge(self, queue: str) -> Deferred[dict[str, Any]]:
        return self._request(operations.queue_action("purge", queue))

    def dead(self, queue: str | None = None, limit: int = 100) -> Deferred[dict[str, Any]]:
        """The dead-letter set (as L{quicx.clients.blocking.QuicxClient.dead})."""
        return self._request(operations.dead(queue, limit))

    def replay(self, task_id: int = 0, queue: str | None = None) -> Deferred[dict[str, Any]]:
        """Replay dead tasks; needs the admin role (as the blocking client's)."""
        return self._request(operations.replay(task_id, queue))

    def bulk(
        self, action: str, dry_run: bool = False, **where: Unpack[operations.BulkKeywords]
    ) -> Deferred[dict[str, Any]]:
        """A bulk action (see L{quicx.clients.blocking.QuicxClient.bulk})."""
        return self._request(operations.bulk(action, dry_run, where))

    def dead_purge(self, queue: str | None = None) -> Deferred[dict[str, Any]]:
        """Drop dead tasks; needs the admin role (as the blocking client's)."""
        return self._request(operations.dead_purge(queue))

    def schedules(self) -> Deferred[list[dict[str, Any]]]:
        return self._request(operations.schedules())

    def schedule(
        self, name: str, task_type: str | bytes, payload: str | bytes = b"", **fields: Any
    ) -> Deferred[dict[str, Any]]:
        """
        Add or replace a run-time schedule; needs the admin role. C{fields}:
        the keywords of L{quicx.clients.blocking.QuicxClient.schedule}.
        """
        return self._request(operations.schedule(name, task_type, payload, fields))

    def unschedule(self, name: str) -> Deferred[dict[str, Any]]:
        """Remove a run-time schedule; needs the admin role."""
        return self._request(operations.unschedule(name))

    def watch(
        self,
        listener: EventListener,
        queues: Iterable[str] = (),
        types: Iterable[str | bytes] = (),
        kinds: Iterable[str] = (),
    ) -> Deferred[dict[str, Any]]:
        """
        Watch the daemon's task lifecycle events as they happen, those of
        C{queues}, task C{types} and event C{kinds} (each empty: any; as
        L{quicx.clients.blocking.QuicxClient.events}).  A second watch
        replaces the first (and its listener).

        @param listener: called on the reactor thread with each event, a
            dict as the daemon's events files write it, and with
            C{{"event": "missed", "count": N}} when N events were dropped
            because this connection read too slowly.
        @return: fires with the filter the daemon took (C{queues}, C{types},
            C{kinds}); fails with L{QueueFull} (C{[events] max_subscribers}
            watch already), C{ValueError} (a bad name or kind),
            L{NeedsVersion2} or L{ConnectionLost}.
        """
        previous, self._event_listener = self._event_listener, listener

        def refused(failure: Failure) -> Failure:
            if self._event_listener is listener:
                self._event_listener = previous
            return failure

        return self._request(operations.watch(queues, types, kinds)).addErrback(refused)

    def unwatch(self) -> Deferred[None]:
        """Stop watching live events; fires once the daemon has stopped sending them."""
        self._event_listener = None
        return self._request(operations.unwatch())

    def _tell_events(self, message: monitor.Events) -> None:
        listener = self._event_listener
        if listener is None:
            return  # the tail of a watch that stopped
        for item in watching.items(message):
            try:
                listener(item)
            except Exception:
                self.log.failure("the live events listener raised")

    def close(self) -> None:
        self.transport.loseConnection()

    # -- replies ----------------------------------------------------------------------

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        self.log.error("daemon sent a frame this client refuses: {reason}", reason=reason)
        self.transport.loseConnection()

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        events: list[Event] = []
        self._conn.receive_frame(self._parser.version, message_type, payload, events)
        for event in events:
            kind = type(event)
            if kind is Answer:
                self._answer(event)  # type: ignore[arg-type]
            elif kind is Settled:
                self._deliver(event.task_id)  # type: ignore[union-attr]
            elif kind is Retried:
                self._retrying(event.task_id)  # type: ignore[union-attr]
            else:
                self._other(event)

    def _answer(self, answer: Answer) -> None:
        reply = self._replies.pop(answer.request)
        if isinstance(answer.value, Exception):
            reply.errback(answer.value)
        else:
            reply.callback(answer.value)

    def _other(self, event: Event) -> None:
        """What is not an answer nor an outcome."""
        if isinstance(event, Send):
            self.transport.write(event.data)
        elif isinstance(event, Progressed):
            self._tell_progress(event.listener, event.report)
        elif isinstance(event, LiveEvents):
            self._tell_events(event.message)
        elif isinstance(event, Greeted):
            self._hello_answered(event)
        elif isinstance(event, Rejected):
            self.frameRejected(ErrorCode.INVALID_MESSAGE, event.reason)
        elif isinstance(event, Unanswered):
            message = event.message
            if isinstance(message, wire.Error):
                self.log.error("unexpected ERROR from the daemon: {e}", e=message.message)
            else:
                self.frameRejected(
                    ErrorCode.INVALID_MESSAGE, f"{type(message).__name__} answers no request"
                )

    def _hello_answered(self, greeted: Greeted) -> None:
        """The answer to HELLO decided the version (the held requests went out)."""
        if greeted.fell_back:
            self.log.warn(
                "the daemon speaks protocol version 1 only: this connection speaks version 1"
                " (queues, priorities, keys, cancel and introspection are unavailable)"
            )
        greeters, self._greeters = self._greeters, []
        for greeter in greeters:
            greeter.callback(self)

    def _retrying(self, task_id: int) -> None:
        """Hand a retry notice to the task's listeners, or keep it for them."""
        listeners = self._watchers.get(task_id)
        if listeners:
            for notice in self._book.notices(task_id):
                for listener in listeners:
                    self._tell(listener, notice)

    def _tell(self, listener: RetryListener, notice: RetryNotice) -> None:
        # A listener's mistake is logged: raised here, it would cut the connection.
        try:
            listener(notice)
        except Exception:
            self.log.failure("on_retry for task {id} raised", id=notice.task_id)

    def _tell_progress(self, listener: Listener, report: ProgressReport) -> None:
        try:
            listener(report)
        except Exception:
            self.log.failure("the progress callback of task {id} raised", id=report.task_id)

    def _deliver(self, task_id: int) -> None:
        self._watchers.pop(task_id, None)
        waiters = self._waiters.pop(task_id, None)
        if not waiters:
            return  # kept in the book
        outcome = self._book.take(task_id)
        if isinstance(outcome, QuicxError):
            for waiter in waiters:
                waiter.errback(outcome)
            return
        value = value_of(outcome)
        for waiter in waiters:
            waiter.callback(value)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = Failure(ConnectionLost(f"connection to the daemon closed: {reason.value}"))
        lost = self._conn.connection_lost()
        pending = [*self._replies.values(), *self._greeters]
        self._replies, self._greeters = {}, []
        for request in pending:
            request.errback(self._closed)
        # The waits the daemon had taken (their fences passed) end too.
        for answer in list(self._answers):
            if not answer.called:
                answer.errback(self._closed)
        self._watchers = {}
        self._event_listener = None
        for task_id in lost:
            waiters = self._waiters.pop(task_id, None)
            if waiters:
                unknown = self._book.take(task_id)
                assert isinstance(unknown, QuicxError)  # lose_all filed an OutcomeUnknown
                for waiter in waiters:
                    waiter.errback(unknown)


SEVERAL = "ClusterProducerService or open_producer (quicx.clients.twisted_cluster)"
"""What takes the addresses of several daemons, where these clients take one."""


class QuicxClientFactory(Factory):
    """Builds L{QuicxClientProtocol}s, for C{endpoint.connect(factory)}."""

    protocol = QuicxClientProtocol
    noisy = False

    def __init__(self, keep_outcomes: int = DEFAULT_KEEP, protocol: int = 2) -> None:
        self.keep_outcomes = keep_outcomes
        self.version = protocol

    def buildProtocol(self, addr: Any) -> QuicxClientProtocol:
        return QuicxClientProtocol(self.keep_outcomes, self.version)


async def connect(
    reactor: Any,
    address: str = DEFAULT_ADDRESS,
    keep_outcomes: int = DEFAULT_KEEP,
    protocol: int = 2,
) -> QuicxClientProtocol:
    """
    Connect a producer to the daemon at C{address}.

    @param keep_outcomes: how many outcomes nobody has asked for yet to keep.
    @param protocol: 2 (falling back to 1 with a daemon that speaks only 1), or 1.
    @return: the connection, once its version is known (or once it closed:
        a connection that closes at once, as when a TLS handshake fails,
        fails every call with L{ConnectionLost}).
    """
    client = QuicxClientProtocol(keep_outcomes, protocol)
    await connectProtocol(endpoint_for(reactor, one_address(address, "connect", SEVERAL)), client)
    # Closed at once (a TLS peer refused): then every call fails with ConnectionLost.
    with contextlib.suppress(ConnectionLost):
        await client.greeted()
    return client


RESUBMIT_DELAY = 0.1
"""Seconds between a submit lost with its connection and its resubmit."""


class ProducerService(ClientService):
    """
    A producer that stays connected: reconnects with backoff (up to 3 s apart)
    whenever the connection drops, and sends each submit on the connection
    current at the time.

    Every submit carries an idempotency key (a random one when the caller
    gives none), and one that fails with L{ConnectionLost} is sent again on
    the next connection with the same key: the daemon answers the first
    task's id and queues no copy, so a task is never run twice for a
    reconnect.  Its outcome then comes on the new connection.  It talks to
    one daemon: for several, see L{quicx.clients.twisted_cluster}.  Against a
    version-1 daemon there are no keys: a resubmit there may run twice, so
    it is not retried and L{ConnectionLost} is raised (and a C{key=} given
    there is L{NeedsVersion2}, like any other version-2 option).

    With C{failover=True}, C{address} lists one replicated shard's daemons
    and it follows the shard's primary (L{quicx.clients.failover}): a submit
    refused by a standby, or cut off, goes to the primary with its key,
    for up to C{failover_deadline} seconds (then L{PrimaryNotFound}); the
    deadline, not C{attempts}, bounds its tries.
    """

    def __init__(
        self,
        reactor: Any,
        address: str | Sequence[str] = DEFAULT_ADDRESS,
        attempts: int = 5,
        failover: bool = False,
        failover_deadline: float = FAILOVER_DEADLINE,
    ) -> None:
        self._shard = Shard(address, failover_deadline) if failover else None
        if self._shard is None:
            endpoint = endpoint_for(
                reactor, one_address(cast(str, address), "ProducerService", SEVERAL)
            )
        else:
            endpoint = cast(IStreamClientEndpoint, _Following(reactor, self._shard))
        super().__init__(
            endpoint,
            QuicxClientFactory(),
            retryPolicy=backoffPolicy(initialDelay=0.1, maxDelay=3.0),
            clock=reactor,
        )
        self.attempts = attempts
        self._reactor = reactor

    async def _connected(self) -> QuicxClientProtocol:
        # Twisted types whenConnected's protocol as any IProtocol: here it is
        # always QuicxClientFactory's.  With failover, a daemon that cannot be
        # reached is followed past at once.
        failures = None if self._shard is None else 1
        return cast(QuicxClientProtocol, await self.whenConnected(failAfterFailures=failures))

    async def _submit(
        self, task_type: str | bytes, payload: str | bytes, options: dict[str, Any]
    ) -> tuple[QuicxClientProtocol, int]:
        own_key = options.get("key") is None
        key = uuid.uuid4().hex if own_key else options["key"]
        shard = self._shard
        attempt = 0
        while True:
            attempt += 1
            try:
                client = await self._connected()
            except Exception as e:  # a connection refused, a host unreachable...
                if shard is None:
                    raise
                await self._follow(shard, None, e)
                continue
            try:
                await client.greeted()
                refusal = None if shard is None else failover.not_primary(client.server)
                if refusal is not None:
                    raise refusal
                # A version-1 daemon takes no key: the caller's is NeedsVersion2, ours left out.
                options["key"] = None if own_key and client.version != codec.VERSION else key
                return client, await client.submit(task_type, payload, **options)
            except NotPrimary as e:
                if shard is None:
                    raise
                await self._follow(shard, client, e)
            except ConnectionLost as e:
                if client.version != codec.VERSION or (shard is None and attempt == self.attempts):
                    raise
                if shard is not None:
                    await self._follow(shard, client, e)
                else:
                    # The service may not have seen the loss yet: let it reconnect.
                    await deferLater(self._reactor, RESUBMIT_DELAY, lambda: None)

    async def _follow(
        self, shard: Shard, client: QuicxClientProtocol | None, error: Exception
    ) -> None:
        """
        The daemon is not the primary, or cannot be reached: aim at the next
        (the service connects there), and close the connection to this one.

        @raise PrimaryNotFound: no primary within the shard's deadline.
        """
        hop = shard.next(error, self._reactor.seconds())
        if client is not None and client.transport is not None:
            client.transport.loseConnection()
        await deferLater(self._reactor, max(hop.delay, RESUBMIT_DELAY), lambda: None)

    async def submit(self, task_type: str | bytes, payload: str | bytes, **options: Any) -> int:
        """Submit a task (options as L{QuicxClientProtocol.submit}); its id."""
        return (await self._submit(task_type, payload, options))[1]

    async def submit_and_wait(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        on_retry: RetryListener | None = None,
        **options: Any,
    ) -> int:
        """Submit a task and wait for its outcome (see L{QuicxClientProtocol.outcome})."""
        client, task_id = await self._submit(task_type, payload, options)
        await client.outcome(task_id, on_retry)
        return task_id


class _Following:
    """The endpoint of a shard's producer: the daemon it follows the primary to."""

    def __init__(self, reactor: Any, shard: Shard) -> None:
        self._reactor = reactor
        self._shard = shard

    def connect(self, factory: Any) -> Deferred[Any]:
        return endpoint_for(self._reactor, self._shard.current).connect(factory)


def _refused(failure: Failure, span: tracing.SubmitSpan) -> Failure:
    """A traced submit failed: its span ends so; the failure goes on."""
    assert failure.value is not None  # a failure of an exception
    span.refused(failure.value)
    return failure


__all__ = [
    "ProducerService",
    "QuicxClientFactory",
    "QuicxClientProtocol",
    "connect",
    "endpoint_for",
]
