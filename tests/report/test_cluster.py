"""
The report and the DataFrame bulk submit on a real Spark standalone cluster
(a master and a worker on loopback, L{tests.sparkcluster}), driven by
C{spark-submit} as docs/pipeline.md shows: the Parquet tables equal
C{local[*]}'s, and so do the tasks the daemon received.  Every process the
test started is gone at the end.

Slow (three JVMs start): run with C{make test-cluster} (C{pytest --cluster}).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quicx.protocol import wire
from tests.peer import Peer
from tests.sparkcluster import StandaloneCluster

pytestmark = pytest.mark.cluster

ROWS = 300

DRIVER = """\
import json, sys
from pyspark.sql import SparkSession
from quicx.clients.spark import submit_dataframe
from quicx.report.pipeline import build_report

events, out, address = sys.argv[1:]
spark = SparkSession.builder.appName("quicx cluster test").getOrCreate()
build_report(spark, [events], out)
df = spark.range({rows}).selectExpr("id", "concat('row-', id) AS body").repartition(3)
ids = submit_dataframe(df, address, key_column="id", task_type="row")
pythons = spark.sparkContext.parallelize(range(4), 2).map(lambda _: sys.executable).collect()
print(json.dumps({{
    "master": spark.sparkContext.master,
    "ids": {{row["id"]: row["task_id"] for row in ids.collect()}},
    "pythons": sorted(set(pythons)),
}}))
spark.stop()
"""


def drain(address: tuple[str, int], count: int) -> dict[int, tuple[bytes, bytes]]:
    """Take C{count} tasks as a worker: task id -> (type, payload)."""
    tasks = {}
    with Peer(address) as worker:
        worker.send(wire.encode_ready())
        for _ in range(count):
            task = worker.receive()
            tasks[task.task_id] = (task.task_type, task.payload)
            worker.send(wire.encode_done(task.task_id))  # and ready for the next
    return tasks


def by_key(ids: dict[Any, int], tasks: dict[int, tuple[bytes, bytes]]) -> dict[int, tuple]:
    """Each row's key -> the (type, payload) of the task submitted for it."""
    return {int(key): tasks[task_id] for key, task_id in ids.items()}


def test_report_and_submit_on_a_standalone_cluster_equal_local(
    tmp_path: Path, start_daemon, spark
) -> None:
    from quicx.clients.spark import submit_dataframe
    from quicx.report.pipeline import build_report
    from tests.report.test_report_page import write_events

    events = tmp_path / "events"
    write_events(events, 1500, pid=11)
    write_events(events, 500, pid=22, legacy=True)
    daemon = start_daemon()
    address = f"tcp:127.0.0.1:{daemon.port}"

    build_report(spark, [str(events)], str(tmp_path / "local"))
    df = spark.range(ROWS).selectExpr("id", "concat('row-', id) AS body").repartition(3)
    local_ids = {
        row["id"]: row["task_id"]
        for row in submit_dataframe(df, address, key_column="id", task_type="row").collect()
    }
    local_tasks = by_key(local_ids, drain(daemon.address, ROWS))

    (tmp_path / "cluster").mkdir()
    (tmp_path / "driver.py").write_text(DRIVER.format(rows=ROWS))
    cluster = StandaloneCluster(tmp_path / "cluster")
    try:
        result = subprocess.run(
            [str(Path(sys.executable).with_name("spark-submit")), "--master", cluster.url,
             "--executor-memory", "512m", "--conf", "spark.sql.shuffle.partitions=4",
             "--conf", "spark.ui.enabled=false", str(tmp_path / "driver.py"),
             str(events), str(tmp_path / "on-cluster"), address],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:] + cluster.log("worker")
    finally:
        cluster.stop()
    assert cluster.leftovers() == []

    answer = json.loads(result.stdout.splitlines()[-1])
    assert answer["master"] == cluster.url
    # The executors ran the interpreter the driver named (PYSPARK_PYTHON).
    assert answer["pythons"] == [sys.executable]
    assert by_key(answer["ids"], drain(daemon.address, ROWS)) == local_tasks
    assert len(local_tasks) == ROWS
    assert json.loads(local_tasks[7][1]) == {"id": 7, "body": "row-7"}

    for table in ("summary", "throughput", "failures", "workers", "queues", "never_completed"):
        here = spark.read.parquet(str(tmp_path / "local" / table))
        there = spark.read.parquet(str(tmp_path / "on-cluster" / table))
        rows = here.collect()
        assert rows and here.schema == there.schema, table
        if table == "never_completed":  # the one table in no order
            assert sorted(rows) == sorted(there.collect())
        else:
            assert rows == there.collect(), table
