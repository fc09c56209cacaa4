"""
A handler's failure keeps its exception: its type and message on the
reason's first line, then its traceback cut to fit (the last frames kept),
shown by C{quicx task}, C{quicx dlq show}, the events and the worker's log;
the worker says where it works when it starts, and each time it reconnects.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from twisted.python.failure import Failure

from quicx.clients.handlers import _timed_call
from quicx.clients.reports import Unrecoverable, failure_reason
from tests.cli.test_cli import ROOT, Background, env_for, quicx
from tests.cli.test_cli import background as background  # a fixture
from tests.conftest import DaemonProcess
from tests.daemon.observe.test_events import read_events

HANDLERS = """
import sys


def lookup(payload):
    return find(payload.decode())


def find(key):
    raise KeyError(key)


def leave(payload):
    sys.exit(3)


def deep(payload):
    dive(40)


def dive(depth):
    if depth:
        dive(depth - 1)
    raise ValueError("at the bottom")


handlers = {"lookup": lookup, "leave": leave, "deep": deep}
"""


def failed(function, *args: object) -> Failure:
    """The Failure of C{function(*args)}, called as the worker calls a handler."""
    outcome, _ = _timed_call(function, args)
    assert isinstance(outcome, Failure)
    return outcome


def missing(payload: bytes) -> None:
    {}[payload.decode()]


def recurse(depth: int) -> None:
    if depth:
        recurse(depth - 1)
    raise KeyError("missing")


def test_the_reason_is_the_exception_then_its_traceback() -> None:
    reason = failure_reason(failed(missing, b"missing"))
    first, *rest = reason.split("\n")
    assert first == "KeyError: 'missing'"
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[1] == f'  File "{__file__}", line {missing.__code__.co_firstlineno + 1}, in missing'
    assert rest[2].strip() == "{}[payload.decode()]"
    # Only the handler's frames: not the worker's own, which call it.
    assert "worker.py" not in reason and len(rest) == 3


def test_sys_exit_and_unrecoverable_and_no_handler() -> None:
    assert failure_reason(failed(sys.exit, 3)) == "SystemExit: 3"  # no frame of the handler's
    assert failure_reason(failed(lambda: sys.exit(3))).split("\n")[0] == "SystemExit: 3"

    def refuse() -> None:
        try:
            int("x")
        except ValueError as e:
            raise Unrecoverable("bad payload") from e

    first, cause, header, *_ = failure_reason(failed(refuse)).split("\n")
    assert first == "bad payload"
    assert cause == "(from ValueError: invalid literal for int() with base 10: 'x')"
    assert header == "Traceback (most recent call last):"
    assert failure_reason(Failure(LookupError("no handler for: t"))) == "no handler for: t"
    assert failure_reason(failed(lambda: missing(b""))).startswith("KeyError: ''\nTraceback")


def test_a_long_traceback_keeps_its_last_frames_within_the_limit() -> None:
    failure = failed(recurse, 40)
    for limit in (1024, 400, 200):
        reason = failure_reason(failure, limit)
        assert len(reason.encode()) <= limit
        lines = reason.split("\n")
        assert lines[:2] == ["KeyError: 'missing'", "Traceback (most recent call last):"]
        assert re.fullmatch(r"  \.\.\. \(\d+ earlier frames? cut\)", lines[2]), lines[2]
        assert lines[-1].strip() == 'raise KeyError("missing")'
    assert failure_reason(failure, 30) == "KeyError: 'missing'"
    assert failure_reason(failure, 10) == "KeyErro..."
    # A message of many bytes per character is cut on a character's edge.
    wide = failure_reason(failed(lambda: missing("é".encode() * 600)), 101)
    assert len(wide.encode()) <= 101 and wide.endswith("...")


def test_a_real_worker_reports_logs_and_shows_the_exception(
    tmp_path: Path, start_daemon, background
) -> None:
    events = tmp_path / "events"
    daemon: DaemonProcess = start_daemon(f"--events={events}")
    (tmp_path / "handlers.py").write_text(HANDLERS)
    env = {**env_for(daemon), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    worker: Background = background("worker", "handlers:handlers", env=env)
    worker.wait_for(
        rf"worker for tcp:127\.0\.0\.1:{daemon.port}: queues the default queue;"
        r" handlers deep, leave, lookup; 1 connection\(s\) to each"
    )
    worker.wait_for(rf"connected to tcp:127\.0\.0\.1:{daemon.port} \(protocol version 2\)")

    submitted = quicx(
        "submit", "lookup", "missing", "--retries", "1", "--backoff", "fixed:0s", env=env
    )
    assert submitted.returncode == 0, submitted.stderr
    task_id = int(submitted.stdout.split()[0])
    shown = wait_for_state(task_id, "dead", env)
    assert shown.splitlines()[1] == "  dead after 2 failures: KeyError: 'missing'"
    assert "    Traceback (most recent call last):" in shown.splitlines()
    assert re.search(r'^      File ".*handlers\.py", line 10, in find$', shown, re.M), shown
    assert "        raise KeyError(key)" in shown.splitlines()

    dead = quicx("dlq", "show", str(task_id), env=env)
    assert dead.returncode == 0, dead.stderr
    lines = dead.stdout.splitlines()
    assert lines[2] == "  reason: KeyError: 'missing'"
    assert lines[3] == "    Traceback (most recent call last):"
    assert lines[-2].strip() == "raise KeyError(key)" and lines[-1].startswith("  payload:")
    listed = quicx("dlq", "list", env=env)
    assert "KeyError: 'missing' ..." in listed.stdout and "Traceback" not in listed.stdout

    exited = quicx("submit", "leave", "x", "--wait", "--timeout", "30", env=env)
    assert exited.returncode == 1
    assert exited.stdout.splitlines()[1] == f"task {task_id + 1} failed: SystemExit: 3"

    # The worker's log: each failure, with its traceback.
    worker.wait_for(
        rf"task {task_id} \(lookup, attempt 1\) failed: KeyError: 'missing'\n"
        r"\tTraceback \(most recent call last\):\n"  # Twisted's text log indents with a tab
        r'\t  File ".*handlers\.py", line 6, in lookup\n'
    )
    worker.wait_for(rf"task {task_id + 1} \(leave, attempt 1\) failed: SystemExit: 3")

    # The worker says it reconnected, once, after a restart of its daemon.
    port = daemon.port
    assert daemon.stop() == 0
    records = [r for r in read_events(events) if r["task"] == task_id]
    reasons = [r.get("reason") for r in records if r["event"] in ("retrying", "failed", "dead")]
    assert len(reasons) == 3 and all(
        r is not None and r.startswith("KeyError: 'missing'\nTraceback") for r in reasons
    )
    daemon.args.append(f"--listen=tcp:{port}:interface=127.0.0.1")
    daemon.start()
    worker.wait_for(rf"reconnected to tcp:127\.0\.0\.1:{port}", timeout=30)
    assert len(re.findall("reconnected to", worker.log())) == 1


def test_the_worker_cuts_a_reason_to_what_its_daemon_takes(
    tmp_path: Path, start_daemon, background
) -> None:
    """A daemon that takes shorter reasons than 1,024 bytes says so, and gets them."""
    daemon: DaemonProcess = start_daemon("--max-reason-length=300")
    (tmp_path / "handlers.py").write_text(HANDLERS)
    env = {**env_for(daemon), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    worker = background("worker", "handlers:handlers", env=env)
    # The submit's --wait is not the worker's start-up time (slow under load).
    worker.wait_for(rf"connected to tcp:127\.0\.0\.1:{daemon.port} \(protocol version 2\)")
    failed = quicx("submit", "deep", "x", "--wait", "--timeout", "120", env=env)
    assert failed.returncode == 1, failed.stderr
    reason = failed.stdout.split("failed: ", 1)[1].rstrip("\n")
    assert 200 < len(reason.encode()) <= 300
    lines = reason.split("\n")
    assert lines[:2] == ["ValueError: at the bottom", "Traceback (most recent call last):"]
    assert re.fullmatch(r"  \.\.\. \(\d+ earlier frames cut\)", lines[2])
    assert lines[-1].strip() == 'raise ValueError("at the bottom")'


def wait_for_state(task_id: int, state: str, env: dict[str, str]) -> str:
    """C{quicx task ID}'s output once the task is in C{state}."""
    deadline = time.monotonic() + 30
    while True:
        asked = quicx("task", str(task_id), "--json", env=env)
        if asked.returncode == 0 and json.loads(asked.stdout)["state"] == state:
            return quicx("task", str(task_id), env=env).stdout
        assert time.monotonic() < deadline, asked.stdout + asked.stderr
        time.sleep(0.1)


def test_a_reason_with_terminal_escapes_is_printed_escaped(
    tmp_path: Path, start_daemon, background
) -> None:
    """
    A handler's message may hold what its producer sent (C{ValueError(payload)}):
    C{quicx submit --wait} and C{quicx result} printed it raw, so a payload's
    escapes reached the operator's terminal (a title, a cleared screen).
    """
    daemon: DaemonProcess = start_daemon()
    (tmp_path / "shouting.py").write_text(
        "def shout(payload):\n    raise ValueError(payload.decode())\n\n"
        'handlers = {"shout": shout}\n'
    )
    env = {**env_for(daemon), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    worker = background("worker", "shouting:handlers", env=env)
    worker.wait_for(rf"connected to tcp:127\.0\.0\.1:{daemon.port} \(protocol version 2\)")
    hostile = "\x1b]0;owned\x07\x1b[2Jgone\rcover"
    waited = quicx("submit", "shout", hostile, "--wait", "--timeout", "120", env=env)
    assert waited.returncode == 1, (waited.stdout, waited.stderr)
    submitted = quicx("submit", "shout", hostile, env=env)
    asked = quicx("result", submitted.stdout.strip(), "--wait", "--timeout", "120", env=env)
    assert asked.returncode == 1, (asked.stdout, asked.stderr)
    for shown in (waited.stdout, asked.stdout):
        first = next(line for line in shown.splitlines() if " failed: " in line)
        assert first.endswith(r"failed: ValueError: \x1b]0;owned\x07\x1b[2Jgone\rcover"), shown
        assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown
        assert "Traceback (most recent call last):" in shown  # the rest as before
