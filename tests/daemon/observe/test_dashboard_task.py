"""
The dashboard's task and dead-letter pages in a real headless Chromium: a
failure's reason shows its first line (the exception) apart from the
traceback a worker sends after it, the task page shows no stray text, and
what an action said does not stay on the pages shown after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from quicx.protocol import outcomes, taskflow, wire
from tests.browser import headless_chromium
from tests.daemon.observe.test_dashboard import (
    ADMIN,
    DASHBOARD,
    click,
    console_errors,
    log_in,
    submit,
    text,
    until,
)
from tests.peer import Peer
from tools.launcher import DaemonProcess

REASON = (
    "KeyError: 'missing'\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/app/handlers.py", line 6, in lookup\n'
    "    return find(payload.decode())\n"
    '  File "/srv/app/handlers.py", line 10, in find\n'
    "    raise KeyError(key)"
)
"""A reason as the Python worker sends it."""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    directory = tmp_path_factory.mktemp("dashboard")
    args = ("--web-listen=tcp:0", f"--web-admin-token={ADMIN}")
    with DaemonProcess(directory, args) as started:
        yield started


@pytest.fixture(scope="module")
def web(daemon: DaemonProcess) -> str:
    match = DASHBOARD.search(daemon.wait_for_log("dashboard on"))
    assert match is not None
    return f"http://127.0.0.1:{match.group(1)}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = headless_chromium(1280, 900)
    yield driver
    driver.quit()


def press(driver: Any, selector: str) -> None:
    """Click the button C{selector} in one script: the page may draw it anew at any time."""
    until(
        lambda: driver.execute_script(
            "const b = document.querySelector(arguments[0]); if (b) b.click(); return !!b;",
            selector,
        ),
        what=selector,
    )


def look_up(driver: Any, web: str, task_id: int) -> str:
    """The task page's answer for C{task_id}."""
    driver.get(f"{web}/#task")
    field = until(lambda: driver.find_elements("id", "task-id"))[0]
    field.clear()
    field.send_keys(str(task_id))
    click(driver, '#task-form button[type="submit"]')
    return str(
        until(
            lambda: (
                text(driver, "task-answer")
                if f"Task {task_id}" in text(driver, "task-answer")
                else ""
            )
        )
    )


def test_a_dead_task_shows_its_exception_and_traceback_apart(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    with Peer(daemon.address) as worker, Peer(daemon.address) as producer:
        (task_id,) = submit(producer, "lookups", retries=1)
        worker.send(taskflow.encode_ready(1, ["lookups"]))
        task = worker.receive()
        worker.send(outcomes.encode_nack(task.task_id, task.token, REASON, permanent=True))
        assert producer.receive() == wire.Failed(task_id, REASON)
    log_in(browser, web, ADMIN, "dead")
    # Read in one script: the page may draw its rows anew at any time.
    cell = until(
        lambda: browser.execute_script(
            "const cell = document.querySelector(arguments[0]);"
            " return cell && [cell.textContent, cell.title];",
            f'tr[data-task="{task_id}"] td.reason',
        ),
        what="the dead task's row",
    )
    assert cell == ["KeyError: 'missing'", REASON]
    answer = look_up(browser, web, task_id)
    assert answer.startswith(f"Task {task_id}: dead")
    shown = browser.execute_script(
        "return [...document.querySelectorAll("
        "'#task-answer .reason strong, #task-answer pre.traceback')].map((n) => n.textContent);"
    )
    assert shown == REASON.split("\n", 1)
    assert strays(browser) == [] and "null" not in answer
    assert console_errors(browser) == []


def strays(driver: Any) -> list[str]:
    """The task page's answer's own text nodes (none: it holds elements only)."""
    found: list[str] = driver.execute_script(
        "return [...document.getElementById('task-answer').childNodes]"
        ".filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent);"
    )
    return found


@pytest.mark.parametrize("held", [False, True])
def test_a_queued_or_running_task_shows_no_stray_null(
    daemon: DaemonProcess, web: str, browser: Any, held: bool
) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        (task_id,) = submit(producer, f"idle{held}")
        if held:
            worker.send(taskflow.encode_ready(1, [f"idle{held}"]))
            assert worker.receive().task_id == task_id
        log_in(browser, web, ADMIN, "overview")
        answer = look_up(browser, web, task_id)
        assert answer.startswith(f"Task {task_id}: {'running' if held else 'queued'}")
        assert strays(browser) == []
        assert "null" not in answer


def test_an_actions_banner_is_gone_on_the_next_page(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    with Peer(daemon.address) as worker:
        worker.send(taskflow.encode_ready(1, ["banner"]))
        log_in(browser, web, ADMIN, "queues")
        press(browser, 'button[data-action="pause"][data-queue="banner"]')
        until(lambda: text(browser, "message") == "queue banner paused", what="the action's word")
        browser.get(f"{web}/#dead")
        until(lambda: not browser.find_element("id", "message").is_displayed(), what="no banner")
        browser.get(f"{web}/#queues")
        press(browser, 'button[data-action="resume"][data-queue="banner"]')
        until(lambda: text(browser, "message") == "queue banner resumed", what="the next word")
    assert console_errors(browser) == []
