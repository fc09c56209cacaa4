"""
The report reads every version of the events schema: the committed
version-1 file (tests/data/events-v1, written by the release before lines
had a C{v}) and the same events as this release writes them (compressed, as
C{[events] compress = gzip} leaves rotated files) give the same tables.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from quicx.daemon.observe.events import _EXTRA_KEY, format_event
from quicx.protocol.monitor import EVENTS_SCHEMA

VERSION_1 = Path(__file__).parents[1] / "data" / "events-v1"


def as_event(record: dict) -> tuple:
    """A line's record as the daemon's event tuple (L{quicx.daemon.observe.events.Event})."""
    keys = _EXTRA_KEY.get(record["event"])
    extra = (
        None
        if keys is None
        else record.get(keys)
        if isinstance(keys, str)
        else tuple(record[key] for key in keys)
    )
    return (
        (record["t"] + 0.5) / 1000,
        record["event"],
        record["task"],
        record["type"].encode(),
        record["size"],
        record["producer"],
        record["worker"],
        record["attempt"],
        extra,
        record.get("queue"),
        record.get("priority"),
    )


@pytest.mark.slow
def test_version_1_and_this_version_give_the_same_report(spark, tmp_path: Path) -> None:
    from quicx.report.pipeline import build_report

    (old,) = VERSION_1.glob("events-*.ndjson")
    old_lines = old.read_text().splitlines()
    assert EVENTS_SCHEMA == 3 and not any('"v"' in line for line in old_lines)
    new_lines = [format_event(as_event(json.loads(line))) for line in old_lines]
    # This version's line is the old one with the version first, and nothing else.
    assert new_lines == ['{"v":3,' + line[1:] for line in old_lines]
    new = tmp_path / "events"
    new.mkdir()
    (new / f"{old.name}.gz").write_bytes(
        gzip.compress("".join(f"{x}\n" for x in new_lines).encode())
    )

    before, after = build_report(spark, [str(VERSION_1)]), build_report(spark, [str(new)])
    assert attrs.asdict(before) == attrs.asdict(after)
    overall = next(row for row in after.summary if row["type"] == "*")
    # The file has every count the summary shows, so each is compared.
    assert all(overall[count] for count in ("completed", "failed", "given_up", "requeued"))
    assert all(overall[count] for count in ("retried", "dead", "rejected", "dropped"))
    assert after.events == len(old_lines) and after.queues and after.failures


def test_a_newer_schema_is_refused(spark, tmp_path: Path) -> None:
    from quicx.report.pipeline import ReportError, build_report

    (old,) = VERSION_1.glob("events-*.ndjson")
    newer = tmp_path / old.name
    newer.write_text('{"v":4,' + old.read_text().splitlines()[0][1:] + "\n")
    cached = spark.sparkContext._jsc.getPersistentRDDs().size()
    with pytest.raises(ReportError, match=r"schema version 4 .* reads versions 1 to 3"):
        build_report(spark, [str(newer)])
    # The events it had read and kept are let go: the session may live on.
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == cached


@pytest.mark.slow  # a long run of its own: make test-cluster (CI) runs it
def test_quicx_report_refuses_a_newer_schema_in_one_line(tmp_path: Path) -> None:
    """The command's error is one line naming the version, with no traceback."""
    pytest.importorskip("pyspark")
    (old,) = VERSION_1.glob("events-*.ndjson")
    newer = tmp_path / old.name
    newer.write_text('{"v":4,' + old.read_text().splitlines()[0][1:] + "\n")
    result = subprocess.run(
        [str(Path(sys.executable).with_name("quicx")), "report", str(newer),
         f"--out={tmp_path / 'out'}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == (
        "quicx report: error: events of schema version 4 (a newer daemon's):"
        " this report reads versions 1 to 3"
    )
    assert not (tmp_path / "out").exists()


def test_a_missing_path_is_named(spark, tmp_path: Path) -> None:
    from quicx.report.pipeline import ReportError, build_report

    with pytest.raises(ReportError, match=r"^file:.*/nowhere: no such file or directory$"):
        build_report(spark, [str(tmp_path / "nowhere")])


def test_a_report_over_no_events(spark, tmp_path: Path) -> None:
    """An empty directory: every count 0, and the page says so."""
    from quicx.report.pipeline import COUNTS, build_report, render_html

    (tmp_path / "events").mkdir()
    report = build_report(spark, [str(tmp_path / "events")], str(tmp_path / "out"))
    (overall,) = report.summary
    assert overall["type"] == "*" and all(overall[count] == 0 for count in COUNTS)
    assert "0 events; 0 tasks submitted" in render_html(report)
