"""
The asyncio client's per-call machinery: calls made at once go out
together and are answered in order; a late answer is a C{TimeoutError}
from one timer for all; and what it keeps per call is let go as answers
come (a real daemon, and a silent one on a real socket).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from quicx.aio import AsyncClient, AsyncWorker
from quicx.protocol import link
from tests.aio_helpers import LOOPS, runner
from tests.conftest import DaemonProcess


@pytest.mark.parametrize("loop", LOOPS)
def test_calls_made_at_once_are_answered_each_its_own(daemon: DaemonProcess, loop: str) -> None:
    async def main() -> None:
        worker = AsyncWorker({"double": lambda payload: int(payload) * 2}, credits=50)
        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            ids = await asyncio.gather(*(client.submit("double", b"%d" % n) for n in range(500)))
            assert len(set(ids)) == 500
            values = await asyncio.gather(*(client.wait(i, 30) for i in ids))
            assert values == [2 * n for n in range(500)]
            trips = await asyncio.gather(
                *(client.submit_and_wait("double", b"%d" % n) for n in range(200))
            )
            assert len(set(trips)) == 200
            for _ in range(300):
                await client.stats()
            # Nothing kept per call once answered: no deadlines, timers or waiters.
            assert len(client._deadlines._owed) <= 1
            assert client._replies == {} and client._outcomes == {} and client._retries == {}
        await worker.stop()
        await serving

    runner(loop)(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_an_answer_that_does_not_come_is_a_timeout_of_each_call(loop: str) -> None:
    async def main() -> None:
        received: list[bytes] = []

        class Silent(asyncio.Protocol):
            """Answers HELLO, then nothing."""

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = cast(asyncio.Transport, transport)

            def data_received(self, data: bytes) -> None:
                if not received:
                    self.transport.write(link.encode_info({"server": "silent"}))
                received.append(data)

        server = await asyncio.get_running_loop().create_server(Silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, AsyncClient(f"tcp:127.0.0.1:{port}", timeout=0.3) as client:
            calls = [client.stats(), client.queues(), client.status()]
            found: list[Any] = await asyncio.gather(*calls, return_exceptions=True)
            assert [type(error) for error in found] == [TimeoutError] * 3
            assert str(found[0]) == f"no answer from tcp:127.0.0.1:{port} in 0.3 s"
            # Later calls are timed too (the one timer is armed again).
            with pytest.raises(TimeoutError):
                await client.stats()
            assert not client._deadlines._owed or all(f.done() for _, f in client._deadlines._owed)

    runner(loop)(main())
