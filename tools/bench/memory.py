"""
Memory per queued task, counted exactly: the daemon built in this process
(L{quicx.daemon.service.build_daemon} on L{BENCH_CONFIG}, its reactor not
run), a producer connected to its listener through an in-memory transport
(as L{tools.hot_path}) sending SUBMITs 64 to a read, as a pipelining
producer's arrive, the Python heap measured by C{tracemalloc} (the PMAD pool
is an C{mmap}, outside it): what each queued task costs beyond its PMAD
block, and what of it each part is.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from typing import Any

from twisted.internet import reactor

from quicx.daemon import config as configuration
from quicx.daemon.queue.model import Task
from quicx.daemon.service import build_daemon
from tools.bench.rig import BENCH_CONFIG


def task_memory_workload(n: int, protocol: int = 1) -> dict[str, Any]:
    """
    The Python heap's growth over C{n} queued 100-byte tasks (plain version 1,
    or spread over L{V2_OPTIONS}), per task, and its parts: the task record,
    its id, its PMAD block's handle, its FIFO ticket, its submit time, its
    place in the live-task table and in its queue's FIFO.
    """
    # (Imported here: tools.hot_path imports this package, for its rig.)
    from tools.hot_path import CHUNK, Peer, factory_of, submits_of

    daemon = build_daemon(configuration.parse(BENCH_CONFIG), reactor)
    kernel = daemon.queue
    producer = Peer(factory_of(daemon), 1, protocol)
    submits = submits_of(protocol)

    def submit(count: int) -> None:
        for sent in range(0, count, CHUNK):
            producer.send(
                b"".join(submits[i % len(submits)] for i in range(sent, min(sent + CHUNK, count)))
            )
            producer.transport.clear()  # its OKs

    submit(1024)  # the queues, their levels and tallies made
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    submit(n)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    tasks = [t for t in kernel._live.values() if isinstance(t, Task)]
    task = tasks[-1]
    # Per task: what one is made of, each object allocated for it alone (or
    # its share of one that tasks share).
    floats = len({id(t.enqueued_at) for t in tasks}) / len(tasks)
    parts = {
        "task record": sys.getsizeof(task),
        "task id (int)": sys.getsizeof(task.task_id),
        "block handle (int)": sys.getsizeof(task.block),
        # A fresh task's ticket is its id, the same object (NamedQueue.push): 0.
        "FIFO ticket (int)": 0 if task.ticket is task.task_id else sys.getsizeof(task.ticket),
        # One a task, unless the tasks of one read share one.
        "submit time (float)": round(sys.getsizeof(task.enqueued_at) * floats, 1),
        # Shared by the tasks of its type and queue (NamedQueue.types): 0.
        "task type (bytes)": 0
        if task.task_type is task.home.types.get(task.task_type)
        else sys.getsizeof(task.task_type),
    }
    pool = kernel.pool.bytes_used
    producer.protocol.connectionLost()
    kernel.pool.close()
    return {
        "n": n,
        "protocol": protocol,
        "bytes_per_task": grown / n,
        "parts": parts,
        "rest": grown / n - sum(parts.values()),  # the live table, the FIFO slot, rounding
        "extras": task.extras is not None,
        "pmad_used_per_task": pool / len(tasks),
    }
