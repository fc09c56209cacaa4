"""The asyncio worker told to go quiet or to terminate by the daemon (a real one, on loopback)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from quicx.aio import AsyncClient, AsyncWorker
from quicx.clients.blocking import QuicxClient
from tests.aio_helpers import runner, until
from tests.conftest import DaemonProcess


def admin(daemon: DaemonProcess, call: Callable[[QuicxClient], Any]) -> Any:
    """C{call} on a client of the control socket (the admin role)."""
    with QuicxClient(f"unix:{daemon.control_path}") as client:
        return call(client)


def held_by(daemon: DaemonProcess) -> list[tuple[str, int]]:
    return [(w["state"], w["holding"]) for w in admin(daemon, QuicxClient.workers)]


def test_a_quiet_asyncio_worker_finishes_its_task_and_takes_no_more(
    daemon: DaemonProcess,
) -> None:
    async def main() -> None:
        release = asyncio.Event()
        started: list[bytes] = []
        worker = AsyncWorker(credits=2)

        @worker.handler("hold")
        async def hold(payload: bytes) -> bytes:
            started.append(payload)
            await release.wait()
            return payload

        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            first = await client.submit("hold", b"1")
            await until(lambda: started == [b"1"])
            await asyncio.to_thread(admin, daemon, lambda c: c.quiet(0))
            await until(lambda: any(slot.quiet for slot in worker.slots))
            second = await client.submit("hold", b"2")
            release.set()
            assert await client.wait(first, 10) == b"1"
            assert (await client.task(second))["state"] == "queued"
            assert await asyncio.to_thread(held_by, daemon) == [("quiet", 0)]
            assert started == [b"1"]
        await worker.stop()
        await serving

    runner("asyncio")(main())


def test_a_terminated_asyncio_worker_cancels_its_handlers_and_returns(
    daemon: DaemonProcess,
) -> None:
    async def main() -> None:
        cancelled: list[bytes] = []
        started: list[bytes] = []
        worker = AsyncWorker()

        @worker.handler("hold")
        async def hold(payload: bytes) -> bytes:
            started.append(payload)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(payload)
                raise
            return payload

        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            held = await client.submit("hold", b"1")
            await until(lambda: started == [b"1"])
            await asyncio.to_thread(admin, daemon, lambda c: c.terminate(0))
            await asyncio.wait_for(serving, 30)  # run() returns
            assert cancelled == [b"1"]
            assert (await client.task(held))["state"] == "queued"

    runner("asyncio")(main())
