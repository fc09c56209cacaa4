"""
The typed status document (quicx.documents.status): a daemon's document read
back is written again byte for byte; a reader of another version's document
ignores the keys it does not know, defaults the ones missing, and names the
key of a value of the wrong kind.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from quicx.daemon import config as configuration
from quicx.daemon.service import build_daemon
from quicx.documents.status import STATUS_FORMAT, StatusDocument, Tasks, read_status
from quicx.documents.typed import DocumentError
from tests.fakes import producer_of, submit_to, worker_of


def busy_document() -> dict[str, Any]:
    """A daemon's document: tasks queued in two queues, one failed, a named client."""
    reactor = MemoryReactorClock()
    daemon = build_daemon(configuration.Config(), reactor)
    queue = daemon.queue
    producer = producer_of(queue)
    producer.session.client = "test-client 1.0"
    for index in range(4):
        submit_to(
            queue,
            producer.session,
            b"t%d" % (index % 2),
            b"x" * index,
            queue="q" if index % 2 else None,
        )
    worker = worker_of(queue)
    reactor.advance(0.25)
    (task_id,) = worker.session.tasks
    queue.failed(worker.session, task_id, "no", permanent=True)
    document: dict[str, Any] = daemon.status()
    return document


def test_a_daemons_document_read_back_is_written_again_byte_for_byte() -> None:
    document = busy_document()
    typed = read_status(document)
    assert json.dumps(typed.as_json()) == json.dumps(document)
    assert typed.tasks.submitted == 4 and typed.tasks.failed == 1
    assert [c.client for c in typed.clients] == ["test-client 1.0"]
    assert [(q.name, q.depth + q.running) for q in typed.queues] == [("default", 1), ("q", 2)]
    assert {t.type for t in typed.telemetry.tallies} == {"t0", "t1"}
    assert read_status(typed) is typed


def test_unknown_keys_are_ignored_and_missing_ones_defaulted() -> None:
    newer = busy_document()
    known = json.dumps(newer)
    newer["from_the_future"] = {"anything": [1, 2]}
    newer["tasks"]["a_new_count"] = 7
    assert json.dumps(read_status(newer).as_json()) == known
    older = read_status({"format": STATUS_FORMAT, "protocol": 1, "uptime": 3, "tasks": {}})
    assert older.tasks == Tasks() and older.shared is None and older.journal is None
    assert older.versions == (1,) and older.queues == () and older.uptime == 3


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ({}, "uptime is missing"),
        ([], "the document is not an object"),
        ({"uptime": "soon"}, "uptime is not a number"),
        ({"uptime": 1, "tasks": {"queued": True}}, "tasks.queued is not an integer"),
        ({"uptime": 1, "queues": [{"depth": 1}]}, "queues[0].name is missing"),
        ({"uptime": 1, "memory": [1, 2]}, "memory is not an object"),
    ],
)
def test_a_value_of_the_wrong_kind_is_named(document: Any, error: str) -> None:
    with pytest.raises(DocumentError, match=error.replace("[", r"\[").replace("]", r"\]")):
        read_status(document)


def test_the_document_is_written_in_the_order_of_its_keys() -> None:
    keys = list(StatusDocument(uptime=1.0).as_json())
    assert keys[:10] == [
        "format",
        "version",
        "protocol",
        "protocols",
        "pid",
        "started_at",
        "uptime",
        "config",
        "listening",
        "control",
    ]
    assert list(busy_document()) == keys


def test_waiting_expired_debounced_and_checkpoints_are_in_the_document_text_and_metrics() -> None:
    """
    A daemon with one task waiting for a parent, one expired, one SUBMIT
    debounced and one checkpoint kept says so in its status document, in
    C{quicx status}'s text and in its metrics.
    """
    from quicx.cli.status import render_status
    from quicx.daemon.observe.metrics import QuicxCollector
    from quicx.protocol import taskflow
    from quicx.protocol.start_options import Debounce, DebounceMode, Expires
    from tests.fakes import v2_producer_of, v2_worker_of

    reactor = MemoryReactorClock()
    daemon = build_daemon(configuration.Config(), reactor)
    queue = daemon.queue
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"parent", b"p", queue="later")
    (parent,) = [m.task_id for m in producer.take() if isinstance(m, taskflow.Ok)]
    submit_to(queue, producer.session, b"child", b"c", queue="later", after=(parent,))
    submit_to(queue, producer.session, b"late", b"l", queue="later", expires=Expires(1000))
    for payload in (b"one", b"two"):
        replace = Debounce(DebounceMode.REPLACE, 60_000)
        submit_to(queue, producer.session, b"d", payload, queue="later", key=b"k", debounce=replace)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"long", b"x")
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    state = taskflow.Result.of({"cursor": 7})
    queue.checkpoints.save(worker.session, task.task_id, task.token, state)
    reactor.advance(2)

    typed = read_status(daemon.status())
    assert (typed.tasks.waiting, typed.tasks.expired, typed.tasks.debounced) == (1, 1, 1)
    assert (typed.checkpoints.kept, typed.checkpoints.bytes) == (1, len(state.data))
    assert typed.checkpoints.max_memory == queue.checkpoints.settings.max_memory
    text = render_status(typed)
    for line in ("expired", "debounced", "waiting", "checkpoints"):
        (found,) = [row for row in text.splitlines() if row.split()[:1] == [line]]
        assert found.split()[1] == "1", found
    scraped = {
        family.name: family.samples[0].value
        for family in QuicxCollector(queue, daemon.shared, None).collect()
        if family.samples and not family.samples[0].labels
    }
    assert scraped["quicx_tasks_waiting"] == 1
    assert scraped["quicx_checkpoints"] == 1
    assert scraped["quicx_checkpoints_bytes"] == len(state.data)
