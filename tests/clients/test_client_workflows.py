"""
Debounce and expiry from the clients (docs/clients.md, "Debounce and
expiry"): the blocking, Twisted and asyncio clients' C{submit(...,
debounce=..., expires_in=..., expires_at=...)} against a real daemon, and
the options' checks before anything is sent.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import pytest_twisted
from twisted.internet import reactor

from quicx.aio import AsyncClient
from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.clients.twisted_client import connect
from quicx.protocol.errors import TaskExpired
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from tests.aio_helpers import runner
from tests.conftest import DaemonProcess


def test_the_options_become_the_wire_options() -> None:
    wire = Options(key="k", debounce="extend:2.5s", expires_in=60).wire()
    assert wire.debounce == Debounce(DebounceMode.EXTEND, 2500)
    assert wire.expires == Expires(60_000)
    at = datetime(2027, 1, 1, tzinfo=UTC)
    assert Options(expires_at=at).wire().expires == Expires(round(at.timestamp() * 1000), True)
    assert Options(expires_at=1.5).wire().expires == Expires(1500, True)


@pytest.mark.parametrize(
    ("options", "fault"),
    [
        ({"debounce": "later:2s"}, "is not a debounce"),
        ({"debounce": "replace:0s"}, "1 ms or more"),
        ({"expires_in": 0}, "more than 0 seconds"),
        ({"expires_in": 1, "expires_at": 2.0}, "not both"),
        ({"expires_at": datetime(2027, 1, 1)}, "has no time zone"),
    ],
)
def test_a_bad_option_is_a_value_error_and_nothing_is_sent(
    options: dict[str, object], fault: str
) -> None:
    with pytest.raises(ValueError, match=fault):
        Options(**options).wire()  # type: ignore[arg-type]


def test_the_blocking_client_hears_an_expiry_and_folds_by_debounce(
    daemon: DaemonProcess,
) -> None:
    with QuicxClient(daemon.client_address, timeout=10) as client:
        task_id = client.submit("t", b"x", queue="nobody", expires_in=0.2)
        with pytest.raises(TaskExpired, match=f"task {task_id} expired"):
            client.wait(task_id, timeout=30)
        first = client.submit("t", b"one", queue="d", key="k", debounce="replace:1h")
        assert client.submit("t", b"two", queue="d", key="k", debounce="replace:1h") == first
        inspected = client.task(first)
        assert inspected["size"] == 3 and inspected["state"] == "delayed"
        soon = datetime.now(UTC) + timedelta(milliseconds=200)
        at = client.submit("t", b"x", queue="nobody", expires_at=soon)
        with pytest.raises(TaskExpired):
            client.wait(at, timeout=30)


@pytest_twisted.ensureDeferred
async def test_the_twisted_client_hears_an_expiry(daemon: DaemonProcess) -> None:
    client = await connect(reactor, f"tcp:127.0.0.1:{daemon.port}")
    try:
        task_id = await client.submit("t", b"x", queue="nobody", expires_in=0.2)
        with pytest.raises(TaskExpired):
            await client.outcome(task_id)
    finally:
        client.close()


def test_the_asyncio_client_hears_an_expiry(daemon: DaemonProcess) -> None:
    async def main() -> None:
        async with AsyncClient(daemon.client_address, timeout=10) as client:
            task_id = await client.submit("t", b"x", queue="nobody", expires_in=0.2)
            with pytest.raises(TaskExpired):
                await client.wait(task_id, timeout=30)
            first = await client.submit("t", b"a", queue="d", key="k", debounce="drop:1h")
            again = await client.submit("t", b"b", queue="d", key="k", debounce="drop:1h")
            assert again == first

    runner("asyncio")(main())
