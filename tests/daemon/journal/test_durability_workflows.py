"""
Debounce and expiry survive a crash: a daemon with C{fsync = always} is
killed with SIGKILL; a folded payload comes back (the newest, never both),
a deadline comes back with its task (expiring as the daemon starts when it
passed while the daemon was down), and an expiry is journaled once.
"""

from __future__ import annotations

import time
from pathlib import Path

from quicx.protocol import admin, outcomes, taskflow, wire
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from quicx.protocol.taskflow import SubmitOptions
from tests.peer import Peer

WHY = "expired: not started before its deadline"


def submit(peer: Peer, payload: bytes, **options: object) -> taskflow.Ok:
    options.setdefault("queue", "q")
    frame = taskflow.encode_submit(b"t", payload, SubmitOptions(**options).encode())  # type: ignore[arg-type]
    reply = peer.request(frame)
    assert isinstance(reply, taskflow.Ok), reply
    return reply


def awaited(peer: Peer, task_id: int) -> outcomes.Outcome:
    answer = peer.request(outcomes.encode_await(task_id, 0))
    assert isinstance(answer, outcomes.Outcome), answer
    return answer


def test_a_deadline_survives_kill_9_and_an_expiry_is_journaled_once(
    tmp_path: Path, start_daemon
) -> None:
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(daemon.address) as producer:
        gone = submit(producer, b"expired-before", expires=Expires(300))
        assert producer.receive(timeout=30) == outcomes.Outcome(
            gone.task_id, OutcomeState.EXPIRED, None, WHY
        )
        deadline = time.time() + 1.0
        down = submit(
            producer, b"expires-while-down", expires=Expires(round(deadline * 1000), True)
        )
        later = submit(producer, b"later", expires=Expires(3_600_000))
        # Its OK comes once everything before it is synced (the expiry too).
        submit(producer, b"barrier", queue="barrier")
    daemon.kill()
    while time.time() < deadline + 0.1:  # the deadline passes while it is down
        time.sleep(0.05)

    restarted = start_daemon(f"--journal={journal}", "--fsync=always")
    with Peer(restarted.address) as client:
        # Recovered, its producer gone: its outcome is kept, as expired.
        assert awaited(client, down.task_id).state is OutcomeState.EXPIRED
        assert awaited(client, gone.task_id).state is OutcomeState.UNKNOWN  # told, not kept
        inspected = client.request(admin.encode_inspect(later.task_id)).document
        assert inspected["state"] == "queued"
        submit(client, b"barrier", queue="barrier")
    restarted.kill()

    again = start_daemon(f"--journal={journal}")
    with Peer(again.address) as client, Peer(again.address) as worker:
        assert awaited(client, down.task_id).state is OutcomeState.EXPIRED  # kept, not again
        worker.send(taskflow.encode_ready(1, ["q"]))
        task = worker.receive(timeout=30)
        assert isinstance(task, taskflow.Task) and task.payload == b"later"
        assert worker.nothing_for(0.5)


def test_a_debounced_payload_survives_kill_9_the_newest_only(tmp_path: Path, start_daemon) -> None:
    journal = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    replace = Debounce(DebounceMode.REPLACE, 1500)
    extend = Debounce(DebounceMode.EXTEND, 1500)
    with Peer(daemon.address) as producer:
        first = submit(producer, b"one", key=b"r", debounce=replace)
        folded = submit(producer, b"two", key=b"r", debounce=replace)
        assert (folded.task_id, folded.duplicate) == (first.task_id, True)
        other = submit(producer, b"a", key=b"e", debounce=extend)
        submit(producer, b"b", key=b"e", debounce=extend)
    daemon.kill()

    restarted = start_daemon(f"--journal={journal}")
    with Peer(restarted.address) as worker:
        worker.send(taskflow.encode_ready(2, ["q"]))
        got: dict[int, bytes] = {}
        while len(got) < 2:
            task = worker.receive(timeout=30)
            if isinstance(task, wire.Wait):
                continue  # READY's answer while both still wait their window
            assert isinstance(task, taskflow.Task), task
            got[task.task_id] = task.payload
        assert got == {first.task_id: b"two", other.task_id: b"b"}
        assert worker.nothing_for(0.5)
