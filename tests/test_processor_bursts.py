"""Worker processes woken again and again: a producer adds bursts of jobs one ``add`` at a
time, with pauses long enough for every worker to go idle (waiting on its watch) in
between, as ``bench.compare``'s sustained workload does once.  Every job runs exactly once
and every outcome is written: a job left running after its run (an outcome lost) fails
the wait below, long before its type timeout would re-enqueue it; no job is re-enqueued
and no worker says it lost an outcome."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import textwrap
import time

import jobs
from jobs.observe import status
from waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TYPE = "burst"
WORKERS = 3
BURSTS, PER_BURST = 8, 40
IDLE = 0.7  # seconds between bursts: more than an accept's wait slice (0.5 s), so every worker idles
TIMEOUT = 30.0  # the type timeout: far beyond the wait for outcomes, so a lost one shows as a job still running

APP = textwrap.dedent(f"""
    import os
    import jobs, processors

    processor = processors.Processor(jobs.open(), grace=1)

    @processor.handler({TYPE!r}, timeout={TIMEOUT})
    def run(ctx):
        fd = os.open(os.environ["BURST_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{{ctx.job_id}} {{os.getpid()}}\\n".encode())
        os.close(fd)
""")


def _runs(log) -> collections.Counter:
    return collections.Counter(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else \
        collections.Counter()


def test_workers_woken_by_bursts_run_every_job_once(tmp_path):
    url = f"sqlite:{tmp_path / 'store.sqlite'}"
    (tmp_path / "burstapp.py").write_text(APP)
    log = tmp_path / "runs.log"
    env = {**os.environ, "BURST_LOG": str(log),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), ROOT, os.environ.get("PYTHONPATH")]))}
    db = jobs.open(url)
    jobs.set_type_timeout(db, TYPE, TIMEOUT)
    outs = [open(tmp_path / f"worker-{i}.log", "w") for i in range(WORKERS)]
    procs = [subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", url, "worker", "burstapp:processor",
                               "--concurrency", "1"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
             for out in outs]
    try:
        warm = [f"warm-{i}" for i in range(2 * WORKERS)]
        for job_id in warm:
            jobs.add(db, TYPE, job_id)
        assert wait_until(lambda: sum(_runs(log).values()) >= len(warm), deadline=120), "workers did not start"
        ids = []
        for burst in range(BURSTS):
            time.sleep(IDLE)
            for n in range(PER_BURST):
                ids.append(f"b{burst}-{n:02d}")
                jobs.add(db, TYPE, ids[-1])
        everything = set(warm) | set(ids)

        def all_finished() -> bool:
            return {j.id for j in jobs.get_jobs(db, TYPE) if j.state == "finished"} == everything

        assert wait_until(all_finished, deadline=TIMEOUT - 5, interval=0.2), (
            "outcomes not written: " + repr(sorted(j.id for j in jobs.get_jobs(db, TYPE) if j.state != "finished")))
        runs = _runs(log)
        assert set(runs) == everything and [i for i, n in runs.items() if n != 1] == []
        (t,) = status.gather(db).types
        assert (t.finished, t.running, t.lost) == (len(everything), 0, 0)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for out in outs:
            out.close()
        db.close()
    said = "".join((tmp_path / f"worker-{i}.log").read_text() for i in range(WORKERS))
    assert "outcome was not written" not in said and "re-enqueued" not in said
    assert [p.returncode for p in procs] == [0] * WORKERS, said[-3000:]
