"""
Steering workers from the dashboard in a real headless Chromium, against a
real daemon and a real C{quicx worker} process: the workers page shows what
the worker announced; a task's page shows its checkpoint, and a task no
connected worker runs says so there and on the queues page; quiet from the
page (a task submitted after stays queued), then terminate it (a confirm
first): the worker process exits.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import headless_chromium
from tests.daemon.observe.test_dashboard import ADMIN, DASHBOARD, console_errors, log_in, until
from tests.daemon.observe.test_dashboard_history import call, heading, script, submit
from tools.launcher import DaemonProcess, start_workers, stop_all

HANDLERS = """
import time
from pathlib import Path

FOLDER = Path({folder!r})

def step(payload: bytes, context) -> None:
    context.checkpoint("row 3 of 9")
    while not (FOLDER / "release").exists():
        time.sleep(0.05)

def encode(payload: bytes) -> None:
    (FOLDER / "encoded").touch()

handlers = {{"step": step, "encode": encode}}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("steering")


@pytest.fixture(scope="module")
def daemon(folder: Path) -> Iterator[DaemonProcess]:
    (folder / "daemon").mkdir()
    args = ("--web-listen=tcp:0", f"--web-admin-token={ADMIN}")
    with DaemonProcess(folder / "daemon", args) as started:
        yield started


@pytest.fixture(scope="module")
def web(daemon: DaemonProcess) -> str:
    match = DASHBOARD.search(daemon.wait_for_log("dashboard on"))
    assert match is not None
    return f"http://127.0.0.1:{match.group(1)}"


@pytest.fixture(scope="module")
def worker(folder: Path, daemon: DaemonProcess) -> Iterator[subprocess.Popen[bytes]]:
    """A C{quicx worker} process named C{encoder}: it runs C{step} and C{encode}, in C{jobs}."""
    (folder / "steering_handlers.py").write_text(HANDLERS.format(folder=str(folder)))
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(folder), path])
    try:
        (process,) = start_workers(
            "steering_handlers:handlers",
            1,
            ["--connect", daemon.client_address, "--queues", "jobs", "--name", "encoder"],
            folder,
        )
    finally:
        os.environ["PYTHONPATH"] = path
    yield process
    (folder / "release").touch()
    stop_all([process], 10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium(1280, 900)
    yield driver
    driver.quit()


def cells(driver: Any, selector: str) -> list[str]:
    """The text of each cell of the first row C{selector} finds (read in one go)."""
    found: list[str] = script(
        driver,
        "const row = document.querySelector(arguments[0]);"
        " return row ? [...row.children].map((c) => c.textContent) : [];",
        selector,
    )
    return found


def worker_row(driver: Any, worker_id: int) -> list[str]:
    """The workers page's row of worker C{worker_id}, read after a refresh."""
    script(driver, "document.getElementById('workers-refresh').click();")
    return cells(driver, f'#worker-rows tr[data-connection="{worker_id}"]')


def test_the_task_page_shows_a_checkpoint_and_a_type_no_worker_runs(
    daemon: DaemonProcess,
    web: str,
    worker: subprocess.Popen[bytes],
    browser: Any,
    folder: Path,
) -> None:
    stepping = submit(daemon, b"step", b"", queue="jobs")
    log_in(browser, web, ADMIN, f"task/{stepping}")

    def checkpoint() -> str:
        browser.get(f"{web}/#overview")
        browser.get(f"{web}/#task/{stepping}")
        until(lambda: heading(browser), what="the task page")
        return str(
            script(
                browser,
                "const c = document.querySelector('#task-answer .checkpoint');"
                " return c ? c.textContent : '';",
            )
        )

    shown = until(checkpoint, timeout=60, what="the checkpoint")
    assert shown.startswith("Checkpoint (10 B, saved ") and shown.endswith("row 3 of 9")
    # No worker runs "resize": once the worker is free and passes it over, it
    # is set aside, and says so.
    (folder / "release").touch()
    resize = submit(daemon, b"resize", b"", queue="jobs")
    browser.get(f"{web}/#task/{resize}")
    until(lambda: heading(browser) == f"Task {resize}: queued", what="its page")
    why = script(
        browser, "return [...document.querySelectorAll('ul.why li')].map((n) => n.textContent);"
    )
    assert "no connected worker handles type resize" in why
    browser.get(f"{web}/#queues")
    until(lambda: cells(browser, '#queue-rows tr[data-queue="jobs"]'), what="the queue's row")
    unroutable = until(
        lambda: script(
            browser,
            "const c = document.querySelector("
            "'#queue-rows tr[data-queue=\"jobs\"] td[data-column=unroutable]');"
            " return c && c.textContent === '1' && c.title;",
        ),
        what="one unroutable task",
    )
    assert unroutable == "resize: 1"
    promoted = script(
        browser,
        "return document.querySelector("
        "'#queue-rows tr[data-queue=\"jobs\"] td[data-column=promoted]').textContent;",
    )
    assert promoted == "0"
    assert call(web, f"/api/tasks/{resize}/cancel", "POST")[0] == 200
    assert console_errors(browser) == []


def test_quiet_then_terminate_a_worker_from_the_page(
    daemon: DaemonProcess,
    web: str,
    worker: subprocess.Popen[bytes],
    browser: Any,
    folder: Path,
) -> None:
    # The worker connects in its own time (this test may be the module's first).
    (shown,) = until(
        lambda: [c for c in call(web, "/api/workers")[1] if c["role"] == "worker"],
        what="the worker's connection",
    )
    worker_id = shown["id"]
    assert (shown["name"], shown["pid"], shown["types"]) == (
        "encoder",
        worker.pid,
        ["encode", "step"],
    )
    log_in(browser, web, ADMIN, "workers")
    row = until(lambda: worker_row(browser, worker_id), what="the worker's row")
    assert row[2] == f"encoder on {shown['host']} (pid {worker.pid})"
    assert (row[3], row[4]) == ("encode, step", "active")
    script(browser, "document.querySelector('button[data-action=quiet][data-worker]').click();")
    until(lambda: worker_row(browser, worker_id)[4] == "quiet", what="it quiet")
    assert script(browser, "return document.getElementById('message').textContent;") == (
        f"quiet: worker(s) {worker_id}"
    )
    task_id = submit(daemon, b"encode", b"", queue="jobs")
    # Terminate asks first: said no, nothing is done.
    script(
        browser,
        "window.asked = []; window.confirm = (q) => { window.asked.push(q); return false; };",
    )
    script(browser, "document.querySelector('button[data-action=terminate]').click();")
    asked = script(browser, "return window.asked;")
    assert len(asked) == 1 and asked[0].startswith(f"Terminate worker {worker_id}?")
    assert worker.poll() is None and worker_row(browser, worker_id)[4] == "quiet"
    script(browser, "window.confirm = () => true;")
    script(browser, "document.querySelector('button[data-action=terminate]').click();")
    assert worker.wait(timeout=60) == 0
    until(lambda: not worker_row(browser, worker_id), what="its row gone")
    # The task submitted after it went quiet never ran: it is still queued.
    page = call(web, f"/api/tasks/{task_id}")[1]
    assert (page["found"], page["task"]["state"]) == ("live", "queued")
    assert not (folder / "encoded").exists()
    assert console_errors(browser) == []
