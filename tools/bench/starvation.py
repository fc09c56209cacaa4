"""
The starvation bound end to end: a real daemon and real workers, a producer
that keeps the top priority saturated (mostly one heavy fairness key), and a
trickle of lowest-priority tasks; each low task's wait, from just before its
SUBMIT to its handler's start, with C{[queues] aging} on and off.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.clients.worker import Worker
from tools.bench.rig import quantile, running, status

TOP_TYPE, LOW_TYPE = "top", "low"
TOP_PRIORITY, LOW_PRIORITY = 255, 0
TOP_WORK = 0.001
"""Seconds each top-priority task keeps its worker busy."""
BACKLOG = 1000
"""Top-priority tasks the producer keeps queued: the stream saturates the workers."""
STARVATION_WORKERS, STARVATION_LAYOUT = 2, (4, 1)
"""Worker processes, and their connections and credits (one task held per connection)."""

starvation_worker = Worker()
"""The workers' target: top tasks take L{TOP_WORK}; low tasks say how long they waited."""


@starvation_worker.handler(TOP_TYPE, thread=False)
def busy(payload: bytes) -> None:
    time.sleep(TOP_WORK)


@starvation_worker.handler(LOW_TYPE, thread=False)
def waited(payload: bytes) -> bytes:
    """Seconds since the time its payload holds (its producer's clock, this host's)."""
    return repr(time.time() - float(payload)).encode()


def _saturate(address: str, stop: threading.Event, sent: list[int]) -> None:
    """Keep L{BACKLOG} top-priority tasks queued until C{stop}: 9 in 10 of one key."""
    keys = [Options(priority=TOP_PRIORITY, fairness_key="heavy")] * 9 + [
        Options(priority=TOP_PRIORITY, fairness_key="light")
    ]
    with QuicxClient(address, protocol=2) as client:
        while not stop.is_set():
            (queue,) = (q for q in client.queues() if q["name"] == "default")
            missing = BACKLOG - queue["priorities"].get(str(TOP_PRIORITY), 0)
            if missing > 0:
                client.submit_many(
                    (TOP_TYPE, b"", keys[(sent[0] + i) % len(keys)]) for i in range(missing)
                )
                sent[0] += missing
            time.sleep(0.01)


def starvation_workload(aging: float, seconds: float, spacing: float) -> dict[str, Any]:
    """
    For C{seconds}, a low task every C{spacing} seconds beside the saturating
    top; then the top stops and every low task's wait is read (those still
    queued start once the top backlog drains: without aging, all of them).
    """
    with running(
        [f"--default-aging={aging}"],
        STARVATION_WORKERS,
        STARVATION_LAYOUT,
        None,
        (),
        "tools.bench:starvation_worker",
    ) as (daemon, _):
        address = daemon.client_address
        stop, sent = threading.Event(), [0]
        producer = threading.Thread(target=_saturate, args=(address, stop, sent))
        producer.start()
        try:
            with QuicxClient(address, protocol=2) as low:
                time.sleep(1.0)  # the top's backlog is there
                ids = []
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    ids.append(low.submit(LOW_TYPE, repr(time.time()), priority=LOW_PRIORITY))
                    time.sleep(spacing)
                stop.set()
                producer.join()
                waits = sorted(float(low.wait(i, timeout=600)) for i in ids)
            (queue,) = (q for q in status(daemon)["queues"] if q["name"] == "default")
        finally:
            stop.set()
            producer.join()
    return {
        "aging": aging,
        "seconds": seconds,
        "spacing": spacing,
        "low_tasks": len(waits),
        "top_tasks": sent[0],
        "promoted": queue["promoted"],
        "wait_p50_s": quantile(waits, 0.5),
        "wait_p99_s": quantile(waits, 0.99),
        "wait_max_s": waits[-1],
    }
