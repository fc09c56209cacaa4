"""
The dispatch's cost per task with routing by type, in-process: C{python -m tools.routing [N]}.

SUBMIT -> TASK -> ACK through the queue kernel alone (no sockets, frames
discarded), the version-2 mix of L{tools.bench} (4 queues, 3 priorities),
2 workers of 16 credits, with the workers:

  - C{plain}: announcing nothing (every type: the dispatch before routing);
  - C{typed}: announcing the one type they are sent;
  - C{split}: one worker per type, the tasks of two types in turn;
  - C{aside}: as C{typed}, with 10,000 tasks of a type nobody runs set
    aside in each queue first (they must cost little after);
  - C{queued}: its baseline, as C{plain} with as many tasks queued in a
    queue nobody serves (a larger live set costs by itself).

It prints each one's CPU nanoseconds per task (process time: the machine's
other load does not count), the median of C{--runs}.  Run the same against
an older tree (C{PYTHONPATH=OLD python -m tools.routing}, C{plain} only
there) to compare.
"""

from __future__ import annotations

import argparse
import statistics
import time

from twisted.internet.task import Clock
from zope.interface import implementer

from quicx.daemon.queue import pmad
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Session
from quicx.daemon.speakers import SPEAKERS
from quicx.protocol import taskflow
from quicx.protocol.session import IPeer, Role

QUEUES = ("q0", "q1", "q2", "q3")
OPTIONS = [taskflow.SubmitOptions(queue=q, priority=p) for q in QUEUES for p in (0, 5, 9)]
PAYLOAD = b"x" * 100


@implementer(IPeer)
class _Sink:
    peer_name = "sink"

    def sendFrame(self, data: bytes) -> None:
        pass

    def disconnect(self) -> None:
        pass


def _worker(kernel: QueueService, handles: frozenset[bytes] | None) -> Session:
    session = kernel.open_session(_Sink(), SPEAKERS[2])
    if handles is not None and hasattr(session, "handles"):
        session.handles = handles
    kernel.claim_role(session, Role.WORKER)
    kernel.subscribe(session, QUEUES)
    kernel.ready(session, 16)
    return session


def run(mode: str, n: int) -> float:
    """CPU ns per task of C{n} tasks with the workers of C{mode}."""
    kernel = QueueService(pmad.Pmad(64 << 20, pmad.default_classes()), scheduler=Clock())
    admission = Admission(kernel)
    producer = kernel.open_session(_Sink(), SPEAKERS[2])
    kernel.claim_role(producer, Role.PRODUCER)
    types = (b"a", b"b") if mode == "split" else (b"a",)
    if mode == "aside":
        _worker(kernel, frozenset({b"a"}))
        for i in range(40_000):
            admission.submit(producer, b"nobody", PAYLOAD, OPTIONS[i % 4])
        kernel.close_session(next(s for s in kernel.sessions.values() if s is not producer))
    elif mode == "queued":
        unserved = taskflow.SubmitOptions(queue="unserved")
        for _ in range(40_000):
            admission.submit(producer, b"nobody", PAYLOAD, unserved)
    handles = {
        "plain": [None, None],
        "queued": [None, None],
        "typed": [frozenset({b"a"})] * 2,
        "aside": [frozenset({b"a"})] * 2,
        "split": [frozenset({b"a"}), frozenset({b"b"})],
    }[mode]
    workers = [_worker(kernel, h) for h in handles]
    start = time.process_time()
    for i in range(n):
        admission.submit(producer, types[i % len(types)], PAYLOAD, OPTIONS[i % 12])
        if i % 8 == 7:
            for worker in workers:
                for task_id, task in list(worker.tasks.items()):
                    kernel.ack(worker, task_id, task.token)
    for worker in workers:
        for task_id, task in list(worker.tasks.items()):
            kernel.ack(worker, task_id, task.token)
    return (time.process_time() - start) / n * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.routing", description=__doc__)
    parser.add_argument("n", type=int, nargs="?", default=100_000, help="tasks per run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--modes", default="plain,typed,split,aside,queued")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        samples = [run(mode, args.n) for _ in range(args.runs)]
        print(f"{mode:6} {statistics.median(samples):8.0f} ns/task (CPU, median of {args.runs})")


if __name__ == "__main__":
    main()
