"""Limits hold when OS processes race for the same jobs: four workers,
with commits that fail on purpose (1020, 1021 committed or not), never have more jobs
running than the type's and each key's running limit, and never start more than the rate
limit allows in any period.

The workers are this file run as a script (``python test_limits_processes.py URL LOG
MODE``).  Each logs, on the same clock (``time.time``): ``call T`` before ``accept``,
``start ID KEY T`` once it returned the job, and ``end ID T`` just before ``finish``.  The
logged run of a job (start to end) lies inside its real one (accept's commit to finish's),
so more logged runs at once than the limit would mean more real ones: the count is sound.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import jobs
from jobs.engine.transactional import run

TYPE = "limited"
WORKERS = 4
KEYS = 4
PER_KEY = 20
RUNNING, KEY_RUNNING = 3, 1
RATE, PERIOD = 10, 0.5
FAULTS = dict(conflict=0.1, unknown_committed=0.1, unknown_not_committed=0.1)
TIMEOUT = 240  # seconds for the whole run: a safety net, not a measurement
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(url: str, log_path: str, mode: str) -> None:
    from jobs.engine.faults import FaultInjectingDatabase

    db = FaultInjectingDatabase(jobs.open(url), seed=os.getpid(), **FAULTS)
    give_up = time.monotonic() + TIMEOUT
    with open(log_path, "w", buffering=1) as log:
        while time.monotonic() < give_up:
            log.write(f"call {time.time()!r}\n")
            job = jobs.accept(db, TYPE, timeout=0.2)
            if job is None:
                if jobs.pending_count(db, TYPE) == 0:
                    break
                continue
            log.write(f"start {job.id} {job.data['key']} {time.time()!r}\n")
            if mode == "running":
                time.sleep(0.01)  # long enough for the others to try to start more
            log.write(f"end {job.id} {time.time()!r}\n")
            jobs.finish(db, job)
        else:
            raise SystemExit("store not empty before the time limit")
    db.close()


def _run_workers(tmp_path, url: str, mode: str) -> list[list[str]]:
    logs = [tmp_path / f"worker-{i}.log" for i in range(WORKERS)]
    env = {**os.environ, "PYTHONPATH": REPO}
    procs = [subprocess.Popen([sys.executable, __file__, url, str(log), mode], env=env) for log in logs]
    try:
        for proc in procs:
            assert proc.wait(TIMEOUT + 30) == 0
    finally:
        for proc in procs:
            proc.kill()
    return [line.split() for log in logs for line in log.read_text().splitlines()]


def _fill(url: str, keyed: bool) -> None:
    db = jobs.open(url)
    jobs.set_type_timeout(db, TYPE, 60)

    def body(tr):
        for k in range(KEYS):
            for i in range(PER_KEY):
                key = f"tenant-{k}"
                jobs.add(tr, TYPE, f"{key}-{i:03d}", {"key": key}, key=key if keyed else None)

    run(db, body)
    db.close()


def most_at_once(events: list[tuple[float, int]]) -> int:
    """The most runs at once, from ``(time, +1 start / -1 end)``; ends first at a tie."""
    now = peak = 0
    for _t, step in sorted(events, key=lambda e: (e[0], e[1])):
        now += step
        peak = max(peak, now)
    return peak


@pytest.fixture
def url(tmp_path):
    return "sqlite:" + str(tmp_path / "jobs.sqlite")


def test_no_more_jobs_run_at_once_than_the_limits(tmp_path, url):
    _fill(url, keyed=True)
    jobs.set_limits(jobs.open(url), TYPE, concurrency=RUNNING, key_concurrency=KEY_RUNNING)
    lines = _run_workers(tmp_path, url, "running")
    starts = {f[1]: (f[2], float(f[3])) for f in lines if f[0] == "start"}
    ends = {f[1]: float(f[2]) for f in lines if f[0] == "end"}
    assert len(starts) == KEYS * PER_KEY and set(ends) == set(starts)
    events = [(t, 1) for _k, t in starts.values()] + [(t, -1) for t in ends.values()]
    assert most_at_once(events) <= RUNNING
    for k in range(KEYS):
        key = f"tenant-{k}"
        mine = [job_id for job_id, (kk, _t) in starts.items() if kk == key]
        assert most_at_once([(starts[j][1], 1) for j in mine] + [(ends[j], -1) for j in mine]) <= KEY_RUNNING
    db = jobs.open(url)
    assert all(info.state == "finished" for info in jobs.get_jobs(db, TYPE))


def test_no_more_jobs_start_per_period_than_the_rate(tmp_path, url):
    _fill(url, keyed=False)
    jobs.set_limits(jobs.open(url), TYPE, rate=(RATE, PERIOD))
    lines = _run_workers(tmp_path, url, "rate")
    # Each start lies between its worker's last "call" and its "start" line.
    spans, last_call = [], {}
    for log_line in lines:
        if log_line[0] == "call":
            last_call["now"] = float(log_line[1])
        elif log_line[0] == "start":
            spans.append((last_call["now"], float(log_line[3])))
    assert len(spans) == KEYS * PER_KEY
    for begin, _end in spans:  # starts surely inside [begin, begin + PERIOD): at most RATE
        inside = sum(1 for b, e in spans if b >= begin and e < begin + PERIOD)
        assert inside <= RATE


if __name__ == "__main__":
    worker(*sys.argv[1:4])
