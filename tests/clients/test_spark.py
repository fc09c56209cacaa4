"""
Bulk submit from a real local Spark session into a real daemon with a pool
small enough that "queue full" happens: every row is delivered exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from quicx.daemon.control import fetch_status
from tests.conftest import config_option

pyspark = pytest.importorskip("pyspark", reason="pip install 'quicx[spark]'")


RECORDER = """\
import os
from quicx.clients.worker import Worker

OUT = open(os.path.join({directory!r}, f"{{os.getpid()}}.txt"), "a", buffering=1)
worker = Worker()


@worker.handler("row", thread=False)
def record(payload: bytes) -> None:
    OUT.write(payload.decode() + "\\n")
"""


@pytest.mark.slow  # a long run of its own: make test-cluster (CI) runs it
def test_a_hundred_thousand_rows_through_a_full_queue_exactly_once(
    tmp_path: Path, start_daemon, spark
) -> None:
    from quicx.clients.spark import submit_dataframe

    daemon = start_daemon(
        config_option(tmp_path, "[allocator]\npool_size = 64K\nclass = 32,50\nclass = 64,50\n")
    )
    seen = tmp_path / "seen"
    seen.mkdir()
    (tmp_path / "recorder.py").write_text(RECORDER.format(directory=str(seen)))
    quicx = str(Path(sys.executable).with_name("quicx"))
    workers = [
        subprocess.Popen(
            [quicx, "worker", "recorder:worker", "-n4", f"--connect=tcp:127.0.0.1:{daemon.port}"],
            cwd=tmp_path,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        rows = 100_000
        df = spark.range(rows).selectExpr("id", "concat('row-', id) AS body").repartition(4)
        ids = submit_dataframe(
            df,
            f"tcp:127.0.0.1:{daemon.port}",
            key_column="id",
            task_type="row",
            payload_column="body",
        )
        assert ids.columns == ["id", "task_id"]
        assert ids.count() == rows
        assert ids.select("task_id").distinct().count() == rows
        status = fetch_status(str(daemon.control_path))
        assert status["tasks"]["rejected"] > 0, "the pool was never full"
        assert status["tasks"]["submitted"] == rows
        deadline = time.monotonic() + 120
        while fetch_status(str(daemon.control_path))["tasks"]["completed"] < rows:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait()
    delivered = [line for path in seen.iterdir() for line in path.read_text().splitlines()]
    assert len(delivered) == rows
    assert set(delivered) == {f"row-{n}" for n in range(rows)}


def test_payload_as_json_and_type_from_a_column(tmp_path: Path, start_daemon, spark) -> None:
    import json

    from quicx.clients.spark import submit_dataframe
    from quicx.protocol import wire
    from tests.peer import Peer

    daemon = start_daemon()
    df = spark.createDataFrame(
        [("a", "mail", 1), ("b", "sms", 2)], "key string, kind string, n long"
    )
    ids = {
        row["key"]: row["task_id"]
        for row in submit_dataframe(
            df, f"tcp:127.0.0.1:{daemon.port}", key_column="key", type_column="kind"
        ).collect()
    }
    assert sorted(ids) == ["a", "b"]
    with Peer(daemon.address) as worker:
        first = worker.request(wire.encode_ready())
        worker.send(wire.encode_done(first.task_id))
        second = worker.receive()
    tasks = {first.task_id: first, second.task_id: second}
    assert tasks[ids["a"]].task_type == b"mail"
    assert json.loads(tasks[ids["a"]].payload) == {"key": "a", "kind": "mail", "n": 1}
    assert tasks[ids["b"]].task_type == b"sms"


def test_bad_arguments_are_refused_before_any_submit(spark) -> None:
    from quicx.clients.spark import submit_dataframe

    df = spark.range(3)
    with pytest.raises(ValueError, match="task_type or type_column"):
        submit_dataframe(df, "tcp:127.0.0.1:1", key_column="id")
    with pytest.raises(ValueError, match="no column 'nope'"):
        submit_dataframe(df, "tcp:127.0.0.1:1", key_column="nope", task_type="t")


def test_a_version_1_daemon_is_refused_before_any_submit(
    tmp_path: Path, start_daemon, spark
) -> None:
    from quicx.clients.spark import submit_dataframe
    from quicx.protocol.errors import NeedsVersion2

    daemon = start_daemon(config_option(tmp_path, "[protocol]\nversions = 1\n"))
    with pytest.raises(NeedsVersion2, match="version 1 only, which has no idempotency keys"):
        submit_dataframe(
            spark.range(3), f"tcp:127.0.0.1:{daemon.port}", key_column="id", task_type="t"
        )
    assert fetch_status(str(daemon.control_path))["tasks"]["submitted"] == 0


def test_each_row_key_is_its_value_after_the_submission() -> None:
    from quicx.clients.spark import _Plan, idempotency_key

    plan = _Plan("tcp:127.0.0.1:1", "id", "t", None, None, 1000, 600.0, "job-7", 80)
    assert idempotency_key(plan, 12) == "job-7:12"
    assert idempotency_key(plan, "é" * 37) == "job-7:" + "é" * 37  # 80 bytes
    # Longer than the daemon takes: the value's sha256, the same on every try.
    long = idempotency_key(plan, "é" * 38)
    assert long.startswith("job-7:#") and len(long) == 71
    assert long == idempotency_key(plan, "é" * 38) != idempotency_key(plan, "é" * 39)
    with pytest.raises(ValueError, match="'id' is null"):
        idempotency_key(plan, None)


def test_a_long_keys_hash_fits_a_short_max_key_length() -> None:
    """
    A daemon with C{max_key_length} under 130 bytes (a 64-byte prefix, C{:#}
    and 64 hex digits): the hash is cut to fit, and where not even 32 digits
    fit, the row is refused by name, not sent to be refused as a protocol error.
    """
    from quicx.clients.spark import _Plan, idempotency_key

    prefix = "0123456789abcdef0123456789abcdef"  # a default submission id: a uuid's hex
    plan = _Plan("tcp:127.0.0.1:1", "id", "t", None, None, 1000, 600.0, prefix, 80)
    key = idempotency_key(plan, "x" * 60)
    assert key.startswith(prefix + ":#") and len(key) == 80
    assert key != idempotency_key(plan, "x" * 61)
    assert idempotency_key(plan, 7) == prefix + ":7"
    with pytest.raises(ValueError, match=r"max_key_length \(60\), which leaves no room"):
        idempotency_key(attrs.evolve(plan, max_key=60), "x" * 60)


def test_a_bad_submission_id_is_refused(spark) -> None:
    from quicx.clients.spark import submit_dataframe

    for submission, error in [
        ("", "is 1 to 64 bytes"),
        ("x" * 65, "is 1 to 64 bytes"),
        ("a:b", "has no ':'"),  # 'a:b' + 'c' would be 'a' + 'b:c'
        ("group-5", "has no ':' and does not begin 'group-': 'group-5'"),  # group 5's keys
    ]:
        with pytest.raises(ValueError, match=f"submission id {error}"):
            submit_dataframe(
                spark.range(3),
                "tcp:127.0.0.1:1",
                key_column="id",
                task_type="t",
                submission=submission,
            )


SUBMIT_WITHOUT_PYSPARK_PYTHON = """\
import json, sys
from pyspark.sql import SparkSession
from quicx.clients.spark import submit_dataframe

spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
df = spark.createDataFrame([("a",), ("b",), ("c",)], "key string")
ids = submit_dataframe(df, sys.argv[1], key_column="key", task_type="mail")
print(json.dumps(sorted(row["key"] for row in ids.collect())))
print(json.dumps(spark.sparkContext.pythonExec))
spark.stop()
"""


def test_submit_dataframe_needs_no_pyspark_python(tmp_path: Path, start_daemon) -> None:
    """
    The documented example, run by this interpreter with C{PYSPARK_PYTHON}
    unset and this venv's directory off C{PATH}: the local executors still
    run an interpreter that has quicx.
    """
    import json
    import os

    daemon = start_daemon()
    script = tmp_path / "submit.py"
    script.write_text(SUBMIT_WITHOUT_PYSPARK_PYTHON)
    here = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d != here)
    result = subprocess.run(
        [sys.executable, str(script), f"tcp:127.0.0.1:{daemon.port}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    keys, python = (json.loads(line) for line in result.stdout.splitlines()[-2:])
    assert keys == ["a", "b", "c"]
    assert python == sys.executable
    assert fetch_status(str(daemon.control_path))["tasks"]["submitted"] == 3


def test_a_chosen_interpreter_is_kept(spark, monkeypatch) -> None:
    from quicx.clients.spark import use_this_python

    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/their/python")
    before = spark.sparkContext.pythonExec
    assert use_this_python(spark) is False
    assert spark.sparkContext.pythonExec == before


def test_a_dataframe_as_a_group_reports_when_every_row_is_done(
    tmp_path: Path, start_daemon, spark
) -> None:
    from quicx.clients.blocking import QuicxClient
    from quicx.clients.spark import submit_dataframe_group, submit_partition

    daemon = start_daemon()
    seen = tmp_path / "seen"
    seen.mkdir()
    (tmp_path / "recorder.py").write_text(RECORDER.format(directory=str(seen)))
    quicx = str(Path(sys.executable).with_name("quicx"))
    address = f"tcp:127.0.0.1:{daemon.port}"
    rows = 2000
    df = spark.range(rows).selectExpr("id", "concat('row-', id) AS body").repartition(4)
    batch = submit_dataframe_group(
        df, address, key_column="id", task_type="row", payload_column="body"
    )
    assert batch.ids.count() == rows
    state = batch.state()
    assert (state["state"], state["members"], state["pending"]) == ("closed", rows, rows)
    # A partition sent again (as a recomputed one would be) is answered as
    # duplicates: it neither joins nor runs twice.
    plan = evolve_plan(batch.group, address)
    again = list(submit_partition(plan, df.limit(50).collect()))
    assert len(again) == 50
    assert batch.state()["members"] == rows
    worker = subprocess.Popen(
        [quicx, "worker", "recorder:worker", "-n2", f"--connect={address}"],
        cwd=tmp_path,
        stderr=subprocess.DEVNULL,
    )
    try:
        counts = batch.wait(timeout=120)
    finally:
        worker.terminate()
        worker.wait()
    assert (counts["done"], counts["failed"], counts["cancelled"]) == (rows, 0, 0)
    delivered = [line for path in seen.iterdir() for line in path.read_text().splitlines()]
    assert sorted(delivered) == sorted(f"row-{n}" for n in range(rows))
    with QuicxClient(address) as client:
        assert client.group(batch.group)["state"] == "finished"


def evolve_plan(group: int, address: str) -> Any:
    """The plan the executors of a grouped submit of the test's DataFrame had."""
    from quicx.clients.spark import _Plan

    return _Plan(address, "id", "row", None, "body", 1000, 600.0, f"group-{group}", 255, group)


def test_executors_killed_mid_submit_leave_every_row_submitted_once(
    tmp_path: Path, start_daemon, spark
) -> None:
    """
    The Python workers sending two partitions are killed (SIGKILL) while
    they wait on a full queue, some of their rows in: Spark runs those
    tasks again, the daemon answers the rows it has as duplicates, and each
    row is one task, run once, with one id in the result.
    """
    from quicx.clients.spark import submit_dataframe

    daemon = start_daemon(config_option(tmp_path, "[queues]\nmax_depth = 300\n"))
    address = f"tcp:127.0.0.1:{daemon.port}"
    rows = 2000
    df = spark.range(rows).selectExpr("id", "concat('row-', id) AS body").repartition(4)
    result: dict[str, object] = {}

    def submit() -> None:
        try:
            ids = submit_dataframe(
                df, address, key_column="id", task_type="row", payload_column="body", window=50
            )
            result["ids"] = {row["id"]: row["task_id"] for row in ids.collect()}
        except Exception as e:
            result["error"] = e

    driver = threading.Thread(target=submit, daemon=True)
    driver.start()
    # Both running tasks hold rows the full queue refuses: they are mid-partition.
    status = wait_for(daemon, lambda s: s["tasks"]["submitted"] >= 300 and s["tasks"]["rejected"])
    killed = connected_descendants(daemon.port)
    assert 1 <= len(killed) <= 2, killed  # one per running task
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    submitted_before = status["tasks"]["submitted"]

    seen = tmp_path / "seen"
    seen.mkdir()
    (tmp_path / "recorder.py").write_text(RECORDER.format(directory=str(seen)))
    quicx = str(Path(sys.executable).with_name("quicx"))
    worker = subprocess.Popen(
        [quicx, "worker", "recorder:worker", "-n4", f"--connect={address}"],
        cwd=tmp_path,
        stderr=subprocess.DEVNULL,
    )
    try:
        driver.join(120)
        assert "error" not in result, result.get("error")
        ids = result["ids"]
        assert isinstance(ids, dict)
        assert sorted(ids) == list(range(rows)) and len(set(ids.values())) == rows
        status = wait_for(daemon, lambda s: s["tasks"]["completed"] >= rows)
    finally:
        worker.terminate()
        worker.wait()
    tasks = status["tasks"]
    assert (tasks["submitted"], tasks["failed"], tasks["queued"]) == (rows, 0, 0)
    # The killed attempts' rows came again, and were answered with their first ids.
    assert tasks["duplicates"] >= submitted_before > 0
    delivered = [line for path in seen.iterdir() for line in path.read_text().splitlines()]
    assert sorted(delivered) == sorted(f"row-{n}" for n in range(rows))


def wait_for(daemon, done, timeout: float = 60.0) -> dict:
    """The daemon's status, once C{done(status)} holds (within C{timeout} seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        status = fetch_status(str(daemon.control_path))
        if done(status):
            return status
        assert time.monotonic() < deadline, status["tasks"]
        time.sleep(0.05)


def connected_descendants(port: int) -> set[int]:
    """This process's descendants with a TCP connection to loopback C{port}: the executors."""
    sockets = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue  # gone meanwhile

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    found = set()
    for pid in filter(ours, parents):
        try:
            links = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
        except OSError:
            continue
        if links & sockets:
            found.add(pid)
    return found
