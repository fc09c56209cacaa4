"""
The report's page in a real headless Chromium at 1280 px: nothing scrolls
sideways and no two labels of a chart touch.  The page is computed by a real
local Spark from event files written with the daemon's own encoder
(L{quicx.daemon.observe.events.format_event}); and the counts the page shows are checked
against the events.
"""

from __future__ import annotations

import json
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from random import Random
from typing import Any

import pytest

from quicx.daemon.observe.events import format_event
from quicx.report.pipeline import QUEUE_COUNTS, normalise_reason
from tests.browser import headless_chromium
from tests.report.test_report import percentile

WIDTH = 1280


def write_events(
    directory: Path, tasks: int = 3000, hours: float = 1.5, pid: int = 4242, legacy: bool = False
) -> list[tuple]:
    """
    A day's work in small: tasks over C{hours} that complete, fail for
    reasons that carry ports and ids, are requeued after a lost worker, are
    given up after their last delivery is lost, are cancelled, or never
    complete (dropped, or still queued); and a few SUBMITs rejected.  Spread
    over three queues and three priorities.  Each event is a tuple of
    L{format_event}'s fields, the queue and priority included.

    @param legacy: write the file as the previous release did: no C{queue}
        or C{priority} keys (the tuples have C{None}), and no cancelled tasks.
    """
    rng = Random(13)
    events: list[tuple] = []
    start = 1_795_000_000.0
    for task in range(1, tasks + 1):
        kind = (b"send_receipt", b"sms", b"resize_image")[task % 3]
        now = start + task * hours * 3600 / tasks
        size, producer = rng.randint(20, 400), 1 + task % 4
        if task % 41 == 0:
            refused = (now, "rejected", None, kind, size, producer, None, 0, (1, "queue full"))
            events.append((*refused, None, None))
            continue
        place = (
            (None, None)
            if legacy
            else (("default", "mail", "bulk")[task % 7 % 3], (0, 5, 9)[task % 5 % 3])
        )
        life: list[tuple] = [(now, "submitted", task, kind, size, producer, None, 0, None)]
        if task % 23 == 0:  # never completed: dropped at a stop, or still queued
            if task % 2:
                life.append((now + 1, "dropped", task, kind, size, producer, None, 0, "stopped"))
        elif task % 29 == 0 and not legacy:
            life.append((now + 0.5, "cancelled", task, kind, size, producer, None, 0, "by admin"))
        else:
            life += _deliveries(rng, task, now, kind, size, producer)
        events += [(*e, *place) for e in life]
    directory.mkdir(parents=True, exist_ok=True)
    lines = (format_event(e) for e in sorted(events, key=lambda e: e[0]))
    if legacy:
        lines = (_without_queue(line) for line in lines)
    path = directory / f"events-20261121T000000-{pid}-0001.ndjson"
    path.write_text("".join(line + "\n" for line in lines))
    return events


def _deliveries(rng: Random, task: int, now: float, kind: bytes, size: int, producer: int) -> list:
    """A task's deliveries until it is done, failed, or given up."""
    events: list[tuple] = []
    attempt, t = 0, now
    while True:
        attempt += 1
        worker = 100 + rng.randrange(40)
        t += rng.expovariate(50)
        events.append((t, "dispatched", task, kind, size, producer, worker, attempt, None))
        t += rng.expovariate(5)
        if task % 17 == 0 and attempt <= 2:
            cause = f"worker 127.0.0.1:{rng.randrange(30000, 60000)} disconnected"
            events.append((t, "requeued", task, kind, size, producer, None, attempt, cause))
            if attempt == 2 and task % 34 == 0:
                reason = f"given up after 2 attempts; last: {cause}"
                events.append((t, "failed", task, kind, size, producer, None, 2, reason))
                return events
            continue
        if task % 11 == 0:
            reason = (
                f"SMTP 10.0.{rng.randrange(256)}.{rng.randrange(256)}"
                f":{rng.randrange(1024, 65535)} refused message"
                f" {rng.getrandbits(64):016x}: 4.7.1 try again later"
                if task % 2
                else f"over quota for account {rng.randrange(10**6)}"
            )
            events.append((t, "failed", task, kind, size, producer, worker, attempt, reason))
        else:
            events.append((t, "done", task, kind, size, producer, worker, attempt, None))
        return events


def _without_queue(line: str) -> str:
    """A line as the previous release wrote it: the same keys, less queue and priority."""
    record = json.loads(line)
    del record["queue"], record["priority"]
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def by_queue(*runs: list[tuple]) -> dict[tuple[str, int], dict[str, Any]]:
    """
    The per-queue table computed directly from the generated events of one
    or more daemons (task ids are per daemon): the counts, and the queue
    waits (ms, as written) of the tasks dispatched.  Events without a queue
    or priority count as queue C{default}, priority 0.
    """
    table: dict[tuple[str, int], dict[str, Any]] = {}
    submitted: dict[tuple[int, int], tuple[int, tuple[str, int]]] = {}
    ended: set[tuple[int, int]] = set()
    dispatched: dict[tuple[int, int], int] = {}
    for run, events in enumerate(runs):
        for e in events:
            if e[1] == "rejected":
                continue
            place = (e[9] or "default", e[10] or 0)
            row = table.setdefault(place, {"counts": Counter(), "waits": []})
            row["counts"][e[1]] += 1
            task, ms = (run, e[2]), int(e[0] * 1000)  # ms as format_event writes them
            if e[1] == "submitted":
                submitted[task] = (ms, place)
            elif e[1] == "dispatched":
                dispatched[task] = min(ms, dispatched.get(task, ms))
            elif e[1] in ("done", "failed", "cancelled"):
                ended.add(task)
    for task, (ms, place) in submitted.items():
        if task not in ended:
            table[place]["counts"]["never_completed"] += 1
        if task in dispatched:
            table[place]["waits"].append(dispatched[task] - ms)
    return table


@pytest.fixture(scope="module")
def report_and_events(tmp_path_factory: pytest.TempPathFactory, spark) -> tuple[Any, list]:
    from quicx.report.pipeline import build_report

    directory = tmp_path_factory.mktemp("page") / "events"
    events = write_events(directory)
    return build_report(spark, [str(directory)]), events


def test_reasons_are_normalised_to_one_row_per_cause() -> None:
    a = normalise_reason("worker 127.0.0.1:50321 disconnected")
    b = normalise_reason("worker 127.0.0.1:40999 disconnected")
    assert a == b and "50321" not in a
    assert normalise_reason("over quota") == "over quota"
    # The Python worker's traceback after the exception is not part of the cause.
    traced = "KeyError: 'k1'\nTraceback (most recent call last):\n  File \"h.py\", line 6, in f"
    assert normalise_reason(traced) == "KeyError: 'k<n>'"
    assert normalise_reason("SMTP 550\nno such user") == "SMTP <n>\nno such user"
    ids = {
        normalise_reason(f"job {n} failed at 0x{n * 7919:x} ({n:032x})") for n in (3, 77, 100003)
    }
    assert len(ids) == 1 and not any(ch.isdigit() for ch in ids.pop().replace("<", ""))


def test_counts_and_reasons_from_the_events(report_and_events) -> None:
    report, events = report_and_events
    overall = next(row for row in report.summary if row["type"] == "*")
    kinds = Counter(e[1] for e in events)
    give_ups = {(e[2], e[7]) for e in events if e[1] == "failed" and e[6] is None}
    requeues = [e for e in events if e[1] == "requeued"]
    assert give_ups and len(requeues) > len(give_ups)
    assert overall["given_up"] == len(give_ups)
    assert overall["requeued"] == len([e for e in requeues if (e[2], e[7]) not in give_ups])
    assert overall["failed"] == kinds["failed"]
    # Give-ups are outcomes, not runs: every run is credited to a worker.
    assert sum(row["tasks"] for row in report.workers) == kinds["done"] + kinds["failed"] - len(
        give_ups
    )
    expected = Counter((e[3].decode(), normalise_reason(e[8])) for e in events if e[1] == "failed")
    rows = {(row["type"], row["reason"]): row["count"] for row in report.failures}
    assert rows == dict(expected)
    assert len(rows) < len({e[8] for e in events if e[1] == "failed"}) / 10


COUNTED = ("submitted", "done", "failed", "cancelled", "never_completed")
"""What each of the per-queue table's counts (QUEUE_COUNTS) counts, as L{by_queue} names it."""


def assert_queue_rows(rows: list[dict[str, Any]], expected: dict) -> None:
    """The report's per-queue rows are L{by_queue}'s."""
    found = {(row["queue"], row["priority"]): row for row in rows}
    assert found.keys() == expected.keys()
    for place, want in expected.items():
        row, waits = found[place], want["waits"]
        assert [row[name] for name in QUEUE_COUNTS] == [want["counts"][c] for c in COUNTED], place
        assert row["wait_p50_ms"] == pytest.approx(percentile(waits, 0.5)), place
        assert row["wait_p95_ms"] == pytest.approx(percentile(waits, 0.95)), place


class PageTables(HTMLParser):
    """The tables of a page, by the heading above each: lists of rows of cell texts."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._heading = ""
        self._text: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("h2", "th", "td"):
            self._text = []
        elif tag == "tr":
            self.tables.setdefault(self._heading, []).append([])

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._text is None or tag not in ("h2", "th", "td"):
            return
        text, self._text = "".join(self._text), None
        if tag == "h2":
            self._heading = text
        else:
            self.tables[self._heading][-1].append(text)


def test_counts_by_queue_and_priority(report_and_events) -> None:
    from quicx.report.pipeline import render_html

    report, events = report_and_events
    expected = by_queue(events)
    # The generator spreads tasks: several queues, several priorities, and
    # in each some that never completed and some cancelled.
    assert len({q for q, _ in expected}) > 1 and len({p for _, p in expected}) > 1
    assert all(row["counts"]["never_completed"] for row in expected.values())
    assert all(row["counts"]["cancelled"] for row in expected.values())
    assert_queue_rows(report.queues, expected)
    overall = next(row for row in report.summary if row["type"] == "*")
    assert overall["never_completed"] == sum(
        row["counts"]["never_completed"] for row in expected.values()
    )
    assert overall["rejected"] == sum(e[1] == "rejected" for e in events) > 0

    # The page shows the same table.
    page = render_html(report)
    head, *rows = PageTables(page).tables["Tasks by queue and priority"]
    assert head[:7] == ["queue", "priority", *(c.replace("_", " ") for c in QUEUE_COUNTS)]
    shown = {(r[0], int(r[1])): [int(c.replace(",", "")) for c in r[2:7]] for r in rows}
    assert shown == {
        place: [want["counts"][c] for c in COUNTED] for place, want in expected.items()
    }
    cancelled = sum(row["counts"]["cancelled"] for row in expected.values())
    assert f"{cancelled:,} cancelled" in page


def test_events_of_the_previous_release_still_report(spark, tmp_path) -> None:
    """
    A directory with files of both releases: the old one's tasks are in the
    default queue at priority 0, with the new one's of that queue and
    priority; the per-type tables count both.
    """
    from quicx.report.pipeline import build_report

    directory = tmp_path / "events"
    old = write_events(directory, tasks=400, pid=1111, legacy=True)
    new = write_events(directory, tasks=400, pid=2222)
    assert '"queue"' not in next(directory.glob("events-*-1111-*")).read_text()
    report = build_report(spark, [str(directory)])

    expected = by_queue(old, new)
    assert (
        expected["default", 0]["counts"]["submitted"]
        > by_queue(new)["default", 0]["counts"]["submitted"]
    )
    assert_queue_rows(report.queues, expected)
    overall = next(row for row in report.summary if row["type"] == "*")
    kinds = Counter(e[1] for e in old + new)
    assert (overall["submitted"], overall["completed"], overall["rejected"]) == (
        kinds["submitted"],
        kinds["done"],
        kinds["rejected"],
    )


@pytest.fixture(scope="module")
def browser() -> Any:
    driver = headless_chromium(WIDTH, 1000)
    yield driver
    driver.quit()


LAYOUT = """
const box = (e) => { const r = e.getBoundingClientRect();
                     return [r.left, r.top, r.right, r.bottom]; };
const scrolling = [...document.querySelectorAll('body *')].filter((e) =>
    ['auto', 'scroll'].includes(getComputedStyle(e).overflowX) && e.scrollWidth > e.clientWidth
  ).map((e) => e.tagName);
return {
  inner: window.innerWidth,
  scroll: document.scrollingElement.scrollWidth,
  scrolling: scrolling,
  charts: [...document.querySelectorAll('svg')].map((svg) => ({
    box: box(svg),
    texts: [...svg.querySelectorAll('text')].map(
      (t) => [t.textContent, t.getAttribute('class'), box(t)]),
  })),
};
"""


def overlap(a: list[float], b: list[float]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def test_the_page_fits_1280_px_and_no_labels_touch(
    report_and_events, browser, tmp_path: Path
) -> None:
    from quicx.report.pipeline import render_html

    page = tmp_path / "report.html"
    page.write_text(render_html(report_and_events[0]), encoding="utf-8")
    browser.get(page.as_uri())
    layout = browser.execute_script(LAYOUT)
    browser.save_screenshot(str(tmp_path / "report.png"))

    assert layout["inner"] == WIDTH
    assert layout["scroll"] <= layout["inner"], "the page scrolls sideways"
    assert layout["scrolling"] == [], "an element scrolls sideways"
    assert len(layout["charts"]) == 3
    for chart in layout["charts"]:
        texts = chart["texts"]
        classes = Counter(kind for _, kind, _ in texts)
        assert classes["tick x"] >= 3 and classes["tick y"] >= 3, classes
        assert classes["axis-title"] == 2
        for n, (text, _, box) in enumerate(texts):
            inside = chart["box"]
            assert inside[0] <= box[0] and box[2] <= inside[2], f"{text!r} leaves its chart"
            for other, _, other_box in texts[n + 1 :]:
                assert not overlap(box, other_box), f"{text!r} overlaps {other!r}"


def wide_report() -> Any:
    """
    A report of a big deployment, made by hand: counts in the billions in
    every column, long names, and a what-if of many worker counts (a long
    legend).
    """
    from quicx.report.capacity import WhatIf
    from quicx.report.pipeline import COUNTS, Report

    big, origin, bucket = 1_234_567_890, 1_795_000_000_000, 60_000
    latencies = {f"{p}_{q}_ms": 123_456_789.5 for p in ("wait", "run") for q in PCT_NAMES}
    summary = [
        {"type": kind, **dict.fromkeys(COUNTS, big), **latencies}
        for kind in ("*", "send_receipt_to_every_customer_of_the_month", "sms")
    ]
    queues = [
        {"queue": "a-queue-with-a-long-name", "priority": 255, **dict.fromkeys(QUEUE_COUNTS, big),
         "wait_p50_ms": 123_456_789.5, "wait_p95_ms": 123_456_789.5}
    ]  # fmt: skip
    scenarios = [("recorded", 266), *(("simulated", n) for n in (1, 2, 4, 8, 16, 32, 64, 128))]
    table = [
        {"queue": queue, "workers": n, "scenario": scenario, "tasks": big,
         "wait_p50_ms": 1234.5, "wait_p95_ms": 35_000.0, "wait_p99_ms": 41_234.0,
         "max_backlog": 37_842}
        for queue in ("*", "mail", "bulk") for scenario, n in scenarios
    ]  # fmt: skip
    backlog = [
        {"scenario": scenario, "workers": n, "queue": queue, "t": origin + i * bucket,
         "backlog": i * n % 500}
        for queue in ("*", "mail", "bulk") for scenario, n in scenarios for i in range(120)
    ]  # fmt: skip
    minutes = [
        {"minute": origin + i * 60_000, "type": "sms", "submitted": big, "completed": big,
         "failed": 0}
        for i in range(200)
    ]  # fmt: skip
    reasons = [
        {"type": "send_receipt", "reason": "SMTP <address> refused message <hex> " * 4,
         "count": big, "example": "x" * 300}
    ]  # fmt: skip
    return Report(
        summary=summary,
        throughput=minutes,
        failures=reasons,
        workers=[{"run": "123456", "worker": big, "tasks": big, "busy_ms": big * 1000}],
        queues=queues,
        never_completed=big,
        events=big,
        wait_histogram=[(10.0 * i, i) for i in range(30)],
        run_histogram=[(10.0 * i, i) for i in range(30)],
        what_if=WhatIf(table, backlog, origin, bucket),
    )


PCT_NAMES = ("p50", "p95", "p99", "max")


def test_a_wide_report_and_its_what_if_fit_1280_px(browser, tmp_path: Path) -> None:
    """
    Ten-digit counts in every column of the widest table do not push the
    page sideways (a number breaks after a separator where it must), and
    each what-if chart's legend, however many worker counts, stays in its
    chart, its entries apart.
    """
    from quicx.report.pipeline import render_html

    page = tmp_path / "report.html"
    page.write_text(render_html(wide_report()), encoding="utf-8")
    browser.get(page.as_uri())
    layout = browser.execute_script(LAYOUT)
    browser.save_screenshot(str(tmp_path / "report.png"))

    assert layout["scroll"] <= layout["inner"], "the page scrolls sideways"
    assert layout["scrolling"] == [], "an element scrolls sideways"
    backlogs = [c for c in layout["charts"] if any(k == "legend" for _, k, _ in c["texts"])]
    assert len(backlogs) == 3
    for chart in backlogs:
        legend = [(text, box) for text, kind, box in chart["texts"] if kind == "legend"]
        assert [text for text, _ in legend] == [
            "266 recorded",
            *(f"{n} workers" for n in (1, 2, 4, 8, 16, 32, 64, 128)),
        ]
        for n, (text, box) in enumerate(legend):
            inside = chart["box"]
            assert inside[0] <= box[0] and box[2] <= inside[2], f"{text!r} leaves its chart"
            assert box[3] <= inside[3], f"{text!r} leaves its chart"
            for other, other_box in legend[n + 1 :]:
                assert not overlap(box, other_box), f"{text!r} overlaps {other!r}"
