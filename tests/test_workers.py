"""The workers registry: ``jobs.observe.workers`` (register, heartbeat, unregister, live
and stale records, bounded cleaning, bad input), processors registering as they run and
dropping out when they stop, ``jobsctl workers`` (text and ``--json``), ``/status`` and
``/metrics``; and a processor killed with SIGKILL dropping out once stale.

Run as a script (``python test_workers.py URL``), this file is that processor: a short
heartbeat and staleness bound, one type ``k``, until it is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import anyio
import orjson
import pytest

import jobs
from jobs import StoreError, keys
from jobs.observe import status, workers
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import run
from jobsctl import cli
from monitor import StatusServer
from monitor.http import Gathered
from monitor.metrics import metrics_text
from processors import Processor
from waiting import DEADLINE, running, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mine(db, processor) -> workers.Worker | None:
    """The live record of ``processor``'s current run, if any."""
    worker = processor.registration.worker
    return next((w for w in workers.live_workers(db) if worker is not None and w.id == worker.id), None)


# --- the job layer -------------------------------------------------------------------------------


def test_a_held_job_over_its_time_limit_is_in_the_record_and_a_record_without_the_field_is_corrupt(db):
    """A heartbeat may say when a held job went over its handler's time limit; a record
    without that field is not one this release writes."""
    w = workers.new_worker(["a"], 1, interval=1.0)
    workers.register(db, w)
    beat = workers.heartbeat(db, w, [("a", "j1", 1234.5), ("a", "j2")])
    assert [(j.id, j.over_time_limit_since) for j in workers.live_workers(db)[0].held_jobs] == [
        ("j1", 1234.5), ("j2", None)]
    with pytest.raises(ValueError):
        workers.heartbeat(db, w, [("a", "j1", -1.0)])
    short = fdb_tuple.pack((w.host, w.pid, w.types, 1, w.started, beat.heartbeat, w.stale_after, 1, (("a", "j1"),)))
    with pytest.raises(StoreError, match=f"worker {w.id!r} is corrupt"):
        workers.decode(w.id, short)


def test_register_heartbeat_unregister(db):
    w = workers.new_worker(["b", "a", "a"], 4, interval=1.0)
    assert (w.types, w.concurrency, w.pid, w.held) == (("a", "b"), 4, os.getpid(), 0)
    assert w.stale_after == workers.MIN_STALE  # 3 intervals of 1 s: the floor
    assert workers.stale_bound(60) == 180
    workers.register(db, w)
    assert workers.live_workers(db) == [w]
    beat = workers.heartbeat(db, w, [("a", "j1"), ("b", "j2")], held_count=5)
    assert (beat.held, [(j.type, j.id) for j in beat.held_jobs]) == (5, [("a", "j1"), ("b", "j2")])
    assert workers.live_workers(db) == [beat] and beat.heartbeat >= w.heartbeat
    many = [("a", f"j{i}") for i in range(50)]
    assert len(workers.heartbeat(db, w, many).held_jobs) == workers.MAX_HELD_IDS
    assert workers.live_workers(db)[0].held == 50
    workers.unregister(db, w)
    workers.unregister(db, w.id)  # absent: nothing to do
    assert workers.live_workers(db) == [] and workers.registered(db) == []


def test_a_stale_record_is_not_live_and_is_cleared_by_its_reader(db):
    fresh = workers.new_worker(["t"], 1, interval=1.0)
    old = workers.new_worker(["t"], 2, interval=1.0, now=time.time() - 3600)  # heartbeat an hour ago
    for w in (fresh, old):
        run(db, workers._write, w)  # (register would clear the old one at once)
    assert {w.id for w in workers.registered(db)} == {fresh.id, old.id}
    assert [w.id for w in workers.live_workers(db, clean=False)] == [fresh.id]
    assert len(workers.registered(db)) == 2  # clean=False leaves it
    assert [w.id for w in workers.live_workers(db)] == [fresh.id]
    assert [w.id for w in workers.registered(db)] == [fresh.id]
    # a worker heartbeating again after a reader dropped it is back
    run(db, workers._write, old)
    assert workers.heartbeat(db, old).live(time.time()) and len(workers.live_workers(db)) == 2


def test_cleaning_is_bounded_per_call_and_register_cleans_too(db, monkeypatch):
    monkeypatch.setattr(workers, "CLEAN_LIMIT", 3)
    for _ in range(7):
        run(db, workers._write, workers.new_worker(["t"], 1, interval=1.0, now=1000.0))
    assert workers.live_workers(db) == [] and len(workers.registered(db)) == 4
    workers.register(db, workers.new_worker(["t"], 1, interval=1.0))
    assert len(workers.registered(db)) == 2  # 3 more cleared, the new one written
    assert workers.clean_stale(db) and len(workers.registered(db)) == 1


@pytest.mark.parametrize("call, error", [
    (lambda: workers.new_worker([], 1, interval=1), ValueError),
    (lambda: workers.new_worker("t", 1, interval=1), TypeError),
    (lambda: workers.new_worker(["t"], 0, interval=1), ValueError),
    (lambda: workers.new_worker(["t"], True, interval=1), TypeError),
    (lambda: workers.new_worker(["t"], 1, interval=0), ValueError),
    (lambda: workers.new_worker(["t"], 1, interval=float("nan")), ValueError),
    (lambda: workers.new_worker([""], 1, interval=1), ValueError),
    (lambda: workers.stale_bound(-1), ValueError),
])
def test_bad_arguments(call, error):
    with pytest.raises(error):
        call()


def test_bad_arguments_with_a_store(db):
    w = workers.new_worker(["t"], 1, interval=1.0)
    for call, error in [(lambda: workers.register(db, "w"), TypeError),
                        (lambda: workers.heartbeat(db, w, "t/a"), TypeError),
                        (lambda: workers.heartbeat(db, w, [("t", "")]), ValueError),
                        (lambda: workers.heartbeat(db, w, [("t", "a")], held_count=0), ValueError),
                        (lambda: workers.unregister(db, ""), ValueError),
                        (lambda: workers.live_workers(db, now=-1), ValueError)]:
        with pytest.raises(error):
            call()
    assert workers.registered(db) == []  # nothing written
    run(db, lambda tr: tr.set(keys.worker_key("bad"), b"\x01garbage"))
    with pytest.raises(StoreError, match="worker 'bad'"):
        workers.live_workers(db)
    # a record a newer release extended with more fields still reads
    raw = fdb_tuple.pack(("h", 1, ("t",), 1, time.time(), time.time(), 10.0, 0, (), (), "more"))
    run(db, lambda tr: (tr.clear(keys.worker_key("bad")), tr.set(keys.worker_key("newer"), raw)))
    assert [w.id for w in workers.live_workers(db)] == ["newer"]


# --- processors ----------------------------------------------------------------------------------


def test_a_running_processor_is_live_with_what_it_holds_then_drops_out(db):
    p = Processor(db, worker_heartbeat=0.05, monitor=False)
    go, started = threading.Event(), threading.Event()

    @p.handler("slow", timeout=30)
    def slow(ctx):
        started.set()
        go.wait(DEADLINE)
        return {}

    @p.handler("other", timeout=30)
    def other(ctx):
        return {}

    with running(p, concurrency=3):
        me = mine(db, p)
        assert me is not None and (me.types, me.concurrency, me.held) == (("other", "slow"), 3, 0)
        first_id = me.id
        future = p.submit("slow")
        assert started.wait(DEADLINE)
        assert wait_until(lambda: (w := mine(db, p)) is not None and w.held == 1)
        assert [(j.type, j.id) for j in mine(db, p).held_jobs] == [("slow", future.job_id)]
        go.set()
        future.result(DEADLINE)
        assert wait_until(lambda: (w := mine(db, p)) is not None and w.held == 0)
    assert workers.live_workers(db) == [] and workers.registered(db) == []
    with running(p, concurrency=1):  # another run, another id
        assert mine(db, p).id != first_id and mine(db, p).concurrency == 1
    assert workers.registered(db) == []


def test_a_cancelled_serve_unregisters(db):
    p = Processor(db, monitor=False)
    p.handler("t", timeout=30)(lambda ctx: {})

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(p.serve, 1)
            while not p.ready.is_set():
                await anyio.sleep(0.01)
            assert len(workers.live_workers(db)) == 1
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert workers.registered(db) == [] and p.registration.worker is None


# --- jobsctl workers, /status, /metrics -------------------------------------------------------------


def test_jobs_workers_text_and_json(tmp_path, capsys):
    url = f"sqlite:{tmp_path / 'store.sqlite'}"
    db = jobs.open(url)
    try:
        assert cli.main(["--store", url, "workers"]) == 0
        assert capsys.readouterr().out.strip() == "(no live workers)"
        w = workers.register(db, workers.new_worker(["resize", "thumb"], 4, interval=1.0))
        workers.heartbeat(db, w, [("resize", "img-1")], held_count=2)
        assert cli.main(["--store", url, "workers"]) == 0
        text = capsys.readouterr().out
        assert "HOST/PID" in text and f"{w.host}/{w.pid}" in text and "resize,thumb" in text
        assert w.id in text and "2 (resize/img-1, ...)" in text
        assert cli.main(["--store", url, "--json", "workers"]) == 0
        (doc,) = orjson.loads(capsys.readouterr().out)
        assert {k: doc[k] for k in ("id", "host", "pid", "types", "concurrency", "held", "held_jobs")} == {
            "id": w.id, "host": w.host, "pid": os.getpid(), "types": ["resize", "thumb"], "concurrency": 4,
            "held": 2, "held_jobs": [{"type": "resize", "id": "img-1", "over_time_limit_since": None}]}
        assert doc["started"] <= doc["heartbeat"] and doc["stale_after"] == workers.MIN_STALE
        assert cli.main(["--store", url, "status"]) == 0
        assert "live workers (1;" in capsys.readouterr().out
    finally:
        db.close()
    assert cli.main(["--store", f"sqlite:{tmp_path / 'nope.sqlite'}", "workers"]) == 1  # never creates a store


def _samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line[len(name):].rpartition(" ")
            out[labels] = float(value)
    return out


def test_status_and_metrics_show_the_live_workers(db):
    a = workers.register(db, workers.new_worker(["t", "u"], 2, interval=1.0))
    workers.register(db, workers.new_worker(["t"], 1, interval=1.0))
    workers.heartbeat(db, a, [("t", "x")])
    st = status.gather(db)
    assert sorted((w.types, w.held) for w in st.workers) == [(("t",), 0), (("t", "u"), 1)]
    text = metrics_text(Gathered(st, None, 0.01, 0.0))
    assert _samples(text, "jobs_workers") == {"": 2}
    assert _samples(text, "jobs_workers_by_type") == {'{type="t"}': 2, '{type="u"}': 1}
    assert _samples(text, "jobs_workers_held") == {"": 1}
    failed = metrics_text(Gathered(None, "down", 0.01, 0.0))
    assert "# TYPE jobs_workers gauge" in failed and _samples(failed, "jobs_workers") == {}
    with StatusServer(db, port=0, min_interval=0) as server:
        import urllib.request
        with urllib.request.urlopen(server.url + "status", timeout=DEADLINE) as r:
            doc = orjson.loads(r.read())
    assert sorted((d["types"], d["concurrency"]) for d in doc["workers"]) == [(["t"], 1), (["t", "u"], 2)]


# --- a processor killed with SIGKILL -------------------------------------------------------------


def test_a_killed_processor_drops_out_once_stale(tmp_path):
    url = f"sqlite:{tmp_path / 'store.sqlite'}"
    db = jobs.open(url)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), url], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def its_record():
            return next((w for w in workers.live_workers(db) if w.pid == proc.pid), None)

        assert wait_until(lambda: its_record() is not None or proc.poll() is not None), "never registered"
        assert proc.poll() is None, proc.communicate()[1].decode()
        w = its_record()
        assert w.types == ("k",) and w.stale_after < 5  # the short bound the script chose
        assert wait_until(lambda: (r := its_record()) is not None and r.heartbeat > w.heartbeat)  # it beats
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(DEADLINE)
        assert wait_until(lambda: its_record() is None)  # stale: not live, and cleared by the read
        assert all(r.pid != proc.pid for r in workers.registered(db))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        db.close()


def killable_worker(url: str) -> None:
    workers.MIN_STALE = 0.5  # (read by new_worker in this process: its record's stale_after)
    p = Processor(jobs.open(url), worker_heartbeat=0.1, monitor=False)
    p.handler("k", timeout=30)(lambda ctx: {})
    p.run(concurrency=2)


if __name__ == "__main__":
    killable_worker(*sys.argv[1:])
