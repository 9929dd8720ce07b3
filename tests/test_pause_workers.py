"""Pausing a type, seen by workers: a Processor stops taking the type's jobs
while its running job heartbeats and finishes, and takes them again on resume; a pause
made in one process is obeyed by an accept in another, which wakes on the resume.

Run as a script (``python test_pause_workers.py URL LOG``), this file is that other
process: it logs ``none`` after an accept that returned nothing at once, then
``waiting`` each time an accept waits on its watch, and ``accepted ID``.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import jobs
from jobs.queue import accepting, rows
from jobs.engine.transactional import run
from processors import Processor
from waiting import DEADLINE, running, wait_until

T = "t"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def paused_attempts(monkeypatch):
    """An Event set whenever an accept attempt (in this process) finds its type paused."""
    seen = threading.Event()
    nothing = accepting.AcceptCall._nothing_to_take

    def spy(self, tr, also, max_stime, *args, **kwargs):
        if max_stime is None:
            seen.set()
        return nothing(self, tr, also, max_stime, *args, **kwargs)

    monkeypatch.setattr(accepting.AcceptCall, "_nothing_to_take", spy)
    return seen


def _seq(db, job_id):
    return run(db, lambda tr: rows.get(tr, "slow", job_id).seq)


def test_a_processor_takes_no_jobs_of_a_paused_type_and_resumes(db, paused_attempts):
    p = Processor(db)
    go = threading.Event()
    started = []

    @p.handler("slow", timeout=1)
    def slow(ctx):
        started.append(ctx.job_id)
        while not go.is_set():
            ctx.check()
            time.sleep(0.05)
        return {"done": ctx.job_id}

    # One lane: while it runs the first job nobody accepts, so the second waits for it.
    with running(p, concurrency=1):
        first = p.submit("slow")
        assert wait_until(lambda: started == [first.job_id])
        second = p.submit("slow")
        jobs.pause(db, "slow")
        stamps = set()

        def beaten_twice():  # heartbeats go on while paused (timeout 1 s: monitored)
            stamps.add(_seq(db, first.job_id))
            return len(stamps) >= 3

        assert wait_until(beaten_twice)
        paused_attempts.clear()
        go.set()
        assert first.result(DEADLINE) == {"done": first.job_id}  # finished while paused
        assert paused_attempts.wait(DEADLINE), "the processor never looked for jobs again"
        assert jobs.get_job_state(db, "slow", second.job_id) == "pending" and started == [first.job_id]
        jobs.resume(db, "slow")
        assert second.result(DEADLINE) == {"done": second.job_id}
    assert p.stats["halted"] == 0


# --- another process -------------------------------------------------------------------------


def worker(url: str, log_path: str) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks if it hangs
    db = jobs.open(url)
    with open(log_path, "w", buffering=1) as log:
        log.write("none\n" if jobs.accept(db, T, timeout=0) is None else "took one at once\n")
        wait = accepting.AcceptCall.wait

        def logged(call, w):
            log.write("waiting\n")
            return wait(call, w)

        accepting.AcceptCall.wait = logged
        job = jobs.accept(db, T, timeout=DEADLINE)
        log.write(f"accepted {None if job is None else job.id}\n")
        if job is not None:
            jobs.finish(db, job)
    db.close()


def test_a_pause_in_one_process_is_obeyed_by_another(tmp_path):
    url = f"sqlite:{tmp_path / 'store.sqlite'}"
    db = jobs.open(url)
    log = tmp_path / "worker.log"

    def lines():
        return log.read_text().splitlines() if log.exists() else []

    try:
        jobs.set_type_timeout(db, T, 60)
        jobs.pause(db, T)
        jobs.add(db, T, "a")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), url, str(log)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            if not wait_until(lambda: "waiting" in lines() or proc.poll() is not None):
                pytest.fail(f"the worker never waited; its log: {lines()}; its threads:\n{_stacks_of(proc)}")
            assert lines()[:2] == ["none", "waiting"], (
                proc.communicate()[1].decode() if proc.poll() is not None else lines())
            assert jobs.get_job_state(db, T, "a") == "pending"
            jobs.resume(db, T)  # wakes the other process's waiting accept
            _out, err = proc.communicate(timeout=DEADLINE)
            assert proc.returncode == 0, err.decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert lines()[0] == "none" and lines()[-1] == "accepted a"
        assert jobs.get_job_state(db, T, "a") == "finished"
    finally:
        db.close()


def _stacks_of(proc: subprocess.Popen) -> str:
    """The stacks of a hung worker's threads (its faulthandler prints them on SIGUSR1),
    and whatever else it wrote to stderr; the worker is killed."""
    proc.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    proc.kill()
    _out, err = proc.communicate(timeout=DEADLINE)
    return err.decode(errors="replace")[-8000:]


if __name__ == "__main__":
    worker(*sys.argv[1:])
