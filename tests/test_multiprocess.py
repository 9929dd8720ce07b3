"""Four OS processes take jobs from one store file until it is empty: every job is accepted
exactly once and finished exactly once, also when every process's commits fail on purpose
(1020, 1021 committed or not, 1007) and the job layer's retries must stay idempotent.

The workers are this file run as a script (``python test_multiprocess.py URL LOG ...``):
each logs ``accepted ID`` once ``accept`` returned the job and ``finished ID`` once
``finish`` returned, so the logs are what the workers really saw.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time

import pytest

TYPE = "mp"
JOBS = 400
WORKERS = 4
FAULTS = dict(conflict=0.1, unknown_committed=0.1, unknown_not_committed=0.1, too_old=0.1)
TIMEOUT = 240  # seconds for the whole run: generous, a safety net, not a measurement
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(url: str, log_path: str, ready_path: str, go_path: str, faults: dict | None) -> None:
    import jobs
    from jobs.engine.faults import FaultInjectingDatabase

    db = jobs.open(url)
    if faults:
        db = FaultInjectingDatabase(db, seed=os.getpid(), **faults)
    open(ready_path, "w").close()
    give_up = time.monotonic() + TIMEOUT
    while not os.path.exists(go_path):  # start together, so that the workers contend
        if time.monotonic() > give_up:
            raise SystemExit("never told to start")
        time.sleep(0.005)
    with open(log_path, "w", buffering=1) as log:
        while time.monotonic() < give_up:
            job = jobs.accept(db, TYPE, timeout=0)
            if job is None:
                if jobs.pending_count(db, TYPE) == 0:
                    break
                continue
            log.write(f"accepted {job.id}\n")
            jobs.finish(db, job, {**job.data, "worker": os.getpid()})
            log.write(f"finished {job.id}\n")
        else:
            raise SystemExit("store not empty before the time limit")
        if faults:
            log.write(f"faults {json.dumps(dict(db.injected))}\n")
    db.close()


def _wait_for(paths, procs, deadline):
    while not all(os.path.exists(p) for p in paths):
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                pytest.fail(f"worker {p.pid} exited early ({p.returncode}):\n{err.decode()}")
        if time.monotonic() > deadline:
            pytest.fail("workers did not get ready in time")
        time.sleep(0.01)


@pytest.mark.parametrize("faults", [None, FAULTS], ids=["plain", "faults"])
def test_four_processes_drain_one_store(tmp_path, faults):
    import jobs

    url = f"sqlite:{tmp_path / 'store.sqlite'}"
    db = jobs.open(url)
    jobs.set_type_timeout(db, TYPE, 3600)  # no monitor runs here: nothing re-enqueues
    ids = [f"job-{n:04d}" for n in range(JOBS)]
    for first in range(0, JOBS, 100):

        @jobs.transactional
        def add_batch(tr, first=first):
            for n in range(first, first + 100):
                jobs.add(tr, TYPE, ids[n], {"n": n})

        add_batch(db)
    assert jobs.pending_count(db, TYPE) == JOBS

    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    procs, logs, readies = [], [], []
    for w in range(WORKERS):
        log, ready = tmp_path / f"worker-{w}.log", tmp_path / f"ready-{w}"
        args = [url, str(log), str(ready), str(go), json.dumps(faults)]
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
        logs.append(log)
        readies.append(ready)
    deadline = time.monotonic() + TIMEOUT
    try:
        _wait_for(readies, procs, deadline)
        go.touch()
        for p in procs:
            _out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert p.returncode == 0, f"worker {p.pid} failed ({p.returncode}):\n{err.decode()}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    accepted, finished, per_worker = collections.Counter(), collections.Counter(), {}
    injected = collections.Counter()
    for p, log in zip(procs, logs):
        lines = log.read_text().splitlines()
        mine = [line.split(" ", 1)[1] for line in lines if line.startswith("finished ")]
        per_worker[p.pid] = set(mine)
        accepted.update(line.split(" ", 1)[1] for line in lines if line.startswith("accepted "))
        finished.update(mine)
        for line in lines:
            if line.startswith("faults "):
                injected.update(json.loads(line.split(" ", 1)[1]))

    assert sorted(accepted) == ids, "accepted: missing or unknown ids"
    assert [i for i, c in accepted.items() if c != 1] == [], "accepted more than once"
    assert sorted(finished) == ids and [i for i, c in finished.items() if c != 1] == []
    infos = jobs.get_jobs(db, TYPE)
    assert [j.id for j in infos] == ids
    assert [j.id for j in infos if j.state != "finished"] == []
    assert jobs.pending_count(db, TYPE) == 0 and jobs.get_active_jobs_ids(db, TYPE) == []
    for info in infos:  # the finish that committed is the one its worker logged
        assert info.data["n"] == ids.index(info.id)
        assert info.id in per_worker[info.data["worker"]]
    if faults:
        assert sum(injected.values()) > 0, "no fault was injected: the test would prove nothing"
    sizes = sorted(len(s) for s in per_worker.values())
    print(f"jobs per worker: {sizes}; injected faults: {dict(injected)}")
    db.close()


if __name__ == "__main__":
    _url, _log, _ready, _go, _faults = sys.argv[1:6]
    worker(_url, _log, _ready, _go, json.loads(_faults))
