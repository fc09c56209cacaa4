"""
Lifecycle events from a real daemon: every kind of record, with its fields,
written as NDJSON files, rotated by size and by age, and flushed at stop.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicx.daemon.observe.events import format_event, format_events
from quicx.protocol import wire
from quicx.protocol.wire import ErrorCode
from tests.conftest import config_option
from tests.peer import Peer


def read_events(directory: Path) -> list[dict]:
    """The records of every events file in C{directory}, plain or compressed, in order."""
    records = []
    for path in sorted(directory.glob("events-*.ndjson*")):
        text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for line in text.decode().splitlines():
            records.append(json.loads(line))
    return records


def test_format_event_fields() -> None:
    line = format_event(
        (1795000000.1234, "failed", 7, b"send_email", 12, 3, 9, 2, "SMTP 550", "mail", 5)
    )
    assert json.loads(line) == {
        "v": 3,
        "t": 1795000000123,
        "event": "failed",
        "task": 7,
        "type": "send_email",
        "size": 12,
        "producer": 3,
        "worker": 9,
        "attempt": 2,
        "queue": "mail",
        "priority": 5,
        "reason": "SMTP 550",
    }
    rejected = json.loads(
        format_event((1.0, "rejected", None, b"x", 5, 1, None, 0, (4, "no"), None, None))
    )
    assert rejected["task"] is None and rejected["code"] == 4 and rejected["reason"] == "no"
    assert rejected["queue"] is None and rejected["priority"] is None
    progress = json.loads(
        format_event((1.0, "progress", 7, b"x", 5, 1, 2, 1, (0.25, 'a "quarter"'), "q", 0))
    )
    assert (progress["fraction"], progress["message"]) == (0.25, 'a "quarter"')


def test_format_events_in_a_batch_writes_each_line_as_alone() -> None:
    # Templates are kept per kind, task type and queue: a batch mixing
    # them, with a type holding % and quotes, nulls and extras, gives each
    # event the line it has alone, with its own numbers.
    batch = [
        (2.0005, "submitted", 1, b'50% "off"', 10, 3, None, 0, None, "q", 1),
        (2.5, "dispatched", 1, b'50% "off"', 10, 3, 8, 1, None, "q", 1),
        (3.0, "submitted", 2, b'50% "off"', 20, None, None, 0, None, "r", 0),
        (4.0, "rejected", None, b'50% "off"', 5, 4, None, 0, (4, "no"), None, None),
        (5.0, "done", 1, b'50% "off"', 10, 3, 8, 1, None, "q", 1),
    ]
    lines = format_events(batch)
    assert lines == [format_event(event) for event in batch]
    records = [json.loads(line) for line in lines]
    assert [(r["t"], r["task"], r["type"], r["size"], r["queue"]) for r in records] == [
        (2000, 1, '50% "off"', 10, "q"),
        (2500, 1, '50% "off"', 10, "q"),
        (3000, 2, '50% "off"', 20, "r"),
        (4000, None, '50% "off"', 5, None),
        (5000, 1, '50% "off"', 10, "q"),
    ]
    assert records[2]["producer"] is None and records[3]["reason"] == "no"


def test_numbers_small_and_large_and_times_shared_read_back() -> None:
    # Small numbers are written from a table, a time from the line before
    # when its millisecond is the same: each line still says its own.
    batch = [
        (7.0001, "done", 1, b"t", 0, 1, 2, 3, None, "q", 0),
        (7.0009, "done", 2, b"t", 1023, 1024, 4096, 70000, None, "q", 255),
        (7.0012, "done", 3, b"t", 1 << 40, 1023, 1023, 1023, None, "q", 9),
    ]
    fields = ("t", "task", "size", "producer", "worker", "attempt", "priority")
    assert [tuple(json.loads(line)[f] for f in fields) for line in format_events(batch)] == [
        (7000, 1, 0, 1, 2, 3, 0),
        (7000, 2, 1023, 1024, 4096, 70000, 255),
        (7001, 3, 1 << 40, 1023, 1023, 1023, 9),
    ]


def test_a_scripted_workload_leaves_every_kind_of_event(tmp_path: Path, start_daemon) -> None:
    events = tmp_path / "events"
    daemon = start_daemon(f"--events={events}", "--allow=work", "--drain-timeout=0")
    with Peer(daemon.address) as producer:
        ids = [producer.submit(b"work", b"x" * n).task_id for n in (10, 20, 30, 40)]
        refused = producer.submit(b"other", b"abc")
        assert isinstance(refused, wire.Error) and refused.code == ErrorCode.UNKNOWN_TASK_TYPE
        with Peer(daemon.address) as lost:
            assert lost.request(wire.encode_ready()).task_id == ids[0]
        # The lost worker's task comes back to the next worker (attempt 2).
        with Peer(daemon.address) as worker:
            assert worker.request(wire.encode_ready()).task_id == ids[0]
            worker.send(wire.encode_done(ids[0]))
            assert worker.receive().task_id == ids[1]
            worker.send(wire.encode_failed(ids[1], "no such mailbox"))
            assert worker.receive().task_id == ids[2]
            worker.send(wire.encode_done(ids[2]))
            assert producer.receive() == wire.Done(ids[0])
            assert producer.receive() == wire.Failed(ids[1], "no such mailbox")
            assert producer.receive() == wire.Done(ids[2])
        # ids[3] is still queued at stop, with no journal: dropped.
        assert daemon.stop() == 0
    records = read_events(events)
    kinds = [r["event"] for r in records]
    assert kinds.count("submitted") == 4
    assert kinds.count("rejected") == 1
    rejected = next(r for r in records if r["event"] == "rejected")
    assert rejected["code"] == 4 and rejected["type"] == "other" and rejected["size"] == 3
    first = [r for r in records if r["task"] == ids[0]]
    assert [r["event"] for r in first] == [
        "submitted",
        "dispatched",
        "requeued",
        "dispatched",
        "done",
    ]
    assert [r["attempt"] for r in first] == [0, 1, 1, 2, 2]
    assert "disconnected" in first[2]["cause"]
    assert first[1]["worker"] != first[3]["worker"]
    worker_id = first[3]["worker"]
    assert first[4]["worker"] == worker_id and first[4]["size"] == 10
    failed = next(r for r in records if r["event"] == "failed")
    assert failed["task"] == ids[1] and failed["reason"] == "no such mailbox"
    dropped = [r for r in records if r["event"] == "dropped"]
    assert [r["task"] for r in dropped] == [ids[3]]
    producers = {r["producer"] for r in records if r["event"] == "submitted"}
    assert len(producers) == 1
    times = [r["t"] for r in records]
    assert times == sorted(times) and abs(times[0] / 1000 - time.time()) < 60


def test_files_rotate_by_size_and_every_line_is_whole(tmp_path: Path, start_daemon) -> None:
    events = tmp_path / "events"
    conf = config_option(tmp_path, f"[events]\ndirectory = {events}\nmax_bytes = 4096\n")
    daemon = start_daemon(conf, "--drain-timeout=0")
    with Peer(daemon.address) as producer:
        producer.send(b"".join(wire.encode_submit(b"t", b"p") for _ in range(300)))
        for _ in range(300):
            assert isinstance(producer.receive(), wire.Ok)
    daemon.stop()
    files = sorted(events.glob("events-*.ndjson"))
    assert len(files) >= 5
    assert all(path.stat().st_size <= 4096 + 300 for path in files)
    records = read_events(events)
    assert [r["event"] for r in records].count("submitted") == 300
    assert [r["event"] for r in records].count("dropped") == 300


def test_files_rotate_by_age(tmp_path: Path, start_daemon) -> None:
    events = tmp_path / "events"
    conf = config_option(tmp_path, f"[events]\ndirectory = {events}\nmax_age = 0.5\n")
    daemon = start_daemon(conf, "--drain-timeout=0")
    with Peer(daemon.address) as producer:
        for _ in range(3):
            assert isinstance(producer.submit(b"t", b"p"), wire.Ok)
            time.sleep(1.3)  # past the age, and past a flush
    daemon.stop()
    assert len(list(events.glob("events-*.ndjson"))) >= 3
    assert [r["event"] for r in read_events(events)].count("submitted") == 3


@pytest.mark.slow  # a Spark report over rotated files: 19 s; make test-cluster (CI) runs it
def test_rotated_files_are_compressed_and_the_report_reads_the_mix(
    tmp_path: Path, start_daemon, spark
) -> None:
    from quicx.report.pipeline import build_report

    events = tmp_path / "events"
    conf = config_option(
        tmp_path, f"[events]\ndirectory = {events}\nmax_bytes = 4096\ncompress = gzip\n"
    )
    daemon = start_daemon(conf, "--drain-timeout=0")
    with Peer(daemon.address) as producer:
        producer.send(b"".join(wire.encode_submit(b"t", b"p") for _ in range(300)))
        for _ in range(300):
            assert isinstance(producer.receive(), wire.Ok)
    daemon.stop()  # waits for the compressions under way
    names = sorted(path.name for path in events.iterdir())
    plain = [name for name in names if name.endswith(".ndjson")]
    compressed = [name for name in names if name.endswith(".ndjson.gz")]
    # Every file but the last (open at the stop) compressed, nothing else left.
    assert len(compressed) >= 4 and len(plain) == 1 and len(names) == len(compressed) + 1
    assert plain[0] > max(compressed)
    records = read_events(events)
    assert all(record["v"] == 3 for record in records)
    kinds = [record["event"] for record in records]
    assert (kinds.count("submitted"), kinds.count("dropped")) == (300, 300)

    report = build_report(spark, [str(events)])
    overall = next(row for row in report.summary if row["type"] == "*")
    assert report.events == len(records)
    assert (overall["submitted"], overall["dropped"], overall["never_completed"]) == (300, 300, 300)


def test_a_file_left_beside_its_gz_is_removed_at_start_so_no_event_counts_twice(
    tmp_path: Path, start_daemon
) -> None:
    """
    A daemon stopped between writing a rotated file's C{.gz} and removing
    the file leaves both; the next start removes the plain one (logged),
    and a part of a compression the stop cut short, and leaves every other
    file as it was.
    """
    events = tmp_path / "events"
    events.mkdir()
    line = b'{"v":2,"t":1,"event":"submitted","task":1,"type":"t","size":1,"producer":1}\n'
    twin = events / "events-20260101T000000-1-0001.ndjson"
    twin.write_bytes(line)
    (events / f"{twin.name}.gz").write_bytes(gzip.compress(line))
    alone = events / "events-20260101T000000-1-0002.ndjson"
    alone.write_bytes(line)
    # A daemon killed while compressing the file beside it leaves its part.
    part = events / f".{alone.name}.gz"
    part.write_bytes(gzip.compress(line)[:10])
    conf = config_option(tmp_path, f"[events]\ndirectory = {events}\ncompress = gzip\n")
    daemon = start_daemon(conf)
    try:
        assert not twin.exists()
        assert gzip.decompress((events / f"{twin.name}.gz").read_bytes()) == line
        assert alone.read_bytes() == line and not part.exists()
    finally:
        daemon.stop()
    assert f"events: removed {twin}, already compressed" in daemon.log()
    assert f"events: removed {part}, a part of a compression the daemon stopped" in daemon.log()


COMPRESS_UNDER_A_FILE_SIZE_LIMIT = """\
import resource, signal, sys
from quicx.daemon.observe.events import gzip_file

# Writes past 4 KiB fail (EFBIG), as they would on a full disk.
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    gzip_file(sys.argv[1])
except OSError as e:
    print(e.strerror)
"""


def test_a_compression_that_fails_leaves_the_file_and_no_part(tmp_path: Path) -> None:
    """
    Compressing a rotated file fails part-way (the disk full): the plain file
    stays whole, and the part written so far is removed, not left to hold
    the space.
    """
    path = tmp_path / "events-20260101T000000-1-0001.ndjson"
    data = os.urandom(64 * 1024).hex().encode()  # compresses to more than 4 KiB
    path.write_bytes(data)
    result = subprocess.run(
        [sys.executable, "-c", COMPRESS_UNDER_A_FILE_SIZE_LIMIT, str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.strip() == "File too large", result.stderr
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
