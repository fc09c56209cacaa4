"""
Quiet, terminate and routing end to end: a real daemon, real C{quicx worker}
processes, the real CLI (C{quicx workers}, C{quiet}, C{terminate}, C{task}).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quicx.clients import operations
from quicx.clients.blocking import QuicxClient
from quicx.protocol.codec import MessageType
from quicx.protocol.errors import Forbidden
from quicx.protocol.taskflow import encode_ready
from quicx.protocol.workers import encode_announce
from tests.conftest import DaemonProcess, config_option
from tests.interop.raw import Wire

QUICX = str(Path(sys.executable).with_name("quicx"))
DEADLINE = 30.0

HANDLERS = """
import os, time
from pathlib import Path

HERE = Path(__file__).parent

def record(kind):
    def handler(payload):
        name = payload.decode()
        with open(HERE / "ran.txt", "a") as out:
            out.write(f"{os.getpid()} {kind} {name}\\n")
        gate = HERE / f"{name}.gate"
        if name.startswith("hold"):
            (HERE / f"{name}.started").write_text("")
            while not gate.exists():
                time.sleep(0.02)
        return name
    return handler

mail = {"mail": record("mail")}
pdf = {"pdf": record("pdf")}
both = {"mail": record("mail"), "pdf": record("pdf")}
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(HANDLERS)
    return tmp_path


@pytest.fixture
def spawn(workspace: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start C{quicx worker TARGET} processes for a daemon; kill them all after."""
    started: list[subprocess.Popen[str]] = []
    path = os.pathsep.join(filter(None, [str(workspace), os.environ.get("PYTHONPATH")]))

    def start(daemon: DaemonProcess, target: str, *flags: str) -> subprocess.Popen[str]:
        log = (workspace / f"worker{len(started)}.log").open("w")
        worker = subprocess.Popen(
            [QUICX, "worker", target, f"--connect={daemon.client_address}", *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()
        worker.wait()


@pytest.fixture
def start_worker(daemon: DaemonProcess, spawn: Callable[..., Any]) -> Callable[..., Any]:
    """Start C{quicx worker TARGET} processes for the test's daemon."""
    return lambda target, *flags: spawn(daemon, target, *flags)


def quicx(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """An admin command, through the daemon's control socket."""
    return run(*args, f"--control={daemon.control_path}")


def look(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """A command that looks, over TCP."""
    return run(*args, f"--connect={daemon.client_address}")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QUICX, *args], capture_output=True, text=True, timeout=60)


def until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while not (found := condition()):
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)
    return found


def workers_now(client: QuicxClient, count: int) -> list[dict[str, Any]]:
    return until(lambda: len(w := client.workers()) == count and w, f"{count} workers")


def ran(workspace: Path) -> list[list[str]]:
    path = workspace / "ran.txt"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_each_worker_runs_only_the_types_it_handles(
    daemon: DaemonProcess, workspace: Path, start_worker: Callable[..., Any]
) -> None:
    mail = start_worker("jobs:mail", "--name", "mailer")
    pdf = start_worker("jobs:pdf")
    with QuicxClient(daemon.client_address) as client:
        records = workers_now(client, 2)
        assert sorted(tuple(r["types"]) for r in records) == [("mail",), ("pdf",)]
        ids = [client.submit(kind, f"{kind}{n}") for n in range(10) for kind in ("mail", "pdf")]
        for task_id in ids:
            client.wait(task_id, timeout=DEADLINE)
        nobody = client.submit("nobody", "x")
        by_pid = {str(mail.pid): "mail", str(pdf.pid): "pdf"}
        assert len(ran(workspace)) == 20
        assert all(by_pid[pid] == kind for pid, kind, _ in ran(workspace))
        assert client.status()["tasks"]["unroutable"] == 1
    shown = look(daemon, "task", str(nobody))
    assert "no connected worker handles type nobody" in shown.stdout, shown
    listed = look(daemon, "workers")
    assert listed.returncode == 0 and "mailer" in listed.stdout and "active" in listed.stdout


def test_a_quiet_worker_finishes_its_task_and_takes_no_more(
    daemon: DaemonProcess, workspace: Path, start_worker: Callable[..., Any]
) -> None:
    worker = start_worker("jobs:both", "--credits", "1")
    with QuicxClient(daemon.client_address) as client:
        workers_now(client, 1)
        held = client.submit("mail", "hold1")
        until(lambda: (workspace / "hold1.started").exists(), "the task to start")
        quieted = quicx(daemon, "quiet", "--all")
        assert (quieted.returncode, quieted.stdout) == (0, "quiet: worker 2\n"), quieted
        waiting = client.submit("mail", "after")
        (workspace / "hold1.gate").write_text("")
        assert client.wait(held, timeout=DEADLINE) == "hold1"
        [record] = workers_now(client, 1)
        assert (record["state"], record["holding"]) == ("quiet", 0)
        assert client.task(waiting)["state"] == "queued"
        assert [name for _, _, name in ran(workspace)] == ["hold1"]
        assert worker.poll() is None  # quiet keeps the process, idle
        assert json.loads(look(daemon, "workers", "--json").stdout)[0]["state"] == "quiet"
        # Terminate ends it, with status 0; a new worker runs what waits.
        assert quicx(daemon, "terminate", str(record["id"])).returncode == 0
        assert worker.wait(DEADLINE) == 0
        start_worker("jobs:both")
        assert client.wait(waiting, timeout=DEADLINE) == "after"


def test_a_terminated_worker_s_task_runs_elsewhere(
    daemon: DaemonProcess, workspace: Path, start_worker: Callable[..., Any]
) -> None:
    first = start_worker("jobs:both", "--name", "first")
    with QuicxClient(daemon.client_address) as client:
        workers_now(client, 1)
        held = client.submit("pdf", "hold2")
        until(lambda: (workspace / "hold2.started").exists(), "the task to start")
        terminated = quicx(daemon, "terminate", "first")
        assert terminated.returncode == 0 and terminated.stdout.startswith("terminating: worker")
        # It stops now, not waiting for the handler that runs.
        assert first.wait(DEADLINE) == 0
        assert client.task(held)["state"] == "queued"
        (workspace / "hold2.gate").write_text("")
        second = start_worker("jobs:both")
        assert client.wait(held, timeout=DEADLINE) == "hold2"
        assert [pid for pid, _, name in ran(workspace) if name == "hold2"] == [
            str(first.pid),
            str(second.pid),
        ]
    log = (workspace / "worker0.log").read_text()
    assert "terminates this worker" in log and "Traceback" not in log


def test_steering_refuses_what_it_cannot_do(daemon: DaemonProcess) -> None:
    neither = quicx(daemon, "quiet")
    assert (neither.returncode, neither.stderr) == (
        2,
        "quicx: quiet needs WORKER or --all (not both)\n",
    )
    unknown = quicx(daemon, "terminate", "77")
    assert unknown.returncode == 1 and "no worker 77 is connected" in unknown.stderr
    named = quicx(daemon, "quiet", "nobody")
    assert named.returncode == 1 and "no connected worker is named 'nobody'" in named.stderr
    # Over TCP, without the admin role: refused.
    with QuicxClient(daemon.client_address) as client, pytest.raises(Forbidden, match="STEER"):
        client.quiet(0)
    assert quicx(daemon, "terminate", "--all").stdout == "no version-2 worker to terminate\n"


def test_tasks_set_aside_survive_a_kill_9(
    start_daemon: Callable[..., DaemonProcess],
    tmp_path: Path,
    workspace: Path,
    spawn: Callable[..., Any],
) -> None:
    journal = tmp_path / "quicx.journal"
    # fsync = always: an OK is sent once its record is written (with everysec a
    # kill -9 may lose the last OKs' records, as docs/operations.md says).
    config = f"[journal]\npath = {journal}\nfsync = always\n"
    daemon = start_daemon(config_option(tmp_path, config))
    spawn(daemon, "jobs:mail")
    with QuicxClient(daemon.client_address) as client:
        workers_now(client, 1)
        ids = [client.submit("pdf", f"pdf{n}") for n in range(5)]
        until(lambda: client.status()["tasks"]["unroutable"] == 5, "five tasks set aside")
    daemon.kill()
    daemon.start()
    # Back, in order, for the worker of their type.
    spawn(daemon, "jobs:pdf")
    until(lambda: len(ran(workspace)) == 5, "the five tasks to run")
    assert [name for _, kind, name in ran(workspace)] == [f"pdf{n}" for n in range(5)]
    with QuicxClient(daemon.client_address) as client:
        until(lambda: client.status()["tasks"]["completed"] == 5, "their outcomes")
        assert ids == [1, 2, 3, 4, 5] and client.status()["tasks"]["queued"] == 0


def test_workers_lists_every_worker_over_pages_when_one_answer_would_not_fit(
    daemon: DaemonProcess,
) -> None:
    """
    Six workers announcing 256 types of 255 bytes each are about 400 KB of
    records: more than one WORKERS answer carries (256 KiB), so the client
    reads them in two pages, every worker once.
    """
    types = [b"%03d" % i + b"t" * 252 for i in range(256)]
    peers = [Wire(("127.0.0.1", daemon.port)) for _ in range(6)]
    for n, peer in enumerate(peers):
        peer.send(encode_announce(types, name=f"wide-{n}"))
        peer.send(encode_ready(1, ["paged"]))
        assert peer.read()[0] == MessageType.WAIT
    with QuicxClient(daemon.client_address) as client:
        listed = [w for w in client.workers() if w["name"].startswith("wide-")]
        first = client._call(operations.WorkerPages().request())
    assert sorted(w["name"] for w in listed) == [f"wide-{n}" for n in range(6)]
    assert all(len(w["types"]) == 256 for w in listed)
    assert first["next"] is not None and len(first["workers"]) < 6
    for peer in peers:
        peer.close()
