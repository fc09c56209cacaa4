"""
A Flask app that hands work to Quicx with the blocking client.

    quicx worker examples.words:worker
    flask --app examples.flask_app run        # pip install flask
    curl -s localhost:5000/words --json '{"text": "to be or not to be"}'
    {"id":1,"result":{"most_common":[["to",2],["be",2],["or",1]],"words":6},"status":"done"}

The same API as examples/fastapi_app.py: POST /words submits a
`count_words` task and waits for its outcome for up to ?wait= seconds (10
by default); GET /words/ID reads it later, waiting up to ?wait= seconds (0
by default); 200 done, 202 pending, 422 failed, 409 cancelled, 404 no such
task, 503 the daemon is full or out of reach.

A QuicxClient may be shared by threads, but it holds its lock for the whole
of a call, a wait included: requests served by several threads would wait
in turn behind each other's waits.  So each request borrows a client of its
own from `Clients`, and gives it back for the next request to reuse its
connection: as many clients as requests served at once, no more.

QUICX_ADDRESS selects the daemon (default tcp:127.0.0.1:16381).
"""

import json
import os
import queue
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flask import Flask, request

from quicx import (
    DEFAULT_ADDRESS,
    ConnectionLost,
    OutcomeForgotten,
    OutcomeUnknown,
    QueueFull,
    QuicxClient,
    TaskCancelled,
    TaskFailed,
    TaskUnknown,
)


class Clients:
    """Blocking clients of one daemon, each used by one request at a time."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._idle: queue.SimpleQueue[QuicxClient] = queue.SimpleQueue()

    @contextmanager
    def borrow(self) -> Iterator[QuicxClient]:
        try:
            client = self._idle.get_nowait()
        except queue.Empty:
            client = QuicxClient(self.address)
        try:
            yield client
        finally:
            self._idle.put(client)


def create_app(address: str | None = None) -> Flask:
    app = Flask(__name__)
    clients = Clients(address or os.environ.get("QUICX_ADDRESS", DEFAULT_ADDRESS))

    @app.post("/words")
    def count_words() -> Any:
        body = request.get_json(silent=True)
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            return {"detail": 'expected a JSON body {"text": "..."}'}, 422
        with clients.borrow() as client:
            task_id = client.submit("count_words", json.dumps({"text": text}), keep_result=True)
            return answer(task_id, lambda: client.wait(task_id, timeout=seconds(10)))

    @app.get("/words/<int:task_id>")
    def word_count(task_id: int) -> Any:
        with clients.borrow() as client:
            return answer(task_id, lambda: client.result(task_id, timeout=seconds(0)))

    @app.errorhandler(QueueFull)
    @app.errorhandler(ConnectionLost)
    def unavailable(error: Exception) -> Any:
        return {"detail": str(error)}, 503, {"Retry-After": "1"}

    return app


def seconds(default: float) -> float:
    """The request's ?wait=, 0 to 60 seconds."""
    return min(max(request.args.get("wait", default, type=float), 0.0), 60.0)


def answer(task_id: int, outcome: Callable[[], Any]) -> Any:
    """The task's outcome, as C{outcome()} gives it, as an HTTP answer."""
    try:
        result = outcome()
    except (TimeoutError, OutcomeUnknown):  # not finished, or not heard of here: ask again
        return {"id": task_id, "status": "pending"}, 202, {"Location": f"/words/{task_id}"}
    except TaskFailed as e:  # its reason's first line (the rest: the worker's traceback)
        return {"id": task_id, "status": "failed", "reason": e.reason.partition("\n")[0]}, 422
    except TaskCancelled:
        return {"id": task_id, "status": "cancelled"}, 409
    except (TaskUnknown, OutcomeForgotten):
        return {"detail": f"no task {task_id}"}, 404
    return {"id": task_id, "status": "done", "result": result}
