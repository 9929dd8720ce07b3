"""Procrastinate on PostgreSQL: one ``procrastinate worker --concurrency 1`` process per
worker (LISTEN/NOTIFY wakes it).  Recovery: workers heartbeat (here every 1 s) and
Procrastinate offers ``job_manager.get_stalled_jobs`` + ``retry_job`` for an app to call
periodically; the recovery workload runs that in its own process every 0.5 s with a 5 s
heartbeat threshold (``python -m bench.peers.procrastinate_peer retry-stalled``), the
counterpart of our ``jobsctl monitor``."""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time

from . import record
from .base import Peer, is_worker, python, venv_bin

QUEUE = "bench"
STALLED_AFTER = 5


@functools.cache
def _app():
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_PG_DSN"]),
        worker_defaults={"update_heartbeat_interval": 1.0, "stalled_worker_timeout": 30.0},
    )

    @app.task(name="noop", queue=QUEUE)
    def noop(enq=0.0, block=False):
        record.record(enq, block)

    app.bench_noop = noop
    if is_worker():
        record.started()
    return app


def __getattr__(name):  # `procrastinate --app bench.peers.procrastinate_peer.app worker`
    if name == "app":
        return _app()
    raise AttributeError(name)


class ProcrastinatePeer(Peer):
    name = "procrastinate"
    title = "Procrastinate (PostgreSQL)"
    needs = ("postgres",)
    packages = ("procrastinate", "psycopg")
    settings = ("`procrastinate worker --concurrency 1` (LISTEN/NOTIFY), heartbeat every 1 s; PostgreSQL with "
                "`synchronous_commit=off`")
    recovery = (f"workers heartbeat; a `retry-stalled` process (0.5 s loop) retries jobs whose worker's heartbeat is "
                f"{STALLED_AFTER} s old (`get_stalled_jobs` + `retry_job`)")

    def env(self):
        return {**super().env(), "BENCH_PG_DSN": self.ctx.pg_dsn}

    def setup(self):
        import psycopg

        os.environ.update(self.env())
        with psycopg.connect(self.ctx.pg_dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
            conn.execute("CREATE SCHEMA public")
        self.app = _app()
        self.app_cm = self.app.open()
        self.app_cm.__enter__()
        self.app.schema_manager.apply_schema()

    def teardown(self):
        self.app_cm.__exit__(None, None, None)

    def preload(self, n):
        noop = self.app.bench_noop
        for lo in range(0, n, 1000):
            noop.batch_defer(*[{"enq": 0.0} for _ in range(lo, min(n, lo + 1000))])

    def enqueue(self, enq, block=False):
        self.app.bench_noop.defer(enq=enq, block=block)

    def worker_cmd(self):
        return [venv_bin("procrastinate"), "--app", "bench.peers.procrastinate_peer.app", "worker", "--concurrency",
                "1", "--queues", QUEUE]

    def helper_cmds(self, workload):
        if workload == "recovery":
            return [[python(), "-m", "bench.peers.procrastinate_peer", "retry-stalled"]]
        return []


PEER = ProcrastinatePeer


async def _retry_stalled(deadline: float) -> None:
    app = _app()
    async with app.open_async():
        while time.monotonic() < deadline:
            for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED_AFTER):
                await app.job_manager.retry_job(job)
            await asyncio.sleep(0.5)


if __name__ == "__main__" and sys.argv[1:] == ["retry-stalled"]:
    asyncio.run(_retry_stalled(time.monotonic() + 900))
