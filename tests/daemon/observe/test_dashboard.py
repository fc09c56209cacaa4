"""
The web dashboard of a real daemon (C{twistd -n quicx} with C{[web]
listen}) in a real headless Chromium driven by selenium: the page loads
without console errors, its numbers move while a worker drains 10,000
tasks, pausing a queue from the page stops dispatch (checked over the
wire), a dead letter replayed from the page runs, and the monitor role has
no buttons and is refused an action, and the Cluster page shows the daemon
and its C{[cluster]} peer side by side, and the peer down once it stops.
Without the token nothing is served.

One daemon (and its peer) and one browser for the module.  The test saves a screenshot of
the overview; with C{QUICX_UPDATE_SCREENSHOT=1} it writes docs/dashboard.png.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quicx.protocol import admin, outcomes, taskflow, wire
from tests.browser import headless_chromium
from tests.peer import Peer
from tools.launcher import DaemonProcess

ADMIN = "admin-token-for-the-test"
MONITOR = "monitor-token-for-the-test"
DASHBOARD = re.compile(r"dashboard on 127\.0\.0\.1:(\d+)")
SCREENSHOT = Path(__file__).resolve().parents[3] / "docs" / "dashboard.png"
TASKS = 10_000


def until(check: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """C{check()}'s first true answer, polled; AssertionError after C{timeout}."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what or check}")
        time.sleep(0.05)
    return found


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A second daemon, the dashboard daemon's one C{[cluster]} peer."""
    with DaemonProcess(tmp_path_factory.mktemp("peer"), ()) as started:
        yield started


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, peer: DaemonProcess
) -> Iterator[DaemonProcess]:
    directory = tmp_path_factory.mktemp("dashboard")
    args = (
        "--web-listen=tcp:0",  # no interface: on loopback (see the announcement)
        f"--web-admin-token={ADMIN}",
        f"--web-monitor-token={MONITOR}",
        f"--cluster-peers={peer.client_address}",
        "--cluster-interval=0.3",
        "--cluster-timeout=1",
    )
    with DaemonProcess(directory, args) as started:
        yield started


@pytest.fixture(scope="module")
def web(daemon: DaemonProcess) -> str:
    """The dashboard's base URL, from its announcement (on loopback: no interface was given)."""
    match = DASHBOARD.search(daemon.wait_for_log("dashboard on"))
    assert match is not None
    return f"http://127.0.0.1:{match.group(1)}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium(1280, 900)
    yield driver
    driver.quit()


def console_errors(driver: Any) -> list[str]:
    """The console's SEVERE entries since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def log_in(driver: Any, web: str, token: str, page: str = "overview") -> None:
    driver.get(f"{web}/login?token={token}")
    until(lambda: driver.current_url == f"{web}/", what="the login's redirect")
    driver.get(f"{web}/#{page}")
    until(lambda: text(driver, "live") == "live", what="the live stream")


def text(driver: Any, element_id: str) -> str:
    found = driver.find_elements("id", element_id)
    return str(found[0].text) if found else ""


def shown_number(driver: Any, element_id: str) -> int:
    """The first number in an element's text (C{1,234 in all} -> 1234)."""
    match = re.search(r"[\d,]+", text(driver, element_id))
    return int(match.group().replace(",", "")) if match else -1


def click(driver: Any, selector: str) -> None:
    """
    Click the first element C{selector} finds, found again if the page
    re-rendered it between finding and clicking (its tables are redrawn on
    each update: on a loaded machine that window is wide).
    """
    from selenium.common.exceptions import StaleElementReferenceException

    def clicked() -> bool:
        try:
            found = driver.find_elements("css selector", selector)
            if found:
                found[0].click()
            return bool(found)
        except StaleElementReferenceException:
            return False

    until(clicked, what=selector)


def save_screenshot(driver: Any, tmp_path: Path) -> None:
    """The overview as it is now, in C{tmp_path} (or docs/, with QUICX_UPDATE_SCREENSHOT=1)."""
    path = SCREENSHOT if os.environ.get("QUICX_UPDATE_SCREENSHOT") == "1" else tmp_path / "d.png"
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000


def submit(peer: Peer, queue: str, count: int = 1, **options: Any) -> list[int]:
    """Submit C{count} tasks to C{queue} (pipelined); their ids."""
    frame = taskflow.encode_submit(b"job", b"payload", taskflow.submit_options(queue, **options))
    peer.send(frame * count)
    answers = [peer.receive() for _ in range(count)]
    assert all(isinstance(a, taskflow.Ok) for a in answers), answers[:3]
    return [a.task_id for a in answers]


def queue_state(daemon: DaemonProcess, name: str) -> dict[str, Any]:
    with Peer(daemon.address) as monitor:
        answer = monitor.request(admin.encode_queues())
    found: dict[str, Any] = next(q for q in answer.document if q["name"] == name)
    return found


def drain(daemon: DaemonProcess, queue: str, count: int, per_second: float) -> None:
    """A raw-socket worker that ACKs C{count} tasks of C{queue}, at most C{per_second}."""
    with Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(100, [queue]))
        start = time.monotonic()
        for done in range(count):
            task = worker.receive(10)
            worker.send(outcomes.encode_ack(task.task_id, task.token))
            ahead = start + done / per_second - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)


def test_a_request_without_the_token_is_refused(web: str) -> None:
    for path, headers in [
        ("/", {}),
        ("/api/overview", {}),
        ("/api/overview", {"Authorization": "Bearer not-the-token"}),
        ("/login?token=not-the-token", {}),
    ]:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(web + path, headers=headers), timeout=5)
        assert refused.value.code == 401, path
        assert b"queue" not in refused.value.read()
    request = urllib.request.Request(
        f"{web}/api/overview", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert json.load(answer)["version"]


def test_the_page_loads_cleanly_and_its_numbers_move_while_a_worker_drains(
    daemon: DaemonProcess, web: str, browser: Any, tmp_path: Path
) -> None:
    with Peer(daemon.address) as producer:
        submit(producer, "bulk", TASKS)
    log_in(browser, web, ADMIN)
    until(lambda: shown_number(browser, "now-queued") >= TASKS, what="the queued count")
    before = shown_number(browser, "total-done")
    worker = threading.Thread(target=drain, args=(daemon, "bulk", TASKS, 2500.0))
    worker.start()
    try:
        first = until(
            lambda: (n := shown_number(browser, "total-done")) > before and n,
            what="the done count moving",
        )
        assert first < before + TASKS, "drained before the page showed it moving"
        assert float(text(browser, "rate-done").replace(",", "")) > 0
        time.sleep(1.5)
        assert shown_number(browser, "total-done") > first
        save_screenshot(browser, tmp_path)
    finally:
        worker.join(30)
    until(lambda: shown_number(browser, "total-done") >= before + TASKS, what="all done")
    assert browser.find_elements("css selector", "#chart-rates polyline")
    assert console_errors(browser) == []


def test_pausing_a_queue_from_the_page_stops_dispatch(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    with Peer(daemon.address) as worker, Peer(daemon.address) as producer:
        worker.send(taskflow.encode_ready(5, ["mail"]))
        assert isinstance(worker.receive(), wire.Wait)
        log_in(browser, web, ADMIN, "queues")
        click(browser, 'button[data-action="pause"][data-queue="mail"]')
        until(lambda: queue_state(daemon, "mail")["paused"], what="mail paused over the wire")
        until(
            lambda: browser.find_elements("css selector", 'button[data-action="resume"]'),
            what="the page showing it paused",
        )
        (task_id,) = submit(producer, "mail")
        assert worker.nothing_for(1.5), "a task was dispatched from a paused queue"
        click(browser, 'button[data-action="resume"][data-queue="mail"]')
        task = worker.receive(30)  # the click goes through the browser: generous
        assert task.task_id == task_id
        worker.send(outcomes.encode_ack(task.task_id, task.token))
        assert producer.receive() == taskflow.Done(task_id)
        assert not queue_state(daemon, "mail")["paused"]
    assert console_errors(browser) == []


def test_a_dead_letter_replayed_from_the_page_runs(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    with Peer(daemon.address) as worker, Peer(daemon.address) as producer:
        (task_id,) = submit(producer, "jobs", retries=1, result_ttl=600)
        worker.send(taskflow.encode_ready(1, ["jobs"]))
        task = worker.receive()
        worker.send(outcomes.encode_nack(task.task_id, task.token, "hopeless", permanent=True))
        assert producer.receive() == wire.Failed(task_id, "hopeless")
        log_in(browser, web, ADMIN, "dead")
        click(browser, f'button[data-action="replay"][data-task="{task_id}"]')
        again = worker.receive(30)  # through the browser: generous
        assert (again.task_id, again.failures) == (task_id, 0)
        result = taskflow.Result(taskflow.ResultKind.TEXT, b"ran after all")
        worker.send(outcomes.encode_ack(again.task_id, again.token, result))
        producer.send(outcomes.encode_await(task_id, 5000))
        assert producer.receive() == outcomes.Outcome(task_id, outcomes.OutcomeState.DONE, result)
    until(lambda: "replayed 1 task" in text(browser, "message"), what="the page's word")
    assert console_errors(browser) == []


def test_a_monitor_session_has_no_buttons_and_is_refused_an_action(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    with Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(1, ["mail"]))
        log_in(browser, web, MONITOR, "queues")
        until(lambda: browser.find_elements("css selector", 'tr[data-queue="mail"]'))
        assert text(browser, "who") == "monitor: read only"
        assert browser.find_elements("css selector", "button[data-action]") == []
        browser.get(f"{web}/#dead")
        assert browser.find_elements("css selector", "button[data-action]") == []
        status = browser.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            fetch('/api/session').then((r) => r.json()).then((session) =>
              fetch('/api/queues/mail/pause',
                    {method: 'POST', headers: {'X-Quicx-CSRF': session.csrf}}))
              .then((r) => done(r.status), (e) => done(String(e)));
            """
        )
        assert status == 403
        assert not queue_state(daemon, "mail")["paused"]


def test_html_in_a_task_type_or_a_failure_reason_shows_as_text(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    """Clients name the types and the reasons: the pages show them, never run them."""
    task_type = '<img src=x onerror="document.title=1">'
    reason = '<b id="injected">bold</b><script>document.title=2</script>'
    with Peer(daemon.address) as worker, Peer(daemon.address) as producer:
        options = taskflow.submit_options("html", retries=1, result_ttl=600)
        task_id = producer.request(taskflow.encode_submit(task_type.encode(), b"", options)).task_id
        worker.send(taskflow.encode_ready(1, ["html"]))
        task = worker.receive()
        worker.send(outcomes.encode_nack(task.task_id, task.token, reason, permanent=True))
        assert producer.receive() == wire.Failed(task_id, reason)
    console_errors(browser)  # what the tests before left
    log_in(browser, web, MONITOR, "dead")
    row = until(lambda: browser.find_elements("css selector", f'tr[data-task="{task_id}"]'))[0]
    assert task_type in row.text and reason in row.text
    browser.get(f"{web}/#task")
    browser.find_element("id", "task-id").send_keys(str(task_id))
    click(browser, '#task-form button[type="submit"]')
    until(lambda: reason in text(browser, "task-answer"), what="the task's reason")
    assert browser.find_elements("css selector", "#injected, main img") == []
    assert browser.title == "Quicx dashboard"
    assert console_errors(browser) == []


def cluster_cell(driver: Any, row: str, column: int) -> str:
    """The Cluster page's cell of C{row} (its heading) in C{column} (0: this daemon)."""
    table = driver.execute_script(
        "return [...document.querySelectorAll('#cluster-rows tr')]"
        ".map((tr) => [...tr.children].map((cell) => cell.textContent));"
    )
    return next((str(line[1 + column]) for line in table if line[0] == row), "")


def test_the_cluster_page_shows_both_daemons_and_the_total_then_the_peer_down(
    daemon: DaemonProcess, peer: DaemonProcess, web: str, browser: Any
) -> None:
    with Peer(daemon.address) as here, Peer(peer.address) as there:
        submit(here, "cluster-here", 2)
        submit(there, "cluster-there", 3)
    log_in(browser, web, MONITOR, "cluster")
    heads = until(
        lambda: [h.text for h in browser.find_elements("css selector", "#cluster-head th")],
        what="the cluster table",
    )
    assert heads == ["", "self", peer.client_address, "total"]

    def queued() -> list[int]:
        browser.find_element("id", "cluster-refresh").click()
        cells = [cluster_cell(browser, "queued", i).replace(",", "") for i in range(3)]
        return [int(cell) if cell.isdigit() else -1 for cell in cells]

    until(lambda: (q := queued())[1] == 3 and q[2] == q[0] + 3, what="the peer's queued and total")
    assert cluster_cell(browser, "state", 2) == "2 of 2 up"
    peer.kill()
    until(
        lambda: (queued(), cluster_cell(browser, "state", 1) == "down")[1],
        what="the peer shown down",
    )
    assert cluster_cell(browser, "state", 2) == "1 of 2 up"
    assert f"down: {peer.client_address}" in text(browser, "cluster-note")
    assert console_errors(browser) == []


def test_the_task_page_says_an_outcome_was_evicted_not_expired(
    tmp_path: Path, browser: Any
) -> None:
    args = ("--web-listen=tcp:0", f"--web-monitor-token={MONITOR}", "--result-max-count=1")
    with DaemonProcess(tmp_path, args) as small:
        match = DASHBOARD.search(small.wait_for_log("dashboard on"))
        assert match is not None
        site = f"http://127.0.0.1:{match.group(1)}"
        with Peer(small.address) as worker, Peer(small.address) as producer:
            first, _ = submit(producer, "evict", 2, result_ttl=600)
            worker.send(taskflow.encode_ready(1, ["evict"]))
            for _ in range(2):
                task = worker.receive()
                worker.send(outcomes.encode_ack(task.task_id, task.token))
                assert isinstance(producer.receive(), taskflow.Done)
        console_errors(browser)  # what the tests before left
        log_in(browser, site, MONITOR, "task")
        browser.find_element("id", "task-id").send_keys(str(first))
        click(browser, '#task-form button[type="submit"]')
        words = "its outcome was kept and was evicted: past [results] max_count"
        until(lambda: words in text(browser, "task-answer"), what="the eviction")
        assert console_errors(browser) == []
