"""
The Twisted worker's checkpoints against a real daemon in this process's
reactor: a handler on the reactor awaits its checkpoint's Deferred, and its
retry resumes from the state it saved.
"""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet import reactor

from quicx.clients.twisted_client import connect
from quicx.clients.worker import TaskContext, Worker
from tests.clients.test_lifecycle_clients import start as start  # the fixture


@pytest_twisted.ensureDeferred
async def test_a_handler_on_the_reactor_awaits_its_checkpoint_and_its_retry_resumes(
    start,
) -> None:
    daemon = start()
    seen: list[tuple[int, bool, Any]] = []

    async def step(payload: bytes, context: TaskContext) -> Any:
        seen.append((context.attempt, context.resumed, context.checkpoint_state))
        if not context.resumed:
            assert await context.checkpoint({"page": 7}) is True  # kept, and durable
            raise RuntimeError("crashed after saving")
        return context.checkpoint_state

    worker = Worker()
    worker.register("step", step)
    worker.start(reactor, daemon.address)
    producer = await connect(reactor, daemon.address)
    try:
        task_id = await producer.submit("step", b"", retries=1, backoff="fixed:0")
        assert await producer.outcome(task_id) == {"page": 7}
    finally:
        producer.close()
        await worker.stop()
    assert seen == [(1, False, None), (2, True, {"page": 7})]
    assert daemon.service.queue.checkpoints.held == 0  # freed once done
