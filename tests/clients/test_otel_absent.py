"""
Without OpenTelemetry nothing breaks, and nothing imports it: a process in
which it cannot be imported submits with the blocking client, and runs a
task whose delivery carries a trace (its handler sees the traceparent) and
one without, on the asyncio worker, against a real daemon.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import DaemonProcess

ROOT = Path(__file__).resolve().parents[2]

HIDDEN = """
import sys

class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Hidden())
"""
"""A C{-c} prelude: OpenTelemetry cannot be imported (as if it were not installed)."""

TRACE = "00" + "01" * 16 + "02" * 8 + "01"


def test_nothing_breaks_without_opentelemetry(daemon: DaemonProcess) -> None:
    script = HIDDEN + textwrap.dedent(
        f"""
        import asyncio
        from quicx.aio import AsyncWorker
        from quicx.clients.blocking import QuicxClient
        from quicx.protocol.taskflow import SubmitOptions

        def handler(payload, context):
            return context.traceparent

        def produce():
            with QuicxClient({daemon.client_address!r}) as client:
                trace = bytes.fromhex({TRACE!r}) + b"vendor=1"
                traced = SubmitOptions(trace=trace, result_ttl=60)
                (first,) = client.submit_many([("traced", b"x", traced)])
                assert client.result(first, 30) == "00-{"01" * 16}-{"02" * 8}-01"
                plain = client.submit("traced", b"y", keep_result=True)
                assert client.result(plain, 30) is None

        async def main():
            worker = AsyncWorker({{"traced": handler}})
            serving = worker.start({daemon.client_address!r})
            await asyncio.to_thread(produce)
            await worker.stop()
            await serving

        asyncio.run(main())
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print("loaded:", loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded: []"
