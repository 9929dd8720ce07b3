"""OpenTelemetry tracing of tasks: optional (``pip install 'fdb-jobs[otel]'``), through the
OpenTelemetry API only.  The application configures the SDK and its exporter; without the
API installed, or with no tracer provider set, every hook here returns at once and no job's
data changes.

Spans (kind; attributes ``job.type``, ``job.id`` and as listed):

* ``submit TYPE`` (PRODUCER), around :func:`processors.submit`: ``job.key``; ``job.joined``
  when the submit joined a task of that id already pending or running (no new run);
* ``accept TYPE`` (CONSUMER), one per job taken by a processor's accept transaction,
  timed as that transaction (``job.attempt``, ``job.batch``: the jobs it took);
* ``run TYPE`` (CONSUMER), around the handler and the queueing of its outcome:
  ``job.attempt``, ``job.outcome`` (succeeded, retried, failed, halted, error); the
  handler's exception is recorded on it, with status ERROR.  The handler runs inside it,
  so its own spans are its children.

The trace context travels in the job: ``submit`` injects the W3C trace context of its
span (``opentelemetry.propagate.inject``: the global propagator) into the job's data under
``_task.trace`` (behaviors.TASK_KEY, which handlers never see in ``ctx.data``); the worker
extracts it, and the accept and run spans are *children* of the submit span, in the same
trace.  Automatic retries, hand-backs and lost workers keep the carried context, so every
attempt is a child of the one submit; an operator's retry (``retry_failed``) keeps it too.
A recurring job's later runs, and jobs added by ``jobs.add`` without :func:`carry`, start
traces of their own (their run spans are roots; they get no accept span).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

from . import behaviors

log = logging.getLogger("processors")

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed: tracing is off
    AVAILABLE = False
else:
    AVAILABLE = True

TRACER_NAME = "fdb-jobs"

_configured = None  # the tracer provider given to configure() (None: the global one)
_cached: tuple = (None, None)  # (provider, its tracer)
_OFF = contextlib.nullcontext()


def configure(tracer_provider=None) -> None:
    """Trace with ``tracer_provider`` rather than the global one (None: the global one
    again, as set by ``opentelemetry.trace.set_tracer_provider``)."""
    global _configured
    _configured = tracer_provider


def _tracer():
    """The tracer to use, or None when tracing is off (no API, or no provider set)."""
    global _cached
    if not AVAILABLE:
        return None
    provider = _configured if _configured is not None else _global_provider()
    if provider is None or isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None  # nobody configured the SDK: nothing would be recorded
    if _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(TRACER_NAME))
    return _cached[1]


_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER"  # the API's variable naming a provider to load
_env_names_provider: bool | None = None  # whether it was set (looked up once, when first needed)


def _global_provider():
    """``trace.get_tracer_provider()``, or None while no provider is set.  Until one is,
    the API looks its variable up in ``os.environ`` at every call (a failing lookup
    raises and catches a KeyError inside ``os.environ``: three times a job for a worker
    that does not trace); here that is done once, as the SDK reads its configuration
    from the environment when the process starts."""
    global _env_names_provider
    provider = getattr(trace, "_TRACER_PROVIDER", trace)
    if provider is trace:  # (an API without that global: ask it every time)
        return trace.get_tracer_provider()
    if provider is not None:
        return provider
    if _env_names_provider is None:
        _env_names_provider = _ENV_PROVIDER in os.environ
    return trace.get_tracer_provider() if _env_names_provider else None


# --- enqueue --------------------------------------------------------------------------


class _Enqueue:
    """What ``enqueuing`` yields: ``carry(params)`` is the data to add (params with the
    trace context when tracing); ``joined()`` notes that nothing was added."""

    def __init__(self, span=None):
        self._span = span

    def carry(self, params):
        return params if self._span is None else carry(params)

    def joined(self) -> None:
        if self._span is not None:
            self._span.set_attribute("job.joined", True)


_NOT_TRACED = _Enqueue()


@contextlib.contextmanager
def enqueuing(type: str, job_id: str, key: str | None = None):
    """The span of one submit (current while it runs): yields an ``_Enqueue``."""
    tracer = _tracer()
    if tracer is None:
        yield _NOT_TRACED
        return
    attributes = {"job.type": type, "job.id": job_id}
    if key is not None:
        attributes["job.key"] = key
    with tracer.start_as_current_span(f"submit {type}", kind=SpanKind.PRODUCER, attributes=attributes):
        yield _Enqueue(trace.get_current_span())


def carry(data):
    """``data`` (a job's data, a dict) with the current trace context under
    ``_task.trace``, for ``jobs.add(tr, type, id, processors.tracing.carry(data))``: the
    processor that runs the job continues the current trace.  ``data`` itself when tracing
    is off, there is no current trace, or ``data`` is not a dict."""
    if not isinstance(data, dict) or _tracer() is None:
        return data
    carrier: dict = {}
    propagate.inject(carrier)
    if not carrier:
        return data
    params, task = behaviors.split(data)
    return {**params, behaviors.TASK_KEY: {**task, behaviors.TRACE: carrier}}


def _carried(data) -> "otel_context.Context | None":
    """The trace context a job's data carries (None: none)."""
    task = behaviors.split(data)[1] if isinstance(data, dict) else {}
    carrier = task.get(behaviors.TRACE)
    if not isinstance(carrier, dict) or not carrier:
        return None
    return propagate.extract({str(k): str(v) for k, v in carrier.items()})


def _attempt(data) -> int:
    task = behaviors.split(data)[1] if isinstance(data, dict) else {}
    try:
        return int(task.get("attempts", 0)) + 1
    except (TypeError, ValueError):
        return 1


# --- accept ---------------------------------------------------------------------------


def clock() -> int:
    """Now, as a span's start time (ns since the epoch)."""
    return time.time_ns()


def accepted(taken: list, began: int) -> None:
    """Record the accept of ``taken`` (``jobs.Job``s; one transaction that began at
    ``began``): an accept span in each job's carried trace."""
    tracer = _tracer()
    if tracer is None:
        return
    end = clock()
    try:
        for job in taken:
            parent = _carried(job.data)
            if parent is None:
                continue
            attributes = {"job.type": job.type, "job.id": job.id, "job.attempt": _attempt(job.data),
                          "job.batch": len(taken)}
            span = tracer.start_span(f"accept {job.type}", context=parent, kind=SpanKind.CONSUMER,
                                     attributes=attributes, start_time=began)
            span.end(end_time=end)
    except Exception:  # noqa: BLE001 - tracing never stops a worker
        log.exception("tracing the accept of %d job(s) failed", len(taken))


# --- run ------------------------------------------------------------------------------


def running(run):
    """Context manager: the span of one run of a job (a ``run.Run``), current on the lane
    while its handler runs and its outcome is queued."""
    tracer = _tracer()
    if tracer is None:
        return _OFF
    job = run.job
    try:
        parent = _carried(job.data)
        attributes = {"job.type": job.type, "job.id": job.id, "job.attempt": _attempt(job.data)}
        return tracer.start_as_current_span(
            f"run {job.type}", context=otel_context.Context() if parent is None else parent,
            kind=SpanKind.CONSUMER, attributes=attributes, record_exception=False, set_status_on_exception=False,
        )
    except Exception:  # noqa: BLE001 - tracing never stops a worker: the job runs untraced
        log.exception("tracing job %s/%s failed", job.type, job.id)
        return _OFF


def outcome(kind: str, error: BaseException | None = None) -> None:
    """Note what the current run came to (``kind``) on its span, and the handler's
    ``error`` (recorded, status ERROR).  Called inside :func:`running` only."""
    if not AVAILABLE or _tracer() is None:
        return
    span = trace.get_current_span()
    try:
        span.set_attribute("job.outcome", kind)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    except Exception:  # noqa: BLE001 - tracing never stops a worker
        log.exception("tracing the outcome of a run failed")
