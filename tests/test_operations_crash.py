"""Operations across real process deaths: worker processes started through the CLI, the
one holding the coordinator killed with SIGKILL while it runs the completion code; another
takes over and the operation completes exactly once in effect."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import jobs
from processors.operations import Operation, Operations, coordinator_type
from waiting import DEADLINE, wait_until

APP = textwrap.dedent('''
    import os, time
    import jobs
    from processors import Processor
    from processors.operations import Operation, Operations

    MARKS = os.environ["OPAPP_MARKS"]

    class Hang(Operation):
        type = "hang"
        job_timeout = 2.0

        def start_or_resume_job(self, ctx):
            return {"partition": ctx.partition}

        def complete_operation(self, tr, arg, table, success, results):
            open(os.path.join(MARKS, f"complete-{os.getpid()}"), "w").close()
            while not os.path.exists(os.path.join(MARKS, "go")):  # the first one is killed here
                time.sleep(0.02)

    db = jobs.open()
    ops = Operations(db, lambda tr, table: ["a", "b", "c"])
    ops.register(Hang())
    processor = Processor(db)
    ops.attach(processor)
''')


class Hang(Operation):  # the client's view of the same kind (start, wait)
    type = "hang"
    job_timeout = 2.0


def _worker(store: str, cwd, marks) -> subprocess.Popen:
    env = {**os.environ, "OPAPP_MARKS": str(marks)}
    return subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", store, "worker", "opapp:processor"],
                            cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_coordinator_killed_while_completing_is_replaced(tmp_path):
    (tmp_path / "opapp.py").write_text(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    store = "sqlite:" + str(tmp_path / "jobs.sqlite")
    db = jobs.open(store)
    ops = Operations(db, lambda tr, table: ["a", "b", "c"])
    ops.register(Hang())
    first = _worker(store, tmp_path, marks)
    second = None
    try:
        instance = ops.start_operation("hang", "db.t")
        assert wait_until(lambda: any(m.name.startswith("complete-") for m in marks.iterdir()), DEADLINE)
        first.send_signal(signal.SIGKILL)  # dies inside complete_operation, holding the coordinator
        first.wait(DEADLINE)
        assert ops.operation_status(db, "db.t", "hang", instance).state == "running"
        (marks / "go").touch()
        second = _worker(store, tmp_path, marks)
        status = ops.wait_operation("db.t", "hang", instance, timeout=DEADLINE)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(DEADLINE)
    assert status.state == "success"
    assert sorted(status.partitions.values()) == ["success"] * 3
    completions = sorted(m.name for m in marks.iterdir() if m.name.startswith("complete-"))
    assert completions == sorted([f"complete-{first.pid}", f"complete-{second.pid}"])  # ran twice ...
    assert ops.running_operations(db, "db.t") == []  # ... and took effect once
    assert jobs.get_job_state(db, coordinator_type("hang"), f"db.t/{instance}") == "finished"
    assert second.returncode == 0
