"""``/metrics``: a status gather (``jobs.observe.status.gather``) as Prometheus gauges, in the text
exposition format 0.0.4 (``http.py`` serves it).  Every per-type family has a ``type``
label; a family whose value a type does not have (no timeout, no limit) has no sample for
that type rather than a made-up one."""

from __future__ import annotations

import math

from jobs.queue.finished import KINDS
from jobs.observe.status import PLACES

# One gauge family per TypeStatus field, labelled by type: (name, field, help).
GAUGES = (
    ("jobs_pending", "pending", "Jobs waiting to run, due or scheduled later."),
    ("jobs_due", "due", "Pending jobs scheduled at or before now."),
    ("jobs_running", "running", "Jobs accepted by a worker and not finished."),
    ("jobs_finished", "finished", "Finished jobs still in the store, except the failed ones."),
    ("jobs_failed", "failed", "Finished jobs that failed (retries used up, or too many workers lost)."),
    ("jobs_lost", "lost", "Workers lost by the type's jobs (re-enqueued by an activity monitor), in all."),
    ("jobs_oldest_due_age_seconds", "oldest_due_age", "How long the longest-waiting due job has waited."),
    ("jobs_type_timeout_seconds", "timeout", "How long a running job of the type may go without update."),
    ("jobs_paused", "paused", "1 if the type is paused (no worker takes its jobs), else 0."),
    ("jobs_running_slots", "running_slots",
     "Running jobs holding one of the type's running slots (started while it had a concurrency limit); "
     "absent: no concurrency limit."),
    ("jobs_started_in_rate_period", "started_in_period",
     "Jobs of the type started in the last period of its rate limit; absent: no rate limit."),
)

RATE_GAUGES = (  # the last hour, from jobs/indexes/rates.py's per-minute counters
    ("jobs_finished_last_hour", "finished", "Runs of the type that succeeded in the last hour."),
    ("jobs_failed_last_hour", "failed", "Jobs of the type that failed for good in the last hour."),
    ("jobs_retried_last_hour", "retried",
     "Runs of the type that failed in the last hour, their job to run again (a retry, or a recurring job's next run)."),
    ("jobs_started_last_hour", "started", "Jobs of the type accepted in the last hour."),
)

BAND_GAUGES = (  # per type and priority band (lower runs first)
    ("jobs_pending_by_priority", "pending", "Pending jobs of the priority band."),
    ("jobs_due_by_priority", "due", "Due pending jobs of the priority band."),
)

# One gauge family per limit (``jobs.set_limits``), labelled by type: (name, value of a
# Limits, help); a type without that limit has no sample.
LIMIT_GAUGES = (
    ("jobs_limit_running", lambda lim: lim.concurrency, "Most jobs of the type running at once; absent: no limit."),
    ("jobs_limit_rate", lambda lim: lim.rate and lim.rate.count,
     "Most jobs of the type started per jobs_limit_rate_period_seconds; absent: no rate limit."),
    ("jobs_limit_rate_period_seconds", lambda lim: lim.rate and lim.rate.seconds,
     "The period of the type's rate limit."),
    ("jobs_key_limit_running", lambda lim: lim.key_concurrency,
     "Most jobs of each job key of the type running at once; absent: no limit."),
    ("jobs_key_limit_rate", lambda lim: lim.key_rate and lim.key_rate.count,
     "Most jobs of each job key of the type started per jobs_key_limit_rate_period_seconds; absent: no rate "
     "limit."),
    ("jobs_key_limit_rate_period_seconds", lambda lim: lim.key_rate and lim.key_rate.seconds,
     "The period of the type's per-key rate limit."),
)


def _label(value: str) -> str:
    """A label value escaped as the text format requires."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):  # (a flag: 1 or 0, not Python's True)
        return str(int(value))
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return repr(value)


def _worker_families(family, status) -> None:
    """The live workers (``jobs.observe.workers``): in all, per type they handle, the jobs they
    held at their last heartbeat; no sample after a failed gather."""
    workers = status.workers if status is not None else None
    by_type: dict[str, int] = {}
    for w in workers or []:
        for t in w.types:
            by_type[t] = by_type.get(t, 0) + 1
    family("jobs_workers", "Live workers (processors heartbeating their registration).",
           [] if workers is None else [("", len(workers))])
    family("jobs_workers_by_type", "Live workers that handle the type.",
           [(f'{{type="{_label(t)}"}}', n) for t, n in sorted(by_type.items())])
    family("jobs_workers_held", "Jobs held by the live workers at their last heartbeat (running or prefetched).",
           [] if workers is None else [("", sum(w.held for w in workers))])


def metrics_text(g) -> str:
    """The Prometheus text of one gather (an ``http.Gathered``); a failed one has no
    per-type samples."""
    lines: list[str] = []

    def family(name: str, help: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP {name} {help}", f"# TYPE {name} gauge"])
        lines.extend(f"{name}{labels} {_number(value)}" for labels, value in samples)

    types = g.status.types if g.status is not None else []
    for name, field, help in GAUGES:
        family(name, help, [(f'{{type="{_label(t.type)}"}}', getattr(t, field))
                            for t in types if getattr(t, field) is not None])
    for name, field, help in BAND_GAUGES:
        family(name, help, [(f'{{type="{_label(t.type)}",priority="{b.priority}"}}', getattr(b, field))
                            for t in types for b in t.bands])
    family("jobs_retention_seconds", "How long the type's finished (or failed) jobs are kept; absent: forever.",
           [(f'{{type="{_label(t.type)}",kind="{kind}"}}', t.retention.period(kind))
            for t in types for kind in KINDS if t.retention.period(kind) is not None])
    limited = [t for t in types if t.limits is not None]
    for name, value, help in LIMIT_GAUGES:
        family(name, help, [(f'{{type="{_label(t.type)}"}}', value(t.limits))
                            for t in limited if value(t.limits) is not None])
    family("jobs_keys", "Job keys of the type with pending jobs, per place: turns (served in turn), asleep (their "
                        "next job or rate slot is due later), full (at their running limit).",
           [(f'{{type="{_label(t.type)}",place="{place}"}}', getattr(t.keys, place))
            for t in types for place in PLACES])
    for name, field, help in RATE_GAUGES:
        family(name, help, [(f'{{type="{_label(t.type)}"}}', getattr(t.last_hour, field)) for t in types])
    family("jobs_start_wait_seconds", "Quantiles of how long the jobs started in the last hour waited, from due "
                                      "(or enqueued, if later) to accepted; within 25%; absent: none started.",
           [(f'{{type="{_label(t.type)}",quantile="{q}"}}', getattr(t.last_hour, field))
            for t in types for q, field in (("0.5", "wait_p50"), ("0.99", "wait_p99"))
            if getattr(t.last_hour, field) is not None])
    _worker_families(family, g.status)
    family("jobs_status_gather_seconds", "How long the last status gather took.", [("", g.seconds)])
    family("jobs_status_up", "1 if the last status gather succeeded, 0 if it failed.",
           [("", 0 if g.error else 1)])
    return "\n".join(lines) + "\n"
