"""Ours: the embedded engine (one SQLite store file; with ``bench.compare --store URL``,
that store, in a scratch key prefix cleared before each run), ``jobsctl worker`` processes
(``processors.Processor``, concurrency 1), type timeout 5 s.  Recovery: the activity
monitor re-enqueues a running job whose worker has not called ``update`` for one type
timeout; the recovery workload runs a dedicated ``jobsctl monitor`` process."""

from __future__ import annotations

import functools
import glob
import json
import os
import time

from . import record
from .base import Peer, is_worker, python

TYPE = "bench"
TIMEOUT = 5.0
STATS_EVERY = 0.2  # seconds between two writes of a worker's stats file


@functools.cache
def _processor(prefetch: int | None = None):
    import jobs
    import processors
    from processors.processor import PREFETCH

    p = processors.Processor(jobs.open(), grace=1, prefetch=PREFETCH if prefetch is None else prefetch)

    @p.handler(TYPE, timeout=TIMEOUT)
    def noop(ctx):
        record.record(ctx.data.get("enq", 0.0), ctx.data.get("block", False))

    if is_worker():
        record.started()
        p.periodic(STATS_EVERY, functools.partial(_write_stats, p))
    return p


def _write_stats(p) -> None:
    """The processor's stats, and its use of the store's write lock, as
    ``stats-PID.json`` in the log directory (replaced whole)."""
    path = os.path.join(os.environ["BENCH_LOGDIR"], f"stats-{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({**p.stats, **_lock_counters(p.db, "write_lock")}, f)
    os.replace(path + ".tmp", path)


def _lock_counters(db, prefix: str) -> dict:
    """``db``'s write lock use in this process (``write_lock_stats``: acquisitions, ms
    waited, ms held), named ``prefix_...``; none on a store without that lock."""
    stats = getattr(db, "write_lock_stats", None)
    if stats is None:
        return {}
    s = stats()
    return {f"{prefix}_acquired": s["acquired"], f"{prefix}_wait_ms": round(s["wait_seconds"] * 1000, 1),
            f"{prefix}_hold_ms": round(s["hold_seconds"] * 1000, 1)}


def __getattr__(name):  # `jobsctl worker bench.peers.ours_peer:processor`
    if name == "processor":
        return _processor()
    raise AttributeError(name)


@functools.cache
def _compile_sources() -> None:
    """Byte-compile the project's packages, as pip does for the peers' installed ones: an
    editable install under PYTHONDONTWRITEBYTECODE would otherwise compile every module in
    each worker process that starts, on the cores the running workers use."""
    import compileall

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for package in ("jobs", "processors", "jobsctl", "monitor", "bench"):
        compileall.compile_dir(os.path.join(root, package), quiet=1)


def store_name(url: str | None) -> str:
    """What a row of ours ran on, for its label: the engine, and the store's URL when the
    run was given one (``bench.compare --store URL``)."""
    if url is None:
        return "embedded engine"
    engine = "FoundationDB" if url.partition(":")[0] == "fdb" else "embedded engine"
    return f"{engine}, {url}"


class OursPeer(Peer):
    name = "ours"
    label = "ours"  # (the title without its store)
    title = "ours (embedded engine)"
    venv = "ours"
    packages = ("fdb-jobs",)
    module = "bench.peers.ours_peer"
    settings = (f"one store file (WAL, synchronous=NORMAL); `jobsctl worker --concurrency 1` (a `processors.Processor`, "
                f"which also runs an activity monitor; it accepts up to 64 short jobs per transaction); "
                f"type timeout {TIMEOUT:g} s")
    recovery = (f"activity monitor re-enqueues a job not updated for one type timeout ({TIMEOUT:g} s); "
                "a dedicated `jobsctl monitor` process runs")

    @classmethod
    def title_on(cls, store: str | None) -> str:
        return f"{cls.label} ({store_name(store)})"

    @property
    def url(self):
        from jobsctl import scratch

        if scratch.in_scratch():  # bench.compare --store URL
            return scratch.store_url(None)
        return "sqlite:" + os.path.join(self.ctx.workdir, "jobs.sqlite")

    def setup(self):
        import jobs
        from jobs import store

        _compile_sources()
        from bench.bench_engine import fresh_store
        from jobsctl import scratch

        if scratch.in_scratch():  # the previous run's jobs are not this one's
            fresh_store(self.ctx.workdir, "jobs.sqlite", self.url)
        self._store = store.opened(self.url)
        self.db = self._store.__enter__()
        jobs.set_type_timeout(self.db, TYPE, TIMEOUT)
        self.n = 0

    def teardown(self):
        self._store.__exit__(None, None, None)

    def preload(self, n):
        import jobs

        for lo in range(0, n, 5000):
            @jobs.transactional
            def batch(tr, lo=lo):
                for i in range(lo, min(n, lo + 5000)):
                    jobs.add(tr, TYPE, f"p{i}", {"enq": 0.0})

            batch(self.db)

    def enqueue(self, enq, block=False):
        import jobs

        self.n += 1
        jobs.add(self.db, TYPE, f"e{self.n}", {"enq": enq, "block": block} if block else {"enq": enq})

    def counters(self):
        """The workers' ``Processor.stats`` and write lock use, summed (read after one more
        write of each), and the producer's (this process's) write lock use."""
        time.sleep(2 * STATS_EVERY)
        total: dict[str, float] = {}
        for path in glob.glob(os.path.join(self.ctx.logdir, "stats-*.json")):
            with open(path) as f:
                for k, v in json.load(f).items():
                    total[k] = total.get(k, 0) + v
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in total.items()} | _lock_counters(
            self.db, "producer_write_lock")

    def worker_cmd(self):
        return [python(), "-m", "jobsctl", "--store", self.url, "worker", f"{self.module}:processor",
                "--concurrency", "1"]

    def helper_cmds(self, workload):
        if workload == "recovery":
            return [[python(), "-m", "jobsctl", "--store", self.url, "monitor"]]
        return []


PEER = OursPeer
