"""
Bulk actions and the journal: a MOVED record's layout is checked like every
other kind's, and a daemon killed with SIGKILL in the middle of a bulk move
or cancel comes back with every task acted on or not, never lost nor doubled.
"""

from __future__ import annotations

import os
import signal
import time
import zlib
from pathlib import Path

import pytest

from quicx import Options
from quicx.clients.blocking import QuicxClient
from quicx.daemon.journal import records
from quicx.daemon.journal.records import JournalCorrupt
from quicx.daemon.journal.recovery import recover
from quicx.protocol import bulk
from quicx.protocol.errors import NotFound
from tests.interop.raw import Wire

TASKS = 20_000
DONE_BEFORE = 100


def journal_of(path: Path, *body: bytes) -> str:
    path.write_bytes(records.MAGIC + b"".join(body))
    return str(path)


def test_a_moved_record_changes_the_recovered_tasks_queue(tmp_path: Path) -> None:
    submitted = records.encode_submit2(7, b"t", b"x", "a", 0, 1.0, None, None)
    path = journal_of(tmp_path / "j", submitted, records.encode_moved(7, "elsewhere"))
    (task,) = recover(path).tasks
    assert (task.task_id, task.queue) == (7, "elsewhere")


def test_a_moved_record_of_the_wrong_length_is_damage(tmp_path: Path) -> None:
    submitted = records.encode_submit2(7, b"t", b"x", "a", 0, 1.0, None, None)
    moved = records.encode_moved(7, "elsewhere")
    body = moved[records.RECORD_HEADER.size :]
    short = body[:-1]
    bad = records.RECORD_HEADER.pack(len(short), zlib.crc32(short)) + short
    path = journal_of(tmp_path / "j", submitted, bad, submitted)
    with pytest.raises(JournalCorrupt, match="MOVED record of the wrong length"):
        recover(path)


def queued(client: QuicxClient) -> dict[str, int]:
    return {q["name"]: q["depth"] for q in client.queues()}


def check_each_task_once(client: QuicxClient, ids: list[int], action: str) -> dict[str, int]:
    """Every task is in exactly one queue (or cancelled), as the depths say."""
    depths = queued(client)
    if action == "move":
        assert depths.get("a", 0) + depths.get("b", 0) == TASKS  # every task in one queue
    found: dict[str, list[int]] = {"a": [], "b": []}
    for task_id in ids:
        try:
            found[client.task(task_id)["queue"]].append(task_id)
        except NotFound:  # cancelled
            assert action == "cancel"
    assert (len(found["a"]), len(found["b"])) == (depths.get("a", 0), depths.get("b", 0))
    return depths


@pytest.mark.parametrize("action", ["move", "cancel"])
def test_kill_9_in_the_middle_of_a_bulk_action_loses_and_doubles_nothing(
    tmp_path: Path, start_daemon, action: str
) -> None:
    journal = str(tmp_path / "journal")
    flags = (f"--journal={journal}", "--fsync=always", "--bulk-batch=5", "--pool-size=32M")
    daemon = start_daemon(*flags)
    with QuicxClient(f"tcp:127.0.0.1:{daemon.port}") as client:
        answers = client.submit_many(("t", b"x", Options(queue="a")) for _ in range(TASKS))
        ids = [i for i in answers if isinstance(i, int)]
        assert len(ids) == TASKS
        admin = Wire(str(daemon.control_path))
        request = bulk.request(action, queue="a", to="b" if action == "move" else None)
        written = os.path.getsize(journal)
        admin.send(bulk.encode_bulk(request))
        # Killed once the records of the first 100 tasks acted on are in the
        # file (on a slow machine the action may have finished by then).
        record = len(
            records.encode_moved(1, "b")
            if action == "move"
            else records.encode_outcome(1, "cancelled")
        )
        cut = written + DONE_BEFORE * record
        deadline = time.monotonic() + 60
        while os.path.getsize(journal) < cut:
            assert time.monotonic() < deadline, "the action's records never reached the file"
            time.sleep(0.001)
        os.kill(daemon.pid, signal.SIGSTOP)
    daemon.kill()
    # A crash at that exact record: the file as it was when the 100th task's
    # record had been written (the action writes nothing else meanwhile).
    at_cut = str(tmp_path / "at-cut")
    with open(journal, "rb") as whole, open(at_cut, "wb") as prefix:
        prefix.write(whole.read(cut))
    restarted = start_daemon(*flags[:1], "--pool-size=32M")
    with QuicxClient(f"tcp:127.0.0.1:{restarted.port}") as client:
        left = check_each_task_once(client, ids, action).get("a", 0)
        assert left <= TASKS - DONE_BEFORE
    restarted.kill()
    in_the_middle = start_daemon(f"--journal={at_cut}", "--pool-size=32M")
    with QuicxClient(f"tcp:127.0.0.1:{in_the_middle.port}") as client:
        assert check_each_task_once(client, ids, action).get("a", 0) == TASKS - DONE_BEFORE
