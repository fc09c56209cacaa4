"""
The asyncio worker's capacity and shared data, as the Twisted runner's,
against real daemons on loopback: credits chosen by its handlers' pace,
handlers that read the newest shared data, and a capacity split among a
list of daemons, a gone one's share going to the others.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, cast

import pytest

from quicx.aio import AsyncClient, AsyncWorker, TaskContext
from quicx.clients.adaptive import AUTO_MAX
from tests.aio_helpers import LOOPS, runner, until
from tests.conftest import DaemonProcess


@pytest.mark.parametrize("loop", LOOPS)
def test_quick_plain_handlers_get_more_credits_by_their_pace(
    daemon: DaemonProcess, loop: str
) -> None:
    async def main() -> None:
        worker = AsyncWorker({"echo": lambda payload: payload})  # credits chosen
        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            tasks = [("echo", b"%d" % n) for n in range(3000)]
            ids = cast(list[int], await client.submit_many(tasks))
            for n, task_id in enumerate(ids):
                assert await client.wait(task_id, 30) == b"%d" % n
        (slot,) = worker.slots
        assert slot.auto is not None and 1 < slot.credits <= AUTO_MAX
        await worker.stop()
        await serving

    runner(loop)(main())


def test_a_coroutine_holds_its_connection_only_credit(daemon: DaemonProcess) -> None:
    async def main() -> None:
        running, most = 0, 0

        async def hold(payload: bytes) -> bytes:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.001)
            running -= 1
            return payload

        worker = AsyncWorker({"hold": hold})
        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            ids = cast(list[int], await client.submit_many([("hold", b"x")] * 50))
            assert [await client.wait(i, 30) for i in ids] == [b"x"] * 50
        assert most == 1
        (slot,) = worker.slots
        assert slot.credits == 1
        await worker.stop()
        await serving

    asyncio.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_handlers_read_the_newest_shared_data(daemon: DaemonProcess, loop: str) -> None:
    async def main() -> None:
        async def rate(payload: bytes, context: TaskContext) -> bytes:
            return context.shared.get("rates", b"none")

        async with AsyncClient(daemon.client_address) as client:
            await client.publish("rates", b"1.10")
            # Two connections: the one that does not follow asks for tasks
            # only once the data has come, so no task runs without it.
            worker = AsyncWorker({"rate": rate}, concurrency=2, credits=4, follow=["rates"])
            serving = worker.start(daemon.client_address)
            ids = cast(list[int], await client.submit_many([("rate", b"")] * 40))
            assert [await client.wait(i, 30) for i in ids] == [b"1.10"] * 40
            await client.publish("rates", b"1.25")
            await until(lambda: worker.shared.get("rates") == b"1.25")
            assert await client.wait(await client.submit("rate", b""), 30) == b"1.25"
            await client.unpublish("rates")
            await until(lambda: "rates" not in worker.shared)
            assert await client.wait(await client.submit("rate", b""), 30) == b"none"
            # The follower goes: another connection follows.
            follower = worker._following.follower
            assert follower is not None and follower.transport is not None
            follower.transport.abort()
            await until(lambda: worker._following.follower not in (None, follower))
            await client.publish("rates", b"1.30")
            await until(lambda: worker.shared.get("rates") == b"1.30")
        await worker.stop()
        await serving

    runner(loop)(main())


@pytest.mark.slow  # two daemons, one stopped mid-run: 16 s; make test-cluster (CI) runs it
def test_the_capacity_is_split_among_the_daemons_and_a_gone_ones_share_moves(
    start_daemon: Any,
) -> None:
    first, second = start_daemon(), start_daemon()

    async def main() -> None:
        running: Counter[bytes] = Counter()
        release = asyncio.Event()

        async def hold(payload: bytes) -> bytes:
            running[payload] += 1
            await release.wait()
            return payload

        worker = AsyncWorker({"hold": hold}, concurrency=2, credits=4)  # 8 in all
        serving = worker.start([first.client_address, second.client_address])
        async with (
            AsyncClient(first.client_address) as a,
            AsyncClient(second.client_address) as b,
        ):
            await a.submit_many([("hold", b"a")] * 20)
            await b.submit_many([("hold", b"b")] * 20)
            await until(lambda: running == Counter({b"a": 4, b"b": 4}))
            assert sorted(slot.credits for slot in worker.slots) == [2, 2, 2, 2]
            assert (await a.stats()).queue_depth == 16
            # The second daemon goes: the first takes its share.
            await asyncio.to_thread(second.stop)
            await until(lambda: running[b"a"] == 8)
            assert sorted(slot.credits for slot in worker.slots) == [4, 4]
            release.set()
            await until(lambda: running[b"a"] == 20)
        await worker.stop()
        await serving

    asyncio.run(main())
