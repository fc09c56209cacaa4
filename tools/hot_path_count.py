"""
The hot path in-process, for counting instructions: SUBMIT, TASK, ACK (v2) or DONE (v1).

A real queue and real server protocols over in-memory transports, on a
L{task.Clock}: no sockets, no reactor, nothing random, so that
C{valgrind --tool=callgrind} counts the same instructions run after run and
two trees can be compared (the figure that timing on a loaded box cannot
give).  Usage::

    PYTHONHASHSEED=0 PYTHONPATH=TREE valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.out python -m tools.hot_path_count 20000
    callgrind_annotate /tmp/cg.out | head -3      # its total Ir

It prints the tasks run and the seconds taken (without valgrind: a rough figure).
"""

from __future__ import annotations

import sys
import time

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import Logger

from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.queue import pmad
from quicx.daemon.queue.core import QueueService
from quicx.daemon.server import QuicxServerFactory
from quicx.protocol import outcomes, taskflow, wire
from quicx.protocol.frames import Frame, FrameParser

BATCH = 100


def connect(factory: QuicxServerFactory) -> tuple[object, StringTransport]:
    transport = StringTransport()
    protocol = factory.buildProtocol(None)
    assert protocol is not None
    protocol.makeConnection(transport)
    return protocol, transport


def frames(transport: StringTransport, parser: FrameParser) -> list[Frame]:
    found = parser.feed(transport.value())
    transport.clear()
    return [f for f in found if isinstance(f, Frame)]


def run(tasks: int, version: int) -> None:
    clock = Clock()
    queue = QueueService(
        pmad.Pmad(8 << 20, pmad.default_classes()),
        clock=clock.seconds,
        scheduler=clock,
        failures=LogSummary(Logger(), 60.0),
    )
    factory = QuicxServerFactory(queue, clock)
    producer, produced = connect(factory)
    worker, working = connect(factory)
    parser = FrameParser(1 << 20, check_types=False, v2_max_length=1 << 20)
    if version == 2:
        submit = taskflow.encode_submit(b"t", b"x" * 32)
        worker.dataReceived(taskflow.encode_ready(BATCH))  # type: ignore[attr-defined]
    else:
        submit = wire.encode_submit(b"t", b"x" * 32)
        worker.dataReceived(wire.encode_ready(BATCH))  # type: ignore[attr-defined]
    for _ in range(tasks // BATCH):
        producer.dataReceived(submit * BATCH)  # type: ignore[attr-defined]
        clock.advance(0)
        produced.clear()
        reports = []
        for frame in frames(working, parser):
            if frame.message_type != wire.MessageType.TASK:
                continue
            if version == 2:
                task = taskflow.decode_task(frame.payload)
                reports.append(outcomes.encode_ack(task.task_id, task.token))
            else:
                reports.append(wire.encode_done(wire.decode_task(frame.payload).task_id))
        worker.dataReceived(b"".join(reports))  # type: ignore[attr-defined]
        clock.advance(0)
    assert queue.stats().queue_depth == 0 and queue.tasks_running == 0


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    for version in (1, 2):
        started = time.perf_counter()
        run(tasks, version)
        print(f"v{version}: {tasks} tasks in {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main()
