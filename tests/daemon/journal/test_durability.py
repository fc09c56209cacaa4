"""
Crash tests: a real daemon with a journal is killed with SIGKILL (or stopped,
or starved of disk) and restarted; every task that got its OK comes back.
"""

from __future__ import annotations

import hashlib
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from quicx.daemon.control import fetch_status
from quicx.daemon.journal import records as journal
from quicx.protocol import wire
from quicx.protocol.wire import ErrorCode
from tests.conftest import TWISTD, DaemonProcess, config_option
from tests.peer import Peer
from tools.launcher import LISTENING

QUICX = str(Path(TWISTD).with_name("quicx"))


def payload_for(seq: int) -> bytes:
    """A distinct payload of 20 to 400 bytes that says which task it is."""
    digest = hashlib.sha256(b"%d" % seq).digest()
    return b"%08d:" % seq + digest * (1 + seq % 12)


def drain(address: tuple[str, int]) -> dict[int, bytes]:
    """Take every queued task with one worker, DONE each; ids are distinct."""
    with Peer(address) as monitor:
        depth = monitor.stats().queue_depth
    received: dict[int, bytes] = {}
    with Peer(address) as worker:
        worker.send(wire.encode_ready())
        for _ in range(depth):
            task = worker.receive(10)
            assert isinstance(task, wire.Task), task
            assert task.task_id not in received, f"task {task.task_id} delivered twice"
            received[task.task_id] = task.payload
            worker.send(wire.encode_done(task.task_id))
        assert worker.request(wire.encode_ready()) == wire.Wait()
    return received


class StreamingProducer(threading.Thread):
    """Pipelines SUBMITs in bursts until the daemon goes away; keeps each OK."""

    def __init__(self, address: tuple[str, int], first: int = 0, burst: int = 64) -> None:
        super().__init__(daemon=True)
        self.peer = Peer(address)
        self.first = first
        self.burst = burst
        self.acknowledged: dict[int, bytes] = {}
        self.refused: list[wire.Error] = []
        self.refused_payloads: set[bytes] = set()
        self.stop_when_refused = False

    def run(self) -> None:
        seq = self.first
        try:
            while True:
                batch = [payload_for(seq + n) for n in range(self.burst)]
                seq += self.burst
                self.peer.send(b"".join(wire.encode_submit(b"t", p) for p in batch))
                for payload in batch:
                    reply = self.peer.receive(10)
                    if isinstance(reply, wire.Ok):
                        self.acknowledged[reply.task_id] = payload
                    else:
                        self.refused.append(reply)
                        self.refused_payloads.add(payload)
                if self.refused and self.stop_when_refused:
                    return
        except (ConnectionError, OSError):
            pass
        finally:
            self.peer.close()


def kill_when_acknowledged(daemon: DaemonProcess, stream: StreamingProducer, count: int) -> None:
    """Run C{stream} until C{count} OKs (20 s at most), then kill -9 the daemon."""
    stream.start()
    deadline = time.monotonic() + 20
    while len(stream.acknowledged) < count and time.monotonic() < deadline:
        time.sleep(0.001)
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait()
    stream.join(10)


def submit_all(address: tuple[str, int], count: int) -> dict[int, bytes]:
    with Peer(address) as producer:
        accepted = {}
        for seq in range(count):
            reply = producer.submit(b"t", payload_for(seq))
            assert isinstance(reply, wire.Ok), reply
            accepted[reply.task_id] = payload_for(seq)
        return accepted


def test_kill_9_mid_stream_loses_no_acknowledged_task(tmp_path: Path, start_daemon) -> None:
    path = str(tmp_path / "quicx.journal")
    daemon = start_daemon(f"--journal={path}", "--fsync=always")
    first = submit_all(daemon.address, 100)
    # A worker completes the first 50; their DONE records reach the disk with
    # the sync of any later SUBMIT, as records are written in order.
    completed = set()
    with Peer(daemon.address) as worker:
        worker.send(wire.encode_ready())
        for _ in range(50):
            task = worker.receive()
            worker.send(wire.encode_done(task.task_id))
            completed.add(task.task_id)
        held = worker.receive()  # taken, never finished: must come back
        assert held.task_id not in completed
        stream = StreamingProducer(daemon.address, first=100)
        kill_when_acknowledged(daemon, stream, 3000)
    assert len(stream.acknowledged) >= 3000
    assert not stream.refused

    restarted = start_daemon(f"--journal={path}", "--fsync=always")
    assert "tasks recovered" in restarted.log()
    delivered = drain(restarted.address)
    expected = {i: p for i, p in first.items() if i not in completed} | stream.acknowledged
    missing = expected.keys() - delivered.keys()
    assert not missing, f"{len(missing)} acknowledged tasks lost, e.g. {sorted(missing)[:5]}"
    assert not completed & delivered.keys(), "a task whose DONE was journaled came back"
    for task_id, payload in expected.items():
        assert delivered[task_id] == payload
    # Anything else delivered was written but its OK never arrived (at least
    # once): it is one of the stream's own payloads, never garbage.
    for task_id in delivered.keys() - expected.keys():
        assert delivered[task_id].split(b":")[0].isdigit()
    # The id counter resumes past every id handed out.
    with Peer(restarted.address) as producer:
        new = producer.submit(b"t", b"after")
        assert new.task_id > max(delivered)


def test_recovery_keeps_order_and_ids(tmp_path: Path, start_daemon) -> None:
    path = str(tmp_path / "j")
    daemon = start_daemon(f"--journal={path}", "--fsync=no")
    accepted = submit_all(daemon.address, 200)
    # SIGTERM: a clean stop syncs whatever the policy.
    assert daemon.stop() == 0
    assert "200 queued and 0 running tasks; the journal" in daemon.log()
    restarted = start_daemon(f"--journal={path}")
    with Peer(restarted.address) as worker:
        worker.send(wire.encode_ready())
        order = []
        for _ in accepted:
            task = worker.receive()
            assert task.payload == accepted[task.task_id]
            order.append(task.task_id)
            worker.send(wire.encode_done(task.task_id))
    assert order == sorted(accepted)


def test_without_a_journal_the_log_counts_what_is_dropped(start_daemon) -> None:
    # The worker never finishes: the drain gives up after its timeout.
    daemon = start_daemon("--drain-timeout=0.5")
    submit_all(daemon.address, 7)
    with Peer(daemon.address) as worker:
        worker.request(wire.encode_ready())
        daemon.stop()
    assert (
        "stopping with 6 queued, 0 delayed and 1 running tasks; without a journal they are dropped"
        in (daemon.log())
    )


def test_compaction_under_load_loses_nothing(tmp_path: Path, start_daemon) -> None:
    path = tmp_path / "j"
    conf = config_option(
        tmp_path,
        f"[journal]\npath = {path}\nfsync = always\ncompact_factor = 2\ncompact_min_size = 64K\n",
    )
    daemon = start_daemon(conf)
    acknowledged: dict[int, bytes] = {}
    completed: set[int] = set()
    compactions = 0
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        worker.send(wire.encode_ready())
        assert worker.receive() == wire.Wait()
        for burst in range(250):
            # Submit a burst, then finish all but the last of the bursts:
            # the journal keeps growing while its live part stays small.
            payloads = [payload_for(burst * 32 + n) for n in range(32)]
            producer.send(b"".join(wire.encode_submit(b"t", p) for p in payloads))
            for payload in payloads:
                acknowledged[producer.receive().task_id] = payload
            if burst == 249:
                break
            for _ in payloads:
                task = worker.receive()
                worker.send(wire.encode_done(task.task_id))
                completed.add(task.task_id)
            for _ in payloads:
                assert isinstance(producer.receive(), wire.Done)
        status = fetch_status(str(daemon.control_path))
        compactions = status["journal"]["compactions"]
        daemon.process.send_signal(signal.SIGKILL)
        daemon.process.wait()
    assert compactions >= 5, status["journal"]
    # Compacted: the file is a small multiple of what is live, not everything.
    assert status["journal"]["file_bytes"] < 64 * 1024 * 2 + 2 * status["journal"]["live_bytes"]

    restarted = start_daemon(conf)
    delivered = drain(restarted.address)
    expected = acknowledged.keys() - completed
    assert expected <= delivered.keys()
    # Every DONE before the last burst's OKs is on disk: nothing else returns.
    assert delivered.keys() == expected
    for task_id in delivered:
        assert delivered[task_id] == acknowledged[task_id]


def test_a_damaged_journal_stops_the_daemon_from_starting(tmp_path: Path) -> None:
    path = tmp_path / "j"
    written = [journal.encode_submit(n, b"t", b"payload") for n in range(1, 4)]
    path.write_bytes(journal.MAGIC + b"".join(written))
    data = bytearray(path.read_bytes())
    second = len(journal.MAGIC) + len(written[0])
    data[second + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    daemon = DaemonProcess(tmp_path, [f"--journal={path}"])
    with pytest.raises(RuntimeError, match="quicx exited with 1") as raised:
        daemon.start()
    assert f"quicx: journal {path}: offset {second}: checksum mismatch" in str(raised.value)
    assert "will not start" in str(raised.value)
    assert "Traceback" not in str(raised.value)
    assert path.read_bytes() == bytes(data), "a refused journal must not be modified"


def test_a_torn_tail_is_cut_and_logged(tmp_path: Path, start_daemon) -> None:
    path = tmp_path / "j"
    records = [journal.encode_submit(n, b"t", b"payload %d" % n) for n in range(1, 4)]
    path.write_bytes(journal.MAGIC + b"".join(records)[:-3])
    daemon = start_daemon(f"--journal={path}")
    assert "cut a torn tail of" in daemon.log()
    assert sorted(drain(daemon.address)) == [1, 2]
    with Peer(daemon.address) as producer:
        assert producer.submit(b"t", b"new").task_id == 3


def test_tasks_that_do_not_fit_the_pool_stop_the_start(tmp_path: Path) -> None:
    path = tmp_path / "j"
    records = [journal.encode_submit(n, b"t", b"x" * 1000) for n in range(1, 401)]
    path.write_bytes(journal.MAGIC + b"".join(records))
    daemon = DaemonProcess(tmp_path, [f"--journal={path}", "--pool-size=1M"])
    with pytest.raises(RuntimeError, match="400 tasks do not fit the pool"):
        daemon.start()


def _limit_file_size() -> None:
    # Past RLIMIT_FSIZE a write fails with EFBIG (SIGXFSZ ignored): a real
    # failing disk, without a small filesystem.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))


def test_a_failing_disk_refuses_tasks_instead_of_acknowledging_them(tmp_path: Path) -> None:
    path = tmp_path / "j"
    # Through a pipe: the file size limit hits the journal, not the log.
    first = DaemonProcess(
        tmp_path,
        [f"--journal={path}", "--fsync=always", "--control=none"],
        preexec=_limit_file_size,
        pipe=True,
    )
    first.start()
    try:
        stream = StreamingProducer(first.address, burst=16)
        stream.stop_when_refused = True
        stream.run()  # until the journal is broken and every reply is ERROR
    finally:
        first.kill()
    assert stream.acknowledged, "some tasks fit before the limit"
    assert stream.refused
    assert all(e.code == ErrorCode.QUEUE_FULL for e in stream.refused)
    assert "journal write failed" in stream.refused[0].message
    assert "File too large" in first.log()
    restarted = DaemonProcess(tmp_path / "again", [f"--journal={path}"])
    restarted.directory.mkdir()
    restarted.start()
    try:
        delivered = drain(restarted.address)
    finally:
        restarted.kill()
    assert delivered.keys() >= stream.acknowledged.keys()
    # ERROR means never run: no record of a refused task survived the failure
    # (a partly written batch is cut back off the file before the ERRORs).
    ran_anyway = stream.refused_payloads & set(delivered.values())
    assert not ran_anyway, f"{len(ran_anyway)} refused tasks ran after the restart"


def _wait_listening(log: Path) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if match := LISTENING.search(log.read_text()):
            return int(match.group(1))
        time.sleep(0.05)
    raise AssertionError(log.read_text())


def test_status_shows_the_journal(tmp_path: Path, start_daemon) -> None:
    daemon = start_daemon(f"--journal={tmp_path / 'j'}", "--fsync=always")
    submit_all(daemon.address, 3)
    status = fetch_status(str(daemon.control_path))
    assert status["journal"]["fsync"] == "always"
    assert status["journal"]["live_bytes"] == sum(
        journal.submit2_record_size("default", 1, None, None, len(payload_for(n))) for n in range(3)
    )
    assert status["journal"]["syncs"] >= 1
    assert status["journal"]["broken"] is None
    table = subprocess.run(
        [QUICX, "status", f"--control={daemon.control_path}"], capture_output=True, text=True
    )
    assert f"Journal     {tmp_path / 'j'}   (fsync always)" in table.stdout


def test_quicx_start_takes_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "j"
    path.write_bytes(journal.MAGIC + journal.encode_submit(41, b"t", b"kept"))
    log = tmp_path / "start.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [QUICX, "start", f"--journal={path}", "--fsync=always", "--control=none",
             "--listen=tcp:0:interface=127.0.0.1", f"--pid-file={tmp_path / 'pid'}"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_listening(log)
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    finally:
        process.kill()
        process.wait()
    text = log.read_text()
    assert f"journal {path} (fsync always): 1 records, 1 tasks recovered" in text
    assert "1 queued and 0 running tasks; the journal" in text


def test_ids_acknowledged_before_a_crash_are_never_issued_again(
    tmp_path: Path, start_daemon
) -> None:
    # everysec: an OK can leave before its record is written, so a kill -9
    # can lose the task (the documented window) -- but never its id.
    path = tmp_path / "j"
    daemon = start_daemon(f"--journal={path}", "--fsync=everysec")
    stream = StreamingProducer(daemon.address, burst=256)
    kill_when_acknowledged(daemon, stream, 5000)
    restarted = start_daemon(f"--journal={path}", "--fsync=everysec")
    recovered = drain(restarted.address)
    for task_id, payload in recovered.items():
        if task_id in stream.acknowledged:
            assert stream.acknowledged[task_id] == payload, "one id, two tasks"
    with Peer(restarted.address) as producer:
        new = {producer.submit(b"t", b"after %d" % n).task_id for n in range(1000)}
    reused = new & (stream.acknowledged.keys() | recovered.keys())
    assert not reused, f"ids issued again: {sorted(reused)[:5]}"


def test_repair_journal_lets_a_refused_journal_start_with_its_good_tasks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j"
    records = [journal.encode_submit(n, b"t", b"payload %d" % n) for n in range(1, 4)]
    path.write_bytes(journal.MAGIC + b"".join(records))
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01  # the last record: whole, but its checksum fails
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="quicx repair-journal"):
        DaemonProcess(tmp_path, [f"--journal={path}"]).start()
    repaired = subprocess.run(
        [QUICX, "repair-journal", str(path)], capture_output=True, text=True, timeout=30
    )
    assert repaired.returncode == 0, repaired.stderr
    last = len(journal.MAGIC) + len(records[0]) * 2
    assert f"skipped {len(records[2])} damaged bytes at offset {last}" in repaired.stdout
    moved = next(tmp_path.glob("j.damaged-*"))
    assert moved.read_bytes() == bytes(data)
    daemon = DaemonProcess(tmp_path / "after", [f"--journal={path}"])
    daemon.directory.mkdir()
    daemon.start()
    try:
        assert sorted(drain(daemon.address)) == [1, 2]
    finally:
        daemon.kill()
    again = subprocess.run([QUICX, "repair-journal", str(path)], capture_output=True, text=True)
    assert again.returncode == 0 and "no damage found" in again.stdout
