"""RQ on Redis: one ``rq worker`` process per worker, RQ's default ``Worker`` class,
which forks a work horse for every job.  Recovery: RQ's StartedJobRegistry cleanup
(worker maintenance, here every second) re-enqueues a job whose worker stopped
heart-beating, if the job has retries left; the registry entry lives
``min(job timeout, job monitoring interval) + 60`` s past the last heartbeat (the
60 s is fixed in RQ), so it cannot come back sooner than about a minute."""

from __future__ import annotations

import functools

from . import record
from .base import Peer, is_worker, venv_bin

QUEUE = "bench"


def task(enq=0.0, block=False):  # the job function, by path: bench.peers.rq_peer.task
    record.record(enq, block)


@functools.cache
def _worker_class(simple: bool):
    import rq

    class Worker(rq.SimpleWorker if simple else rq.Worker):  # so that workers import this module
        pass

    if is_worker():
        record.started()
    return Worker


def __getattr__(name):  # `rq worker --worker-class bench.peers.rq_peer.Worker`
    if name in ("Worker", "SimpleWorker"):
        return _worker_class(name == "SimpleWorker")
    raise AttributeError(name)


class RQPeer(Peer):
    name = "rq"
    title = "RQ (Redis)"
    max_jobs = 2000  # a fork per job: ~30 jobs/s here, 20,000 would take most of an hour
    worker_class = "Worker"
    needs = ("redis",)
    packages = ("rq", "redis")
    settings = ("default `Worker` (forks a work horse per job), `--job-monitoring-interval 1 "
                "--maintenance-interval 1`; the recovery job has `Retry(max=3)`")
    recovery = ("StartedJobRegistry cleanup re-enqueues jobs of dead workers with retries left, "
                "≥ 60 s after the last heartbeat (fixed in RQ)")

    def setup(self):
        import redis
        import rq

        self.conn = redis.Redis.from_url(self.ctx.redis_url + "/2")
        self.conn.flushdb()
        self.q = rq.Queue(QUEUE, connection=self.conn)

    def teardown(self):
        self.conn.close()

    def preload(self, n):
        from rq import Queue

        for lo in range(0, n, 1000):
            with self.conn.pipeline() as pipe:
                self.q.enqueue_many([Queue.prepare_data(task, kwargs={"enq": 0.0})
                                     for _ in range(lo, min(n, lo + 1000))], pipeline=pipe)
                pipe.execute()

    def enqueue(self, enq, block=False):
        from rq import Retry

        if block:
            self.q.enqueue(task, kwargs={"enq": enq, "block": True}, retry=Retry(max=3), job_timeout=600)
        else:
            self.q.enqueue(task, kwargs={"enq": enq})

    def worker_cmd(self):
        return [venv_bin("rq"), "worker", "--url", self.ctx.redis_url + "/2", "--worker-class",
                f"bench.peers.rq_peer.{self.worker_class}", "--job-monitoring-interval", "1", "--maintenance-interval", "1",
                "--logging_level", "WARNING", QUEUE]


PEER = RQPeer
