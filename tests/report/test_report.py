"""
The PySpark report, computed by a real local Spark from the event files of a
real daemon that ran a scripted workload (failures, slow tasks, a worker
killed mid-task, tasks at other priorities and in a queue nobody serves,
tasks cancelled, purged and left behind), checked against a plain-Python
computation over the same events.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from quicx.clients.blocking import QuicxClient
from quicx.daemon.control import fetch_status
from quicx.protocol import wire
from tests.peer import Peer

HANDLERS = """\
import os, time
from quicx.clients.worker import Worker

MARK = {mark!r}
worker = Worker()


def run(payload: bytes) -> None:
    kind = payload[:1]
    if kind == b"k" and not os.path.exists(MARK):
        open(MARK, "w").close()
        time.sleep(60)  # killed here
    if kind == b"f":
        raise ValueError("bad address" if payload[1:2] == b"a" else "over quota")
    if kind == b"s":
        time.sleep(0.05)


worker.register("mail", run)
worker.register("sms", run)
"""


def percentile(values: list[int], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    low = math.floor(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def plain_python(directory: Path) -> dict:
    """The report's numbers, computed directly from the NDJSON lines."""
    records = [
        json.loads(line)
        for path in sorted(directory.glob("events-*.ndjson"))
        for line in path.read_text().splitlines()
    ]
    counts: dict[str, Counter] = defaultdict(Counter)
    by_queue: dict[tuple[str, int], Counter] = defaultdict(Counter)
    submitted, dispatch, outcome = {}, {}, {}
    first_dispatch: dict[int, int] = {}
    cancelled: set[int] = set()
    for r in records:
        counts[r["type"]][r["event"]] += 1
        if r["event"] != "rejected":
            by_queue[r["queue"], r["priority"]][r["event"]] += 1
        task = r["task"]
        if r["event"] == "submitted":
            submitted[task] = (r["t"], r["type"], (r["queue"], r["priority"]))
        elif r["event"] == "dispatched":
            first_dispatch.setdefault(task, r["t"])
            dispatch[task, r["attempt"]] = (r["t"], r["worker"])
        elif r["event"] in ("done", "failed"):
            outcome[task] = r
        elif r["event"] == "cancelled":
            cancelled.add(task)
    waits, runs = defaultdict(list), defaultdict(list)
    queue_waits: dict[tuple[str, int], list[int]] = defaultdict(list)
    busy: Counter = Counter()
    tasks_by_worker: Counter = Counter()
    for task, (t, kind, place) in submitted.items():
        if task in first_dispatch:
            waits[kind].append(first_dispatch[task] - t)
            queue_waits[place].append(first_dispatch[task] - t)
    for task, r in outcome.items():
        if (task, r["attempt"]) in dispatch:
            t, worker = dispatch[task, r["attempt"]]
            runs[r["type"]].append(r["t"] - t)
            busy[worker] += r["t"] - t
            tasks_by_worker[worker] += 1
    # The worker's reason, less the traceback it sends after it.
    reasons = Counter(
        r["reason"].split("\nTraceback")[0] for r in outcome.values() if r["event"] == "failed"
    )
    never = {task for task in submitted if task not in outcome and task not in cancelled}
    for task in never:
        by_queue[submitted[task][2]]["never_completed"] += 1
    return {
        "records": records,
        "counts": counts,
        "by_queue": by_queue,
        "queue_waits": queue_waits,
        "waits": waits,
        "runs": runs,
        "busy": busy,
        "tasks_by_worker": tasks_by_worker,
        "reasons": reasons,
        "never": never,
    }


def run_workload(tmp_path: Path, start_daemon) -> tuple[Path, dict]:
    """Run the workload; return the events' directory and the daemon's last status."""
    events = tmp_path / "events"
    daemon = start_daemon(f"--events={events}", "--drain-timeout=0")
    (tmp_path / "handlers.py").write_text(HANDLERS.format(mark=str(tmp_path / "killed")))
    quicx = str(Path(sys.executable).with_name("quicx"))
    address = f"--connect=tcp:127.0.0.1:{daemon.port}"

    def worker(slots: int) -> subprocess.Popen:
        return subprocess.Popen(
            [quicx, "worker", "handlers:worker", f"-n{slots}", address],
            cwd=tmp_path,
            stderr=subprocess.DEVNULL,
        )

    doomed = worker(1)
    with (
        Peer(daemon.address) as producer,
        QuicxClient(f"tcp:127.0.0.1:{daemon.port}") as client,
        QuicxClient(f"unix:{daemon.control_path}") as admin,
    ):
        assert producer.submit(b"mail", b"k-killed-mid-task").task_id == 1
        deadline = time.monotonic() + 15
        while not (tmp_path / "killed").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        survivor = worker(2)
        try:
            kinds = [b"ok", b"s", b"fa", b"fq", b"ok", b"s"]
            for n in range(30):
                task_type = b"mail" if n % 3 else b"sms"
                producer.submit(task_type, kinds[n % len(kinds)] + b"-%d" % n)
            for n in range(6):  # the default queue, above the others
                client.submit("mail", b"ok-urgent-%d" % n, priority=7)
            deadline = time.monotonic() + 30
            while True:
                tasks = fetch_status(str(daemon.control_path))["tasks"]
                if tasks["completed"] + tasks["failed"] == 37:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            survivor.terminate()
            survivor.wait()
        # Tasks no worker will take: one cancelled by its producer, two
        # purged with their queue, the rest dropped at stop.
        producer.submit(b"sms", b"ok-left-1")
        producer.submit(b"mail", b"ok-left-2")
        bulk = [client.submit("sms", b"ok-bulk-%d" % n, queue="bulk", priority=3) for n in range(3)]
        client.cancel(bulk[1])
        for n in range(2):
            client.submit("mail", b"ok-archive-%d" % n, queue="archive", priority=1)
        admin.purge("archive")
        status = fetch_status(str(daemon.control_path))
        assert daemon.stop() == 0
    return events, status


def test_report_matches_a_plain_python_computation(tmp_path: Path, start_daemon, spark) -> None:
    from quicx.report.pipeline import QUEUE_COUNTS, build_report, render_html

    events, status = run_workload(tmp_path, start_daemon)
    expected = plain_python(events)
    report = build_report(spark, [str(events)], str(tmp_path / "report"))

    assert report.events == len(expected["records"])
    summary = {row["type"]: row for row in report.summary}
    for kind in ("mail", "sms"):
        counts, row = expected["counts"][kind], summary[kind]
        assert row["submitted"] == counts["submitted"]
        assert row["completed"] == counts["done"]
        assert row["failed"] == counts["failed"]
        assert row["requeued"] == counts["requeued"]
        assert row["dropped"] == counts["dropped"]
        for p, name in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            assert row[f"wait_{name}_ms"] == pytest.approx(percentile(expected["waits"][kind], p))
            assert row[f"run_{name}_ms"] == pytest.approx(percentile(expected["runs"][kind], p))
        assert row["run_max_ms"] == max(expected["runs"][kind])
    overall = summary["*"]
    assert overall["submitted"] == 44 and overall["requeued"] == 1
    assert overall["completed"] + overall["failed"] == 37
    # Cancelled and purged tasks ended: they are not "never completed".
    assert overall["never_completed"] == len(expected["never"]) == 4
    assert overall["dropped"] == 4
    all_runs = [v for values in expected["runs"].values() for v in values]
    assert overall["run_p99_ms"] == pytest.approx(percentile(all_runs, 0.99))
    # The killed worker's attempt has no outcome; the survivor finished all 31.
    workers = {row["worker"]: row for row in report.workers}
    assert {w: row["tasks"] for w, row in workers.items()} == dict(expected["tasks_by_worker"])
    assert {w: row["busy_ms"] for w, row in workers.items()} == dict(expected["busy"])
    assert {(r["reason"]): r["count"] for r in report.failures} == dict(expected["reasons"])
    assert sum(r["completed"] for r in report.throughput) == overall["completed"]
    # Per queue and priority: a version-1 SUBMIT goes to the default queue
    # at priority 0.
    queues = {(r["queue"], r["priority"]): r for r in report.queues}
    assert queues.keys() == expected["by_queue"].keys()
    assert queues.keys() == {("default", 0), ("default", 7), ("bulk", 3), ("archive", 1)}
    for place, counts in expected["by_queue"].items():
        row, waits = queues[place], expected["queue_waits"][place]
        assert [row[name] for name in QUEUE_COUNTS] == [
            counts[event] for event in ("submitted", "done", "failed", "cancelled")
        ] + [counts["never_completed"]], place
        if waits:
            assert row["wait_p50_ms"] == pytest.approx(percentile(waits, 0.5))
            assert row["wait_p95_ms"] == pytest.approx(percentile(waits, 0.95))
        else:
            assert row["wait_p50_ms"] is None and row["wait_p95_ms"] is None
    assert sum(r["cancelled"] for r in report.queues) == status["tasks"]["cancelled"] == 3

    # The Parquet tables and the page.
    tables = tmp_path / "report"
    assert spark.read.parquet(str(tables / "summary")).count() == 3
    assert spark.read.parquet(str(tables / "never_completed")).count() == 4
    written = spark.read.parquet(str(tables / "queues")).collect()
    assert {(r["queue"], r["priority"]): r.asDict() for r in written} == queues
    page = render_html(report)
    assert page.count("<svg") == 3 and "<script" not in page
    assert "over quota" in page and "bad address" in page
    assert "archive" in page and "bulk" in page


@pytest.mark.slow  # a long run of its own: make test-cluster (CI) runs it
def test_quicx_report_command(tmp_path: Path, start_daemon) -> None:
    """
    C{quicx report --timings} with stderr to a file, as under a service
    manager: the progress lines and each phase's seconds, and none of
    Spark's progress bars.
    """
    pytest.importorskip("pyspark")
    from tools.bench import synthetic_events

    events = tmp_path / "events"
    daemon = start_daemon(f"--events={events}", "--drain-timeout=0")
    with Peer(daemon.address) as producer:
        producer.submit(b"mail", b"x")
    daemon.stop()
    # Enough events for stages longer than the half second after which
    # Spark draws a stage's progress bar (when it may).
    written = synthetic_events(events, 200_000)
    out = tmp_path / "out"
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        result = subprocess.run(
            [str(Path(sys.executable).with_name("quicx")), "report", str(events),
             f"--out={out}", "--timings"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300,
        )  # fmt: skip
    errors = log.read_text()
    assert result.returncode == 0, errors[-2000:]
    assert "quicx report: reading" in errors and "quicx report: wrote" in errors
    assert "[Stage" not in errors and "\r" not in errors
    # The JVM logs errors only: besides the report's own lines, at most
    # the JVM's own notice of the modules Spark adds.
    others = [line for line in errors.splitlines() if not line.startswith("quicx report: ")]
    assert others in ([], ["WARNING: Using incubator modules: jdk.incubator.vector"]), errors
    phases = re.findall(r"^quicx report: (\w[\w ]*?) +[0-9]+\.[0-9]{2} s$", errors, re.MULTILINE)
    assert phases == [
        "spark start", "read", "tasks", "summary", "queues", "throughput", "failures",
        "workers", "histograms", "parquet", "html", "total",
    ]  # fmt: skip
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    assert json.loads(result.stdout.splitlines()[-1])["events"] == 2 + written


@pytest.mark.parametrize("missing", ["nowhere", "nowhere-*.ndjson", "file://{tmp}/nowhere"])
def test_a_missing_input_is_one_line_before_spark_starts(tmp_path: Path, missing: str) -> None:
    """
    A path that names nothing is the report's one-line error, found before
    the JVM starts: no Java, nothing of Spark's log, and no --out made.
    """
    events = tmp_path / "events"
    events.mkdir()
    missing = str(tmp_path / missing) if "://" not in missing else missing.format(tmp=tmp_path)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("quicx")), "report", str(events), missing,
         f"--out={tmp_path / 'out'}"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAVA_HOME": str(tmp_path / "no-java")},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr == f"quicx report: error: {missing}: no such file or directory\n"
    assert not (tmp_path / "out").exists()


def test_timings_are_each_phase_in_order() -> None:
    from quicx.report.pipeline import Timings

    ticks = iter([10.0, 11.5, 12.0, 14.25])
    timings = Timings(clock=lambda: next(ticks))
    with timings.phase("read"):
        pass
    with pytest.raises(ZeroDivisionError), timings.phase("summary"):
        1 / 0  # noqa: B018
    assert timings.phases == [("read", 1.5), ("summary", 2.25)]
    assert timings.lines() == ["read       1.50 s", "summary    2.25 s", "total      3.75 s"]


@pytest.mark.slow
def test_the_report_job_runs_under_spark_submit(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    import os

    from quicx.report import job as report_job
    from tools.bench import synthetic_events

    events = tmp_path / "events"
    events.mkdir()
    written = synthetic_events(events, 2000)
    out = tmp_path / "out"
    result = subprocess.run(
        [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
         report_job.__file__, str(events), f"--out={out}"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    # spark-submit's master, not the local[*] the command would choose (the
    # driver's stderr is in spark-submit's stdout).
    assert f"quicx report: reading {events} on local[2]" in result.stdout
    assert json.loads(result.stdout.splitlines()[-1])["events"] == written
    assert (out / "report.html").exists() and (out / "summary").is_dir()


SLOW_HANDLERS = """\
import os, time
from quicx.clients.worker import Worker

worker = Worker()


def run(payload: bytes) -> None:
    mark = os.path.join({directory!r}, payload.decode())
    if payload.startswith(b"hang"):
        # Past both deliveries' timeouts: no outcome comes before the give-up
        # (the first outcome from any delivery would finish the task).
        time.sleep(3.0)
    elif not os.path.exists(mark):
        open(mark, "w").close()
        time.sleep(1.0)  # past the task timeout, once


worker.register("mail", run)
"""


def test_report_counts_agree_with_quicx_status(tmp_path: Path, start_daemon, spark) -> None:
    """
    Tasks that time out once (requeued, then done) and tasks that time out on
    every delivery (requeued once, then given up): the report's requeued,
    given up, failed and completed are the daemon's own counts.
    """
    from quicx.report.pipeline import build_report
    from tests.conftest import config_option

    events = tmp_path / "events"
    daemon = start_daemon(
        config_option(
            tmp_path,
            f"[tasks]\ntimeout = 0.3\nmax_attempts = 2\n[events]\ndirectory = {events}\n",
        ),
        "--drain-timeout=0",
    )
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "slow.py").write_text(SLOW_HANDLERS.format(directory=str(marks)))
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("quicx")), "worker", "slow:worker", "-n8",
         f"--connect=tcp:127.0.0.1:{daemon.port}"],
        cwd=tmp_path, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with Peer(daemon.address) as producer:
            for n in range(3):
                producer.submit(b"mail", b"hang-%d" % n)
                producer.submit(b"mail", b"once-%d" % n)
            deadline = time.monotonic() + 60
            while True:
                status = fetch_status(str(daemon.control_path))
                if status["tasks"]["completed"] + status["tasks"]["failed"] == 6:
                    break
                assert time.monotonic() < deadline, status
                time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait()
    tasks = status["tasks"]
    assert daemon.stop() == 0
    report = build_report(spark, [str(events)])
    overall = next(row for row in report.summary if row["type"] == "*")
    recorded = sum(
        json.loads(line)["event"] == "requeued"
        for path in events.glob("events-*.ndjson")
        for line in path.read_text().splitlines()
    )
    # A give-up is not a requeue: the daemon records a "requeued" event only
    # for a task queued again, so the events and its counters agree.
    assert tasks["given_up"] == 3 and recorded == tasks["requeued"]
    for name in ("submitted", "completed", "failed", "given_up", "requeued"):
        assert overall[name] == tasks[name], name
    # A give-up is no worker's run.
    assert sum(row["tasks"] for row in report.workers) == tasks["completed"]


def _events_of(directory: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("events-*.ndjson"))
        for line in path.read_text().splitlines()
    ]


def _serve(peer: Peer, count: int) -> None:
    """Take C{count} tasks one at a time as a version-1 worker, and finish each."""
    peer.send(wire.encode_ready())
    for _ in range(count):
        task = peer.receive(30)
        assert isinstance(task, wire.Task), task
        peer.send(wire.encode_done(task.task_id))


@pytest.mark.slow  # a long run of its own: make test-cluster (CI) runs it
def test_the_report_agrees_with_the_journal_across_a_kill_9(
    tmp_path: Path, start_daemon, spark
) -> None:
    """
    A daemon with a journal runs some of its tasks and is killed (SIGKILL);
    the next one recovers the rest from the journal and runs them, writing
    to the same events directory.  Every task submitted is one task in the
    report, completed once: nothing "never completed", and no row with more
    completed than submitted.  A delayed task's queue wait leaves out its
    delay.
    """
    from quicx.report.pipeline import build_report

    events, journal = tmp_path / "events", tmp_path / "quicx.journal"
    options = (f"--journal={journal}", f"--events={events}", "--drain-timeout=0")
    first = start_daemon(*options)
    with Peer(first.address) as producer:
        for n in range(200):
            assert isinstance(producer.submit(b"mail", b"%d" % n), wire.Ok)
    with Peer(first.address) as worker:
        _serve(worker, 50)
        held = worker.receive(30)  # taken, never finished: it comes back
        assert isinstance(held, wire.Task)
        # The first 50 are done in the events files before the crash.
        deadline = time.monotonic() + 30
        while sum(r["event"] == "done" for r in _events_of(events)) < 50:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first.kill()

    second = start_daemon(*options)
    with QuicxClient(f"tcp:127.0.0.1:{second.port}") as client:
        for n in range(5):
            client.submit("later", b"%d" % n, delay=3)
    with Peer(second.address) as worker:
        _serve(worker, 150 + 5)
        deadline = time.monotonic() + 30
        while fetch_status(str(second.control_path))["tasks"]["completed"] < 155:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert second.stop() == 0
    report = build_report(spark, [str(events)])
    summary = {row["type"]: row for row in report.summary}
    overall = summary["*"]
    assert (overall["submitted"], overall["completed"]) == (205, 205)
    assert overall["never_completed"] == report.never_completed == 0
    for row in [*report.summary, *report.queues]:
        assert row["completed"] <= row["submitted"], row
    assert [(r["queue"], r["submitted"], r["completed"]) for r in report.queues] == [
        ("default", 205, 205)
    ]
    # Each delayed task went to a waiting worker when it came due: its wait
    # is not its 3 s delay.
    assert summary["later"]["wait_max_ms"] < 3000
    # The 150 tasks the second daemon recovered, each said so.
    assert sum(r["event"] == "recovered" for r in _events_of(events)) == 150
