"""
Django's Tasks framework on Quicx (quicx.contrib.django): the test project
(tests/django_project, SQLite in a temporary file) enqueues to a real daemon
on loopback, and a real C{quicx worker --django} process runs its tasks.

Runs with Django 6 (C{django.tasks}) or Django 5.2 and the C{django-tasks}
backport, whichever is installed; skipped without either.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tools.launcher import DaemonProcess, tools_environment

django = pytest.importorskip("django", reason="pip install 'quicx[django]'")
if importlib.util.find_spec("django.tasks") is None:  # Django 5.2: the backport
    pytest.importorskip("django_tasks", reason="pip install 'quicx[django]'")

SETTINGS = "tests.django_project.settings"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """
    A daemon, the project set up against it (its SQLite file), and a worker
    of it: the environment they share.
    """
    directory = tmp_path_factory.mktemp("django")
    daemon = DaemonProcess(directory).start()
    environment = {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "QUICX_DJANGO_DB": str(directory / "db.sqlite3"),
        "QUICX_ADDRESS": daemon.client_address,
        "QUICX_CONTROL": str(daemon.control_path),
    }
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    django.setup()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE notes (key TEXT PRIMARY KEY, value TEXT)")
    log = (directory / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "quicx.cli", "worker", "--django"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=tools_environment({**os.environ, **environment}),
    )
    try:
        yield environment
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
        daemon.kill()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def finished(result: Any, deadline: float = 30.0) -> Any:
    """C{result} refreshed until its task has finished; AssertionError past C{deadline}."""
    until = time.monotonic() + deadline
    while not result.is_finished:
        assert time.monotonic() < until, f"{result.id} still {result.status} after {deadline} s"
        time.sleep(0.02)
        result.refresh()
    return result


def admin(project: dict[str, str]) -> Any:
    from quicx import QuicxClient

    return QuicxClient(f"unix:{project['QUICX_CONTROL']}", timeout=10)


def test_a_task_runs_on_the_worker_and_its_result_comes_back(project: dict[str, str]) -> None:
    from tests.django_project import tasks

    result = tasks.add.enqueue(2, 3)
    assert result.status == "READY"
    assert result.id.startswith("tests.django_project.tasks.add:")
    assert result.args == [2, 3] and result.enqueued_at is not None

    done = finished(tasks.add.get_result(result.id))
    assert done.status == "SUCCESSFUL"
    assert done.return_value == 5
    assert done.attempts == 1 and done.errors == []
    assert done.started_at is not None and done.finished_at is not None
    assert done.enqueued_at <= done.started_at <= done.finished_at
    # JSON in, JSON out: a tuple is a list, nested values come back whole.
    echoed = finished(tasks.echo.enqueue({"a": (1, 2), "b": None}))
    assert echoed.return_value == {"a": [1, 2], "b": None}


@pytest.mark.parametrize(
    ("name", "argument", "path", "message"),
    [
        ("fail", "card declined", "tests.django_project.tasks.Declined", "card declined"),
        ("fail_builtin", "missing", "builtins.KeyError", "'missing'"),
    ],
)
def test_a_task_that_raises_is_failed_with_its_exception_and_traceback(
    project: dict[str, str], name: str, argument: str, path: str, message: str
) -> None:
    from tests.django_project import tasks

    task = getattr(tasks, name)
    result = finished(task.enqueue(argument))
    assert result.status == "FAILED"
    [error] = result.errors
    assert error.exception_class_path == path
    assert error.exception_class is getattr(tasks, "Declined", None) or path.startswith("builtins")
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert f"in {name}\n" in error.traceback  # the task's own frame
    assert error.traceback.endswith(f"{path.removeprefix('builtins.')}: {message}\n")
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


def test_a_task_retried_by_quicx_succeeds_on_its_second_attempt(project: dict[str, str]) -> None:
    from tests.django_project import tasks

    result = finished(tasks.flaky.enqueue())
    assert result.status == "SUCCESSFUL"
    assert result.return_value == 2  # what context.attempt said
    assert result.attempts == 2


def test_priorities_and_queues_are_quicx_s(project: dict[str, str]) -> None:
    """
    Queued behind a paused queue, the tasks are READY with their priority
    (Django's -100..100 as Quicx's 0..200), and run highest first once it resumes.
    """
    from tests.django_project import tasks

    with admin(project) as control:
        control.pause("default")
        try:
            low = tasks.echo.enqueue("low")  # the decorator's priority, -50
            high = tasks.echo.using(priority=100).enqueue("high")
            middle = tasks.echo.using(priority=0).enqueue("middle")
            waiting = tasks.echo.get_result(high.id)
            assert waiting.status == "READY" and waiting.task.priority == 100
            quicx_ids = [int(r.id.rpartition(":")[2]) for r in (low, high, middle)]
            assert [control.task(i)["priority"] for i in quicx_ids] == [50, 200, 100]
            elsewhere = tasks.echo.using(queue_name="later").enqueue("later")
            assert control.task(int(elsewhere.id.rpartition(":")[2]))["queue"] == "later"
        finally:
            control.resume("default")
    started = [finished(r).started_at for r in (high, middle, low)]
    assert started == sorted(started)
    assert finished(elsewhere).return_value == "later"


def test_run_after_delays_the_task_in_the_daemon(project: dict[str, str]) -> None:
    from django.utils import timezone

    from tests.django_project import tasks

    run_after = timezone.now() + timedelta(seconds=1.5)
    result = tasks.add.using(run_after=run_after).enqueue(1, 1)
    with admin(project) as control:
        assert control.task(int(result.id.rpartition(":")[2]))["state"] == "delayed"
    assert tasks.add.get_result(result.id).status == "READY"
    done = finished(result)
    assert done.return_value == 2
    assert done.started_at >= run_after - timedelta(milliseconds=50)  # clocks to the ms


def test_async_enqueue_get_result_and_an_async_task(project: dict[str, str]) -> None:
    from tests.django_project import tasks

    async def scenario() -> Any:
        result = await tasks.double.aenqueue(21)
        until = time.monotonic() + 30
        while not result.is_finished:
            assert time.monotonic() < until
            await asyncio.sleep(0.02)
            result = await tasks.double.aget_result(result.id)
        return result

    result = asyncio.run(scenario())
    assert result.status == "SUCCESSFUL" and result.return_value == 42


def test_enqueue_on_commit_enqueues_once_the_transaction_commits(
    project: dict[str, str],
) -> None:
    """
    The task reads the row its transaction wrote: it could not, had it run
    before the commit (SQLite shows another connection committed rows only).
    """
    from functools import partial

    from django.db import connection, transaction

    from quicx.contrib.django import enqueue_on_commit
    from quicx.contrib.django.compat import task_enqueued
    from tests.django_project import tasks

    enqueued: list[Any] = []

    def listen(sender: object, task_result: Any, **kwargs: object) -> None:
        enqueued.append(task_result)

    task_enqueued.connect(listen)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO notes VALUES ('a', 'committed')")
            enqueue_on_commit(tasks.read_row, "a")
            assert enqueued == []  # nothing sent while the transaction is open
        [result] = enqueued
        assert finished(result).return_value == "committed"

        # Django's own spelling of it does the same.
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO notes VALUES ('b', 'also')")
            transaction.on_commit(partial(tasks.read_row.enqueue, "b"))
        assert finished(enqueued[1]).return_value == "also"

        # A rollback sends nothing.
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_on_commit(tasks.read_row, "c")
            raise RuntimeError("rolled back")
        assert len(enqueued) == 2
    finally:
        task_enqueued.disconnect(listen)


def test_bad_input_gets_the_framework_s_errors(project: dict[str, str]) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from quicx.contrib.django import QuicxBackend
    from quicx.contrib.django.compat import InvalidTask, TaskResultDoesNotExist, task_enqueued
    from tests.django_project import tasks

    enqueued: list[Any] = []

    def listen(sender: object, task_result: Any, **kwargs: object) -> None:
        enqueued.append(task_result)

    task_enqueued.connect(listen)
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.echo.enqueue(object())
    with pytest.raises(InvalidTask, match="priority"):
        tasks.echo.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        tasks.echo.using(queue_name="nowhere")
    for bad in ("nonsense", "tests.django_project.tasks.add:99999999", "os.path:1"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_backend().get_result(bad)
    with pytest.raises(ImproperlyConfigured, match="unknown keys RETRY"):
        QuicxBackend("x", {"OPTIONS": {"RETRY": 1}})
    task_enqueued.disconnect(listen)
    assert enqueued == []  # nothing was sent


def run_worker(environment: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quicx.cli", "worker", *args],
        capture_output=True,
        text=True,
        env=tools_environment(environment),
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "settings", "error"),
    [
        (["--django"], None, "--django needs DJANGO_SETTINGS_MODULE"),
        (["--django", "nope"], SETTINGS, "TASKS['nope']"),
        (["--django", "x:y"], SETTINGS, "TASKS['x:y']"),
        (["--django", "--", "a:b"], SETTINGS, "give no MODULE:OBJECT"),
        ([], None, "worker needs MODULE:OBJECT, or --django"),
    ],
)
def test_quicx_worker_django_errors_are_one_line(
    tmp_path: Path, args: list[str], settings: str | None, error: str
) -> None:
    environment: dict[str, str] = {
        k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"
    }
    if settings:
        environment["DJANGO_SETTINGS_MODULE"] = settings
    environment["QUICX_DJANGO_DB"] = str(tmp_path / "db.sqlite3")
    done = run_worker(environment, *args)
    assert done.returncode == 2, done.stderr
    assert error in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_the_example_project_runs(tmp_path: Path) -> None:
    """examples/django_app: its worker and its enqueue script, as its docstring says."""
    daemon = DaemonProcess(tmp_path).start()
    environment = tools_environment(
        {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "examples.django_app.settings",
            "QUICX_ADDRESS": daemon.client_address,
        }
    )
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "quicx.cli", "worker", "--django"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "examples.django_app.enqueue", "Ada"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
    finally:
        worker.terminate()
        worker.wait(30)
        daemon.kill()
    assert done.returncode == 0, done.stderr
    enqueued, message = done.stdout.splitlines()
    assert enqueued.startswith("enqueued examples.django_app.tasks.welcome:")
    assert message == "Welcome, Ada!"
