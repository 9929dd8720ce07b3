"""Tracing (processors/tracing.py): the submit, accept and run spans, the trace context
carried in the job from the submitter to the worker, errors on the run span, and nothing
changed when tracing is off.

The spans go to the SDK's in-memory exporter through a tracer provider handed to
``tracing.configure`` (the global provider can be set only once per process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import jobs
import processors
from processors import Processor, Retry, TaskFailed, behaviors, tracing
from processors.behaviors import TASK_KEY, TRACE
from waiting import DEADLINE, running, wait_until


@pytest.fixture
def exporter():
    """Spans of this test, in memory (tracing configured with their provider)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.configure(tracer_provider=provider)
    try:
        yield memory
    finally:
        tracing.configure(None)
        provider.shutdown()


def request_tracer():
    """The tracer of the "application" (the configured provider's)."""
    return tracing._configured.get_tracer("test")


def spans(exporter, name: str, count: int = 1) -> list:
    """The finished spans named ``name``, once there are ``count`` of them."""
    assert wait_until(lambda: len([s for s in exporter.get_finished_spans() if s.name == name]) >= count)
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_requests_trace_continues_into_its_job(db, exporter):
    p = Processor(db)
    seen = {}

    @p.handler("traced", timeout=10)
    def handler(ctx):
        seen["data"] = ctx.data
        seen["span"] = trace.get_current_span().get_span_context()
        with request_tracer().start_as_current_span("inside the handler"):
            pass
        return {"ok": True}

    with request_tracer().start_as_current_span("request") as request:
        future = p.submit("traced", {"x": 1}, key="tenant")
    with running(p):
        assert future.result(DEADLINE) == {"ok": True}
    assert seen["data"] == {"x": 1}  # the carried context is not the handler's

    [submit] = spans(exporter, "submit traced")
    [accept] = spans(exporter, "accept traced")
    [run] = spans(exporter, "run traced")
    [inner] = spans(exporter, "inside the handler")
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in (submit, accept, run, inner)} == {trace_id}
    assert submit.parent.span_id == request.get_span_context().span_id
    assert accept.parent.span_id == submit.context.span_id
    assert run.parent.span_id == submit.context.span_id
    assert inner.parent.span_id == run.context.span_id == seen["span"].span_id
    assert submit.kind == SpanKind.PRODUCER and run.kind == accept.kind == SpanKind.CONSUMER
    assert dict(submit.attributes) == {"job.type": "traced", "job.id": future.job_id, "job.key": "tenant"}
    assert dict(run.attributes) == {"job.type": "traced", "job.id": future.job_id, "job.attempt": 1,
                                    "job.outcome": "succeeded"}
    assert accept.attributes["job.batch"] >= 1 and accept.start_time <= accept.end_time <= run.start_time
    assert run.status.status_code == StatusCode.UNSET


def test_a_failing_handler_marks_each_attempt_error_under_the_one_submit(db, exporter):
    p = Processor(db)

    @p.handler("flaky", timeout=10, retry=Retry(max_attempts=2, backoff=0))
    def handler(ctx):
        raise ValueError(f"attempt {ctx.attempt} broke")

    with request_tracer().start_as_current_span("request"):
        future = p.submit("flaky", {"x": 1})
    with running(p):
        with pytest.raises(TaskFailed):
            future.result(DEADLINE)
    [submit] = spans(exporter, "submit flaky")
    runs = sorted(spans(exporter, "run flaky", 2), key=lambda s: s.attributes["job.attempt"])
    assert [(s.attributes["job.attempt"], s.attributes["job.outcome"]) for s in runs] == [(1, "retried"),
                                                                                            (2, "failed")]
    for span in runs:
        assert span.parent.span_id == submit.context.span_id  # the retry kept the carried context
        assert span.status.status_code == StatusCode.ERROR
        assert "ValueError" in span.status.description
        [event] = span.events
        assert event.name == "exception" and event.attributes["exception.type"] == "ValueError"
    assert processors.failed_jobs(db, "flaky")[0].reason == "ValueError: attempt 2 broke"


def test_async_handlers_run_inside_the_run_span(db, exporter):
    p = Processor(db)
    seen = {}

    @p.handler("aio", timeout=10)
    async def handler(ctx):
        await anyio.sleep(0)
        seen["span"] = trace.get_current_span().get_span_context()
        return None  # keeps the data: not the carried context

    with request_tracer().start_as_current_span("request"):
        future = p.submit("aio", {"x": 2})
    with running(p):
        assert future.result(DEADLINE) == {"x": 2}
    [run] = spans(exporter, "run aio")
    assert run.context.span_id == seen["span"].span_id
    assert jobs.get_job_data(db, "aio", future.job_id) == {"x": 2}


def test_jobs_added_with_carry_continue_the_trace_and_others_start_their_own(db, exporter):
    p = Processor(db)

    @p.handler("plain", timeout=10)
    def handler(ctx):
        return {"got": ctx.data}

    with request_tracer().start_as_current_span("request") as request:
        jobs.set_type_timeout(db, "plain", 10)
        jobs.add(db, "plain", "carried", tracing.carry({"n": 1}))
        jobs.add(db, "plain", "bare", {"n": 2})
    with running(p):
        assert wait_until(lambda: all(jobs.get_job_state(db, "plain", i) == "finished" for i in ("carried", "bare")))
    assert jobs.get_job_data(db, "plain", "carried") == {"got": {"n": 1}}
    runs = {s.attributes["job.id"]: s for s in spans(exporter, "run plain", 2)}
    assert runs["carried"].parent.span_id == request.get_span_context().span_id
    assert runs["bare"].parent is None  # a root: a trace of its own
    assert runs["bare"].context.trace_id != request.get_span_context().trace_id
    assert [s.attributes["job.id"] for s in spans(exporter, "accept plain")] == ["carried"]


def test_a_joined_submit_is_noted(db, exporter):
    p = Processor(db)

    @p.handler("once", timeout=10)
    def handler(ctx):
        return {}

    first = p.submit("once", {"a": 1}, unique=True)
    second = p.submit("once", {"a": 1}, unique=True)
    assert first.job_id == second.job_id
    submits = spans(exporter, "submit once", 2)
    assert [s.attributes.get("job.joined") for s in submits] == [None, True]


@pytest.mark.parametrize("off", ["not installed", "no provider"])
def test_tracing_off_changes_nothing(db, exporter, monkeypatch, off):
    if off == "not installed":
        monkeypatch.setattr(tracing, "AVAILABLE", False)
    else:
        monkeypatch.setattr(tracing, "_configured", None)  # the global provider: none set
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    p = Processor(db)

    @p.handler("quiet", timeout=10, retry=Retry(max_attempts=2, backoff=0))
    def handler(ctx):
        if ctx.attempt == 1:
            raise ValueError("once")
        return None

    with TracerProvider().get_tracer("test").start_as_current_span("request"):
        future = p.submit("quiet", {"x": 1})
        assert jobs.get_job_data(db, "quiet", future.job_id) == {"x": 1}
        assert tracing.carry({"x": 1}) == {"x": 1}
    with running(p):
        result = future.result(DEADLINE)  # (the data kept, with the failed attempt's bookkeeping)
    assert result["x"] == 1 and set(result) == {"x", TASK_KEY}
    assert set(result[TASK_KEY]) == {"attempts", "last_error"}
    assert exporter.get_finished_spans() == ()


def test_the_carried_context_survives_an_operators_retry_not_a_recurring_run():
    carried = {"x": 1, TASK_KEY: {"attempts": 3, "failed": True, TRACE: {"traceparent": "00-ab-cd-01"}}}
    assert behaviors.retried(carried) == {"x": 1, TASK_KEY: {TRACE: {"traceparent": "00-ab-cd-01"}}}
    again = behaviors.after_success(carried, {"y": 2}, every=60)
    assert TRACE not in again.data[TASK_KEY]
    assert behaviors.after_success(carried, None, every=None).data == {"x": 1, TASK_KEY: {"attempts": 3,
                                                                                           "failed": True}}


def _python(code: str) -> None:
    """Run ``code`` in a fresh interpreter (the global tracer provider is set once per process)."""
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=DEADLINE,
                          env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr


def test_without_opentelemetry_installed_processors_import_and_carry_nothing():
    _python(
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import processors\n"
        "from processors import tracing\n"
        "assert not tracing.AVAILABLE and tracing.carry({'x': 1}) == {'x': 1}\n"
    )


def test_the_global_tracer_provider_is_used_once_set():
    _python(
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from processors import tracing\n"
        "from processors.behaviors import TASK_KEY, TRACE\n"
        "assert tracing.carry({'x': 1}) == {'x': 1}\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "with trace.get_tracer('app').start_as_current_span('request') as span:\n"
        "    carried = tracing.carry({'x': 1})\n"
        "traceparent = carried[TASK_KEY][TRACE]['traceparent']\n"
        "assert traceparent.split('-')[1] == format(span.get_span_context().trace_id, '032x')\n"
    )


def test_a_failing_tracer_never_stops_a_worker(db, exporter, monkeypatch, caplog):
    class Broken:
        def __getattr__(self, name):
            raise RuntimeError("the tracer broke")

    p = Processor(db)

    @p.handler("sturdy", timeout=10)
    def handler(ctx):
        return {"y": ctx.data["x"] + 1}

    with request_tracer().start_as_current_span("request"):
        future = p.submit("sturdy", {"x": 1})  # (carries a trace context: the accept is traced)
    monkeypatch.setattr(tracing, "_tracer", Broken)
    with running(p):
        assert future.result(DEADLINE) == {"y": 2}
    assert p.stats["succeeded"] == 1 and p.stats["errors"] == 0
    logged = caplog.text
    assert "tracing the accept of 1 job(s) failed" in logged and "tracing job sturdy/" in logged


def test_a_tracer_provider_named_in_the_environment_is_used():
    _python(
        "import os\n"
        "os.environ['OTEL_PYTHON_TRACER_PROVIDER'] = 'sdk_tracer_provider'\n"
        "from opentelemetry import trace\n"
        "from processors import tracing\n"
        "from processors.behaviors import TASK_KEY, TRACE\n"
        "assert tracing._tracer() is not None  # (the processor's the first to ask: it loads it)\n"
        "assert type(trace.get_tracer_provider()).__module__.startswith('opentelemetry.sdk')\n"
        "with trace.get_tracer('app').start_as_current_span('request') as span:\n"
        "    carried = tracing.carry({'x': 1})\n"
        "traceparent = carried[TASK_KEY][TRACE]['traceparent']\n"
        "assert traceparent.split('-')[1] == format(span.get_span_context().trace_id, '032x')\n"
    )
