"""
The report's page in a real headless Chromium at 1280 px: nothing scrolls
sideways and no two labels of a chart touch.  The page is computed by a real
local Spark from event files written with the daemon's own encoder
(L{quicx.daemon.events.format_event}); and the counts the page shows are checked
against the events.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from random import Random
from typing import Any

import pytest

from quicx.daemon.events import format_event
from quicx.report.pipeline import normalise_reason

CHROMIUM = os.environ.get("QUICX_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("QUICX_CHROMEDRIVER", "/usr/bin/chromedriver")
WIDTH = 1280


def write_events(directory: Path, tasks: int = 3000, hours: float = 1.5) -> list[tuple]:
    """
    A day's work in small: tasks over C{hours} that complete, fail for
    reasons that carry ports and ids, are requeued after a lost worker, or
    are given up after their last delivery is lost, or are cancelled; spread
    over two queues and three priorities.  Each event is a tuple of
    L{format_event}'s fields, the queue and priority included.
    """
    rng = Random(13)
    events: list[tuple] = []
    start = 1_795_000_000.0
    for task in range(1, tasks + 1):
        kind = (b"send_receipt", b"sms", b"resize_image")[task % 3]
        now = start + task * hours * 3600 / tasks
        size, producer = rng.randint(20, 400), 1 + task % 4
        place = (("mail", "bulk")[task % 2], (0, 5, 9)[task % 5 % 3])
        first = len(events)
        events.append((now, "submitted", task, kind, size, producer, None, 0, None))
        attempt, t = 0, now
        if task % 29 == 0:
            events.append((t + 0.5, "cancelled", task, kind, size, producer, None, 0, "by admin"))
            events[first:] = [(*e, *place) for e in events[first:]]
            continue
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
                    break
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
            break
        events[first:] = [(*e, *place) for e in events[first:]]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "events-20261121T000000-4242-0001.ndjson"
    path.write_text("".join(format_event(e) + "\n" for e in sorted(events)))
    return events


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


def test_counts_by_queue_and_priority(report_and_events) -> None:
    report, events = report_and_events
    expected: dict[tuple[str, int], Counter[str]] = {}
    for e in events:
        expected.setdefault((e[9], e[10]), Counter())[e[1]] += 1
    rows = {(row["queue"], row["priority"]): row for row in report.queues}
    assert rows.keys() == expected.keys() and len(rows) == 6
    for place, counts in expected.items():
        row = rows[place]
        assert (row["submitted"], row["completed"], row["failed"], row["cancelled"]) == (
            counts["submitted"],
            counts["done"],
            counts["failed"],
            counts["cancelled"],
        )
        assert row["never_completed"] == 0  # every task ended: done, failed or cancelled
        assert 0 < row["wait_p50_ms"] <= row["wait_p95_ms"]


def test_events_of_the_previous_release_land_in_the_default_queue(spark, tmp_path) -> None:
    from quicx.report.pipeline import build_report

    directory = tmp_path / "events"
    directory.mkdir()
    old = [
        {"t": 1000, "event": "submitted", "task": 1, "type": "t", "size": 1, "producer": 1,
         "worker": None, "attempt": 0},
        {"t": 1005, "event": "dispatched", "task": 1, "type": "t", "size": 1, "producer": 1,
         "worker": 2, "attempt": 1},
        {"t": 1010, "event": "done", "task": 1, "type": "t", "size": 1, "producer": 1,
         "worker": 2, "attempt": 1},
    ]  # fmt: skip
    (directory / "events-20250101T000000-1-0001.ndjson").write_text(
        "".join(json.dumps(e) + "\n" for e in old)
    )
    report = build_report(spark, [str(directory)])
    assert [(r["queue"], r["priority"], r["submitted"], r["completed"]) for r in report.queues] == [
        ("default", 0, 1, 1)
    ]
    assert report.queues[0]["wait_p50_ms"] == 5


@pytest.fixture(scope="module")
def browser() -> Any:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"no {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={WIDTH},1000")
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
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
