"""
The workflows on the dashboard, in a real headless Chromium against
a real daemon: a diamond of tasks, whose waiting child's page shows its
parents (each linked, pending) and whose parents' pages show it waiting;
a bulk cancel of 30 queued tasks, its dry run counted first (30, a sample
linked), then confirmed (the question repeats the count): all 30 cancelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import headless_chromium
from tests.daemon.observe.test_dashboard import ADMIN, DASHBOARD, console_errors, log_in, until
from tests.daemon.observe.test_dashboard_history import call, heading, script, submit
from tools.launcher import DaemonProcess


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    folder = tmp_path_factory.mktemp("workflows")
    args = ("--web-listen=tcp:0", f"--web-admin-token={ADMIN}")
    with DaemonProcess(folder, args) as started:
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


def section(driver: Any, name: str) -> Any:
    """The task page's dependencies, item C{name}: its text and the task ids it links to."""
    return script(
        driver,
        "const li = document.querySelector(`#task-answer .dependencies li.${arguments[0]}`);"
        " return li ? [li.textContent,"
        " [...li.querySelectorAll('a.task-link')].map((a) => Number(a.dataset.task))] : null;",
        name,
    )


def depth(web: str, name: str) -> int:
    """Queue C{name}'s queued tasks (0: it is gone)."""
    return sum(q["depth"] for q in call(web, "/api/queues")[1] if q["name"] == name)


def test_a_diamonds_waiting_child_shows_its_parents(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    # No worker serves "diamond": the top stays queued, the rest wait.
    top = submit(daemon, b"t", b"", queue="diamond")
    left = submit(daemon, b"t", b"", queue="diamond", after=(top,))
    right = submit(daemon, b"t", b"", queue="diamond", after=(top,))
    bottom = submit(daemon, b"t", b"", queue="diamond", after=(left, right))
    log_in(browser, web, ADMIN, f"task/{bottom}")
    until(lambda: heading(browser) == f"Task {bottom}: waiting", what="the child's page")
    text, links = until(lambda: section(browser, "parents"), what="its parents")
    assert links == [left, right]
    assert text == f"parents (2 of 2 pending): {left} (pending), {right} (pending)"
    assert section(browser, "policy")[0] == "if a parent does not finish done: fail"
    # A parent's link leads to its page: it waits for the top, and the bottom waits for it.
    script(browser, f"document.querySelector('#task-answer a[data-task=\"{left}\"]').click();")
    until(lambda: heading(browser) == f"Task {left}: waiting", what="the parent's page")
    assert until(lambda: section(browser, "parents"), what="its parent")[1] == [top]
    assert section(browser, "children") == [f"waiting for it: {bottom}", [bottom]]
    browser.get(f"{web}/#task/{top}")
    until(lambda: heading(browser) == f"Task {top}: queued", what="the top's page")
    assert until(lambda: section(browser, "children"), what="its children")[1] == [left, right]
    assert console_errors(browser) == []


def test_a_dry_run_counts_30_then_the_cancel_cancels_them(
    daemon: DaemonProcess, web: str, browser: Any
) -> None:
    ids = [submit(daemon, b"t", b"", queue="held") for _ in range(30)]
    log_in(browser, web, ADMIN, "bulk")
    script(
        browser,
        "document.getElementById('bulk-action').value = 'cancel';"
        " document.getElementById('bulk-queue').value = 'held';"
        " document.querySelector('#bulk-form input[value=queued]').checked = true;"
        " document.querySelector('[data-action=bulk-dry-run]').click();",
    )
    summary = "const p = document.querySelector('#bulk-result p.summary');"
    counted = until(lambda: script(browser, summary + " return p && p.textContent;"), what="count")
    # It looks at every live task (the diamond's too): 30 match.
    assert counted.startswith("dry run: 30 task(s) match (of ")
    sample = script(
        browser,
        "return [...document.querySelectorAll('#bulk-result p.sample a.task-link')]"
        ".map((a) => Number(a.dataset.task));",
    )
    assert sample == ids[:10]
    assert depth(web, "held") == 30
    script(
        browser,
        "window.asked = []; window.confirm = (q) => { window.asked.push(q); return true; };"
        " document.getElementById('bulk-run').click();",
    )
    done = until(
        lambda: script(
            browser,
            summary + " return p && p.dataset.acted !== '0' && p.textContent;",
        ),
        what="the cancel's counts",
    )
    assert done == "cancel: 30 of 30 matching task(s) acted on, 0 skipped"
    assert script(browser, "return window.asked;") == [
        "cancel the tasks that match? The dry run counted 30."
    ]
    assert depth(web, "held") == 0
    assert call(web, f"/api/tasks/{ids[0]}")[1]["found"] != "live"
    assert console_errors(browser) == []
