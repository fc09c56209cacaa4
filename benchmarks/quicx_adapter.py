"""
Quicx as an adapter of the peer harness (../shared/bench/peers), so that it
runs the harness's own workloads under the harness's rules, beside beanstalkd.

Run by C{python -m tools.bench} with this project's Python (the harness
itself needs only the standard library):

    python benchmarks/quicx_adapter.py bench --workload e2e --n 20000

(from anywhere: it puts the repository root on its path and on its children's
C{PYTHONPATH}, so that the workers import C{tools.bench:noop_worker}).

Server : twistd -n quicx on 127.0.0.1:11391, 256 MiB pool, no journal
put    : QuicxClient.submit(): one SUBMIT, returns when its OK arrives
worker : the stock `quicx worker` on a no-op handler, one connection with
         64 READY credits (tools.bench.CREDITS), as the bench's e2e
latency: QuicxClient.submit_and_wait(): SUBMIT, then block until DONE arrives
ready  : idle worker connections (control socket) // connections per worker
done   : tasks completed (control socket)
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = os.environ.get("QUICX_PEERS", str(ROOT.parent / "shared/bench/peers"))
sys.path[:0] = [HARNESS, str(ROOT)]
from harness.core import HOST, Adapter, main  # noqa: E402

from quicx import __version__  # noqa: E402
from quicx.clients.blocking import QuicxClient  # noqa: E402
from quicx.daemon.control import fetch_status  # noqa: E402
from tools.bench import CREDITS  # noqa: E402
from tools.launcher import QUICX, daemon_command, tools_environment  # noqa: E402

# The harness starts the workers with this environment.
os.environ.update(tools_environment())
SLOTS, CREDITS_PER_SLOT = CREDITS


class Quicx(Adapter):
    name = "quicx"
    port = 11391
    description = (
        "QuicxClient.submit (waits for OK); stock `quicx worker` (one connection per process"
        " with 64 READY credits, no-op handler on the reactor); latency = submit_and_wait;"
        " done = completed in status"
    )

    def versions(self):
        return {"quicx": __version__}

    def server_argv(self, workdir):
        self.control = str(Path(workdir) / "quicx-bench.sock")
        return daemon_command(
            f"--listen=tcp:{self.port}:interface={HOST}",
            f"--control={self.control}",
            "--pool-size=256M",
        )

    def worker_argv(self, index, max_jobs, max_seconds, workdir):
        return [QUICX, "worker", "tools.bench:noop_worker", f"-n{SLOTS}",
                f"--credits={CREDITS_PER_SLOT}", f"--connect=tcp:{HOST}:{self.port}"]  # fmt: skip

    def connect(self):
        self.client = QuicxClient(f"tcp:{HOST}:{self.port}", protocol=1)

    def close(self):
        self.client.close()

    def put(self, payload):
        self.client.submit("bench", payload)

    def roundtrip(self, payload, timeout_s):
        self.client.submit_and_wait("bench", payload, timeout=timeout_s)

    def _status(self):
        return fetch_status(self.control)

    def ready_workers(self):
        return self._status()["connections"]["idle_workers"] // SLOTS

    def completed(self):
        return self._status()["tasks"]["completed"]

    def failed(self):
        return self._status()["tasks"]["failed"]


if __name__ == "__main__":
    main(Quicx)
