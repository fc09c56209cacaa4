"""The asyncio worker's checkpoints against a real daemon on loopback: saved, refused, resumed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from quicx.aio import AsyncClient, AsyncWorker, TaskContext
from quicx.protocol.errors import QueueFull
from tests.conftest import config_option


def test_a_retry_resumes_from_the_state_an_async_handler_saved(
    start_daemon: Any, tmp_path: Path
) -> None:
    daemon = start_daemon(config_option(tmp_path, "[checkpoints]\nmax_size = 64\n"))
    seen: list[tuple[int, bool, Any]] = []

    async def main() -> None:
        async def step(payload: bytes, context: TaskContext) -> Any:
            seen.append((context.attempt, context.resumed, context.checkpoint_state))
            if context.attempt == 1:
                assert await context.checkpoint({"done": 3}) is True
                with pytest.raises(ValueError, match="max_checkpoint"):
                    context.checkpoint(b"x" * 65)  # refused before it is sent
                raise RuntimeError("crashed after saving")
            return context.checkpoint_state

        worker = AsyncWorker({"step": step})
        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            task_id = await client.submit("step", b"", retries=1, backoff="fixed:0")
            assert await client.wait(task_id, 10) == {"done": 3}
        await worker.stop()
        await serving

    asyncio.run(main())
    assert seen == [(1, False, None), (2, True, {"done": 3})]


def test_a_checkpoint_past_the_daemons_memory_raises_queue_full(
    start_daemon: Any, tmp_path: Path
) -> None:
    daemon = start_daemon(config_option(tmp_path, "[checkpoints]\nmax_memory = 4\n"))

    async def main() -> None:
        async def save(payload: bytes, context: TaskContext) -> str:
            await context.checkpoint(b"1234")  # at the bound: kept
            with pytest.raises(QueueFull, match="max_memory"):
                await context.checkpoint(b"12345")
            return "the last checkpoint stands"

        worker = AsyncWorker({"save": save})
        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            task_id = await client.submit("save", b"")
            assert await client.wait(task_id, 10) == "the last checkpoint stands"
        await worker.stop()
        await serving

    asyncio.run(main())
