"""
Dependencies through the asyncio client and worker (quicx.aio) against a
real daemon on loopback: C{submit(after=..., after_group=...)} and a
handler's C{context.parents}.
"""

from __future__ import annotations

import asyncio

from quicx.aio import AsyncClient, AsyncWorker, TaskContext
from tests.conftest import DaemonProcess


def test_a_task_after_its_parents_and_a_groups_callback(daemon: DaemonProcess) -> None:
    async def total(payload: bytes, context: TaskContext) -> int:
        return sum(parent.result for parent in context.parents if parent.done)

    async def counts(payload: bytes, context: TaskContext) -> list[int]:
        group = context.group_counts
        assert group is not None
        return [group.members, group.done, len(context.parents)]

    async def main() -> None:
        worker = AsyncWorker(
            {"square": lambda p: int(p) ** 2, "total": total, "counts": counts}, credits=4
        )
        async with AsyncClient(daemon.client_address, timeout=10) as client:
            parents = [await client.submit("square", b"%d" % n, keep_result=True) for n in (2, 3)]
            child = await client.submit("total", b"", after=parents)
            group = await client.open_group()
            callback = await client.submit("counts", b"", after_group=group)
            for n in range(4):
                await client.submit("square", b"%d" % n, group=group)
            await client.close_group(group)
            serving = worker.start(daemon.client_address)
            assert await client.wait(child, timeout=30) == 13
            assert await client.wait(callback, timeout=30) == [4, 4, 4]
            await worker.stop()
            await serving

    asyncio.run(main())
