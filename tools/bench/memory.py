"""
Memory per queued task, counted exactly: the daemon built in this process
(L{quicx.daemon.service.build_daemon} on L{BENCH_CONFIG}, its reactor not
run), tasks submitted straight into its queue, the Python heap measured by
C{tracemalloc} (the PMAD pool is an C{mmap}, outside it): what each queued
task costs beyond its PMAD block, and what of it each part is.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from typing import Any

from twisted.internet import reactor
from zope.interface import implementer

from quicx.daemon import config as configuration
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.model import Task
from quicx.daemon.service import build_daemon
from quicx.daemon.speakers import SPEAKERS
from quicx.protocol.session import IPeer, Role
from quicx.protocol.taskflow import SubmitOptions
from tools.bench.rig import BENCH_CONFIG, BENCH_TYPE, V2_OPTIONS, payload_of


@implementer(IPeer)
class _Producer:
    """A producer's connection that drops what it is sent (its OKs)."""

    peer_name = "bench"

    def sendFrame(self, data: bytes) -> None:
        pass

    def disconnect(self) -> None:
        pass


def task_memory_workload(n: int, protocol: int = 1) -> dict[str, Any]:
    """
    The Python heap's growth over C{n} queued 100-byte tasks (plain version 1,
    or spread over L{V2_OPTIONS}), per task, and its parts: the task record,
    its id, its PMAD block's handle, its FIFO ticket, its submit time, its
    place in the live-task table and in its queue's FIFO.
    """
    daemon = build_daemon(configuration.parse(BENCH_CONFIG), reactor)
    kernel = daemon.queue
    session = kernel.open_session(_Producer(), SPEAKERS[protocol])
    kernel.claim_role(session, Role.PRODUCER)
    admission = Admission(kernel)
    payload = payload_of(100)
    options: list[SubmitOptions | None] = [None]
    if protocol == 2:
        options = [SubmitOptions(queue=o.queue, priority=o.priority) for o in V2_OPTIONS]
    for i in range(1000):  # the queues, their levels and tallies made
        admission.submit(session, BENCH_TYPE.encode(), payload, *_options(options, i))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        admission.submit(session, BENCH_TYPE.encode(), payload, *_options(options, i))
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    task = next(t for t in kernel._live.values() if isinstance(t, Task))
    # Per task: what one is made of, each object allocated for it alone.
    parts = {
        "task record": sys.getsizeof(task),
        "task id (int)": sys.getsizeof(task.task_id),
        "block handle (int)": sys.getsizeof(task.block),
        # A fresh task's ticket is its id, the same object (NamedQueue.push): 0.
        "FIFO ticket (int)": 0 if task.ticket is task.task_id else sys.getsizeof(task.ticket),
        "submit time (float)": sys.getsizeof(task.enqueued_at),
        # Shared by the tasks of its type and queue (NamedQueue.types): 0.
        "task type (bytes)": 0
        if task.task_type is task.home.types.get(task.task_type)
        else sys.getsizeof(task.task_type),
    }
    pool = kernel.pool.bytes_used
    kernel.pool.close()
    return {
        "n": n,
        "protocol": protocol,
        "bytes_per_task": grown / n,
        "parts": parts,
        "rest": grown / n - sum(parts.values()),  # the live table, the FIFO slot, rounding
        "extras": task.extras is not None,
        "pmad_used_per_task": pool / (n + 1000),
    }


def _options(options: list[SubmitOptions | None], i: int) -> tuple[Any, ...]:
    chosen = options[i % len(options)]
    return () if chosen is None else (chosen,)
