"""
An async FastAPI app that hands work to Quicx with the asyncio client.

    quicx worker examples.words:worker
    uvicorn examples.fastapi_app:app          # pip install fastapi uvicorn
    curl -s localhost:8000/words --json '{"text": "to be or not to be"}'
    {"id":1,"status":"done","result":{"words":6,"most_common":[["to",2],["be",2],["or",1]]}}

One client for the app's lifetime, opened by the lifespan: every request
uses it at once, their calls pipelined on its one connection.  POST /words
submits a `count_words` task and awaits its outcome for up to ?wait=
seconds (10 by default); GET /words/ID reads it later (the daemon keeps it
for its [results] ttl), waiting up to ?wait= seconds (0 by default):

    200 done, with the result            202 pending (Location: where to GET it)
    422 failed, with the worker's reason 404 no such task, or its outcome expired
    409 cancelled                        503 the daemon is full or out of reach

QUICX_ADDRESS selects the daemon (default tcp:127.0.0.1:16381).
"""

import json
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from quicx import (
    DEFAULT_ADDRESS,
    ConnectionLost,
    OutcomeForgotten,
    OutcomeUnknown,
    QueueFull,
    TaskCancelled,
    TaskFailed,
    TaskUnknown,
)
from quicx.aio import AsyncClient


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, AsyncClient]]:
    async with AsyncClient(os.environ.get("QUICX_ADDRESS", DEFAULT_ADDRESS)) as client:
        yield {"quicx": client}  # request.state.quicx


app = FastAPI(lifespan=lifespan)


def quicx(request: Request) -> AsyncClient:
    return request.state.quicx


Quicx = Annotated[AsyncClient, Depends(quicx)]
Wait = Annotated[float, Query(ge=0, le=60, description="seconds to wait for the outcome")]


class Text(BaseModel):
    text: str


@app.post("/words")
async def count_words(body: Text, client: Quicx, wait: Wait = 10) -> JSONResponse:
    task_id = await client.submit("count_words", json.dumps({"text": body.text}), keep_result=True)
    return await answer(task_id, client.wait(task_id, timeout=wait))


@app.get("/words/{task_id}")
async def word_count(task_id: int, client: Quicx, wait: Wait = 0) -> JSONResponse:
    return await answer(task_id, client.result(task_id, timeout=wait))


async def answer(task_id: int, outcome: Awaitable[Any]) -> JSONResponse:
    """The task's outcome, once C{outcome} has it, as an HTTP answer."""
    try:
        result = await outcome
    except (TimeoutError, OutcomeUnknown):  # not finished, or not heard of here: ask again
        pending = {"id": task_id, "status": "pending"}
        return JSONResponse(pending, 202, {"Location": f"/words/{task_id}"})
    except TaskFailed as e:  # its reason's first line (the rest: the worker's traceback)
        return JSONResponse(
            {"id": task_id, "status": "failed", "reason": e.reason.partition("\n")[0]}, 422
        )
    except TaskCancelled:
        return JSONResponse({"id": task_id, "status": "cancelled"}, 409)
    except (TaskUnknown, OutcomeForgotten):
        return JSONResponse({"detail": f"no task {task_id}"}, 404)
    return JSONResponse({"id": task_id, "status": "done", "result": result})


@app.exception_handler(QueueFull)
@app.exception_handler(ConnectionLost)
async def unavailable(request: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(error)}, 503, {"Retry-After": "1"})
