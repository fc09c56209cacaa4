"""
Shared data and progress on a real daemon over loopback sockets: a publish
reaches each follower once, a late follower gets the current version, the
journal keeps the versions through a kill -9 and a compaction, and a
worker's PROGRESS reaches the producer that asked for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quicx.daemon.control import fetch_status
from quicx.daemon.journal.recovery import recover
from quicx.protocol import admin, link, outcomes, shared_data, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.shared_data import Shared
from tests.peer import Peer


def publish(peer: Peer, name: str, data: bytes = b"", delete: bool = False) -> dict:
    answer = peer.request(shared_data.encode_publish(name, data, delete))
    assert isinstance(answer, link.Info), answer
    return answer.document


def follow(peer: Peer, *names: str) -> list:
    """FOLLOW C{names}: the SHARED frames that came first, then the INFO's document."""
    peer.send(shared_data.encode_follow(names))
    got: list[Any] = []
    while not isinstance(got[-1:] and got[-1], link.Info):
        got.append(peer.receive())
    return [*got[:-1], got[-1].document]


def test_a_version_reaches_each_follower_once_and_a_late_follower_gets_the_current_one(
    daemon,
) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as a, Peer(daemon.address) as b:
        assert follow(a, "model") == [{"following": {"model": 0}}]
        assert follow(b, "model", "other") == [{"following": {"model": 0, "other": 0}}]
        assert publish(producer, "model", b"weights-1") == {
            "name": "model",
            "version": 1,
            "size": 9,
            "followers": 2,
        }
        publish(producer, "model", b"weights-2")
        for follower in (a, b):
            assert [follower.receive(), follower.receive()] == [
                Shared("model", 1, b"weights-1"),
                Shared("model", 2, b"weights-2"),
            ]
            assert follower.nothing_for(0.2)
        with Peer(daemon.address) as late:
            assert follow(late, "model") == [
                Shared("model", 2, b"weights-2"),
                {"following": {"model": 2}},
            ]
        # A follower is a worker: it may not publish.
        refused = a.request(shared_data.encode_publish("model", b"mine"))
        assert isinstance(refused, wire.Error) and refused.code == ErrorCode.FORBIDDEN
        assert publish(producer, "model", delete=True)["deleted"] is True
        assert a.receive() == b.receive() == Shared("model", 0)
    status = fetch_status(str(daemon.control_path))
    assert status["shared"] == {"names": 0, "bytes": 0, "published": 3, "followers": 0}


def test_a_follower_that_stops_reading_gets_the_newest_version_not_a_backlog(
    start_daemon,
) -> None:
    daemon = start_daemon("--max-output-buffer=4K")
    with Peer(daemon.address) as producer, Peer(daemon.address) as slow:
        follow(slow, "blob")
        # 40 MiB for a follower that reads nothing: far more than its socket holds.
        for n in range(1, 41):
            publish(producer, "blob", bytes([n]) * (1 << 20))
        versions: list[int] = []
        while not versions or versions[-1] != 40:
            shared = slow.receive()
            assert shared.data == bytes([shared.version]) * (1 << 20)
            versions.append(shared.version)
        assert len(versions) < 40 and versions == sorted(versions), versions
        assert slow.nothing_for(0.3)


def test_hello_announces_progress_and_shared_data_with_their_limits(start_daemon) -> None:
    daemon = start_daemon("--shared-max-size=4096", "--max-progress-message=100")
    with Peer(daemon.address) as client:
        info = client.request(link.encode_hello("test", "1", ["progress", "shared"])).document
        assert {"progress", "shared"} <= set(info["capabilities"]) and info["missing"] == []
        assert (info["limits"]["max_shared_size"], info["limits"]["max_progress_message"]) == (
            4096,
            100,
        )
        # The edge of the limit: 4096 bytes are taken, 4097 refused as too large.
        assert publish(client, "edge", b"x" * 4096)["size"] == 4096
        too_large = client.request(shared_data.encode_publish("edge", b"x" * 4097))
        assert isinstance(too_large, wire.Error) and too_large.code == ErrorCode.PAYLOAD_TOO_LARGE


def test_shared_data_survives_kill_9_and_compaction_keeps_only_the_current_versions(
    tmp_path: Path, start_daemon
) -> None:
    path = tmp_path / "j"
    journal = (f"--journal={path}", "--fsync=always", "--compact-min-size=16K")
    daemon = start_daemon(*journal, "--compact-factor=2")
    with Peer(daemon.address) as producer:
        for n in range(1, 41):  # 40 versions of 1 KiB: the file passes 16K and compacts
            publish(producer, "table", b"%04d" % n * 256)
        publish(producer, "small", b"s")
        publish(producer, "gone", b"g")
        publish(producer, "gone", delete=True)
    assert fetch_status(str(daemon.control_path))["journal"]["compactions"] >= 1
    daemon.kill()
    assert recover(str(path)).shared == {"table": (40, b"0040" * 256), "small": (1, b"s")}

    restarted = start_daemon(*journal)
    with Peer(restarted.address) as worker:
        assert follow(worker, "table", "small", "gone") == [
            Shared("table", 40, b"0040" * 256),
            Shared("small", 1, b"s"),
            {"following": {"table": 40, "small": 1, "gone": 0}},
        ]
    with Peer(restarted.address) as producer:
        assert publish(producer, "table", b"next")["version"] == 41


def test_progress_reaches_the_producer_that_asked_in_order_before_the_outcome(
    tmp_path: Path, start_daemon
) -> None:
    events = tmp_path / "events"
    daemon = start_daemon(f"--events={events}", "--progress-interval=0", "--drain-timeout=0")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        options = taskflow.submit_options("q", progress=True)
        ok = producer.request(taskflow.encode_submit(b"resize", b"img", options))
        worker.send(taskflow.encode_ready(1, ["q"]))
        task = worker.receive()
        for step in (1, 2, 3):
            worker.send(
                outcomes.encode_progress(task.task_id, task.token, step * 3000, f"{step}/3")
            )
        stale = worker.request(outcomes.encode_progress(task.task_id, task.token + 1, 1, ""))
        assert isinstance(stale, wire.Error) and stale.code == ErrorCode.STALE
        inspected = worker.request(admin.encode_inspect(task.task_id)).document
        assert inspected["progress"]["fraction"] == 0.9
        worker.send(outcomes.encode_ack(task.task_id, task.token))
        assert [producer.receive() for _ in range(4)] == [
            *(outcomes.Progress(ok.task_id, task.token, s * 3000, f"{s}/3") for s in (1, 2, 3)),
            taskflow.Done(ok.task_id),
        ]
        not_held = worker.request(outcomes.encode_progress(task.task_id, task.token, 1, ""))
        assert isinstance(not_held, wire.Error) and not_held.code == ErrorCode.INVALID_MESSAGE
    daemon.stop()
    recorded = [
        json.loads(line)
        for file in sorted(events.glob("*.ndjson"))
        for line in file.read_text().splitlines()
    ]
    assert [(e["fraction"], e["message"]) for e in recorded if e["event"] == "progress"] == [
        (0.3, "1/3"),
        (0.6, "2/3"),
        (0.9, "3/3"),
    ]
