"""Poison jobs across real process deaths: handlers that SIGKILL their own worker, run by
worker processes started through the real CLI (``jobsctl worker``), beside a ``jobsctl monitor``
process, with a short type timeout.  Dead workers are replaced as a supervisor would.  The
job must not be re-run forever: after ``max_lost`` lost workers it ends failed, naming the
last worker lost; an operation whose partition job does that fails with the reason."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import jobs
from jobs.observe import status
from jobs import get_run_info
from processors.behaviors import TASK_KEY
from processors.operations import Operation, Operations
from waiting import DEADLINE, wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 1.0  # the type timeout: each lost worker costs about this much (plus a restart)

APP = textwrap.dedent('''
    import os, signal
    import jobs
    from processors import Processor, Retry
    from processors.operations import Operation, Operations

    MARKS = os.environ["POISON_MARKS"]


    def die(what):
        """Mark that this process ran ``what``, then kill it as an OOM killer would."""
        open(os.path.join(MARKS, f"ran-{what}-{os.getpid()}"), "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


    class Scan(Operation):
        type = "scan"
        job_timeout = 1.0

        def start_or_resume_job(self, ctx):
            if ctx.partition == "bad":
                die("scan")
            return {"rows": 1}

        def cancel_job_and_cleanup(self, tr, arg, table, partition):
            open(os.path.join(MARKS, f"cleaned-{partition}"), "w").close()


    class Once(Operation):
        type = "once"
        job_timeout = 1.0

        def start_or_resume_job(self, ctx):
            if ctx.partition == "b" and not ctx.job.lost:  # only its first run dies
                die("once")
            return {"lost": ctx.job.lost}


    class Seal(Operation):
        type = "seal"
        job_timeout = 1.0

        def start_or_resume_job(self, ctx):
            return {}

        def complete_operation(self, tr, arg, table, success, results):
            if success:  # a commit that crashes every process that tries it
                die("seal")


    db = jobs.open()
    # prefetch=1: a worker holds only the job it runs, so no other job is lost with it
    processor = Processor(db, prefetch=1)
    ops = Operations(db, lambda tr, table: ["a", "bad", "c"])
    ops.register(Scan())
    ops.register(Once())
    ops.register(Seal())
    ops.attach(processor)


    @processor.handler("poison", timeout=1.0, retry=Retry(max_attempts=2))
    def poison(ctx):
        die("poison")
''')


class Scan(Operation):  # the client's view of the same kind (start, wait)
    type = "scan"
    job_timeout = TIMEOUT


class Once(Operation):
    type = "once"
    job_timeout = TIMEOUT


class Seal(Operation):
    type = "seal"
    job_timeout = TIMEOUT


class Supervisor:
    """Worker processes (``jobsctl worker TARGET``, the app module in ``cwd``), each replaced
    when it dies, and one ``jobsctl monitor``; every process is stopped at the end."""

    def __init__(self, store: str, cwd, marks, workers: int, target: str = "poisonapp:processor"):
        self.env = {**os.environ, "POISON_MARKS": str(marks),
                    "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
        self.store, self.cwd, self.size, self.target = store, cwd, workers, target
        self.log = open(os.path.join(cwd, "workers.log"), "ab")
        self.workers: list[subprocess.Popen] = []
        self.dead: list[int] = []  # pids of the workers that died
        self.monitor = self._start("monitor")

    def _start(self, *command) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", self.store, *command], cwd=self.cwd,
                                env=self.env, stdout=subprocess.DEVNULL, stderr=self.log)

    def keep_up(self) -> None:
        """Replace the dead workers (call it while waiting)."""
        for proc in [p for p in self.workers if p.poll() is not None]:
            self.workers.remove(proc)
            self.dead.append(proc.pid)
        while len(self.workers) < self.size:
            self.workers.append(self._start("worker", self.target))

    def stop(self) -> None:
        for proc in [*self.workers, self.monitor]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.workers, self.monitor]:
            try:
                proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.log.close()


@pytest.fixture
def supervised(tmp_path):
    """``(db, supervisor, marks)`` on a store file in ``tmp_path``."""
    (tmp_path / "poisonapp.py").write_text(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    store = "sqlite:" + str(tmp_path / "jobs.sqlite")
    db = jobs.open(store)
    supervisor = Supervisor(store, tmp_path, marks, workers=2)
    try:
        yield db, supervisor, marks
    finally:
        supervisor.stop()
        db.close()


def ran(marks, what: str) -> list[int]:
    """Pids of the workers that ran ``what`` (and killed themselves)."""
    return [int(m.name.rsplit("-", 1)[1]) for m in marks.iterdir() if m.name.startswith(f"ran-{what}-")]


def wait_supervising(supervisor: Supervisor, predicate) -> bool:
    def check():
        supervisor.keep_up()
        return predicate()

    return wait_until(check, DEADLINE * 3, interval=0.1)


def lost_message(pids: list[int], before: str = "") -> re.Pattern:
    pid = "|".join(str(p) for p in pids)
    return re.compile(rf"{before}worker lost 3 times; last worker {re.escape(socket.gethostname())}/({pid}) at \d{{4}}-")


def test_a_handler_that_kills_its_worker_ends_failed_after_max_lost(supervised):
    db, supervisor, marks = supervised
    jobs.set_type_timeout(db, "poison", TIMEOUT)
    jobs.add(db, "poison", "j", {"x": 1})
    started = time.monotonic()
    assert wait_supervising(supervisor, lambda: jobs.get_job_state(db, "poison", "j") == "finished"), (
        f"still {jobs.get_job_state(db, 'poison', 'j')} after {time.monotonic() - started:.0f} s; "
        f"ran on {ran(marks, 'poison')}")
    killed = ran(marks, "poison")
    assert len(killed) == 3  # the default max_lost: not a fourth run
    assert set(killed) <= set(supervisor.dead)
    data = jobs.get_job_data(db, "poison", "j")
    task = data[TASK_KEY]
    assert data["x"] == 1 and task["failed"] is True and task["attempts"] == 1  # lost runs are not attempts
    assert task["last_error"]["type"] == "WorkerLost"
    assert lost_message(killed).match(task["last_error"]["message"]), task["last_error"]["message"]
    run_info = get_run_info(db, "poison", "j")
    assert run_info.lost.count == 3 and run_info.lost.worker in {f"{socket.gethostname()}/{p}" for p in killed}
    assert run_info.failed is not None
    (t,) = [t for t in status.gather(db).types if t.type == "poison"]
    assert (t.failed, t.lost, t.running, t.pending) == (1, 3, 0, 0)


def test_a_partition_job_that_kills_its_worker_fails_the_operation(supervised):
    db, supervisor, marks = supervised
    ops = Operations(db, lambda tr, table: ["a", "bad", "c"])
    ops.register(Scan())
    instance = ops.start_operation("scan", "db.t")
    assert wait_supervising(supervisor, lambda: ops.operation_status(db, "db.t", "scan", instance).done), (
        f"operation still {ops.operation_status(db, 'db.t', 'scan', instance).state}; ran on {ran(marks, 'scan')}")
    result = ops.operation_status(db, "db.t", "scan", instance)
    assert result.state == "failed" and result.partitions["bad"] == "failed"
    killed = ran(marks, "scan")
    assert len(killed) == 3
    assert lost_message(killed).match(result.results["bad"]["reason"]), result.results["bad"]
    assert (marks / "cleaned-bad").exists()


def test_a_coordinator_that_kills_its_worker_leaves_the_operation_stuck_and_cancellable(supervised):
    db, supervisor, marks = supervised
    ops = Operations(db, lambda tr, table: ["a", "b"])
    ops.register(Seal())
    instance = ops.start_operation("seal", "db.s")
    assert wait_supervising(supervisor, lambda: ops.operation_status(db, "db.s", "seal", instance).stuck), (
        f"not stuck; the coordinator ran on {ran(marks, 'seal')}")
    stuck = ops.operation_status(db, "db.s", "seal", instance)
    killed = ran(marks, "seal")
    assert stuck.state == "running" and len(killed) == 3
    assert lost_message(killed, "its coordinator failed: ").match(stuck.stuck), stuck.stuck
    assert stuck.stuck.endswith("; cancel the operation to end it")
    assert ops.cancel_operation("db.s", "seal", instance)
    supervisor.keep_up()
    done = ops.wait_operation("db.s", "seal", instance, timeout=DEADLINE)
    assert done.state == "cancelled" and len(ran(marks, "seal")) == 3


def test_a_partition_job_whose_worker_is_killed_once_is_run_elsewhere_and_the_operation_succeeds(supervised):
    db, supervisor, marks = supervised
    ops = Operations(db, lambda tr, table: ["a", "b", "c"])
    ops.register(Once())
    instance = ops.start_operation("once", "db.o")
    assert wait_supervising(supervisor, lambda: ops.operation_status(db, "db.o", "once", instance).done)
    result = ops.operation_status(db, "db.o", "once", instance)
    (killed,) = ran(marks, "once")
    assert result.state == "success" and result.results["b"] == {"lost": 1}  # the re-run was told
    assert result.results["a"] == result.results["c"] == {"lost": 0}
    first, second = result.ran_on["b"]  # the killed worker, then the one that finished it
    assert first.endswith(f":{killed}") and not second.endswith(f":{killed}")
