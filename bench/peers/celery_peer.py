"""Celery with the Redis broker: one ``celery worker --pool solo`` process per worker (the
task runs in the worker process itself), prefetch 1, late acks.  Recovery: a message
taken but not acknowledged goes back to the queue after the Redis transport's
``visibility_timeout`` (here 5 s, as our type timeout; default 1 h), when a live worker's
periodic restore sweep (here every 1 s) finds it.  Celery sends no heartbeats for a
running task: a task running longer than the visibility timeout is delivered again."""

from __future__ import annotations

import functools
import os

from . import record
from .base import Peer, is_worker, python

VISIBILITY = 5
QUEUE = "bench"


@functools.cache
def _app():
    from celery import Celery

    app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"] + "/1")
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_default_queue=QUEUE,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": VISIBILITY, "unacked_restore_interval": 1,
                                  "unacked_restore_throttle": 1},
    )

    @app.task(name="noop")
    def noop(enq=0.0, block=False):
        record.record(enq, block)

    app.bench_noop = noop
    if is_worker():
        record.started()
    return app


def __getattr__(name):  # `celery -A bench.peers.celery_peer:app worker`
    if name == "app":
        return _app()
    raise AttributeError(name)


class CeleryPeer(Peer):
    name = "celery"
    title = "Celery (Redis broker)"
    needs = ("redis",)
    packages = ("celery", "kombu", "redis")
    settings = (f"`celery worker --pool solo --concurrency 1 --prefetch-multiplier 1`, `task_acks_late`, results "
                f"off, no gossip/mingle/heartbeat; Redis transport `visibility_timeout={VISIBILITY}`, "
                "restore sweep every 1 s")
    recovery = f"unacked message restored after `visibility_timeout` ({VISIBILITY} s) by a live worker's sweep"

    def env(self):
        return {**super().env(), "BENCH_REDIS_URL": self.ctx.redis_url}

    def setup(self):
        import redis

        os.environ.update(self.env())
        with redis.Redis.from_url(self.ctx.redis_url + "/1") as r:
            r.flushdb()
        self.app = _app()
        self.producer_cm = self.app.producer_or_acquire()
        self.producer = self.producer_cm.__enter__()

    def teardown(self):
        self.producer_cm.__exit__(None, None, None)

    def preload(self, n):
        noop = self.app.bench_noop
        for _ in range(n):
            noop.apply_async(kwargs={"enq": 0.0}, producer=self.producer)

    def enqueue(self, enq, block=False):
        self.app.bench_noop.apply_async(kwargs={"enq": enq, "block": block}, producer=self.producer)

    def worker_cmd(self):
        return [python(), "-m", "celery", "-A", "bench.peers.celery_peer:app", "worker", "--pool", "solo",
                "--concurrency", "1", "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-Q", QUEUE, "--loglevel", "WARNING"]


PEER = CeleryPeer
