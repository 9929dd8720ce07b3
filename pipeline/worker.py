"""A pipeline worker process: ``jobs --store URL worker pipeline.worker:processor``.

Runs every provisioned operation's partition jobs and coordinators with one SparkSession
per process (started on the first Spark job).  ``$JOBS_PIPELINE_JOB_TIMEOUT`` (seconds)
overrides the type timeout of the operations' jobs: how long a dead worker's jobs wait
before they run elsewhere.
"""

from __future__ import annotations

import os

import jobs

from .runtime import processor as _processor

_timeout = os.environ.get("JOBS_PIPELINE_JOB_TIMEOUT")
processor = _processor(jobs.open(), job_timeout=float(_timeout) if _timeout else None, grace=10)
