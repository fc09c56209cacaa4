"""
The daemon's log: JSON lines (C{[log] format = json}), the stable ids of its
messages (docs/operations.md, "Log messages"), and limits hit logged without
flooding the log.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, Logger, LogLevel, formatEvent

from quicx.daemon.observe.logformat import json_line
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.protocol import wire
from quicx.protocol.wire import ErrorCode
from tests.conftest import DaemonProcess, config_option
from tests.fakes import default_pool, make_queue, submit_to, v2_producer_of
from tests.peer import Peer
from tests.test_docs import OPERATIONS, log_table
from tools.launcher import TWISTD

KEYS = {"time", "epoch", "level", "namespace", "log_id", "message", "fields"}
DOCUMENTED = log_table(OPERATIONS.read_text())


# -- one event, one line ---------------------------------------------------------------


def logged(emit: Any) -> dict[str, Any]:
    """The JSON line of the one event C{emit(log)} logs, parsed; it is one line."""
    lines: list[str] = []
    observer = cast(ILogObserver, lambda event: lines.append(json_line(event)))
    emit(Logger(namespace="quicx.test", observer=observer))
    (line,) = lines
    assert line.endswith("\n") and "\n" not in line[:-1]
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_a_json_line_has_the_documented_keys_and_the_fields_json_can_hold() -> None:
    line = logged(
        lambda log: log.warn(
            "refused {peer}: {reason}",
            log_id="limit.pool",
            peer="127.0.0.1:4242",
            reason="queue full:\nno room",
            count=3,
            share=0.5,
            tags=["a", "b"],
            raw=b"bytes",
            thing=object(),
            nan=float("nan"),
        )
    )
    assert line.keys() == KEYS
    assert line["level"] == "warn"
    assert line["namespace"] == "quicx.test"
    assert line["log_id"] == "limit.pool"
    assert line["message"] == "refused 127.0.0.1:4242: queue full:\nno room"
    assert line["fields"] == {
        "peer": "127.0.0.1:4242",
        "reason": "queue full:\nno room",
        "count": 3,
        "share": 0.5,
        "tags": ["a", "b"],
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])
    when = datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
    assert abs(when.timestamp() - line["epoch"]) < 0.001
    assert abs(line["epoch"] - time.time()) < 60


def test_a_failure_is_one_string_field_and_twisteds_lines_have_no_id() -> None:
    def fail(log: Logger) -> None:
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            log.failure("schedule {name}: firing failed", log_id="schedule.failed", name="n")

    line = logged(fail)
    assert (line["level"], line["message"]) == ("critical", "schedule n: firing failed")
    assert "Traceback" in line["failure"] and "ZeroDivisionError" in line["failure"]
    assert logged(lambda log: log.info("Main loop terminated."))["log_id"] is None
    # A twisted.python.log event ("Port closed" lines): its own keys are not fields.
    legacy = {
        "message": ("(TCP Port 1 Closed)",),
        "time": 1.5,
        "isError": 0,
        "system": "-",
        "log_text": "(TCP Port 1 Closed)",
        "log_format": "{log_text}",
        "log_time": 1.5,
        "log_level": LogLevel.info,
        "log_namespace": "log_legacy",
    }
    assert json.loads(json_line(legacy)) == {
        "time": "1970-01-01T00:00:01.500Z",
        "epoch": 1.5,
        "level": "info",
        "namespace": "log_legacy",
        "log_id": None,
        "message": "(TCP Port 1 Closed)",
        "fields": {},
    }


# -- limits hit: at once, then counted -------------------------------------------------


def test_a_limit_is_logged_at_once_then_once_per_interval_while_it_is_hit() -> None:
    events: list[dict[str, Any]] = []
    clock = Clock()
    queue = QueueService(
        default_pool(),
        clock=clock.seconds,
        scheduler=clock,
        failures=LogSummary(Logger(observer=cast(ILogObserver, events.append)), 5.0),
        limits=QueueLimits(declared={"mail": QueuePolicy(max_depth=1)}),
    )
    producer = v2_producer_of(queue)

    def submit(count: int) -> list[tuple[str, str]]:
        for _ in range(count):
            submit_to(queue, producer.session, b"t", b"x", "mail")
        return lines()

    def flush() -> list[tuple[str, str]]:
        queue.failures.flush()
        return lines()

    def lines() -> list[tuple[str, str]]:
        found = [(event["log_id"], formatEvent(event)) for event in events]
        assert all(event["log_level"] is LogLevel.warn for event in events)
        events.clear()
        return found

    refused = "refused producer: queue 'mail' is full (max_depth = 1)"
    assert submit(4) == [("limit.queue_depth", refused)]  # 1 OK, 3 refused
    assert flush() == [
        ("limit.queue_depth", f"2 more of limit.queue_depth in the last 5 s (the last: {refused})")
    ]
    # Still being hit: counted, not logged at once.
    assert submit(1) == []
    assert flush() == [
        ("limit.queue_depth", f"1 more of limit.queue_depth in the last 5 s (the last: {refused})")
    ]
    # A quiet interval: the next hit is news again.
    assert flush() == []
    assert flush() == []
    assert submit(2) == [("limit.queue_depth", refused)]
    # Refusals that are no limit are not logged.
    submit_to(queue, producer.session, b"t", b"x" * 100_000, "other")
    submit_to(queue, producer.session, b"t", b"x", "mail")
    too_large, full = producer.take()[-2:]
    assert (too_large.code, full.code) == (ErrorCode.PAYLOAD_TOO_LARGE, ErrorCode.QUEUE_FULL)
    assert flush() == [
        ("limit.queue_depth", f"2 more of limit.queue_depth in the last 5 s (the last: {refused})")
    ]


def test_a_summary_interval_of_0_logs_every_limit_hit() -> None:
    log: list[str] = []
    queue = make_queue(log=log, limits=QueueLimits(declared={"mail": QueuePolicy(max_depth=1)}))
    producer = v2_producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x", "mail")
    assert log == ["refused producer: queue 'mail' is full (max_depth = 1)"] * 2


# -- a real daemon ---------------------------------------------------------------------


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of C{text} parsed, each checked against the documented keys, ids, levels."""
    lines = [json.loads(line) for line in text.splitlines()]
    for line in lines:
        assert line.keys() == KEYS, line
        assert line["log_id"] is None or line["log_id"] in DOCUMENTED, line
        if line["log_id"] is not None:
            assert line["level"] in DOCUMENTED[line["log_id"]][0].split(", "), line
    return lines


def by_id(lines: list[dict[str, Any]], log_id: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["log_id"] == log_id]


START = ("daemon.start", "daemon.pool", "daemon.listening", "daemon.control", "daemon.ready")


def test_json_lines_from_start_to_stop_with_limits_hit(start_daemon) -> None:
    daemon = start_daemon("--log-format=json", "--max-depth=1", "--max-connections=2")
    daemon.wait_for_log('"daemon.ready"')
    with Peer(daemon.address) as producer, Peer(daemon.address):
        assert isinstance(producer.submit(b"t", b"p"), wire.Ok)
        for _ in range(3):
            assert producer.submit(b"t", b"p").message == "queue 'default' is full (max_depth = 1)"
        with Peer(daemon.address) as third:
            assert third.receive().message == "too many connections (max_connections = 2)"
            third.wait_closed()
        daemon.wait_for_log('"limit.connections"')
    assert daemon.stop() == 0
    lines = json_lines(daemon.log())
    ids = [line["log_id"] for line in lines]
    assert [i for i in ids if i in START] == list(START)
    assert ids.index("daemon.ready") < ids.index("daemon.signal") < ids.index("daemon.stopped")
    (start,) = by_id(lines, "daemon.start")
    assert start["fields"]["source"] == "built-in default"
    (listening,) = by_id(lines, "daemon.listening")
    assert listening["fields"]["address"] == f"127.0.0.1:{daemon.port}"
    assert by_id(lines, "daemon.ready")[0]["fields"] == {"pid": daemon.pid}
    assert by_id(lines, "daemon.signal")[0]["fields"] == {"signal": "SIGTERM"}
    (stopped,) = by_id(lines, "daemon.stopped")
    fields = {"queued": 1, "delayed": 0, "running": 0}
    assert (stopped["level"], stopped["fields"]) == ("warn", fields)
    # The first refusal at once, the other two counted until the stop flushed them.
    first, summary = by_id(lines, "limit.queue_depth")
    assert first["level"] == summary["level"] == "warn"
    assert first["fields"]["reason"] == "queue 'default' is full (max_depth = 1)"
    assert summary["fields"]["count"] == 2
    (connections,) = by_id(lines, "limit.connections")
    assert connections["fields"]["reason"] == "too many connections (max_connections = 2)"


def test_json_from_the_config_file_and_a_restart_on_the_journal(
    tmp_path: Path, start_daemon
) -> None:
    journal = tmp_path / "quicx.journal"
    option = config_option(tmp_path, f"[journal]\npath = {journal}\n[log]\nformat = json\n")
    first = start_daemon(option)
    with Peer(first.address) as producer:
        for _ in range(3):
            assert isinstance(producer.submit(b"t", b"p"), wire.Ok)
    assert first.stop() == 0
    (stopped,) = by_id(json_lines(first.log()), "daemon.stopped")
    assert (stopped["level"], stopped["fields"]["queued"]) == ("info", 3)
    second = start_daemon(option)
    second.wait_for_log('"daemon.ready"')
    assert second.stop() == 0
    (recovered,) = by_id(json_lines(second.log()), "journal.recovered")
    assert recovered["fields"]["tasks"] == 3
    assert recovered["fields"]["path"] == str(journal)


def test_quicx_start_logs_json(tmp_path: Path) -> None:
    log = tmp_path / "quicx.log"
    quicx = str(Path(sys.executable).with_name("quicx"))
    command = [
        quicx,
        "start",
        "--log-format=json",
        "--listen=tcp:0:interface=127.0.0.1",
        f"--control={tmp_path / 'c.sock'}",
        f"--pid-file={tmp_path / 'q.pid'}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while '"daemon.ready"' not in log.read_text():
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    ids = [line["log_id"] for line in json_lines(log.read_text()) if line["log_id"]]
    assert [i for i in ids if i in START] == list(START)
    assert ids[-2:] == ["daemon.signal", "daemon.stopped"]


@pytest.mark.parametrize(
    "twistd_options", [[], ["-n", "--logfile=quicx.log"]], ids=["daemon", "logfile"]
)
def test_twistd_refuses_json_it_would_not_write_to_stdout(
    tmp_path: Path, twistd_options: list[str]
) -> None:
    ran = subprocess.run(
        [TWISTD, *twistd_options, "--pidfile=", "quicx", "--log-format=json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
    )
    assert (ran.returncode, ran.stdout) == (1, "")
    assert ran.stderr == (
        "quicx: [log] format = json writes JSON lines to stdout: run twistd -n,"
        " without --logfile or --syslog\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_text_lines_are_unchanged_by_the_ids(daemon: DaemonProcess) -> None:
    log = daemon.wait_for_log("ready (pid")
    assert "[quicx.daemon.service.QuicxDaemon#info] ready (pid" in log
    assert "log_id" not in log and "daemon.start" not in log
