"""Who and what the peer comparison runs: the peers (their classes load only the standard
library at import: their queue libraries load inside their methods), the workloads, and
each peer's share of a workload."""

from __future__ import annotations

import importlib

PEERS = ["ours", "ours_p1", "huey", "rq", "rq_simple", "celery", "procrastinate"]
CLASSES = {name: importlib.import_module(f"bench.peers.{name}_peer").PEER for name in PEERS}
TITLES = {name: cls.title for name, cls in CLASSES.items()}  # (ours on fresh embedded store files)
WORKLOADS = ["burndown", "steady", "sustained", "recovery", "scale", "limit"]
QUEUE_WORKLOADS = ("burndown", "steady", "sustained", "recovery")  # run for every peer
BARE_BATCH = 32  # jobs per transaction of the batched bare loop (the Processor's default prefetch)


def size(peer: str, jobs: int) -> int:
    """Jobs a workload of ``jobs`` gives ``peer`` (a slow peer has a cap)."""
    return min(jobs, CLASSES[peer].max_jobs or jobs)


def titles(store: str | None = None) -> dict[str, str]:
    """Each peer's row label in a run that gave ours the store ``store`` (None: none):
    ours' rows name the store they ran on."""
    return {name: cls.title_on(store) for name, cls in CLASSES.items()}
