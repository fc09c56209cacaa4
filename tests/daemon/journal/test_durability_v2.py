"""
Version-2 state survives a crash: a daemon with C{fsync = always} is killed
with SIGKILL, and its queues, priorities, pauses and idempotency keys come
back with it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quicx.protocol import admin, codec, link, outcomes, taskflow, wire
from quicx.protocol.outcomes import OutcomeState
from tests.peer import Peer


def submit(
    peer: Peer, payload: bytes, queue: str, priority: int, key: bytes | None = None
) -> taskflow.Ok:
    reply = peer.request(
        taskflow.encode_submit(b"t", payload, taskflow.submit_options(queue, priority, key))
    )
    assert isinstance(reply, taskflow.Ok), reply
    return reply


def test_queues_priorities_pauses_and_keys_survive_kill_9(tmp_path: Path, start_daemon) -> None:
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(daemon.address) as producer:
        low = submit(producer, b"low", "mail", 1, b"order-1")
        high = submit(producer, b"high", "mail", 9)
        submit(producer, b"other", "video", 5)
        finished = submit(producer, b"done-before", "video", 5, b"order-2")
        with Peer(daemon.address) as worker:
            worker.send(taskflow.encode_ready(1, ["video"]))
            first = worker.receive()
            assert isinstance(first, taskflow.Task) and first.payload == b"other"
            worker.send(outcomes.encode_ack(first.task_id, first.token))
            second = worker.receive()
            assert isinstance(second, taskflow.Task) and second.task_id == finished.task_id
            worker.send(outcomes.encode_ack(second.task_id, second.token))
            # Both DONE records are written before the PAUSE below, whose answer
            # waits until they are synced too (an outcome is not on its own).
            done = {producer.receive().task_id, producer.receive().task_id}
            assert done == {first.task_id, second.task_id}
    with Peer(str(daemon.control_path)) as control:
        assert control.request(
            admin.encode_queue_action(codec.MessageType.PAUSE, "mail")
        ) == link.Info({"queue": "mail", "paused": True})
    daemon.kill()

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as client:
        queues = {q["name"]: q for q in client.request(admin.encode_queues()).document}
        assert queues["mail"]["paused"] is True
        assert queues["mail"]["priorities"] == {"9": 1, "1": 1}
        # Keys: a live task's and a finished task's both still answer.
        again = submit(client, b"low", "mail", 1, b"order-1")
        assert (again.task_id, again.duplicate) == (low.task_id, True)
        replay = submit(client, b"x", "video", 5, b"order-2")
        assert (replay.task_id, replay.duplicate) == (finished.task_id, True)
        assert client.receive() == taskflow.Done(finished.task_id)
        inspected = client.request(admin.encode_inspect(high.task_id)).document
        assert (inspected["queue"], inspected["priority"]) == ("mail", 9)
        assert "paused" in {r["reason"] for r in inspected["why"]}
    with Peer(str(restarted.control_path)) as control:
        control.request(admin.encode_queue_action(codec.MessageType.RESUME, "mail"))
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(2, ["mail"]))
        got = [worker.receive(), worker.receive()]
        assert [t.payload for t in got] == [b"high", b"low"]


def test_delayed_retrying_and_dead_tasks_survive_kill_9(tmp_path: Path, start_daemon) -> None:
    journal = str(tmp_path / "j")
    retries = ("--default-retries=2", "--default-backoff=fixed:1m")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always", *retries)
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.request(
            taskflow.encode_submit(b"t", b"warm-up", taskflow.submit_options("q"))
        )
        worker.send(taskflow.encode_ready(1, ["q"]))
        task = worker.receive()
        worker.send(outcomes.encode_ack(task.task_id, task.token))
        assert producer.receive() == taskflow.Done(ok.task_id)

        def submit(payload: bytes, **options: Any) -> int:
            reply = producer.request(
                taskflow.encode_submit(b"t", payload, taskflow.submit_options("q", **options))
            )
            assert isinstance(reply, taskflow.Ok), reply
            return reply.task_id

        later = submit(b"later", delay_ms=3_600_000)
        soon = submit(b"soon", delay_ms=1500)
        retrying = submit(b"retrying")
        task = worker.receive()
        assert task.task_id == retrying
        worker.send(outcomes.encode_nack(task.task_id, task.token, "try again"))
        assert isinstance(producer.receive(), outcomes.Retrying)
        dead = submit(b"dead")
        task = worker.receive()
        worker.send(outcomes.encode_nack(task.task_id, task.token, "hopeless", permanent=True))
        assert producer.receive() == wire.Failed(dead, "hopeless")
        # An outcome is not synced on its own (docs/operations.md): a task
        # submitted now gets its OK only once the DEAD record before it is
        # synced too, or a loaded machine could kill the daemon first.
        barrier = taskflow.encode_submit(b"t", b"barrier", taskflow.submit_options("barrier"))
        assert isinstance(producer.request(barrier), taskflow.Ok)
        before = {
            task_id: producer.request(admin.encode_inspect(task_id)).document
            for task_id in (later, soon, retrying)
        }
    daemon.kill()

    time.sleep(1.5)  # "soon" falls due while the daemon is down
    restarted = start_daemon(f"--journal={journal}", "--default-retries=2")
    with Peer(restarted.address) as client:
        after = client.request(admin.encode_inspect(later)).document
        assert (after["state"], after["due"]) == ("delayed", before[later]["due"])
        again = client.request(admin.encode_inspect(retrying)).document
        assert (again["state"], again["failures"], again["due"]) == (
            "delayed",
            1,
            before[retrying]["due"],
        )
        listing = client.request(admin.encode_dead(10, "q")).document
        assert [(t["id"], t["reason"], t["failures"]) for t in listing["tasks"]] == [
            (dead, "hopeless", 1)
        ]
        queues = {q["name"]: q for q in client.request(admin.encode_queues()).document}
        assert (queues["q"]["delayed"], queues["q"]["dead"]) == (2, 1)
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(10, ["q"]))
        task = worker.receive()
        # Due while the daemon was down: runs at once; nothing else is due.
        assert (task.task_id, task.payload) == (soon, b"soon")
        worker.send(link.HEARTBEAT_FRAME)
        assert worker.receive() == wire.Pong()


def queued_ids(address: str, queue: str) -> list[int]:
    """The ids of the tasks queued in C{queue} (none while it does not exist)."""
    with Peer(address) as client:
        answer = client.request(admin.encode_peek(queue, 1000))
    return [] if isinstance(answer, wire.Error) else [t["id"] for t in answer.document]


def test_a_run_time_schedule_survives_kill_9_and_never_fires_a_time_twice(
    tmp_path: Path, start_daemon
) -> None:
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    schedule = admin.Schedule("beat", b"beat", b"{}", interval=1, queue="beats")
    with Peer(str(daemon.control_path)) as control:
        added = control.request(admin.encode_schedule(schedule)).document
        assert (added["name"], added["every"], added["source"]) == ("beat", 1.0, "runtime")
    deadline = time.monotonic() + 10
    while len(queued_ids(daemon.address, "beats")) < 2:
        assert time.monotonic() < deadline, "the schedule did not fire"
        time.sleep(0.1)
    with Peer(daemon.address) as client:
        (before,) = client.request(admin.SCHEDULES_FRAME).document
    with Peer(daemon.address) as producer:
        # A FIRED record is not synced on its own (a firing since the wait may not
        # be): this OK comes only once every record before it is synced too.
        barrier = taskflow.encode_submit(b"t", b"barrier", taskflow.submit_options("barrier"))
        assert isinstance(producer.request(barrier), taskflow.Ok)
    daemon.kill()

    time.sleep(2.5)  # two or three firings are missed (policy: once)
    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as client:
        (after,) = client.request(admin.SCHEDULES_FRAME).document
        assert after["source"] == "runtime" and after["last_fire"] >= before["last_fire"]
        with Peer(restarted.address) as worker:
            worker.send(taskflow.encode_ready(100, ["beats"]))
            keys: list[bytes] = []
            while True:
                message = worker.receive()
                if not isinstance(message, taskflow.Task):
                    break
                assert message.key is not None, message
                keys.append(message.key)
                worker.send(outcomes.encode_ack(message.task_id, message.token))
                if len(keys) >= 4:
                    break
    # Every fire time once: no key twice, in fire-time order.
    times = [int(key.rsplit(b":", 1)[1]) for key in keys]
    assert len(set(times)) == len(times) and times == sorted(times)


def test_a_tasks_attempts_survive_kill_9_and_max_attempts_keeps_counting(
    tmp_path: Path, start_daemon
) -> None:
    """
    A failure (RETRY) and a lost worker (ATTEMPTS) are counted across a
    kill -9: the next delivery has the next attempt, INSPECT shows the ones
    that ended, and max_attempts gives up on time.
    """
    journal = str(tmp_path / "j")
    options = (
        f"--journal={journal}",
        "--default-retries=2",
        "--max-attempts=3",
        "--default-backoff=fixed:2s",
    )
    daemon = start_daemon(*options, "--fsync=always")
    with Peer(daemon.address) as producer:

        def submit(queue: str) -> int:
            reply = producer.request(
                taskflow.encode_submit(b"t", queue.encode(), taskflow.submit_options(queue))
            )
            assert isinstance(reply, taskflow.Ok), reply
            return reply.task_id

        failed_once, lost = submit("once"), submit("lost")
        with Peer(daemon.address) as worker:
            worker.send(taskflow.encode_ready(1, ["once"]))
            task = worker.receive()
            assert (task.task_id, task.attempt) == (failed_once, 1)
            # Gone with its NACK: the retry, due in 2 s, finds no worker.
            worker.send(outcomes.encode_nack(task.task_id, task.token, "try again"))
        assert isinstance(producer.receive(), outcomes.Retrying)
        for attempt in (1, 2):  # two deliveries that end with their worker gone
            with Peer(daemon.address) as worker:
                worker.send(taskflow.encode_ready(1, ["lost"]))
                task = worker.receive()
                assert (task.task_id, task.attempt) == (lost, attempt)
            # Queued again once the daemon sees the worker gone.
            deadline = time.monotonic() + 30
            while producer.request(admin.encode_inspect(lost)).document["state"] != "queued":
                assert time.monotonic() < deadline
        # With fsync = always this OK waits for every record before it.
        barrier = taskflow.encode_submit(b"t", b"barrier", taskflow.submit_options("barrier"))
        assert isinstance(producer.request(barrier), taskflow.Ok)
    daemon.kill()

    restarted = start_daemon(*options)
    with Peer(restarted.address) as client:
        for task_id, attempt, failures in ((failed_once, 1, 1), (lost, 2, 0)):
            document = client.request(admin.encode_inspect(task_id)).document
            assert (document["attempt"], document["failures"]) == (attempt, failures)
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(1, ["once"]))
        task = worker.receive()
        while isinstance(task, wire.Wait):  # until its retry is due
            task = worker.receive(timeout=30)
        assert (task.task_id, task.attempt, task.failures) == (failed_once, 2, 1)
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(1, ["lost"]))
        task = worker.receive()
        assert (task.task_id, task.attempt) == (lost, 3)
    # Its third delivery lost too: max_attempts = 3 gives up on it.
    with Peer(restarted.address) as client:
        outcome = client.request(outcomes.encode_await(lost, 30_000))
        assert outcome.state == OutcomeState.FAILED
        assert outcome.reason.startswith("given up after 3 attempts")
