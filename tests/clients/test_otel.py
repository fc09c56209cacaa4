"""
OpenTelemetry across a real daemon (quicx.clients.tracing): one trace from
the producer's span, through its C{submit} span, to the worker's C{run
<type>} span and the handler's own spans, for the blocking, Twisted and
asyncio producers and the Twisted and asyncio workers; and across a
restart with a journal (tests/clients/test_otel_absent.py: where it is not
installed, nothing breaks).  The SDK's in-memory exporter collects the spans (the
tests skip where C{opentelemetry-sdk} is not installed: C{pip install
'quicx[test,otel]' opentelemetry-sdk}).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from quicx.aio import AsyncClient, AsyncWorker
from quicx.clients.blocking import QuicxClient
from quicx.clients.twisted_client import connect
from quicx.clients.worker import TaskContext, Worker
from quicx.protocol.errors import TaskFailed
from tests.conftest import DaemonProcess, config_option

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _exporter() -> Any:
    """The in-memory exporter of the process's one tracer provider (set once)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):
        provider = sdk_trace.TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = in_memory.InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


EXPORTER = _exporter()
tracer = trace.get_tracer("tests.otel")


@pytest.fixture(autouse=True)
def spans() -> Any:
    EXPORTER.clear()
    return EXPORTER


def finished(name: str) -> list[Any]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == name]


def assert_one_trace(request: Any, task_id: int, queue: str, task_type: str) -> Any:
    """
    The chain: the producer's C{request} span, its C{submit} child, the
    worker's C{run <type>} (the submit's child), the handler's C{inside}
    (the run's child), all of one trace; the run span, returned.
    """
    (submit,) = [s for s in finished("submit") if s.attributes["quicx.task.id"] == task_id]
    (run,) = finished(f"run {task_type}")
    (inside,) = finished("inside")
    trace_id = request.context.trace_id
    assert {s.context.trace_id for s in (submit, run, inside)} == {trace_id}
    assert submit.parent.span_id == request.context.span_id
    assert run.parent.span_id == submit.context.span_id and run.parent.is_remote
    assert inside.parent.span_id == run.context.span_id
    assert submit.kind == trace.SpanKind.PRODUCER and run.kind == trace.SpanKind.CONSUMER
    assert submit.attributes["quicx.task.id"] == task_id
    assert submit.attributes["quicx.task.type"] == task_type
    assert run.attributes["quicx.task.id"] == task_id
    assert run.attributes["quicx.queue"] == queue
    assert run.attributes["quicx.task.type"] == task_type
    assert run.attributes["quicx.task.attempt"] == 1
    assert run.attributes["quicx.task.wait_ms"] >= 0
    assert run.attributes["quicx.task.outcome"] == "done"
    assert [e.name for e in run.events] == ["enqueued", "done"]
    return run


def traced_handler(payload: bytes, context: TaskContext) -> bytes:
    """A handler that makes a span of its own, and returns the traceparent it was given."""
    with tracer.start_as_current_span("inside"):
        pass
    assert context.traceparent is not None
    return context.traceparent.encode()


# -- producers and workers ------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_blocking_producer_to_twisted_worker(daemon: DaemonProcess) -> None:
    worker = Worker()
    worker.register("traced", traced_handler)  # in the thread pool, at first
    worker.start(reactor, daemon.client_address)

    def produce() -> tuple[int, Any, Any]:
        with (
            tracer.start_as_current_span("request") as request,
            QuicxClient(daemon.client_address) as client,
        ):
            task_id = client.submit("traced", b"x", queue="default", keep_result=True)
            return task_id, request, client.wait(task_id, 30)

    try:
        task_id, request, traceparent = await deferToThread(produce)
    finally:
        await worker.stop()
    run = assert_one_trace(request, task_id, "default", "traced")
    assert traceparent == traced_parent(task_id).encode()
    assert run.status.is_ok


@pytest_twisted.ensureDeferred
async def test_twisted_producer_to_twisted_worker_on_the_reactor(daemon: DaemonProcess) -> None:
    worker = Worker()
    worker.register("traced", traced_handler, thread=False)
    worker.start(reactor, daemon.client_address)
    producer = await connect(reactor, daemon.client_address)
    try:
        with tracer.start_as_current_span("request") as request:
            task_id = await producer.submit("traced", b"x")
        await producer.outcome(task_id)
    finally:
        producer.close()
        await worker.stop()
    assert_one_trace(request, task_id, "default", "traced")


def test_asyncio_producer_to_asyncio_worker_and_the_outcomes(daemon: DaemonProcess) -> None:
    async def flaky(payload: bytes) -> None:
        raise RuntimeError("flaky " + payload.decode())

    async def handler(payload: bytes, context: TaskContext) -> bytes:
        await asyncio.sleep(0)  # the span stays current across an await
        return traced_handler(payload, context)

    async def main() -> tuple[int, Any]:
        worker = AsyncWorker({"traced": handler, "flaky": flaky})
        serving = worker.start(daemon.client_address)
        async with AsyncClient(daemon.client_address) as client:
            with tracer.start_as_current_span("request") as request:
                task_id = await client.submit("traced", b"x", queue="default")
            await client.wait(task_id, 30)
            with tracer.start_as_current_span("failing"):
                failing = await client.submit("flaky", b"twice", retries=1, backoff="fixed:0s")
            with pytest.raises(TaskFailed, match="flaky twice"):
                await client.wait(failing, 30)
        await worker.stop()
        await serving
        return task_id, request

    task_id, request = asyncio.run(main())
    assert_one_trace(request, task_id, "default", "traced")
    first, second = sorted(finished("run flaky"), key=lambda s: s.attributes["quicx.task.attempt"])
    assert first.context.trace_id == second.context.trace_id
    assert [s.attributes["quicx.task.outcome"] for s in (first, second)] == ["retried", "failed"]
    assert [s.attributes["quicx.task.attempt"] for s in (first, second)] == [1, 2]
    for span in (first, second):
        assert span.status.status_code == trace.StatusCode.ERROR
        (exception,) = [e for e in span.events if e.name == "exception"]
        assert exception.attributes["exception.message"] == "flaky twice"


def test_no_span_is_made_without_a_current_span(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address) as client:
        client.submit("untraced", b"x")
        assert client.peek("default", 1)[0]["type"] == "untraced"
    assert not EXPORTER.get_finished_spans()


def test_a_trace_survives_a_restart_with_a_journal(start_daemon: Any, tmp_path: Path) -> None:
    journal = f"[journal]\npath = {tmp_path / 'journal'}\nfsync = always\n"
    first = start_daemon(config_option(tmp_path, journal))
    with (
        tracer.start_as_current_span("request") as request,
        QuicxClient(first.client_address) as client,
    ):
        task_id = client.submit("traced", b"x")
    first.kill()
    second = start_daemon(config_option(tmp_path, journal))

    async def work() -> None:
        worker = AsyncWorker({"traced": traced_handler})
        serving = worker.start(second.client_address)
        async with asyncio.timeout(30):
            while not finished("run traced"):
                await asyncio.sleep(0.02)
        await worker.stop()
        await serving

    asyncio.run(work())
    assert_one_trace(request, task_id, "default", "traced")


def traced_parent(task_id: int) -> str:
    """The traceparent the submit span of C{task_id} sent."""
    (submit,) = [s for s in finished("submit") if s.attributes["quicx.task.id"] == task_id]
    context = submit.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
