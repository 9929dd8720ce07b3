"""The interface every peer module implements (``PEER = SomePeer``), and what they share.

A peer module is imported twice, in different processes:

* by the harness (``bench.peers.harness``) in the process that drives a workload: it
  builds ``PEER(ctx)`` and calls ``setup``, ``preload``, ``enqueue``, ``worker_cmd``, ...;
* by each worker process, through the queue's own CLI, which asks the module for its app
  object (``huey``, ``app``, ``processor``, ...): modules build it lazily in a module
  ``__getattr__``, so importing a peer module has no side effects.

Standard library only here; each peer module imports its library inside functions.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from dataclasses import dataclass


@dataclass
class Ctx:
    """Where one workload run keeps its state; the servers' addresses."""

    workdir: str  # fresh per run: store files, logs
    logdir: str  # records.log / started.log (bench.peers.record)
    redis_url: str = ""
    pg_dsn: str = ""


class Peer:
    name = ""  # short key, e.g. "rq"
    title = ""  # row label, e.g. "RQ (Redis)"
    venv = "peers"  # "peers": bench/.peers-venv; "ours": the project's venv
    needs: tuple[str, ...] = ()  # servers: "redis", "postgres"
    packages: tuple[str, ...] = ()  # distributions whose versions the report names
    max_jobs: int | None = None  # burn-down size cap for a slow peer (None: the run's size)
    skip: tuple[str, ...] = ()  # workloads not run for this peer
    settings = ""  # how it is configured, one sentence for the report
    recovery = ""  # its mechanism for jobs of a killed worker, or "" for none

    def __init__(self, ctx: Ctx):
        self.ctx = ctx

    @classmethod
    def title_on(cls, store: str | None) -> str:
        """The row label when the run gave ours the store ``store`` (None: none, each run
        a fresh embedded store file).  The peers run on their own servers whatever it is."""
        return cls.title

    # --- lifecycle ---------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Environment variables the worker processes (and this process) need."""
        return {"BENCH_LOGDIR": self.ctx.logdir}

    def setup(self) -> None:
        """Fresh, empty queue state for one run."""

    def teardown(self) -> None:
        """Close clients (servers are stopped by the orchestrator)."""

    # --- jobs --------------------------------------------------------------------------

    def preload(self, n: int) -> None:
        """Enqueue ``n`` no-op jobs (enq=0), as fast as the peer allows (not timed)."""
        raise NotImplementedError

    def enqueue(self, enq: float, block: bool = False) -> None:
        """Enqueue one job carrying its enqueue wall time; ``block``: the recovery job."""
        raise NotImplementedError

    # --- processes ---------------------------------------------------------------------

    def worker_cmd(self) -> list[str]:
        """argv of one worker process doing one job at a time."""
        raise NotImplementedError

    def helper_cmds(self, workload: str) -> list[list[str]]:
        """argv of extra long-lived processes a workload needs (a monitor, ...)."""
        return []

    def counters(self) -> dict[str, int]:
        """What the workers counted during the run (the peer's own statistics, summed over
        the worker processes; e.g. ours' accept retries), read after the workload; {}: none."""
        return {}

    def versions(self) -> dict[str, str]:
        out = {}
        for dist in self.packages:
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                out[dist] = "?"
        return out


def python() -> str:
    return sys.executable


def venv_bin(name: str) -> str:
    """A console script of the running venv (``rq``, ``huey_consumer``, ...)."""
    return os.path.join(os.path.dirname(sys.executable), name)


def is_worker() -> bool:
    return os.environ.get("BENCH_WORKER") == "1"
