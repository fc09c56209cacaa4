"""
The report reads every version of the events schema: the committed
version-1 file (tests/data/events-v1, written by the release before lines
had a C{v}) and the same events as this release writes them (compressed, as
C{[events] compress = gzip} leaves rotated files) give the same tables.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import attrs
import pytest

from quicx.daemon.events import _EXTRA_KEY, format_event
from quicx.protocol.monitor import EVENTS_SCHEMA

VERSION_1 = Path(__file__).parent / "data" / "events-v1"


def as_event(record: dict) -> tuple:
    """A line's record as the event tuple the daemon formats (L{quicx.daemon.events.Event})."""
    keys = _EXTRA_KEY.get(record["event"])
    extra = (
        None
        if keys is None
        else record[keys]
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
    assert EVENTS_SCHEMA == 2 and not any('"v"' in line for line in old_lines)
    new_lines = [format_event(as_event(json.loads(line))) for line in old_lines]
    # This version's line is the old one with the version first, and nothing else.
    assert new_lines == ['{"v":2,' + line[1:] for line in old_lines]
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
    from quicx.report.pipeline import build_report

    (old,) = VERSION_1.glob("events-*.ndjson")
    newer = tmp_path / old.name
    newer.write_text('{"v":3,' + old.read_text().splitlines()[0][1:] + "\n")
    with pytest.raises(ValueError, match=r"schema version 3 .* reads versions 1 to 2"):
        build_report(spark, [str(newer)])
