"""
"What happened to my task?" in a real headless Chromium, against a real
daemon and a real C{quicx worker} process: tasks run, one fails twice into
the dead-letter set with the worker's exception and traceback; the
Finished page finds it by its key; its page shows the payload, the
traceback and the timeline; Retry runs it again, and its page says done;
the workers page shows a task running, with its type and how long.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quicx.protocol import taskflow
from tests.browser import headless_chromium
from tests.daemon.observe.test_dashboard import (
    ADMIN,
    DASHBOARD,
    console_errors,
    log_in,
    text,
    until,
)
from tests.peer import Peer
from tools.launcher import DaemonProcess, start_workers, stop_all

HANDLERS = """
import os
import time
from pathlib import Path

FOLDER = Path({folder!r})

def lookup(sku):
    raise KeyError(sku)

def charge(payload: bytes) -> None:
    if not (FOLDER / "fixed").exists():
        lookup(payload.decode())

def render(payload: bytes) -> None:
    while not (FOLDER / "release").exists():
        time.sleep(0.05)

handlers = {{"charge": charge, "render": render}}
"""

SECOND = taskflow.Backoff(taskflow.BackoffKind.FIXED, 200, 200, 0)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("history")


@pytest.fixture(scope="module")
def daemon(folder: Path) -> Iterator[DaemonProcess]:
    # 10 records a request: a search follows its cursor over a few requests.
    args = ("--web-listen=tcp:0", f"--web-admin-token={ADMIN}", "--web-search-step=10")
    (folder / "daemon").mkdir()
    with DaemonProcess(folder / "daemon", args) as started:
        yield started


@pytest.fixture(scope="module")
def web(daemon: DaemonProcess) -> str:
    match = DASHBOARD.search(daemon.wait_for_log("dashboard on"))
    assert match is not None
    return f"http://127.0.0.1:{match.group(1)}"


@pytest.fixture(scope="module")
def worker(folder: Path, daemon: DaemonProcess) -> Iterator[None]:
    """A C{quicx worker} process: C{charge} fails until the file C{fixed} is there."""
    (folder / "history_handlers.py").write_text(HANDLERS.format(folder=str(folder)))
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(folder), path])
    try:
        processes: list[subprocess.Popen[bytes]] = start_workers(
            "history_handlers:handlers",
            1,
            ["--connect", daemon.client_address, "--queues", "shop,slow", "-n", "2"],
            folder,
        )
    finally:
        os.environ["PYTHONPATH"] = path
    yield
    (folder / "release").touch()
    stop_all(processes, 10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium(1280, 900)
    yield driver
    driver.quit()


def submit(daemon: DaemonProcess, task_type: bytes, payload: bytes, **options: Any) -> int:
    with Peer(daemon.address) as producer:
        answer = producer.request(
            taskflow.encode_submit(task_type, payload, taskflow.submit_options(**options)),
            timeout=30,
        )
    assert isinstance(answer, taskflow.Ok), answer
    return int(answer.task_id)


def script(driver: Any, code: str, *args: Any) -> Any:
    """Run C{code} in the page (read in one go: the page may draw anew at any time)."""
    return driver.execute_script(code, *args)


def heading(driver: Any) -> str:
    return str(
        script(
            driver,
            "const h = document.querySelector('#task-answer h3'); return h ? h.textContent : '';",
        )
    )


def wait_for(driver: Any, check: Callable[[], Any], what: str) -> Any:
    return until(check, timeout=60, what=what)


def test_what_happened_to_my_task(
    daemon: DaemonProcess, web: str, worker: None, browser: Any, folder: Path
) -> None:
    for n in range(3):
        submit(daemon, b"charge", b"fine", queue="shop", key=b"warmup-%d" % n)
    # The first three fail too (charge fails until "fixed"): they are the noise the search cuts.
    task_id = submit(
        daemon, b"charge", b"sku-42", queue="shop", key=b"order-42", retries=1, backoff=SECOND
    )
    log_in(browser, web, ADMIN, "finished")
    # Found by its key once it is dead (failed twice: its retry too).
    field = wait_for(browser, lambda: browser.find_elements("id", "finished-key"), "the search")[0]
    field.send_keys("order-4")

    def found() -> Any:
        script(browser, "document.querySelector('#finished-form button[type=submit]').click();")
        return script(
            browser,
            "const rows = [...document.querySelectorAll('#finished-rows tr')];"
            " return rows.map((r) => [r.dataset.task, r.dataset.state]);",
        ) == [[str(task_id), "dead"]]

    wait_for(browser, found, "the dead task, found by its key")
    script(browser, "document.querySelector('#finished-rows a.task-link').click();")
    wait_for(browser, lambda: heading(browser) == f"Task {task_id}: dead", "its page")
    assert browser.current_url == f"{web}/#task/{task_id}"
    failure = script(
        browser,
        "return [...document.querySelectorAll('#task-answer .failure strong,"
        " #task-answer .failure pre.traceback')].map((n) => n.textContent);",
    )
    assert failure[0] == "KeyError: 'sku-42'"
    assert "Traceback (most recent call last):" in failure[1]
    assert "in lookup" in failure[1] and "raise KeyError(sku)" in failure[1]
    assert (
        script(browser, "return document.querySelector('#task-answer pre.payload').textContent;")
        == "sku-42"
    )
    events = script(
        browser,
        "return [...document.querySelectorAll('.timeline tr')].map((r) => r.dataset.event);",
    )
    assert events == ["submitted", "retrying", "delivered", "dead"]
    # Fixed: retried from its page, it runs again, and its page says done.
    (folder / "fixed").touch()
    script(browser, "window.confirm = () => true;")
    script(browser, "document.querySelector('#task-answer button[data-action=retry]').click();")
    wait_for(
        browser, lambda: text(browser, "message") == f"replayed 1 task(s): {task_id}", "retried"
    )

    def done() -> bool:
        browser.get(f"{web}/#finished")
        browser.get(f"{web}/#task/{task_id}")
        return until(lambda: heading(browser), timeout=30) == f"Task {task_id}: done"

    wait_for(browser, done, "its page saying done")
    events = script(
        browser,
        "return [...document.querySelectorAll('.timeline tr')].map((r) => r.dataset.event);",
    )
    assert events[-3:] == ["replayed", "delivered", "done"] and "dead" in events
    assert console_errors(browser) == []


def test_the_workers_page_shows_a_running_task(
    daemon: DaemonProcess, web: str, worker: None, browser: Any
) -> None:
    task_id = submit(daemon, b"render", b"frame", queue="slow")
    log_in(browser, web, ADMIN, "workers")

    def running() -> str:
        script(browser, "document.getElementById('workers-refresh').click();")
        return str(
            script(
                browser,
                "const li = document.querySelector(`#worker-rows li[data-task='${arguments[0]}']`);"
                " return li ? li.textContent : '';",
                task_id,
            )
        )

    shown = wait_for(
        browser, lambda: "render (slow)" in running() and running(), "the running task"
    )
    assert shown.startswith(f"{task_id} render (slow), ")
    script(browser, "document.querySelector('#worker-rows a.task-link').click();")
    wait_for(browser, lambda: heading(browser) == f"Task {task_id}: running", "its page")
    assert console_errors(browser) == []


def call(web: str, path: str, method: str = "GET") -> tuple[int, Any]:
    """The dashboard's answer to C{path} with the admin's token: its status and JSON."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    request = urllib.request.Request(web + path, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def rows(driver: Any) -> list[int]:
    """The task ids the Finished page shows."""
    found = "[...document.querySelectorAll('#finished-rows tr')].map((r) => r.dataset.task)"
    return [int(task) for task in script(driver, f"return {found};")]


def test_the_finished_page_follows_the_searchs_cursor(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    """60 cancelled tasks, searched 10 records a request: pages of 50 and 10, and back."""
    cancelled = []
    for n in range(60):
        task_id = submit(daemon, b"idle", b"", queue="nobody", key=b"page-%d" % n)
        assert call(web, f"/api/tasks/{task_id}/cancel", "POST")[0] == 200
        cancelled.append(task_id)
    newest = cancelled[::-1]
    first = call(web, "/api/finished?key=page-&limit=50")[1]
    assert first["scanned"] == 10 and len(first["tasks"]) == 10 and first["next"] is not None
    log_in(browser, web, ADMIN, "finished")
    field = wait_for(browser, lambda: browser.find_elements("id", "finished-key"), "the search")[0]
    field.send_keys("page-")
    script(browser, "document.querySelector('#finished-form button[type=submit]').click();")
    wait_for(browser, lambda: rows(browser) == newest[:50], "the first 50, over 5 requests")
    assert "matches 1 to 50 shown" in text(browser, "finished-total")
    script(browser, "document.getElementById('finished-older').click();")
    wait_for(browser, lambda: rows(browser) == newest[50:], "the last 10")
    assert "matches 51 to 60 shown" in text(browser, "finished-total")
    assert script(browser, "return document.getElementById('finished-older').disabled;")
    script(browser, "document.getElementById('finished-newer').click();")
    wait_for(browser, lambda: rows(browser) == newest[:50], "the first 50 again")
    assert console_errors(browser) == []


def test_with_task_history_0_there_is_none(web: str, tmp_path: Path) -> None:
    """C{[web] task_history = 0}: no history at all (the service plugs none in)."""
    assert call(web, "/api/finished")[0] == 200  # the module's daemon: the default, on
    args = ("--web-listen=tcp:0", f"--web-admin-token={ADMIN}", "--web-task-history=0")
    with DaemonProcess(tmp_path, args) as daemon:
        match = DASHBOARD.search(daemon.wait_for_log("dashboard on"))
        assert match is not None
        off = f"http://127.0.0.1:{match.group(1)}"
        task_id = submit(daemon, b"idle", b"", queue="nobody")
        assert call(off, f"/api/tasks/{task_id}/cancel", "POST")[0] == 200
        status, answer = call(off, "/api/finished")
        assert (status, answer) == (
            400,
            {"error": "no history of finished tasks: [web] task_history is 0"},
        )
        status, page = call(off, f"/api/tasks/{task_id}")
        assert status == 200 and "history" not in page
