"""
How long one search of the dashboard's history of finished tasks holds the
reactor: C{python -m tools.history_search}.

Fills a history (L{quicx.daemon.observe.task_history}) with 10,000 and
100,000 records (the default and the most C{[web] task_history} keeps),
then times one call of each search that reads the most (nothing matches,
so each reads its whole step): by key prefix, by state, by every field at
once, from the newest and from the middle (the step the farthest from
both ends of the ring, reached past the most records); and a task's page
(its records, by id).  Each with C{[web]
search_step} at its default (10,000 records a call) and, for comparison, as
large as the history (the whole history in one call, as before the step).
The median of 21 calls, in milliseconds.  Then what the DONE hook takes
(the history's cost on the hot path) into a full history at the defaults.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

from quicx.daemon.config.sections import WebSettings
from quicx.daemon.observe.task_history import Search, TaskHistory

SEARCHES = {
    "key prefix": Search(key=b"nothing-"),
    "state": Search(state="cancelled"),
    "every field": Search(key=b"k-", task_type=b"resize", queue="mail", state="cancelled"),
}


WORKER = SimpleNamespace(peer=SimpleNamespace(peer_name="worker-1"))
QUEUES = [SimpleNamespace(name=name) for name in ("mail", "shop", "img", "etl")]


def stand_ins(count: int) -> list[SimpleNamespace]:
    """C{count} finished tasks, as a busy daemon's: 4 types, 4 queues, each with a key."""
    return [
        SimpleNamespace(
            task_id=n,
            task_type=(b"send", b"resize", b"charge", b"report")[n % 4],
            home=QUEUES[n // 4 % 4],
            key=b"k-%d" % n,
            priority=0,
            size=100,
            enqueued_at=time.time(),
            dispatched_at=time.time(),
            attempts=1,
            block=0,
        )
        for n in range(1, count + 1)
    ]


def history(count: int, step: int, budget: int = 1 << 30) -> TaskHistory:
    return TaskHistory(time.time, lambda block, n: b"", count, 3600, 0, 4096, False, budget, step)


def filled(count: int, step: int) -> TaskHistory:
    """A history of C{count} records, 1 % of them dead."""
    found = history(count, step)
    for task in stand_ins(count):
        if task.task_id % 100:
            found.done(task, WORKER, 1)  # type: ignore[arg-type]
        else:
            found.buried(task, WORKER, "KeyError: 'sku'", 1)  # type: ignore[arg-type]
    return found


def done_us(tasks: int = 100_000) -> float:
    """What the DONE hook takes, in µs, into a full history at the defaults (the best of 5)."""
    web = WebSettings()
    each = stand_ins(tasks)
    took = []
    for _ in range(5):
        full = history(web.task_history, web.search_step, web.task_history_bytes)
        done = full.done
        start = time.process_time()  # CPU time: the machine may be shared
        for task in each:
            done(task, WORKER, 1)  # type: ignore[arg-type]
        took.append(time.process_time() - start)
    return min(took) / tasks * 1e6


def median_ms(call: Callable[[], Any], runs: int = 21) -> float:
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1000


def figures(history: TaskHistory, step: int) -> dict[str, float]:
    """Each search's median, and a task's page's, in milliseconds."""
    found = {
        name: median_ms(partial(history.search, search, None, 50))
        for name, search in SEARCHES.items()
    }
    # Records are numbered from 0: the step in the middle, the farthest from both ends.
    middle = (len(history.ring) + step) // 2
    found["key prefix, the middle step"] = median_ms(
        partial(history.search, SEARCHES["key prefix"], middle, 50)
    )
    found["a task's page"] = median_ms(partial(history.of, len(history.ring) // 2))
    return found


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    step = WebSettings().search_step
    for count in (10_000, 100_000):
        for each in sorted({step, count}):
            shown = ", ".join(
                f"{k} {ms:.2f}" for k, ms in figures(filled(count, each), each).items()
            )
            print(f"{count:>7,} records, {each:>7,} a call: {shown} ms")
    print(f"the DONE hook, into a full history at the defaults: {done_us():.2f} µs")


if __name__ == "__main__":
    main()
