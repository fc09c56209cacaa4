"""
The asyncio client: the blocking client's calls as coroutines, on the application's loop.

    async with AsyncClient("tcp:127.0.0.1:16381") as client:
        task_id = await client.submit("send_email", b'{"to": "user@gmail.com"}')
        await client.wait(task_id, timeout=30)     # raises TaskFailed on FAILED
        ids = await client.submit_many(("resize", p) for p in pictures)
        task_id = await client.submit("resize", b"...", keep_result=True)
        await client.result(task_id, timeout=60)  # the handler's return value, from any client
        async with client.events(kinds=["failed"]) as events:  # live, each a dict
            async for event in events:
                print(event["task"], event["reason"])

Native asyncio (an C{asyncio.Protocol}: no Twisted, no threads; uvloop too),
one connection per client, opened by the first call and anew after the
daemon closed it.  Any number of coroutines may call one client at once:
their requests are pipelined on the connection, answered in order.  Each
call is one line over L{quicx.clients.operations}, as the blocking client's
are, takes the same arguments and raises the same errors
(L{quicx.protocol.errors}); a call that gets no answer in the client's
C{timeout} raises C{TimeoutError}.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from functools import partial
from itertools import islice
from typing import Any, Unpack, cast

from quicx.aio.pump import StreamPump
from quicx.clients import failover, operations, tracing
from quicx.clients.blocking import DEFAULT_WINDOW
from quicx.clients.connection import Request
from quicx.clients.failover import Shard
from quicx.clients.operations import SubmitKeywords
from quicx.clients.outcomes import RetryListener, value_of
from quicx.clients.requests import AnyTask, Task
from quicx.protocol import admin, wire
from quicx.protocol.errors import (
    ConnectionLost,
    DaemonError,
    NotAcknowledged,
    NotPrimary,
    QuicxError,
)


class AsyncClient(StreamPump):
    """
    An asyncio producer and monitor client: a byte pump (L{StreamPump})
    around a L{quicx.clients.connection.ClientConnection}; each call sends
    what L{quicx.clients.operations} declares, and awaits its answer.  Each
    call's documentation is the blocking client's
    (L{quicx.clients.blocking.QuicxClient}): only the differences are said here.

    @ivar timeout: seconds any one call may wait for the daemon.
    """

    async def __aenter__(self) -> AsyncClient:
        return self

    async def submit(
        self, task_type: str | bytes, payload: str | bytes, **options: Unpack[SubmitKeywords]
    ) -> int:
        """
        Submit one task; its id.  Every option of the blocking client's
        C{submit}; C{progress} is called on the loop, as reports come.
        """
        span = tracing.submit_span(task_type, options.get("queue"))
        if span is None:
            return await self._call(operations.submit(task_type, payload, options))
        try:
            request = operations.submit(task_type, payload, options, (self._conn, span.trace))
        except BaseException as e:
            span.refused(e)
            raise
        return await span.awaiting(self._call(request))

    async def submit_many(
        self, tasks: Iterable[Task], return_exceptions: bool = False, window: int = DEFAULT_WINDOW
    ) -> list[int | QuicxError]:
        """
        Submit many tasks, pipelined: each batch of C{window} is sent before
        the answers to the one before it are awaited.  An error raised
        part-way holds the answers of the whole batches before it in
        C{results}, and how many tasks were sent in C{sent}.  With
        C{failover}, as the blocking client's.
        """
        if self._shard is None:
            results: list[int | QuicxError] = list(await self._pipeline(tasks, window))
        else:
            results = await self._submit_following(self._shard, list(tasks), window)
        for result in results:
            if not isinstance(result, int | DaemonError | NotAcknowledged):
                raise result  # a daemon's mistake (an answer of the wrong type)
            if isinstance(result, QuicxError) and not return_exceptions:
                result.results = results
                raise result
        return results

    async def _pipeline(self, tasks: Iterable[AnyTask], window: int) -> list[int | DaemonError]:
        """L{submit_many}'s SUBMITs to the daemon of the moment, and their answers."""
        results: list[int | DaemonError] = []
        previous: Any = None  # the answers of the batch sent before
        sent = 0
        iterator = iter(tasks)
        try:
            await self.connect()
            while batch := list(islice(iterator, window)):
                try:
                    reply = self._send(Request.submit(batch), batch=True)
                except Exception:
                    if previous is not None:
                        results += await self._within(None, previous)
                    raise
                sent += len(batch)
                if previous is not None:
                    results += await self._within(None, previous)
                previous = reply
            if previous is not None:
                results += await self._within(None, previous)
        except Exception as e:
            e.results = list(results)  # type: ignore[attr-defined]
            e.sent = sent  # type: ignore[attr-defined]
            raise
        return results

    async def _submit_following(
        self, shard: Shard, tasks: list[Task], window: int
    ) -> list[int | QuicxError]:
        """L{submit_many} to a shard's primary (see L{failover.Batch})."""
        batch = failover.Batch(tasks)
        while not batch.done:
            aimed = self._aimed
            error: Exception | None = None
            try:
                got: list[int | DaemonError] = await self._pipeline(batch.pending(), window)
            except (ConnectionLost, NotPrimary) as e:
                got, sent, error = getattr(e, "results", []), getattr(e, "sent", 0), e
            else:
                sent = len(got)
            error = batch.answered(got, sent, self.address) or error
            if error is not None:
                await self._follow(shard, error, aimed)
        shard.reached()
        return cast(list[int | QuicxError], batch.results)

    async def wait(
        self, task_id: int, timeout: float | None = None, on_retry: RetryListener | None = None
    ) -> Any:
        """
        The outcome of C{task_id}, submitted by this client: the handler's
        return value; C{TimeoutError} after C{timeout} (the task is still
        pending, and may be waited for again).
        """
        return value_of(await self._outcome(task_id, timeout, on_retry))

    async def submit_and_wait(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        timeout: float | None = None,
        on_retry: RetryListener | None = None,
    ) -> int:
        """Submit a task, wait for its outcome (see L{wait}), return its id."""
        task_id = await self.submit(task_type, payload)
        await self.wait(task_id, timeout, on_retry)
        return task_id

    async def stats(self) -> wire.StatsResponse:
        return await self._call(operations.stats())

    async def hello(
        self, name: str, version: str, capabilities: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Say who this client is, now and on every later connection."""
        request = operations.hello(self._conn, name, version, capabilities)
        self._conn.hello = request.prepare()
        return await self._call(request)

    async def cancel(self, task_id: int) -> dict[str, Any]:
        return await self._call(operations.cancel(task_id))

    async def queues(self) -> list[dict[str, Any]]:
        return await self._call(operations.queues())

    async def status(self) -> dict[str, Any]:
        return await self._call(operations.status())

    async def peek(self, queue: str, count: int = 10) -> list[dict[str, Any]]:
        return await self._call(operations.peek(queue, count))

    async def task(self, task_id: int) -> dict[str, Any]:
        return await self._call(operations.task(task_id))

    async def pause(self, queue: str) -> dict[str, Any]:
        return await self._call(operations.queue_action("pause", queue))

    async def resume(self, queue: str) -> dict[str, Any]:
        return await self._call(operations.queue_action("resume", queue))

    async def purge(self, queue: str) -> dict[str, Any]:
        return await self._call(operations.queue_action("purge", queue))

    async def dead(self, queue: str | None = None, limit: int = 100) -> dict[str, Any]:
        return await self._call(operations.dead(queue, limit))

    async def replay(self, task_id: int = 0, queue: str | None = None) -> dict[str, Any]:
        return await self._call(operations.replay(task_id, queue))

    async def bulk(
        self, action: str, dry_run: bool = False, **where: Unpack[operations.BulkKeywords]
    ) -> dict[str, Any]:
        """A bulk action (see L{quicx.clients.blocking.QuicxClient.bulk})."""
        return await self._call(operations.bulk(action, dry_run, where))

    async def dead_purge(self, queue: str | None = None) -> dict[str, Any]:
        return await self._call(operations.dead_purge(queue))

    async def schedules(self) -> list[dict[str, Any]]:
        return await self._call(operations.schedules())

    async def schedule(
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
        fields = dict(
            cron=cron,
            every=every,
            timezone=timezone,
            queue=queue,
            priority=priority,
            missed=missed,
            catch_up=catch_up,
        )
        return await self._call(operations.schedule(name, task_type, payload, fields))

    async def unschedule(self, name: str) -> dict[str, Any]:
        return await self._call(operations.unschedule(name))

    # -- results, shared data and groups ----------------------------------------------

    async def result(self, task_id: int, timeout: float | None = None) -> Any:
        """Any task's outcome, from any client, waiting up to C{timeout} (AWAIT)."""
        return await self._wait(partial(operations.result, self._conn, task_id), timeout)

    async def publish(self, name: str, data: str | bytes) -> dict[str, Any]:
        await self.connect()  # its HELLO tells the limit
        return await self._call(operations.publish(self._conn, name, data))

    async def unpublish(self, name: str) -> dict[str, Any]:
        return await self._call(operations.unpublish(name))

    async def open_group(self) -> int:
        return await self._call(operations.open_group())

    async def close_group(self, group: int) -> dict[str, Any]:
        return await self._call(operations.close_group(group))

    async def group(self, group: int) -> dict[str, Any]:
        return await self._call(operations.group(group))

    async def wait_group(self, group: int, timeout: float | None = None) -> dict[str, Any]:
        return await self._wait(partial(operations.wait_group, self._conn, group), timeout)

    async def submit_group(self, tasks: Iterable[Task], window: int = DEFAULT_WINDOW) -> int:
        """Open a group, submit C{tasks} into it, close it: its id."""
        group = await self.open_group()
        try:
            await self.submit_many(operations.into_group(tasks, group), window=window)
        finally:
            await self.close_group(group)
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
        The daemon's live task lifecycle events (as the blocking client's
        C{events}), as an async iterator; the watch starts as the stream is
        entered (C{async with}) or first read, and ends as it is left or
        closed (C{aclose}).  Each C{__anext__} raises C{TimeoutError} when
        no event comes within C{timeout} seconds (C{None}: as long as it takes).

        @raise ValueError: a bad queue name, an empty type, an unknown kind (here, at once).
        """
        request = operations.watch(queues, types, kinds, "events")
        request.prepare()
        return EventStream(self, request, timeout)

    async def _watch(self, request: Request[Any]) -> None:
        if self._feed.watching:
            raise QuicxError("this client watches events already: one watch at a time")
        self._feed.watching = True  # its EVENTS may come before its answer
        try:
            await self._call(request)
        except BaseException:
            self._feed.stop()
            raise

    async def _next_event(self, timeout: float | None) -> dict[str, Any]:
        while (item := self._feed.next()) is None:
            if not self._feed.watching:
                raise QuicxError("this client no longer watches events")
            fed = self._fed
            if fed is None or fed.done():
                self._fed = fed = asyncio.get_running_loop().create_future()
            if timeout is None:
                await fed
            else:
                await self._within(timeout, fed)
        return item

    async def _unwatch(self) -> None:
        was_watching = self._feed.watching
        self._feed.stop()
        if was_watching and self._link is not None:
            with contextlib.suppress(ConnectionLost, TimeoutError):
                await self._call(operations.unwatch("events"))


class EventStream:
    """The live events of one L{AsyncClient.events} call: an async iterator and context manager."""

    def __init__(self, client: AsyncClient, request: Request[Any], timeout: float | None) -> None:
        self._client = client
        self._request = request
        self._timeout = timeout
        self._started = False
        self._closed = False

    async def start(self) -> None:
        """Start the watch, if not started (entering, or the first read, does)."""
        if not self._started:
            self._started = True
            await self._client._watch(self._request)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._closed:
            raise StopAsyncIteration
        await self.start()
        return await self._client._next_event(self._timeout)

    @property
    def waiting(self) -> int:
        """Events read already, that the next reads hand out without waiting."""
        return len(self._client._feed)

    async def aclose(self) -> None:
        """End the watch (the client stays connected)."""
        if not self._closed:
            self._closed = True
            if self._started:
                await self._client._unwatch()

    async def __aenter__(self) -> EventStream:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
