"""RQ on Redis with ``SimpleWorker``: the job runs in the worker process itself, no fork
per job (RQ's choice for speed over isolation).  Otherwise as ``rq_peer``; no recovery
workload (the mechanism is the same as RQ's default worker's)."""

from __future__ import annotations

from .rq_peer import RQPeer


class RQSimplePeer(RQPeer):
    name = "rq_simple"
    title = "RQ SimpleWorker (Redis)"
    max_jobs = None
    worker_class = "SimpleWorker"
    skip = ("recovery",)
    settings = "`SimpleWorker` (no fork), `--job-monitoring-interval 1 --maintenance-interval 1`"


PEER = RQSimplePeer
