"""Huey with its SQLite storage (``SqliteHuey``): one ``huey_consumer`` process per
worker, one worker thread each.  Huey deletes a task from the queue when a consumer takes
it, so the task of a killed consumer is lost: no recovery."""

from __future__ import annotations

import functools
import os

from . import record
from .base import Peer, is_worker, venv_bin


@functools.cache
def _huey():
    from huey import SqliteHuey

    h = SqliteHuey("bench", filename=os.environ["BENCH_HUEY_FILE"], results=False)

    @h.task(name="noop")
    def noop(enq=0.0, block=False):
        record.record(enq, block)

    h.bench_noop = noop
    if is_worker():
        record.started()
    return h


def __getattr__(name):  # `huey_consumer bench.peers.huey_peer.huey`
    if name == "huey":
        return _huey()
    raise AttributeError(name)


class HueyPeer(Peer):
    name = "huey"
    title = "Huey (SQLite)"
    packages = ("huey",)
    settings = ("SqliteHuey (WAL; its default synchronous=FULL), results off; `huey_consumer -k thread -w 1 "
                "-n`, polling every 10 ms backing off to 100 ms when idle (defaults: 100 ms to 10 s)")
    recovery = ""

    def env(self):
        return {**super().env(), "BENCH_HUEY_FILE": os.path.join(self.ctx.workdir, "huey.db")}

    def setup(self):
        os.environ.update(self.env())
        self.h = _huey()

    def preload(self, n):
        noop = self.h.bench_noop
        for lo in range(0, n, 5000):
            rows = [(self.h.name, self.h.serialize_task(noop.s()), 0) for _ in range(lo, min(n, lo + 5000))]
            with self.h.storage.db(commit=True) as curs:
                curs.executemany("insert into task (queue, data, priority) values (?, ?, ?)", rows)

    def enqueue(self, enq, block=False):
        self.h.bench_noop(enq=enq, block=block)

    def worker_cmd(self):
        return [venv_bin("huey_consumer"), "bench.peers.huey_peer.huey", "-k", "thread", "-w", "1", "-n",
                "-d", "0.01", "-m", "0.1", "-b", "1.15", "-C"]


PEER = HueyPeer
