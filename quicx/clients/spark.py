"""
Bulk submit from Spark: one task per row of a DataFrame, sent from the
executors.

    from quicx.clients.spark import submit_dataframe

    ids = submit_dataframe(
        orders, "tcp:queue.internal:16381",
        key_column="order_id", task_type="send_receipt",   # or type_column=
        payload_column="body",                             # or the row as JSON
    )
    ids.show()     # order_id | task_id

Each partition is sent over one pipelined blocking connection.  A row the
daemon refuses with C{queue full} was not accepted, so it is sent again after
a backoff (0.05 s doubling to 2 s, for up to C{retry_for} seconds): no row
is lost, and none is submitted twice.  Any other refusal (payload too large,
unknown type) fails the job with that error.

The result is computed once, when this function runs, and kept
(C{MEMORY_AND_DISK}).  Spark recomputes a partition only if an executor
holding it is lost.  Recomputing would submit that partition's rows again,
which is the same at-least-once promise a producer gets when its connection
drops.

On a local master (C{local[*]} and the like), the executors run this
interpreter (C{sys.executable}) unless C{PYSPARK_PYTHON} names another: see
L{use_this_python}.

Needs C{pip install 'quicx[spark]'} (PySpark) and Java.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from attrs import frozen

from quicx.clients.blocking import QuicxClient
from quicx.protocol.errors import DaemonError, QueueFull

FIRST_BACKOFF = 0.05
MAX_BACKOFF = 2.0


@frozen
class _Plan:
    """What each executor needs to send its partition (pickled to it)."""

    address: str
    key_column: str
    task_type: str | None
    type_column: str | None
    payload_column: str | None
    window: int
    retry_for: float


def use_this_python(spark: Any) -> bool:
    """
    Have a local master's executors run this interpreter, which has quicx.

    PySpark otherwise starts C{python3} from C{PATH}, which need not have
    quicx (or even PySpark) installed.  Nothing changes when the master is not
    local (a cluster's executors run the cluster's Python) or when the user
    chose one: C{PYSPARK_PYTHON} set, or C{spark.pyspark.python} configured.

    @return: whether the executors' interpreter was set.
    """
    context = spark.sparkContext
    if not context.master.startswith("local") or "PYSPARK_PYTHON" in os.environ:
        return False
    if context.getConf().get("spark.pyspark.python") is not None:
        return False
    context.pythonExec = sys.executable
    return True


def submit_dataframe(
    df: Any,
    address: str,
    *,
    key_column: str,
    task_type: str | None = None,
    type_column: str | None = None,
    payload_column: str | None = None,
    window: int = 1000,
    retry_for: float = 600.0,
) -> Any:
    """
    Submit one task per row of C{df}; return a DataFrame of (key, task_id).

    @param key_column: the column that identifies a row in the result.
    @param task_type: the type of every task, or...
    @param type_column: ...the column holding each row's type.
    @param payload_column: a column of bytes or str; without it, each
        payload is the row as a JSON object.
    @param window: SUBMITs pipelined before reading their answers.
    @param retry_for: seconds to keep retrying rows refused as queue full.
    @raise ValueError: the columns are not there, or not one type source.
    """
    from pyspark import StorageLevel
    from pyspark.sql.types import LongType, StructField, StructType

    if (task_type is None) == (type_column is None):
        raise ValueError("give task_type or type_column, not both or neither")
    for column in (key_column, type_column, payload_column):
        if column is not None and column not in df.columns:
            raise ValueError(f"no column {column!r} in {df.columns}")
    use_this_python(df.sparkSession)
    plan = _Plan(address, key_column, task_type, type_column, payload_column, window, retry_for)
    schema = StructType([df.schema[key_column], StructField("task_id", LongType(), nullable=False)])
    ids = df.sparkSession.createDataFrame(
        df.rdd.mapPartitions(lambda rows: submit_partition(plan, rows)), schema
    )
    ids.persist(StorageLevel.MEMORY_AND_DISK)
    ids.count()  # submit now, exactly once
    return ids


def submit_partition(plan: _Plan, rows: Iterable[Any]) -> Iterator[tuple[Any, int]]:
    """(On an executor.) Submit C{rows} over one connection; yield (key, task id)."""
    with QuicxClient(plan.address, keep_outcomes=0) as client:
        batch: list[tuple[Any, str, bytes]] = []
        for row in rows:
            batch.append(_task_of(plan, row))
            if len(batch) == plan.window:
                yield from _submit_with_retry(client, plan, batch)
                batch = []
        if batch:
            yield from _submit_with_retry(client, plan, batch)


def _task_of(plan: _Plan, row: Any) -> tuple[Any, str, bytes]:
    task_type = plan.task_type if plan.task_type is not None else row[plan.type_column]
    if plan.payload_column is None:
        payload = json.dumps(row.asDict(recursive=True), default=str).encode("utf-8")
    else:
        value = row[plan.payload_column]
        payload = value.encode("utf-8") if isinstance(value, str) else bytes(value or b"")
    return row[plan.key_column], task_type, payload


def _submit_with_retry(
    client: QuicxClient, plan: _Plan, tasks: list[tuple[Any, str, bytes]]
) -> Iterator[tuple[Any, int]]:
    delay, deadline = FIRST_BACKOFF, time.monotonic() + plan.retry_for
    while tasks:
        results = client.submit_many(
            ((task_type, payload) for _, task_type, payload in tasks), return_exceptions=True
        )
        refused: list[tuple[Any, str, bytes]] = []
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, QueueFull):
                refused.append(task)
            elif isinstance(result, DaemonError):
                raise result
            else:
                yield task[0], result
        tasks = refused
        if tasks:
            if time.monotonic() > deadline:
                raise QueueFull(
                    f"queue still full after {plan.retry_for:g} s; {len(tasks)} rows not sent"
                )
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF)
