"""
Results, AWAIT and groups against a real daemon on loopback, over raw
sockets: a worker's result reaches its producer's DONE and another
connection's AWAIT; a kill -9 with a journal keeps the kept results and
the groups, and compaction rewrites them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quicx.daemon.control import fetch_status
from quicx.daemon.journal.recovery import recover
from quicx.protocol import codec, link, outcomes, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import GroupOp, GroupPhase, GroupState, Outcome, OutcomeState
from quicx.protocol.taskflow import Result, ResultKind
from tests.cli.test_cli import quicx
from tests.peer import Peer

REPORT = Result(ResultKind.JSON, b'{"rows":1200,"file":"r.csv"}')


def submit(peer: Peer, payload: bytes, **options: object) -> int:
    reply = peer.request(taskflow.encode_submit(b"t", payload, taskflow.submit_options(**options)))
    assert isinstance(reply, taskflow.Ok), reply
    return reply.task_id


def group_request(peer: Peer, op: GroupOp, group: int = 0) -> dict[str, Any]:
    reply = peer.request(outcomes.encode_group(op, group))
    assert isinstance(reply, link.Info), reply
    return reply.document


def test_a_result_reaches_the_producer_and_another_connections_await(start_daemon) -> None:
    daemon = start_daemon("--result-max-size=100")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        hello = producer.request(link.encode_hello("test", "1", ["results", "groups"])).document
        assert hello["missing"] == [] and hello["limits"]["max_result"] == 100
        task_id = submit(producer, b"report", result_ttl=0)
        with Peer(daemon.address) as watcher:
            watcher.send(outcomes.encode_await(task_id, 10_000))
            assert watcher.nothing_for(0.2)
            worker.send(taskflow.encode_ready(1))
            task = worker.receive()
            worker.send(
                outcomes.encode_ack(task.task_id, task.token, Result(ResultKind.BYTES, b"x" * 101))
            )
            error = worker.receive()
            assert isinstance(error, wire.Error) and error.code == ErrorCode.PAYLOAD_TOO_LARGE
            assert "101 bytes" in error.message and "100 bytes" in error.message
            worker.send(outcomes.encode_ack(task.task_id, task.token, REPORT))
            assert producer.receive() == taskflow.Done(task_id, REPORT)
            assert watcher.receive() == Outcome(task_id, OutcomeState.DONE, REPORT)
        with Peer(daemon.address) as later:
            assert later.request(outcomes.encode_await(task_id)) == Outcome(
                task_id, OutcomeState.DONE, REPORT
            )
            assert later.request(outcomes.encode_await(task_id + 1)) == Outcome(
                task_id + 1, OutcomeState.UNKNOWN
            )
    status = fetch_status(str(daemon.control_path))
    assert status["tasks"]["results_kept"] == 1 and status["results"]["kept"] == 1


def test_kept_results_and_groups_survive_kill_9(tmp_path: Path, start_daemon) -> None:
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        finished_group = group_request(producer, GroupOp.OPEN)["group"]
        kept = submit(producer, b"kept", result_ttl=3600, group=finished_group)
        group = group_request(producer, GroupOp.OPEN)["group"]
        members = [submit(producer, b"m%d" % n, queue="g", group=group) for n in range(3)]
        worker.send(taskflow.encode_ready(1, ["default"]))
        task = worker.receive()
        worker.send(outcomes.encode_ack(task.task_id, task.token, REPORT))
        assert producer.receive() == taskflow.Done(kept, REPORT)
        # Closing finishes it: its GROUP_STATE (not an answer) may come before the INFO.
        producer.send(outcomes.encode_group(GroupOp.CLOSE, finished_group))
        answers = [producer.receive(), producer.receive()]
        assert GroupState(finished_group, GroupPhase.FINISHED, 1, 1) in answers
        (info,) = [m for m in answers if isinstance(m, link.Info)]
        assert info.document["state"] == "finished"
        worker.send(taskflow.encode_ready(1, ["g"]))
        done = worker.receive()
        worker.send(outcomes.encode_ack(done.task_id, done.token))
        failed = worker.receive()
        worker.send(outcomes.encode_nack(failed.task_id, failed.token, "no"))
        assert {producer.receive().task_id, producer.receive().task_id} == set(members[:2])
        # Closing waits for the journal (fsync = always): every record before it is on disk.
        assert group_request(producer, GroupOp.CLOSE, group)["pending"] == 1
    daemon.kill()

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as client, Peer(restarted.address) as worker:
        assert client.request(outcomes.encode_await(kept)) == Outcome(
            kept, OutcomeState.DONE, REPORT
        )
        assert client.request(outcomes.encode_await(members[1])) == Outcome(
            members[1], OutcomeState.UNKNOWN
        )
        finished = group_request(client, GroupOp.STATE, finished_group)
        assert (finished["state"], finished["done"]) == ("finished", 1)
        state = group_request(client, GroupOp.STATE, group)
        assert (state["state"], state["members"], state["done"], state["failed"]) == (
            "closed",
            3,
            1,
            1,
        )
        client.send(outcomes.encode_group(GroupOp.WAIT, group, 10_000))
        client.send(outcomes.encode_await(members[2], 10_000))
        worker.send(taskflow.encode_ready(1, ["g"]))
        last = worker.receive()
        assert last.task_id == members[2]
        worker.send(outcomes.encode_ack(last.task_id, last.token, REPORT))
        answers = [client.receive(), client.receive()]
        assert GroupState(group, GroupPhase.FINISHED, 3, 2, 1, 0, 0) in answers
        # Its producer is gone (a restart): the outcome was kept, and awaited.
        assert Outcome(members[2], OutcomeState.DONE, REPORT) in answers
        assert client.request(outcomes.encode_await(members[2])) == Outcome(
            members[2], OutcomeState.DONE, REPORT
        )
        # A group opened now is numbered past the ones before the restart.
        assert group_request(client, GroupOp.OPEN)["group"] == group + 1


def test_compaction_rewrites_kept_results_and_groups(tmp_path: Path, start_daemon) -> None:
    path = tmp_path / "j"
    config = tmp_path / "quicx.conf"
    config.write_text(
        f"[journal]\npath = {path}\nfsync = always\ncompact_factor = 2\ncompact_min_size = 16K\n"
    )
    daemon = start_daemon(f"--config={config}", "--listen=tcp:0:interface=127.0.0.1")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        group = group_request(producer, GroupOp.OPEN)["group"]
        kept = submit(producer, b"kept", queue="one", result_ttl=600, group=group)
        worker.send(taskflow.encode_ready(1, ["one"]))
        task = worker.receive()
        worker.send(outcomes.encode_ack(task.task_id, task.token, REPORT))
        assert producer.receive() == taskflow.Done(kept, REPORT)
        assert worker.request(taskflow.encode_ready(64, ["churn"])) == wire.Wait()
        for _ in range(400):  # enough finished records to pass 16K and compact
            ok = submit(producer, b"x" * 40, queue="churn")
            task = worker.receive()
            worker.send(outcomes.encode_ack(task.task_id, task.token))
            assert producer.receive().task_id == ok
        assert group_request(producer, GroupOp.STATE, group)["done"] == 1
    assert fetch_status(str(daemon.control_path))["journal"]["compactions"] >= 1
    daemon.kill()
    recovery = recover(str(path))
    assert [(e.task_id, e.state, e.data) for e in recovery.kept] == [
        (kept, OutcomeState.DONE, REPORT.data)
    ]
    assert [(g.group_id, g.phase, g.members, g.done) for g in recovery.groups] == [
        (group, GroupPhase.OPEN, 1, 1)
    ]
    assert recovery.last_group_id == group


def test_groups_and_waits_over_the_wire_refuse_what_they_must(start_daemon) -> None:
    daemon = start_daemon("--max-waiters-per-connection=1")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(1))
        assert worker.receive() == wire.Wait()
        refused = worker.request(outcomes.encode_group(GroupOp.OPEN))
        assert isinstance(refused, wire.Error) and refused.code == ErrorCode.INVALID_MESSAGE
        # A new connection's OPEN makes it a producer.
        group = group_request(producer, GroupOp.OPEN)["group"]
        unknown = producer.request(outcomes.encode_group(GroupOp.CLOSE, group + 1))
        assert isinstance(unknown, wire.Error) and unknown.code == ErrorCode.NOT_FOUND
        task_id = submit(producer, b"x", queue="nobody", group=group)
        producer.send(outcomes.encode_group(GroupOp.WAIT, group, 60_000))
        full = producer.request(outcomes.encode_await(task_id, 60_000))
        assert isinstance(full, wire.Error) and full.code == ErrorCode.QUEUE_FULL
        assert "max_waiters_per_connection = 1" in full.message
        short = codec.frame(
            codec.MessageType.GROUP, outcomes.encode_group(GroupOp.STATE, group)[6:-1]
        )
        bad = producer.request(short)
        assert isinstance(bad, wire.Error) and bad.code == ErrorCode.INVALID_MESSAGE
        assert producer.nothing_for(0.1)


def test_a_daemon_at_its_result_memory_limit_evicts_the_oldest_and_counts_it(
    start_daemon,
) -> None:
    # Each kept result takes a 1 KiB block: 3 KiB holds three of them.
    daemon = start_daemon("--result-max-memory=3K", "--result-max-size=1000")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(1))
        ids = []
        for n in range(5):
            task_id = submit(producer, b"p%d" % n, result_ttl=3600)
            task = worker.receive()
            while not isinstance(task, taskflow.Task):  # a WAIT before the first task
                task = worker.receive()
            result = Result(ResultKind.BYTES, bytes([n]) * 1000)
            worker.send(outcomes.encode_ack(task.task_id, task.token, result))
            assert producer.receive() == taskflow.Done(task_id, result)
            ids.append(task_id)
        with Peer(daemon.address) as later:
            answers = [later.request(outcomes.encode_await(task_id)) for task_id in ids]
    states = [answer.state for answer in answers]
    assert states[:2] == [OutcomeState.FORGOTTEN] * 2  # the oldest went first
    assert states[2:] == [OutcomeState.DONE] * 3
    assert answers[4] == Outcome(ids[4], OutcomeState.DONE, Result(ResultKind.BYTES, b"\4" * 1000))
    status = fetch_status(str(daemon.control_path))
    assert status["tasks"]["results_evicted"] == 2 and status["results"]["kept"] == 3


def test_a_max_size_set_past_the_pools_largest_block_is_logged(start_daemon) -> None:
    daemon = start_daemon("--result-max-size=4K")
    assert (
        "results are held to 1,024 bytes, the pool's largest block ([results] max_size is"
        " 4,096): add a larger class to take larger ones" in daemon.log()
    )


def test_a_fire_and_forget_load_does_not_evict_a_kept_result_and_quicx_result_says_evicted(
    tmp_path: Path, start_daemon
) -> None:
    """
    The new user's run: a result kept on request, then a load whose producer
    leaves at once.  Its outcomes are kept for nobody in particular, so they
    go first, across a kill -9 too; a result evicted is said to be.
    """
    journal = str(tmp_path / "j")
    # Each kept result takes a 1 KiB block: 3 KiB holds three of them.
    limits = ("--result-max-memory=3K", "--result-max-size=1000", f"--journal={journal}")
    daemon = start_daemon(*limits, "--fsync=always")
    result = Result(ResultKind.TEXT, b"r" * 1000)

    def work(worker: Peer, count: int) -> None:
        for _ in range(count):
            task = worker.receive(timeout=30)
            while not isinstance(task, taskflow.Task):  # a WAIT before the first task
                task = worker.receive(timeout=30)
            worker.send(outcomes.encode_ack(task.task_id, task.token, result))
        assert worker.request(link.HEARTBEAT_FRAME) == wire.Pong()  # every ACK applied

    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(1))
        asked = submit(producer, b"mine", result_ttl=3600)
        work(worker, 1)
        assert producer.receive() == taskflow.Done(asked, result)
        with Peer(daemon.address) as loader:
            load = [submit(loader, b"load") for _ in range(5)]
        deadline = time.monotonic() + 30  # until the daemon sees the loader gone
        while fetch_status(str(daemon.control_path))["connections"]["total"] != 2:
            assert time.monotonic() < deadline
        work(worker, 5)
        # Barrier: with fsync = always, this OK follows every record before it.
        submit(producer, b"barrier", queue="barrier")
    daemon.kill()

    restarted = start_daemon(*limits, "--fsync=always")
    address = f"tcp:127.0.0.1:{restarted.port}"
    shown = quicx("result", str(asked), f"--connect={address}")
    assert (shown.returncode, shown.stdout.strip()) == (0, "r" * 1000), shown.stderr
    with Peer(restarted.address) as client:
        states = [client.request(outcomes.encode_await(task_id)).state for task_id in load]
    assert states == [OutcomeState.FORGOTTEN] * 3 + [OutcomeState.DONE] * 2
    # Three results asked for now: the two automatic ones go, then the oldest asked for.
    with Peer(restarted.address) as producer, Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(1))
        for n in range(3):
            submit(producer, b"%d" % n, result_ttl=3600)
        work(worker, 3)
        assert all(isinstance(producer.receive(), taskflow.Done) for _ in range(3))
        submit(producer, b"barrier", queue="barrier")
    shown = quicx("result", str(asked), f"--connect={address}")
    assert shown.returncode == 1
    assert shown.stderr.strip() == (
        f"quicx: the outcome of task {asked} was kept, and was evicted: past [results] max_memory"
    )
    restarted.kill()
    # The journal says it was evicted, not expired: so does a restart.
    again = start_daemon(*limits)
    shown = quicx("result", str(load[0]), f"--connect=tcp:127.0.0.1:{again.port}")
    assert shown.stderr.strip().endswith(f"task {load[0]} was kept, and was evicted")
