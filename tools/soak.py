"""
The soak test: C{python -m tools.soak}.  Not part of the test run.

Holds a mixed, partly hostile load on one daemon for a set time and prints
its resident memory and task counts at intervals:

  - a producer pipelining bursts of tasks (some refused when the queue is full);
  - a producer that submits and never reads a reply;
  - 2 worker processes: most tasks done, some failed, some held past the task
    timeout;
  - connections that send random garbage, huge length prefixes, one byte at
    a time, or nothing at all.

    python -m tools.soak --seconds 600 --interval 30

The daemon runs with a 64 MiB pool, a 2 s task timeout, a 2 s first-frame
deadline and a 64 KiB output cap.  See docs/operations.md, "Memory".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from quicx.clients.blocking import QuicxClient
from quicx.clients.worker import Worker
from quicx.daemon.control import fetch_status
from quicx.protocol import wire
from quicx.protocol.errors import QuicxError
from tools.launcher import DaemonError, DaemonProcess, cpu_seconds, rss, start_workers, stop_all

SOAK_CONFIG = """\
[server]
listen = tcp:0:interface=127.0.0.1
heartbeat_interval = 5
heartbeat_timeout = 15
[allocator]
pool_size = 64M
[tasks]
timeout = 2
max_attempts = 3
[limits]
first_frame_timeout = 2
max_output_buffer = 64K
max_connections = 2000
"""

soak_worker = Worker()


@soak_worker.handler("soak")
def mixed(payload: bytes) -> None:
    """Done, failed, or too slow, by the payload's first byte."""
    kind = payload[:1]
    if kind == b"f":
        raise ValueError("a planned failure")
    if kind == b"s":
        time.sleep(3)


class Load:
    """The hostile and friendly clients, each on its own thread."""

    def __init__(self, host: str, port: int, until: float) -> None:
        self.address = (host, port)
        self.until = until
        self.errors: list[str] = []

    def running(self) -> bool:
        return time.monotonic() < self.until

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._guard, args=(job,), daemon=True)
            for job in (
                self.producer,
                self.never_reads,
                self.garbage,
                self.huge_prefix,
                self.slowloris,
                self.idle,
            )
        ]
        for thread in threads:
            thread.start()
        return threads

    def _guard(self, job: Any) -> None:
        while self.running():
            try:
                job()
            except OSError:
                time.sleep(0.1)  # the daemon closed us, as it should: again
            except QuicxError as e:
                self.errors.append(str(e))
                time.sleep(0.1)

    def producer(self) -> None:
        kinds = [b"d"] * 18 + [b"f", b"s"]
        with QuicxClient(f"tcp:{self.address[0]}:{self.address[1]}", keep_outcomes=10_000) as c:
            while self.running():
                burst = [("soak", random.choice(kinds) + os.urandom(99)) for _ in range(500)]
                c.submit_many(burst, return_exceptions=True)
                time.sleep(0.05)

    def never_reads(self) -> None:
        sock = socket.create_connection(self.address)
        sock.setblocking(False)
        data = wire.encode_submit(b"soak", b"d" * 60) * 100
        while self.running():
            try:
                sock.send(data)
            except BlockingIOError:
                time.sleep(0.05)
        sock.close()

    def garbage(self) -> None:
        with socket.create_connection(self.address) as sock:
            sock.sendall(os.urandom(random.randint(1, 4000)))
        time.sleep(0.01)

    def huge_prefix(self) -> None:
        with socket.create_connection(self.address) as sock:
            sock.sendall(struct.pack(">BBI", 1, wire.MessageType.SUBMIT, 0xFFFFFFFF))
            end = time.monotonic() + 5
            while self.running() and time.monotonic() < end:
                sock.sendall(os.urandom(65536))
                time.sleep(0.01)

    def slowloris(self) -> None:
        with socket.create_connection(self.address) as sock:
            for byte in wire.encode_submit(b"soak", b"d" * 100):
                if not self.running():
                    return
                sock.sendall(bytes((byte,)))
                time.sleep(0.5)

    def idle(self) -> None:
        sockets = [socket.create_connection(self.address) for _ in range(200)]
        time.sleep(3)  # past the first-frame deadline: all closed by the daemon
        for sock in sockets:
            sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.soak",
        description="Hold a mixed, hostile load on one daemon and print its memory, CPU"
        " and task counts every --interval seconds (see docs/operations.md).",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between reports")
    parser.add_argument("--keep", metavar="DIR", help="copy the daemon's and workers' logs here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quicx-soak-") as directory:
        config = Path(directory) / "quicx.conf"
        config.write_text(SOAK_CONFIG)
        try:
            with DaemonProcess(Path(directory), [f"--config={config}"]) as daemon:
                workers = start_workers(
                    "tools.soak:soak_worker",
                    2,
                    ["-n8", f"--connect={daemon.client_address}"],
                    daemon.directory,
                )
                try:
                    return soak(daemon, args.seconds, args.interval)
                finally:
                    stop_all(workers)
        except DaemonError as e:
            raise SystemExit(f"tools.soak: the daemon did not start: {e}") from None
        finally:
            if args.keep:
                shutil.copytree(directory, args.keep, dirs_exist_ok=True)


def soak(daemon: DaemonProcess, seconds: float, interval: float) -> int:
    """Hold the load for C{seconds}, a line of figures every C{interval}; 0 if it lived."""
    control = str(daemon.control_path)
    start = time.monotonic()
    first_rss = rss(daemon.pid)
    load = Load(*daemon.address, start + seconds)
    threads = load.start()
    peak = first_rss
    columns = ("s", "RSS MiB", "submitted", "completed", "failed", "timed out")
    columns += ("rejected", "queued", "conns", "paused")
    widths = (6, 8, 10, 10, 7, 9, 9, 7, 6, 6)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    while load.running():
        time.sleep(min(interval, max(0.0, load.until - time.monotonic())))
        status = fetch_status(control)
        tasks, connections = status["tasks"], status["connections"]
        now = rss(daemon.pid)
        peak = max(peak, now)
        print(
            f"{time.monotonic() - start:6.0f} {now / 2**20:8.1f}"
            f" {tasks['submitted']:10,} {tasks['completed']:10,} {tasks['failed']:7,}"
            f" {tasks['timed_out']:9,} {tasks['rejected']:9,} {tasks['queued']:7,}"
            f" {connections['total']:6,} {connections['paused']:6,}",
            flush=True,
        )
    for thread in threads:
        thread.join(10)
    alive = daemon.alive()
    summary = {
        "seconds": seconds,
        "daemon_alive": alive,
        "rss_start": first_rss,
        "rss_peak": peak,
        "pool_size": 64 << 20,
        "daemon_cpu_s": cpu_seconds(daemon.pid) if alive else None,
        "status": fetch_status(control) if alive else None,
        "client_errors": load.errors[:5],
    }
    print(json.dumps(summary))
    return 0 if alive else 1


if __name__ == "__main__":
    raise SystemExit(main())
