"""
Checkpoints survive a crash: a daemon with C{fsync = always} answers a
CHECKPOINT once its record is synced, is killed with SIGKILL, and the
task's redelivery after the restart carries the last acknowledged state
(also after compactions, which rewrite it); a finished task's is gone.
The record's layout is the page's, the last of a task wins, and a damaged
one is refused.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from quicx.daemon.journal import records as journal
from quicx.daemon.journal.interface import SavedState
from quicx.daemon.journal.records import JournalCorrupt
from quicx.daemon.journal.recovery import recover
from quicx.protocol import admin, checkpoints, codec, outcomes, taskflow, wire
from quicx.protocol.checkpoints import Checkpointed
from quicx.protocol.taskflow import Result
from tests.daemon.journal.test_journal_v2 import framed, write
from tests.peer import Peer


def next_task(worker: Peer) -> taskflow.Task:
    """The next TASK C{worker} gets, past the WAITs of its READY."""
    while isinstance(message := worker.receive(), wire.Wait):
        pass
    assert isinstance(message, taskflow.Task), message
    return message


def running(peer: Peer, worker: Peer, payload: bytes) -> taskflow.Task:
    """Submit a task from C{peer} and take it as C{worker} (READY sent)."""
    ok = peer.request(taskflow.encode_submit(b"t", payload))
    assert isinstance(ok, taskflow.Ok), ok
    task = next_task(worker)
    assert task.task_id == ok.task_id, task
    return task


def save(worker: Peer, task: taskflow.Task, state: object) -> None:
    answer = worker.request(
        checkpoints.encode_checkpoint(task.task_id, task.token, Result.of(state))
    )
    assert answer == Checkpointed(task.task_id, task.token, 0), answer


def test_the_last_acknowledged_checkpoint_survives_kill_9(tmp_path: Path, start_daemon) -> None:
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(2))
        long = running(producer, worker, b"long")
        short = running(producer, worker, b"short")
        save(worker, short, "gone once done")
        worker.send(outcomes.encode_ack(short.task_id, short.token))
        assert producer.receive() == taskflow.Done(short.task_id)
        # Each answer waits for the sync of every record before it: the DONE's too.
        for cursor in range(1, 6):
            save(worker, long, {"cursor": cursor})
        daemon.kill()

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as client:
        shown = client.request(admin.encode_inspect(long.task_id)).document
        assert shown["checkpoint"]["size"] == len(b'{"cursor":5}')
        gone = client.request(admin.encode_inspect(short.task_id))
        assert gone.code == codec.ErrorCode.NOT_FOUND, gone
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(2))
        again = next_task(worker)
        assert (again.task_id, again.checkpoint) == (long.task_id, Result.of({"cursor": 5}))
        assert worker.nothing_for(0.2)  # the finished task is not back


def test_checkpoints_survive_compactions_and_kill_9(tmp_path: Path, start_daemon) -> None:
    journal = tmp_path / "j"
    compact = ("--compact-min-size=4096", "--compact-factor=1.5")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always", *compact)
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(1))
        task = running(producer, worker, b"x")
        for step in range(200):  # 200 records of 1 KiB: compacted again and again
            save(worker, task, bytes([step % 256]) * 1000)
        size = journal.stat().st_size
        assert size < 200 * 1000, size  # compacted: only the last is kept
        daemon.kill()

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(1))
        again = next_task(worker)
        assert again.checkpoint == Result.of(bytes([199]) * 1000)


T0 = 1795000000.0


def test_the_record_is_the_pages_layout_and_the_last_of_a_task_wins(tmp_path: Path) -> None:
    saved = SavedState(Result.of({"i": 2}), T0 + 0.25)
    assert journal.encode_saved(7, saved) == framed(
        bytes([27]) + struct.pack(">IQB", 7, 1795000000250, 3) + b'{"i":2}'
    )
    path = tmp_path / "j"
    first = SavedState(Result.of({"i": 1}), T0)
    write(
        path,
        journal.encode_submit2(7, b"t", b"p", "q", 0, T0, None, None),
        journal.encode_saved(7, first),
        journal.encode_saved(7, saved),
        journal.encode_saved(8, first),  # of no live task: nothing
        journal.encode_submit2(9, b"t", b"p", "q", 0, T0, None, None),
        journal.encode_saved(9, first),
        journal.encode_outcome(9, "done"),  # finished: its checkpoint goes with it
    )
    (task,) = recover(str(path)).tasks
    assert (task.task_id, task.checkpoint) == (7, saved)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (bytes([27]) + struct.pack(">IQ", 7, 0), "CHECKPOINT record shorter than its header"),
        (bytes([27]) + struct.pack(">IQB", 7, 0, 4) + b"x", "unknown state kind 4"),
    ],
)
def test_a_damaged_record_is_refused(tmp_path: Path, body: bytes, problem: str) -> None:
    path = tmp_path / "j"
    write(path, journal.encode_submit2(7, b"t", b"p", "q", 0, T0, None, None), framed(body))
    with pytest.raises(JournalCorrupt, match=problem):
        recover(str(path))
