"""
The clients' per-task work in process, for counting instructions (issue 35's target 2).

No daemon, no sockets: the frames a daemon would send are made once and
fed in, in batches, and what the client writes is thrown away, so that
C{valgrind --tool=callgrind} counts the same instructions run after run
(the figure that timing on a loaded box cannot give).  Workloads:

  - C{worker}: a stock worker's slot (L{quicx.clients.slot.WorkerProtocol},
    credits chosen by its pace, a plain handler that does nothing, on the
    reactor) fed version-2 TASKs with a token and a lease, 32 a read; its
    ACKs go out;
  - C{producer1}, C{producer2}: a producer's connection
    (L{quicx.clients.connection.ClientConnection}): SUBMITs out, 256 at a
    time, their OKs and DONEs in, each outcome taken from the book;
  - C{blocking}: the blocking client as C{tools.bench e2e}'s producer uses
    it (version 1: C{submit_many}, then C{wait} for each task), over a
    socket that answers each SUBMIT with its OK and DONE at once;
  - C{asyncio}: the asyncio client as C{tools.bench clients} uses it
    (version 2: C{submit_many}; the DONEs come too), over a transport that
    answers each write on the loop's next turn.

Usage (the instructions a task: the difference between N and 2N tasks, divided)::

    PYTHONPATH=TREE python -m tools.client_count --count worker 20000
    PYTHONPATH=TREE python -m tools.client_count worker 20000   # a rough µs a task

C{--count} runs C{valgrind --tool=callgrind} itself (with C{PYTHONHASHSEED=0}).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from quicx.aio.client import AsyncClient
from quicx.aio.pump import _Link
from quicx.clients.blocking import QuicxClient
from quicx.clients.connection import ClientConnection, Request
from quicx.clients.worker import Worker, WorkerProtocol
from quicx.protocol import link, taskflow, wire
from quicx.protocol.codec import MessageType
from quicx.protocol.frames import Frame, FrameParser

WORKER_BATCH = 32
_HELLO = int(MessageType.HELLO)
PRODUCER_BATCH = 256


def _nothing(payload: bytes) -> None:
    """The stock handler of the count: it does nothing."""


def worker(tasks: int) -> None:
    """A worker slot: C{tasks} TASKs in, their ACKs out."""
    runner = Worker()
    runner.register("bench", _nothing)
    runner._reactor = Clock()
    runner.timer = lambda: 0.0  # never demoted to a thread, even under valgrind
    placement = runner._handlers[b"bench"].placement
    assert placement is not None
    placement.inline = True  # past its probation in threads
    slot = WorkerProtocol(runner)
    transport = StringTransport()
    slot.makeConnection(transport)
    slot.dataReceived(link.encode_info({"server": "quicx", "capabilities": ["results"]}))
    context = taskflow.task_context(None, None, 12345, 30000)
    read = b"".join(
        taskflow.encode_task(i + 1, b"bench", b"x" * 100, b"\x07default", 0, 1, 0, context)
        for i in range(WORKER_BATCH)
    )
    for _ in range(tasks // WORKER_BATCH):
        slot.dataReceived(read)
        transport.clear()
    assert slot.running == 0


def producer(tasks: int, version: int) -> None:
    """A producer's connection: C{tasks} SUBMITs out, their OKs and DONEs in, outcomes taken."""
    connection = ClientConnection(version, keep_outcomes=1 << 20, announce=False)
    connection.connect()
    if version == 2:
        connection.receive(link.encode_info({"server": "quicx"}))
    spoken = wire if version == 1 else taskflow
    batch = [("bench", b"x" * 100)] * PRODUCER_BATCH
    take = connection.book.take
    for start in range(1, tasks + 1 - PRODUCER_BATCH + 1, PRODUCER_BATCH):
        ids = range(start, start + PRODUCER_BATCH)
        answers = b"".join(spoken.encode_ok(i) for i in ids)
        answers += b"".join(spoken.encode_done(i) for i in ids)
        connection.send(Request.submit(batch))
        connection.receive(answers)
        for task_id in ids:
            take(task_id)


class AnsweringSocket:
    """A socket to a daemon that answers HELLO with INFO, each SUBMIT with its OK and DONE."""

    def __init__(self) -> None:
        self._parser = FrameParser(1 << 20, check_types=False, v2_max_length=1 << 20)
        self._next = 1
        self._answers = bytearray()

    def sendall(self, data: bytes) -> None:
        frames = self._parser.feed(data)
        spoken = wire if self._parser.version == 1 else taskflow
        if frames and isinstance(frames[0], Frame) and frames[0].message_type == _HELLO:
            self._answers += link.encode_info({"server": "quicx"})
            frames = frames[1:]
        ids = range(self._next, self._next + len(frames))
        self._next = ids.stop
        self._answers += b"".join(map(spoken.encode_ok, ids))
        self._answers += b"".join(map(spoken.encode_done, ids))

    def recv(self, size: int) -> bytes:
        data = bytes(self._answers[:size])
        del self._answers[:size]
        assert data, "the client reads what it owes no answer"
        return data

    def settimeout(self, seconds: float | None) -> None:
        pass


class AnsweringTransport(asyncio.Transport):
    """An L{AnsweringSocket} as a transport: its answers come on the loop's next turn."""

    def __init__(self, link: _Link) -> None:
        super().__init__()
        self._link = link
        self._daemon = AnsweringSocket()
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._daemon.sendall(bytes(data))
        answers = self._daemon.recv(1 << 30)
        asyncio.get_running_loop().call_soon(self._link.data_received, answers)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            asyncio.get_running_loop().call_soon(self._link.connection_lost, None)

    def abort(self) -> None:
        self.close()


async def _submit_many(tasks: int) -> None:
    client = AsyncClient("tcp:127.0.0.1:9", keep_outcomes=tasks + 1)
    link = _Link(client)
    link.connection_made(AnsweringTransport(link))
    await client.submit_many([("bench", b"x" * 100)] * tasks)
    await client.close()


def asynchronous(tasks: int) -> None:
    """The asyncio client: C{tasks} submitted in one C{submit_many}, their DONEs read too."""
    asyncio.run(_submit_many(tasks))


def blocking(tasks: int) -> None:
    """The blocking client: C{tasks} submitted in one C{submit_many}, each waited for."""
    client = QuicxClient("tcp:127.0.0.1:9", keep_outcomes=tasks + 1, protocol=1)
    client._sock = AnsweringSocket()  # type: ignore[assignment]
    client._conn.connect()
    ids = client.submit_many([("bench", b"x" * 100)] * tasks)
    for task_id in ids:
        client.wait(task_id)  # type: ignore[arg-type]


WORKLOADS: dict[str, Callable[[int], None]] = {
    "worker": worker,
    "producer1": lambda tasks: producer(tasks, 1),
    "producer2": lambda tasks: producer(tasks, 2),
    "blocking": blocking,
    "asyncio": asynchronous,
}


def instructions(workload: str, tasks: int) -> int:
    """The instructions callgrind counts for one run of C{workload} with C{tasks}."""
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "cg.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "tools.client_count",
                workload,
                str(tasks),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        with open(out) as counted:
            found = re.search(r"^(?:summary|totals): (\d+)", counted.read(), re.MULTILINE)
        assert found is not None, "callgrind wrote no total"
        return int(found[1])


def main(argv: list[str]) -> None:
    count = argv[:1] == ["--count"]
    args = argv[1:] if count else argv
    if not args or args[0] not in WORKLOADS:
        raise SystemExit(f"usage: python -m tools.client_count [--count] {'|'.join(WORKLOADS)} [N]")
    workload = args[0]
    tasks = 20_000
    if len(args) > 1:
        if not args[1].isdigit() or int(args[1]) < 1:
            raise SystemExit(f"tools.client_count: N counts tasks, 1 or more, not {args[1]!r}")
        tasks = int(args[1])
    if count:
        once, twice = instructions(workload, tasks), instructions(workload, 2 * tasks)
        print(f"{workload}: {(twice - once) / tasks:,.0f} instructions a task")
        return
    started = time.process_time()
    WORKLOADS[workload](tasks)
    seconds = time.process_time() - started
    print(f"{workload}: {1e6 * seconds / tasks:.2f} µs a task")


if __name__ == "__main__":
    main(sys.argv[1:])
