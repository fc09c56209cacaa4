"""
examples/fastapi_app.py and examples/flask_app.py, each driven in-process
(Starlette's TestClient, Flask's test client) against a real daemon on
loopback and a real C{quicx worker examples.words:worker}.  Skipped where
FastAPI (with httpx) or Flask is not installed: they are in the test extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from quicx import QuicxClient
from tools.launcher import DaemonProcess, tools_environment

TEXT = "The cat and the hat and the bat"
COUNTED = {"words": 8, "most_common": [["the", 3], ["and", 2], ["cat", 1]]}


class Web:
    """One example app, in-process: its requests, and each answer's status, JSON and headers."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def post(self, path: str, body: object) -> tuple[int, Any, Any]:
        return self._answer(self._client.post(path, json=body))

    def get(self, path: str) -> tuple[int, Any, Any]:
        return self._answer(self._client.get(path))

    @staticmethod
    def _answer(response: Any) -> tuple[int, Any, Any]:
        body = response.json() if callable(response.json) else response.json  # httpx's, Flask's
        return response.status_code, body, response.headers


@contextmanager
def fastapi_app(address: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Web]:
    test_client = importlib.import_module("fastapi.testclient").TestClient
    monkeypatch.setenv("QUICX_ADDRESS", address)  # read by the app's lifespan
    with test_client(importlib.import_module("examples.fastapi_app").app) as client:
        yield Web(client)


@contextmanager
def flask_app(address: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Web]:
    yield Web(importlib.import_module("examples.flask_app").create_app(address).test_client())


Serve = Callable[[str, pytest.MonkeyPatch], AbstractContextManager[Web]]


@pytest.fixture(params=["fastapi", "flask"])
def serve(request: pytest.FixtureRequest) -> Serve:
    """Each app, where its framework is installed (checked before any daemon starts)."""
    if request.param == "fastapi":
        pytest.importorskip("fastapi")
        if importlib.util.find_spec("httpx2") is None:  # Starlette's TestClient's, else httpx
            pytest.importorskip("httpx")
        return fastapi_app
    pytest.importorskip("flask")
    return flask_app


@pytest.fixture
def worker(daemon: DaemonProcess, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real C{quicx worker examples.words:worker} serving C{daemon}."""
    environment = tools_environment()
    environment["QUICX_ADDRESS"] = daemon.client_address
    with (tmp_path / "worker.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "quicx.cli", "worker", "examples.words:worker"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    yield process
    process.terminate()
    process.wait(30)


@pytest.fixture
def web(
    serve: Serve,
    daemon: DaemonProcess,
    worker: subprocess.Popen[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Web]:
    with serve(daemon.client_address, monkeypatch) as web:
        yield web


@pytest.fixture
def admin(daemon: DaemonProcess) -> Iterator[QuicxClient]:
    """A client of the daemon's control socket (pause and resume need the admin role)."""
    with QuicxClient(f"unix:{daemon.control_path}") as client:
        yield client


def until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g} s"
        time.sleep(0.02)


def test_the_result_comes_back(web: Web) -> None:
    status, body, _ = web.post("/words?wait=60", {"text": TEXT})
    assert (status, body) == (200, {"id": body["id"], "status": "done", "result": COUNTED})
    # Kept by the daemon: read again, from any connection.
    assert web.get(f"/words/{body['id']}")[:2] == (200, body)


def test_a_failing_task_is_unprocessable(web: Web) -> None:
    status, body, _ = web.post("/words?wait=60", {"text": "  "})
    failed = {"id": body["id"], "status": "failed", "reason": "no words to count"}
    assert (status, body) == (422, failed)
    assert web.get(f"/words/{body['id']}")[:2] == (422, failed)


def test_a_timeout_answers_pending_with_where_to_look(web: Web, admin: QuicxClient) -> None:
    admin.pause("default")
    status, body, headers = web.post("/words?wait=0.2", {"text": TEXT})
    assert (status, body) == (202, {"id": body["id"], "status": "pending"})
    location = headers["Location"]
    assert location == f"/words/{body['id']}"
    assert web.get(location)[:2] == (202, body)
    admin.resume("default")
    assert web.get(f"{location}?wait=60")[:2] == (
        200,
        {**body, "status": "done", "result": COUNTED},
    )


def test_requests_do_not_wait_behind_each_other(web: Web, admin: QuicxClient) -> None:
    """While one request waits for its task, another is answered (the apps' clients)."""
    _, done, _ = web.post("/words?wait=60", {"text": TEXT})
    admin.pause("default")
    waiting: list[tuple[int, Any, Any]] = []
    post = threading.Thread(
        target=lambda: waiting.append(web.post("/words?wait=60", {"text": TEXT}))
    )
    post.start()
    try:
        until(lambda: admin.peek("default", 1) != [])  # its task is queued: it then waits
        assert web.get(f"/words/{done['id']}")[:2] == (200, done)
        assert post.is_alive()  # still waiting: the answer above did not wait for it
    finally:
        admin.resume("default")
        post.join(90)
    assert waiting[0][:2] == (200, {**waiting[0][1], "status": "done", "result": COUNTED})


def test_unknown_tasks_and_bad_bodies(web: Web) -> None:
    assert web.get("/words/987654")[:2] == (404, {"detail": "no task 987654"})
    assert web.post("/words", {"txt": TEXT})[0] == 422


def test_a_daemon_out_of_reach_is_unavailable(web: Web, daemon: DaemonProcess) -> None:
    daemon.kill()
    status, _, headers = web.post("/words", {"text": TEXT})
    assert (status, headers["Retry-After"]) == (503, "1")
