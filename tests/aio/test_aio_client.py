"""The asyncio client (quicx.aio) against a real daemon on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quicx.aio import AsyncClient, AsyncClusterClient, AsyncWorker, open_client
from quicx.clients.cluster import TaskRef, ranking
from quicx.clients.progress import ProgressReport
from quicx.clients.requests import Options
from quicx.protocol.errors import (
    ConnectionLost,
    NotFinished,
    NotFound,
    NotSubmittedHere,
    OutcomeUnknown,
    TaskCancelled,
    TaskFailed,
    TaskUnknown,
)
from tests.aio_helpers import LOOPS, runner
from tests.conftest import DaemonProcess, config_option


def test_importing_quicx_aio_imports_no_twisted() -> None:
    code = "import sys, quicx.aio; print(sorted(m for m in sys.modules if m.startswith('twisted')))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


@pytest.mark.parametrize("loop", LOOPS)
def test_submit_wait_progress_and_a_failure(daemon: DaemonProcess, loop: str) -> None:
    async def main() -> None:
        worker = AsyncWorker(credits=4)

        @worker.handler("double")
        async def double(payload: bytes, context: Any) -> int:
            context.progress(0.5, "half")
            await asyncio.sleep(0)
            return int(payload) * 2

        @worker.handler("boom")
        def boom(payload: bytes) -> None:
            raise KeyError("missing")

        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address, timeout=10) as client:
            reports: list[ProgressReport] = []
            first = await client.submit("double", b"21", progress=reports.append)
            assert await client.wait(first, timeout=10) == 42
            assert [(r.fraction, r.message) for r in reports] == [(0.5, "half")]
            failed = await client.submit("boom", b"")
            with pytest.raises(TaskFailed, match="KeyError: 'missing'"):
                await client.wait(failed, timeout=10)
            with pytest.raises(NotSubmittedHere):
                await client.wait(first)
            # Many at once, from many coroutines, pipelined on one connection.
            ids = await asyncio.gather(*(client.submit("double", b"%d" % i) for i in range(50)))
            assert await asyncio.gather(*(client.wait(i, 10) for i in ids)) == [
                i * 2 for i in range(50)
            ]
        await worker.stop()
        assert serving.done()

    runner(loop)(main())


def test_every_admin_call_once(start_daemon: Any, tmp_path: Path) -> None:
    daemon = start_daemon(config_option(tmp_path, "[tasks]\nmax_attempts = 1\n"))

    async def main() -> None:
        # The control socket: a unix: address, and the admin role.
        async with AsyncClient(f"unix:{daemon.control_path}", timeout=10) as client:
            answer = await client.hello("tests", "1.0", ["queues"])
            assert answer == client.server and client.version == 2
            task_id = await client.submit(
                "t", b"x", queue="mail", priority=7, key="k-1", delay=0, retries=0
            )
            assert await client.submit("t", b"again", queue="mail", key="k-1") == task_id
            assert (await client.task(task_id))["priority"] == 7
            assert [t["id"] for t in await client.peek("mail")] == [task_id]
            assert "mail" in {q["name"] for q in await client.queues()}
            assert (await client.pause("mail"))["paused"] is True
            assert (await client.resume("mail"))["paused"] is False
            assert (await client.cancel(task_id))["state"] == "cancelled"
            with pytest.raises(TaskCancelled):
                await client.wait(task_id)
            with pytest.raises(NotFound):
                await client.cancel(task_id)
            await client.submit("t", b"y", queue="mail")
            assert (await client.purge("mail"))["purged"] == 1
            assert (await client.dead())["total"] == 0
            assert (await client.dead_purge())["purged"] == 0
            with pytest.raises(NotFound):
                await client.replay(12345)
            await client.schedule("nightly", "t", b"", cron="0 3 * * *")
            assert [s["name"] for s in await client.schedules()] == ["nightly"]
            await client.unschedule("nightly")
            assert (await client.publish("rates", b"1.1"))["version"] == 1
            await client.unpublish("rates")
            assert (await client.status())["queues"] is not None
            assert (await client.stats()).queue_depth == 0
            group = await client.submit_group([("t", b"1"), ("t", b"2", Options(priority=1))])
            assert (await client.group(group))["members"] == 2
            with pytest.raises(NotFinished):
                await client.wait_group(group, timeout=0.1)
            with pytest.raises(TaskUnknown):
                await client.result(task_id + 100, timeout=0.1)
            with pytest.raises(ValueError):
                await client.submit("t", b"", priority=300)
            with pytest.raises(TypeError):
                await client.submit("t", b"", colour="red")  # type: ignore[call-arg]

    asyncio.run(main())


def test_results_groups_and_timeouts(daemon: DaemonProcess) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.client_address, timeout=10) as client:
            task_id = await client.submit("square", b"9", keep_result=True)
            with pytest.raises(TimeoutError):
                await client.wait(task_id, timeout=0.2)  # no worker yet: still pending
            waiting = asyncio.ensure_future(client.result(task_id, timeout=30))
            group = await client.submit_group([("square", b"%d" % i) for i in range(5)])
            worker = AsyncWorker({"square": lambda p: int(p) ** 2}, credits=8)
            serving = worker.start(daemon.client_address)
            assert await waiting == 81
            assert await client.wait(task_id, timeout=10) == 81  # its outcome came here too
            done = await client.wait_group(group, timeout=30)
            assert (done["state"], done["done"]) == ("finished", 5)
            async with AsyncClient(daemon.client_address) as other:
                assert await other.result(task_id, timeout=0) == 81
            await worker.stop()
            await serving

    asyncio.run(main())


def test_submit_many_pipelines_windows(daemon: DaemonProcess) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.client_address) as client:
            ids = await client.submit_many((("t", b"%d" % i) for i in range(2500)), window=1000)
            assert ids == list(range(1, 2501))
            with pytest.raises(ValueError) as refused:
                await client.submit_many([("t", b"ok"), ("t", b"bad", Options(priority=999))])
            assert refused.value.sent == 0  # type: ignore[attr-defined]

    asyncio.run(main())


def test_a_connection_lost_mid_wait(start_daemon: Any, tmp_path: Path) -> None:
    daemon = start_daemon(config_option(tmp_path))

    async def main() -> None:
        client = AsyncClient(daemon.client_address, timeout=10)
        task_id = await client.submit("never", b"")
        waiting = asyncio.ensure_future(client.wait(task_id, timeout=60))
        result = asyncio.ensure_future(client.result(task_id, timeout=60))
        await asyncio.sleep(0.2)
        daemon.kill()
        with pytest.raises(OutcomeUnknown):
            await waiting
        with pytest.raises(ConnectionLost):
            await result
        with pytest.raises(ConnectionLost, match="cannot connect"):
            await client.stats()
        await client.close()

    asyncio.run(main())


def test_events_as_an_async_iterator(daemon: DaemonProcess) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.client_address, timeout=10) as client:
            with pytest.raises(ValueError):
                client.events(kinds=["no-such-kind"])
            async with client.events(queues=["watched"], timeout=10) as events:
                task_id = await client.submit("t", b"", queue="watched")
                await client.submit("t", b"", queue="elsewhere")
                event = await anext(events)
                assert (event["task"], event["queue"]) == (task_id, "watched")
            # The watch ended: the client goes on.
            assert (await client.stats()).queue_depth == 2

    asyncio.run(main())


def test_an_address_list_places_by_the_shard_key(start_daemon: Any) -> None:
    daemons = [start_daemon(), start_daemon()]
    addresses = [d.client_address for d in daemons]

    async def main() -> None:
        client = open_client(",".join(addresses))
        assert isinstance(client, AsyncClusterClient)
        async with client:
            for key in ("user-1", "user-2", "user-3", "user-4"):
                ref = await client.submit("t", b"", shard_key=key)
                assert ref.daemon == ranking(key, client.addresses)[0]
            keyed = await client.submit("t", b"", key="order-9")
            assert keyed.daemon == ranking("order-9", client.addresses)[0]
            refs = await client.submit_many([("t", b"%d" % i) for i in range(10)])
            assert {r.daemon for r in refs if isinstance(r, TaskRef)} == set(client.addresses)
            assert (await client.task(keyed))["state"] == "queued"
            assert (await client.cancel(str(keyed)))["state"] == "cancelled"
            # A daemon gone: a keyed submit goes to the key's next daemon.
            first = ranking("order-10", client.addresses)[0]
            daemons[client.addresses.index(first)].kill()
            moved = await client.submit("t", b"", key="order-10")
            assert moved.daemon == ranking("order-10", client.addresses)[1]

    asyncio.run(main())
