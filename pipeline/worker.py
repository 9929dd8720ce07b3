"""A pipeline worker process: ``jobs --store URL worker pipeline.worker:processor``.

Runs every provisioned operation's partition jobs and coordinators with one SparkSession
per process (started on the first Spark job).  ``$JOBS_PIPELINE_JOB_TIMEOUT`` (seconds)
overrides the type timeout of the operations' jobs: how long a dead worker's jobs wait
before they run elsewhere.  ``$JOBS_PIPELINE_GC_GRACE`` and ``$JOBS_PIPELINE_GC_EVERY``
(seconds) set the garbage collector job's grace period and interval (``pipeline.collector``).
"""

from __future__ import annotations

import os

import jobs

from .collector import DEFAULT_EVERY, DEFAULT_GRACE
from .runtime import processor as _processor


def _seconds(name: str, default: float | None) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else default


processor = _processor(jobs.open(), job_timeout=_seconds("JOBS_PIPELINE_JOB_TIMEOUT", None), grace=10,
                       gc_grace=_seconds("JOBS_PIPELINE_GC_GRACE", DEFAULT_GRACE),
                       gc_every=_seconds("JOBS_PIPELINE_GC_EVERY", DEFAULT_EVERY))
