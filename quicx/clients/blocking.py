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
submit in parallel are faster with a client each.  A call holds the lock
throughout, a C{wait} or C{result} included: threads that wait (a web app's
requests) each need a client of their own while they wait.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Unpack

from quicx.clients import operations, tracing
from quicx.clients.connection import Request
from quicx.clients.operations import SubmitKeywords
from quicx.clients.outcomes import NOT_ARRIVED, RetryNotice, value_of
from quicx.clients.pump import SocketPump, _name
from quicx.clients.requests import Task
from quicx.protocol import admin, wire
from quicx.protocol.errors import ConnectionLost, QuicxError

DEFAULT_WINDOW = 1000
"""SUBMITs sent ahead of their OKs by L{QuicxClient.submit_many}."""
FOREVER = 3600.0
"""How long one read waits when a call waits as long as it takes (it reads again)."""


class QuicxClient(SocketPump):
    """
    A blocking producer and monitor client: a byte pump (L{SocketPump})
    around a L{quicx.clients.connection.ClientConnection}, which owns the
    handshake, the order of the replies, outcomes, waits and progress; each
    call sends what L{quicx.clients.operations} declares, and reads its answer.

    Given the addresses of one replicated shard's daemons with
    C{failover=True} (C{QuicxClient("tcp:h1:16381,tcp:h2:16381",
    failover=True)}), it follows the shard's primary: a call refused by a
    standby, or cut off when sending it again is safe, goes to the primary
    (see L{quicx.clients.failover}), for up to C{failover_deadline} seconds.

    @ivar timeout: seconds any one call may wait for the daemon.
    @ivar version: the protocol version of the connection (2, unless the
        client was made with C{protocol=1} or the daemon speaks only 1).
    @ivar server: what the daemon said of itself in answer to HELLO.
    @ivar address: the daemon it talks to (with failover: the primary, as
        far as it knows).
    """

    # -- requests ----------------------------------------------------------------------

    def submit(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        **options: Unpack[SubmitKeywords],
    ) -> int:
        """
        Submit one task; return its id.

        @param options: by keyword, any of L{operations.SubmitKeywords}, each
            documented on L{quicx.clients.requests.Options}: C{queue},
            C{priority}, C{key}, C{fairness_key}, C{delay} or C{run_at},
            C{retries}, C{backoff}, C{keep_result} and C{result_ttl} (for
            L{result}), C{progress} (called with each L{ProgressReport} by
            whichever call of this client reads it, most often L{wait}),
            C{group} (see L{open_group}), C{after}, C{on_parent_failure} and
            C{after_group} (dependencies), C{debounce}, C{expires_in} or
            C{expires_at} (L{wait} then raises C{TaskExpired}).
        @raise QueueFull, PayloadTooLarge, UnknownTaskType, InvalidMessage:
            the daemon refused it.
        @raise NotFound, Conflict: C{group} is unknown, or closed.
        @raise NeedsVersion2: an option was given to a version-1 daemon.
        @raise ValueError: an option is out of range, or a backoff malformed.
        @raise ConnectionLost: the daemon could not be reached or went away.
        """
        span = tracing.submit_span(task_type, options.get("queue"))
        if span is not None:
            traced = operations.submit(task_type, payload, options, (self._conn, span.trace))
            return span.around(partial(self._submitted, traced))
        return self._submitted(operations.submit(task_type, payload, options))

    def _submitted(self, request: Request[int]) -> int:
        """Send C{request}, a SUBMIT, and read until its answer: the task id."""
        with self._lock:
            if self._shard is None:  # the common case, as short as it goes
                self._begin(time.monotonic() + self.timeout)
                self._request(request)
                (result,) = self._read_replies(request)
            else:
                read = lambda _: self._read_replies(request)[0]  # noqa: E731
                result = self._exchange(request, self.timeout, read)
        if isinstance(result, Exception):
            raise result
        return result

    def submit_many(
        self,
        tasks: Iterable[Task],
        return_exceptions: bool = False,
        window: int = DEFAULT_WINDOW,
    ) -> list[int | QuicxError]:
        """
        Submit many tasks over the one connection, pipelined: SUBMITs go in
        batches of C{window}, and each batch is sent before the OKs of the one
        before it are read, so the daemon and this client work at once.

        Any error raised part-way holds the answers read before it in
        C{results}, for the first tasks, and in C{sent} how many tasks may
        have reached the daemon: those after the answers, up to C{sent}, were
        not acknowledged (and may have been accepted); the others were not sent.

        With C{failover}, the tasks a daemon refused as not the primary, and
        those not sent, go to the primary; those sent and not answered when
        a connection dropped too if they have a key, else each is a
        L{NotAcknowledged} in its place.

        @param tasks: C{(type, payload)}, or C{(type, payload, Options(...))}
            for a queue, priority or keys.
        @param return_exceptions: put each refused task's L{DaemonError} (or
            L{NotAcknowledged}) in its place in the result instead of
            raising the first one.
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
        with self._lock:
            if self._shard is None:
                results: list[int | QuicxError] = list(self._pipeline(tasks, window))
            else:
                results = self._submit_following(self._shard, list(tasks), window)
        if not return_exceptions:
            for result in results:
                if isinstance(result, QuicxError):
                    result.results = results  # type: ignore[attr-defined]
                    raise result
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
        with self._lock:
            book = self._conn.book
            if on_retry is None and not self._inbox:
                # The common case: it came already, read with the OKs of later tasks.
                outcome = book.taken(task_id)
                if outcome is None:  # done, without a result
                    return None
                if outcome is not NOT_ARRIVED:
                    return value_of(outcome)
            deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
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
        return self._call(operations.stats())

    def hello(self, name: str, version: str, capabilities: Iterable[str] = ()) -> dict[str, Any]:
        """
        Say who this client is, now and on every later connection (C{quicx
        status} lists clients by name and version; by default this one is
        C{quicx-python} and the package's version), and ask for
        C{capabilities}.

        @return: the daemon's answer, also kept in C{server}: its version,
            capabilities, the wanted ones it lacks (C{missing}) and limits.
        """
        request = operations.hello(self._conn, name, version, capabilities)
        with self._lock:
            self._conn.hello = request.prepare()
            return self._call(request)

    def cancel(self, task_id: int) -> dict[str, Any]:
        """
        Cancel a queued task (its producer hears CANCELLED).

        @raise NotFound: no such queued or running task.
        @raise Conflict: a worker is running it (it is not interrupted).
        @raise Forbidden: another client submitted it and this one is no admin.
        """
        return self._call(operations.cancel(task_id))

    def queues(self) -> list[dict[str, Any]]:
        """Every queue: name, depth, paused, workers, priorities, oldest_age..."""
        return self._call(operations.queues())

    def status(self) -> dict[str, Any]:
        """
        The daemon's status document: what C{quicx status} shows (see
        docs/operations.md); under C{[tls]} role lists, for a monitor.
        """
        return self._call(operations.status())

    def peek(self, queue: str, count: int = 10) -> list[dict[str, Any]]:
        """The next C{count} tasks of C{queue}, in dispatch order, without taking them."""
        return self._call(operations.peek(queue, count))

    def task(self, task_id: int) -> dict[str, Any]:
        """One task's state and, while it waits, why (see docs/protocol.md)."""
        return self._call(operations.task(task_id))

    def workers(self) -> list[dict[str, Any]]:
        """
        The connected workers: id, address, name, host, pid, queues, types,
        credits, the tasks each holds and for how long, state (docs/protocol.md).
        """
        pages = operations.WorkerPages()
        while not pages.take(self._call(pages.request())):
            pass
        return pages.found

    def quiet(self, worker: int = 0) -> dict[str, Any]:
        """
        Tell worker C{worker} (its id; 0: every version-2 worker) to finish
        what it holds and take no more; needs the admin role.
        """
        return self._call(operations.steer("quiet", worker))

    def terminate(self, worker: int = 0) -> dict[str, Any]:
        """
        Tell worker C{worker} (0: every version-2 worker) to stop now: what
        it holds is queued again at once; needs the admin role.
        """
        return self._call(operations.steer("terminate", worker))

    def pause(self, queue: str) -> dict[str, Any]:
        """Stop dispatching from C{queue} (it still accepts tasks); needs the admin role."""
        return self._call(operations.queue_action("pause", queue))

    def resume(self, queue: str) -> dict[str, Any]:
        """Dispatch from C{queue} again; needs the admin role."""
        return self._call(operations.queue_action("resume", queue))

    def purge(self, queue: str) -> dict[str, Any]:
        """Cancel every queued task of C{queue}; needs the admin role."""
        return self._call(operations.queue_action("purge", queue))

    # -- dead letters and schedules ----------------------------------------------------

    def dead(self, queue: str | None = None, limit: int = 100) -> dict[str, Any]:
        """
        The dead-letter set, oldest first: C{{"total": N, "tasks": [...]}}, at
        most C{limit} (1 to 1000) of the tasks of C{queue} (C{None}: of every
        queue), each with C{id}, C{queue}, C{type}, C{failures}, C{reason},
        C{worker}, C{died_at}...
        """
        return self._call(operations.dead(queue, limit))

    def replay(self, task_id: int = 0, queue: str | None = None) -> dict[str, Any]:
        """
        Put dead task C{task_id} back in its queue, failures reset; or, with
        C{task_id} 0, every dead task of C{queue} (C{None}: of every queue).
        Needs the admin role.

        @return: C{{"replayed": [ids]}}.
        @raise NotFound: C{task_id} is not a dead task.
        @raise ValueError: both a task and a queue.
        """
        return self._call(operations.replay(task_id, queue))

    def dead_purge(self, queue: str | None = None) -> dict[str, Any]:
        """
        Drop the dead tasks of C{queue} (C{None}: of every queue); needs the
        admin role.

        @return: C{{"purged": N}}.
        """
        return self._call(operations.dead_purge(queue))

    def bulk(
        self, action: str, dry_run: bool = False, **where: Unpack[operations.BulkKeywords]
    ) -> dict[str, Any]:
        """
        A bulk action: C{action} (C{cancel}, C{retry}, C{replay}, C{purge} or
        C{move}, with C{to}) on every task that matches C{where} (C{queue},
        C{task_type}, C{key_prefix}, C{states}, C{older_than}, C{newer_than},
        C{reason}: all given must match); with C{dry_run}, only counted.
        Needs the admin role.  Answered once the action is over.

        @return: C{{"matched": N, "acted": N, "skipped": N, "sample": [ids], ...}}.
        @raise Busy: as many bulk actions run as the daemon allows.
        @raise ValueError: an unknown action or state, or a filter the action
            cannot take.
        """
        return self._call(operations.bulk(action, dry_run, where))

    def role(self, action: str) -> dict[str, Any]:
        """
        Step this daemon of a shard down (C{step-down}: the primary only) or
        make it campaign for the primary's role now (C{promote}); needs the
        admin role.

        @return: C{{"role": ROLE, "epoch": N, "primary": "HOST:PORT"}}, after it.
        @raise NotFound: the daemon is not one of a shard.
        @raise Conflict: a step-down of a daemon that is not the primary.
        """
        return self._call(operations.role(action))

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule, by name: its expression or interval, next_fire, last_fire..."""
        return self._call(operations.schedules())

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
        fields = dict(
            cron=cron,
            every=every,
            timezone=timezone,
            queue=queue,
            priority=priority,
            missed=missed,
            catch_up=catch_up,
        )
        return self._call(operations.schedule(name, task_type, payload, fields))

    def unschedule(self, name: str) -> dict[str, Any]:
        """
        Remove run-time schedule C{name}; needs the admin role.

        @raise NotFound: no such schedule.
        @raise Conflict: the configuration declares it.
        """
        return self._call(operations.unschedule(name))

    # -- results, shared data and groups ----------------------------------------------

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
        @raise OutcomeForgotten: its kept outcome is forgotten (its TTL ran out).
        @raise TaskUnknown: no such task, or it finished without its outcome kept.
        @raise NotFinished: it had not finished when the wait ended (a
            C{TimeoutError}); ask again.
        @raise QueueFull: this connection, or the daemon, waits for as many
            tasks as it may.
        """
        return self._wait(partial(operations.result, self._conn, task_id), timeout)

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
            if self._shard is None:  # (with failover, the primary's, once followed)
                self._begin(time.monotonic() + self.timeout)  # its HELLO tells the limit
            return self._call(operations.publish(self._conn, name, data))

    def unpublish(self, name: str) -> dict[str, Any]:
        """
        Delete shared data C{name}; its followers hear it is gone.

        @raise NotFound: no such name.
        """
        return self._call(operations.unpublish(name))

    def open_group(self) -> int:
        """
        Open a group: tasks join it with C{submit(..., group=id)} until
        L{close_group}; it finishes when it is closed and every member has.

        @return: its id.
        @raise QueueFull: the daemon has C{[groups] max_groups} open.
        """
        return self._call(operations.open_group())

    def close_group(self, group: int) -> dict[str, Any]:
        """No more members for C{group}; returns its state (see L{group})."""
        return self._call(operations.close_group(group))

    def group(self, group: int) -> dict[str, Any]:
        """
        A group's state now: C{state} (C{"open"}, C{"closed"}, C{"finished"}
        or C{"unknown"}), its C{members} and how many are C{done},
        C{failed} (dead and given up included), C{cancelled} and
        C{pending}, C{opened_at} and C{finished_at} (Unix seconds, or C{None}).
        """
        return self._call(operations.group(group))

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
        return self._wait(partial(operations.wait_group, self._conn, group), timeout)

    def submit_group(self, tasks: Iterable[Task], window: int = DEFAULT_WINDOW) -> int:
        """
        Submit C{tasks} (as L{submit_many} takes them) as one group: open
        it, submit each into it, close it.  Wait for it with L{wait_group}.

        @return: the group's id.
        @raise DaemonError: a task was refused (its C{results} hold every
            task's id or error); the group is closed with the others.
        """
        group = self.open_group()
        try:
            self.submit_many(operations.into_group(tasks, group), window=window)
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
        request = operations.watch(queues, types, kinds, "events")
        request.prepare()  # a bad argument is refused before the feed changes
        with self._lock:
            self._feed.watching = True  # its EVENTS may come before its answer
            try:
                self._call(request)
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
                    self._request(operations.unwatch("events"))


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
