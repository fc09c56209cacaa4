"""
`quicx events` against a real daemon on loopback: live lines as tasks run,
filters, --json and --count for scripts, the missed-events line of a reader
too slow to keep up, and the ways it ends (a usage error, Ctrl-C, a closed pipe).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

from quicx.clients.blocking import QuicxClient
from quicx.daemon.control import fetch_status
from quicx.protocol import link, outcomes, taskflow
from tests.cli.test_cli import QUICX, env_for, quicx
from tests.conftest import DaemonProcess
from tests.peer import Peer


def wait_for_watchers(daemon: DaemonProcess, count: int = 1, timeout: float = 30) -> None:
    """Wait until C{count} connections watch the daemon's events."""
    deadline = time.monotonic() + timeout
    while fetch_status(str(daemon.control_path))["events"]["subscribers"] != count:
        assert time.monotonic() < deadline, "the command never started watching"
        time.sleep(0.05)


def run(daemon: DaemonProcess, queue: str, task_type: str = "t", reason: str = "") -> int:
    """Submit a task to C{queue}; a worker takes it and ACKs it (NACKs it with C{reason})."""
    with QuicxClient(daemon.client_address) as client:
        task_id = client.submit(task_type, b"x", queue=queue)
    with Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(1, [queue]))
        task = worker.receive()
        assert isinstance(task, taskflow.Task) and task.task_id == task_id
        if reason:
            worker.send(outcomes.encode_nack(task_id, task.token, reason))
        else:
            worker.send(outcomes.encode_ack(task_id, task.token))
        worker.send(link.HEARTBEAT_FRAME)
        worker.receive()  # its PONG: the outcome was taken
    return task_id


def follow(daemon: DaemonProcess, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """C{quicx events ARGS} in the background, once it watches."""
    process = subprocess.Popen(
        [QUICX, "events", *args],
        text=True,
        env=env_for(daemon),
        **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs},
    )
    wait_for_watchers(daemon)
    return process


def test_follow_prints_a_line_per_event_as_it_happens(daemon: DaemonProcess) -> None:
    process = follow(daemon, "--follow")
    try:
        done = run(daemon, "mail", "send_email")
        failed = run(daemon, "mail", "send_email", "SMTP 550\nno such user")
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(6)]  # live: no need to stop it
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 130  # Ctrl-C ends it quietly
    assert process.stderr is not None and process.stderr.read() == ""
    cells = [line.split() for line in lines]
    assert [c[1:5] for c in cells] == [
        ["submitted", f"#{done}", "mail", "send_email"],
        ["dispatched", f"#{done}", "mail", "send_email"],
        ["done", f"#{done}", "mail", "send_email"],
        ["submitted", f"#{failed}", "mail", "send_email"],
        ["dispatched", f"#{failed}", "mail", "send_email"],
        ["failed", f"#{failed}", "mail", "send_email"],
    ]
    assert all(c[0].endswith("Z") and len(c[0]) == len("12:00:00.000Z") for c in cells)
    assert cells[1][5:7] == ["worker", cells[2][6]]
    assert lines[5].rstrip().endswith("reason: SMTP 550 no such user")


def test_count_json_and_filters_for_scripts(daemon: DaemonProcess) -> None:
    process = follow(daemon, "--count=2", "--json", "--queue=a", "--queue=c", "--kind=done")
    first = run(daemon, "a")
    run(daemon, "b")
    third = run(daemon, "c")
    out, err = process.communicate(timeout=30)
    assert (process.returncode, err) == (0, "")
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["event"], r["task"], r["queue"]) for r in records] == [
        ("done", first, "a"),
        ("done", third, "c"),
    ]
    assert set(records[0]) == {"v", "t", "event", "task", "type", "size", "producer", "worker"} | {
        "attempt",
        "queue",
        "priority",
    }
    # The daemon has seen it go.
    wait_for_watchers(daemon, 0)


def test_a_reader_too_slow_is_told_how_many_events_it_missed(start_daemon) -> None:
    daemon = start_daemon("--allow=ok", "--events-max-held=10", "--max-output-buffer=4096")
    process = follow(daemon, "--follow", "--kind=rejected")
    total = 60_000
    with QuicxClient(daemon.client_address) as client:
        # Each refused SUBMIT is one event; the command, its output unread, falls behind.
        refused = client.submit_many((("no", b"") for _ in range(total)), return_exceptions=True)
    assert len(refused) == total
    assert process.stdout is not None
    shown = missed = 0
    while shown + missed < total:
        line = process.stdout.readline()
        if line.startswith("missed "):
            missed += int(line.split()[1].replace(",", ""))
        else:
            assert line.split()[1] == "rejected", line
            shown += 1
    assert missed > 0 and shown + missed == total
    assert fetch_status(str(daemon.control_path))["events"]["dropped"] == missed
    process.send_signal(signal.SIGINT)
    assert process.wait(15) == 130


def test_without_follow_or_count_it_is_a_usage_error(daemon: DaemonProcess) -> None:
    result = quicx("events", env=env_for(daemon))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "quicx: events: give --follow, or --count N to stop after N events\n"
    bad = quicx("events", "--follow", "--kind=finished", env=env_for(daemon))
    assert bad.returncode == 2 and "invalid choice: 'finished'" in bad.stderr


def test_a_reader_that_goes_away_ends_it_quietly(daemon: DaemonProcess) -> None:
    # `quicx events --follow | head -0`: the first line meets a closed pipe.
    read, write = os.pipe()
    os.close(read)
    try:
        process = follow(daemon, "--follow", stdout=write)
    finally:
        os.close(write)
    run(daemon, "q")
    assert process.wait(15) == 141
    assert process.stderr is not None and process.stderr.read() == ""


def test_no_daemon_is_one_line(tmp_path) -> None:
    result = quicx("events", "--follow", "--connect=tcp:127.0.0.1:1")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("quicx: cannot connect to tcp:127.0.0.1:1")
    assert len(result.stderr.splitlines()) == 1
