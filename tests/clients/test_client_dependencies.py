"""
Dependencies end to end: a real daemon, the worker runner (C{quicx
worker}) and the blocking client's C{submit(after=..., on_parent_failure=...,
after_group=...)}: a diamond whose last task reads its parents' results in
C{context.parents}, a chord (a group's callback) with the group's counts,
a failed parent's child failing or continuing, and a dynamic fan-out (a
running handler submits children and the task that waits for them).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.clients.twisted_client import connect
from quicx.clients.worker import Worker
from quicx.protocol.errors import TaskFailed
from tests.cli import test_cli
from tests.cli.test_cli import ROOT, env_for, quicx
from tests.conftest import DaemonProcess

background = test_cli.background  # the fixture: quicx commands that run until stopped

HANDLERS = """
from quicx import open_client

def square(payload):
    return int(payload) ** 2

def fail(payload):
    raise ValueError("no " + payload.decode())

def echo(payload, context):
    return {"me": payload.decode(), "parents": [p.result for p in context.parents]}

def states(payload, context):
    return [[p.task_id, p.state, p.reason] for p in context.parents]

def total(payload, context):
    return sum(p.result for p in context.parents)

def chord(payload, context):
    counts = context.group_counts
    return [counts.members, counts.done, counts.failed, sorted(p.result for p in context.parents)]

def fan_out(payload, context):
    with open_client() as client:
        children = [client.submit("square", str(n), keep_result=True) for n in range(int(payload))]
        return client.submit("total", b"", after=children, keep_result=True)

handlers = {
    "square": square, "fail": fail, "echo": echo, "states": states,
    "total": total, "chord": chord, "fan_out": fan_out,
}
"""


@pytest.fixture
def handlers(tmp_path: Path) -> Callable[[DaemonProcess], dict[str, str]]:
    (tmp_path / "handlers.py").write_text(HANDLERS)

    def environment(daemon: DaemonProcess) -> dict[str, str]:
        return {**env_for(daemon), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}

    return environment


def test_a_diamond_and_a_chord_through_the_worker_runner(daemon, background, handlers) -> None:
    env = handlers(daemon)
    background("worker", "handlers:handlers", "--credits", "4", env=env)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        a = client.submit("echo", "a", keep_result=True)
        b = client.submit("echo", "b", after=[a], keep_result=True)
        c = client.submit("echo", "c", after=[a], keep_result=True)
        d = client.submit("echo", "d", after=[b, c])
        last = client.wait(d, timeout=30)
        assert last["me"] == "d"
        assert sorted(p["me"] for p in last["parents"]) == ["b", "c"]
        assert [p["me"] for p in last["parents"][0]["parents"]] == ["a"]
        group = client.open_group()
        # Submitted first, it hears every member's result (the counts, whatever the order).
        callback = client.submit("chord", "", after_group=group)
        for n in range(1, 6):
            client.submit("square", str(n), group=group)
        client.close_group(group)
        assert client.wait(callback, timeout=30) == [5, 5, 0, [1, 4, 9, 16, 25]]


def test_a_failed_parent_fails_its_child_or_is_listed(daemon, background, handlers) -> None:
    env = handlers(daemon)
    background("worker", "handlers:handlers", env=env)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        parent = client.submit("fail", "way")
        failing = client.submit("states", "", after=[parent])
        listed = client.submit("states", "", after=[parent], on_parent_failure="continue")
        ignoring = client.submit("states", "", after=[parent], on_parent_failure="ignore")
        with pytest.raises(TaskFailed) as caught:
            client.wait(failing, timeout=30)
        assert caught.value.reason.startswith(f"parent {parent} failed: ValueError: no way")
        (entry,) = client.wait(listed, timeout=30)
        assert entry[:2] == [parent, "failed"] and entry[2].startswith("ValueError: no way")
        assert client.wait(ignoring, timeout=30) == []
        with pytest.raises(ValueError, match="'fail', 'ignore' or 'continue'"):
            client.submit("states", "", after=[parent], on_parent_failure="retry")


def test_a_handler_fans_out_and_a_later_task_waits_for_its_children(
    daemon, background, handlers
) -> None:
    env = handlers(daemon)
    background("worker", "handlers:handlers", "--credits", "8", env=env)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        aggregate = client.wait(client.submit("fan_out", "20", keep_result=True), timeout=30)
        assert client.result(aggregate, timeout=30) == sum(n * n for n in range(20))
        # submit_many takes the options too.
        (first,) = client.submit_many([("square", "3", Options(keep_result=True))])
        assert isinstance(first, int)
        (second,) = client.submit_many([("total", "", Options(after=(first,)))])
        assert isinstance(second, int)
        assert client.wait(second, timeout=30) == 9


@pytest_twisted.ensureDeferred
async def test_the_twisted_client_and_worker(daemon: DaemonProcess) -> None:
    worker = Worker(concurrency=2)
    worker.register("square", lambda payload: int(payload) ** 2)
    worker.register(
        "states", lambda payload, context: [[p.state, p.reason] for p in context.parents]
    )
    worker.start(reactor, f"tcp:127.0.0.1:{daemon.port}")
    client = await connect(reactor, f"tcp:127.0.0.1:{daemon.port}")
    try:
        parent = await client.submit("square", "7", keep_result=True)
        cancelled = await client.submit("square", "8", queue="parked")
        child = await client.submit(
            "states", "", after=[parent, cancelled], on_parent_failure="continue"
        )
        # The parents finish in the order the child lists them: the one that runs first.
        assert await client.outcome(parent) == 49
        await client.cancel(cancelled)
        done, cancelled_by = await client.outcome(child)
        assert done == ["done", ""] and cancelled_by[0] == "cancelled"
        assert cancelled_by[1].startswith("cancelled by 127.0.0.1:")
    finally:
        client.close()
        await worker.stop()


def test_quicx_task_says_what_a_waiting_task_waits_for(daemon: DaemonProcess) -> None:
    env = env_for(daemon)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        first = client.submit("t", "x", queue="parked")
        second = client.submit("t", "x", queue="parked")
        child = client.submit(
            "t", "x", after=[first, second], on_parent_failure="ignore", queue="work"
        )
        client.cancel(first)
        shown = quicx("task", str(child), env=env)
    assert shown.returncode == 0, shown.stderr
    head, why = shown.stdout.splitlines()
    assert head.startswith(f"task {child} (t): waiting in queue work, priority ")
    assert why == f"  waiting: it waits for parent {second} (1 of 2 parents finished)"
