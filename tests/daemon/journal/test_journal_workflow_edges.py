"""
Issue 33's journaled parts together through a crash: a task that started
in time, saved a checkpoint, failed into its retry's backoff and had its
payload replaced by a debounced SUBMIT, kill -9'd after compactions and
restarted past its deadline to start, runs once, with the newest payload
and its checkpoint, and does not expire (it started in time).
"""

from __future__ import annotations

import time
from pathlib import Path

from quicx.protocol import admin, outcomes, taskflow
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.parents import ParentPolicy
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from quicx.protocol.taskflow import Backoff, BackoffKind, Result, SubmitOptions
from tests.daemon.journal.test_journal_checkpoints import next_task, save
from tests.peer import Peer


def submit(peer: Peer, payload: bytes, queue: str, **options: object) -> taskflow.Ok:
    body = SubmitOptions(queue=queue, **options).encode()  # type: ignore[arg-type]
    reply = peer.request(taskflow.encode_submit(b"t", payload, body))
    assert isinstance(reply, taskflow.Ok), reply
    return reply


def test_a_replaced_payload_a_checkpoint_and_a_deadline_survive_kill_9(
    tmp_path: Path, start_daemon
) -> None:
    journal = tmp_path / "j"
    compact = ("--compact-min-size=4096", "--compact-factor=1.5")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always", *compact)
    replace = Debounce(DebounceMode.REPLACE, 100)
    backoff = Backoff(BackoffKind.FIXED, 3000, 3000, 0)
    with (
        Peer(daemon.address) as producer,
        Peer(daemon.address) as worker,
        Peer(daemon.address) as other,
    ):
        first = submit(
            producer, b"old", "q", key=b"k", debounce=replace,
            expires=Expires(2000), retries=1, backoff=backoff,
        )  # fmt: skip
        deadline = time.time() + 2.0
        worker.send(taskflow.encode_ready(1, ["q"]))
        task = next_task(worker)
        assert (task.task_id, task.payload) == (first.task_id, b"old")
        save(worker, task, {"cursor": 7})
        worker.send(outcomes.encode_nack(task.task_id, task.token, "again"))
        # Into its retry's backoff (3 s): a debounced SUBMIT of its key folds into it.
        while True:
            shown = other.request(admin.encode_inspect(task.task_id)).document
            if shown["state"] == "delayed":
                break
            time.sleep(0.02)
        retrying = producer.receive()
        assert isinstance(retrying, outcomes.Retrying), retrying
        folded = submit(producer, b"new", "q", key=b"k", debounce=replace)
        assert (folded.task_id, folded.duplicate) == (first.task_id, True)
        # Records enough to compact the file several times over.
        fillers = [submit(other, b"f" * 500, "filler").task_id for _ in range(40)]
        with Peer(daemon.address) as runner:
            runner.send(taskflow.encode_ready(1, ["filler"]))
            for _ in fillers:
                done = next_task(runner)
                runner.send(outcomes.encode_ack(done.task_id, done.token))
            assert runner.request(admin.encode_inspect(fillers[-1])).code == 0x05
        compacted = time.monotonic() + 60  # compaction runs beside the reactor: wait for it
        while journal.stat().st_size >= 40 * 500:
            assert time.monotonic() < compacted, journal.stat().st_size
            time.sleep(0.05)
        daemon.kill()
    while time.time() < deadline + 0.2:  # its deadline to start passes while it is down
        time.sleep(0.05)

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(2, ["q"]))
        again = next_task(worker)
        assert (again.task_id, again.payload) == (first.task_id, b"new")
        assert again.checkpoint == Result.of({"cursor": 7})
        assert again.attempt == 2
        assert worker.nothing_for(0.3)


def test_a_child_of_an_expired_parent_survives_kill_9(tmp_path: Path, start_daemon) -> None:
    """
    A parent that expires while its child waits (the child continues past
    failures): the PARENT record of its outcome (state 7, expired) is read
    back after a kill -9 (it was "of the wrong shape": the daemon would not
    start), and the child runs with it listed.
    """
    journal = tmp_path / "j"
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(daemon.address) as producer:
        parent = submit(producer, b"parent", "work", expires=Expires(300))
        child = submit(
            producer, b"child", "work", after=(parent.task_id,),
            on_parent_failure=ParentPolicy.CONTINUE,
        )  # fmt: skip
        expired = producer.receive(timeout=30)
        assert isinstance(expired, outcomes.Outcome), expired
        assert expired.state is OutcomeState.EXPIRED
        submit(producer, b"barrier", "barrier")  # its OK: everything before it is synced
        daemon.kill()

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(1, ["work"]))
        again = next_task(worker)
        assert again.task_id == child.task_id and again.parents is not None
        assert [(o.task_id, o.state) for o in again.parents.outcomes] == [
            (parent.task_id, OutcomeState.EXPIRED)
        ]
