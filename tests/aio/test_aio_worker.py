"""The asyncio worker (quicx.aio.AsyncWorker) against a real daemon on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from quicx.aio import AsyncClient, AsyncWorker, TaskContext, Unrecoverable
from quicx.protocol.errors import TaskFailed
from tests.aio_helpers import LOOPS, runner, until
from tests.conftest import DaemonProcess, config_option

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("loop", LOOPS)
def test_credits_run_that_many_handlers_at_once(daemon: DaemonProcess, loop: str) -> None:
    async def main() -> None:
        running, most = 0, 0
        release = asyncio.Event()
        worker = AsyncWorker(credits=4)

        @worker.handler("hold")
        async def hold(payload: bytes) -> bytes:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await release.wait()
            running -= 1
            return payload

        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            ids = [await client.submit("hold", b"%d" % i) for i in range(6)]
            await until(lambda: running == 4)
            assert (await client.stats()).queue_depth == 2  # the credits are spent
            release.set()
            assert [await client.wait(i, 10) for i in ids] == [b"%d" % i for i in range(6)]
        assert most == 4
        await worker.stop()
        await serving

    runner(loop)(main())


def test_failures_are_reported_and_unrecoverable_is_for_good(daemon: DaemonProcess) -> None:
    async def main() -> None:
        async def refuse(payload: bytes) -> None:
            raise Unrecoverable("a malformed card")

        worker = AsyncWorker({"refuse": refuse})
        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            refused = await client.submit("refuse", b"", retries=3)
            with pytest.raises(TaskFailed, match="a malformed card"):
                await client.wait(refused, 10)
            unknown = await client.submit("nobody", b"")
            with pytest.raises(TaskFailed, match="no handler for: nobody"):
                await client.wait(unknown, 10)
        await worker.stop()
        await serving

    asyncio.run(main())


def test_auto_extend_touches_a_lease_shorter_than_the_handler(
    start_daemon: Any, tmp_path: Path
) -> None:
    daemon = start_daemon(config_option(tmp_path, "[tasks]\ntimeout = 1\n"))

    async def main() -> None:
        attempts: list[int] = []
        worker = AsyncWorker(auto_extend=True)

        @worker.handler("long")
        async def long(payload: bytes, context: TaskContext) -> int:
            attempts.append(context.attempt)
            assert context.lease == 1.0
            await asyncio.sleep(2.5)  # past the lease: only TOUCH keeps it
            return context.attempt

        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            task_id = await client.submit("long", b"")
            assert await client.wait(task_id, 20) == 1
        assert attempts == [1]  # never taken back
        await worker.stop()
        await serving

    asyncio.run(main())


def test_a_handler_whose_lease_was_lost_is_cancelled(start_daemon: Any, tmp_path: Path) -> None:
    daemon = start_daemon(config_option(tmp_path, "[tasks]\ntimeout = 1\n"))

    async def main() -> None:
        cancelled: list[int] = []
        worker = AsyncWorker(credits=2)

        @worker.handler("stuck")
        async def stuck(payload: bytes, context: TaskContext) -> str:
            if context.attempt > 1:
                return "the second delivery"
            try:
                while True:  # reports progress, never extends: the lease runs out
                    context.progress(0.1, "still here")
                    await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                cancelled.append(context.attempt)
                raise

        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            task_id = await client.submit("stuck", b"")
            assert await client.wait(task_id, 30) == "the second delivery"
            await until(lambda: cancelled == [1])
        await worker.stop()
        await serving

    asyncio.run(main())


def test_sigterm_lets_the_task_in_hand_finish(daemon: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "slow_worker.py").write_text(
        textwrap.dedent(
            """
            import asyncio
            from quicx.aio import AsyncWorker

            worker = AsyncWorker()

            @worker.handler("slow")
            async def slow(payload):
                await asyncio.sleep(1.0)
                return "finished"
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    command = [sys.executable, "-m", "quicx.cli", "worker", "--loop", "asyncio"]
    process = subprocess.Popen(
        [*command, "slow_worker:worker", "--connect", daemon.client_address],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )

    async def main() -> None:
        async with AsyncClient(daemon.client_address, timeout=30) as client:
            task_id = await client.submit("slow", b"", keep_result=True)

            async def running() -> bool:
                return (await client.task(task_id))["state"] == "running"

            await until(running)
            process.send_signal(signal.SIGTERM)
            assert await client.wait(task_id, 30) == "finished"

    try:
        asyncio.run(main())
        assert process.wait(30) == 0
    finally:
        process.kill()
        _, errors = process.communicate()
    assert "SIGTERM: stopping once the tasks in hand are done" in errors
