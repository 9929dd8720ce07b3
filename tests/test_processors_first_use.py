"""Processors as a new user meets them: submitting before any worker ran, recurring
handlers that start themselves, run-time limits, a batch run best first, an idle worker
that stops at once, and tracebacks that start at the handler.

Processors run on a thread (signals off) or, for the stop of a worker process, as
``python -m jobsctl worker``; every wait is on a condition with a generous deadline.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path

import anyio
import pytest
from stores import store_url
from waiting import DEADLINE, running, wait_until

import jobs
import processors
from jobs.observe import status
from jobsctl import views
from monitor.documents import job_document
from processors import Processor, Retry, TaskFailed, TimeLimitExceeded, holding
from processors.behaviors import EVERY_JOB_ID, OVER_TIME_LIMIT, TASK_KEY
from processors.submit import DEFAULT_TYPE_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]  # (the tree under test: a worker process runs its code)


def live(db, type) -> list[str]:
    """Ids of the type's pending or running jobs."""
    return [j.id for j in jobs.get_jobs(db, type) if j.state in ("pending", "running")]


# --- submitting before any worker of the type ran ------------------------------------------


def test_a_task_submitted_before_any_worker_ran_runs_once_one_starts(db):
    """On a fresh store, submit() declares a default type timeout with its add, and the job
    runs when a worker starts, whose declared timeout then takes over.  ``jobs.add`` keeps
    couch_jobs' contract: a type without a timeout is refused until one is set."""
    future = processors.submit(db, "email", {"to": "a@b"})
    unique = processors.submit(db, "email", {"to": "c@d"}, unique=True)
    assert jobs.get_type_timeout(db, "email") == DEFAULT_TYPE_TIMEOUT
    assert sorted(live(db, "email")) == sorted([future.job_id, unique.job_id])

    with pytest.raises(jobs.NoTypeTimeout):
        jobs.add(db, "other", "x")
    jobs.set_type_timeout(db, "other", 5)
    jobs.add(db, "other", "x")  # (as before, once it is set)

    p = Processor(db)

    @p.handler("email", timeout=7)
    def send(ctx):
        return {"sent": ctx.data["to"]}

    with running(p):
        assert future.result(DEADLINE) == {"sent": "a@b"}
        assert unique.result(DEADLINE) == {"sent": "c@d"}
    assert jobs.get_type_timeout(db, "email") == 7


def test_jobsctl_add_can_declare_the_timeout_of_a_type_no_worker_ran(tmp_path, capsys):
    """``jobsctl add --type-timeout SECONDS`` sets the type's timeout if it has none (and
    only then); without it the add still fails for such a type, as ``jobs.add`` does."""
    from jobsctl import cli

    url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    assert cli.main(["--store", url, "add", "mail", "j1"]) == 1
    assert "set-timeout mail SECONDS" in capsys.readouterr().err
    assert cli.main(["--store", url, "add", "mail", "j1", "--type-timeout", "45"]) == 0
    assert cli.main(["--store", url, "add", "mail", "j2", "--type-timeout", "99"]) == 0
    assert cli.main(["--store", url, "add", "mail", "j3", "--type-timeout", "0"]) == 2
    assert "expected a positive number of seconds" in capsys.readouterr().err
    with jobs.store.opened(url) as db:
        assert jobs.get_type_timeout(db, "mail") == 45
        assert live(db, "mail") == ["j1", "j2"]


# --- every= handlers start themselves ---------------------------------------------------------


def test_an_every_handler_starts_its_one_chain_when_the_processor_starts(db):
    """Nobody adds a job: the processor starts the chain (the job ``every``); a second
    processor starting adds no second one."""
    p, q = Processor(db), Processor(db)
    runs = []

    for proc in (p, q):
        @proc.handler("tick", timeout=10, every=0.05)
        def tick(ctx):
            runs.append(1)
            return {"n": len(runs)}

    with running(p), running(q):
        assert wait_until(lambda: len(runs) >= 3)
        assert live(db, "tick") == [EVERY_JOB_ID]
    data = jobs.get_job_data(db, "tick", EVERY_JOB_ID)
    assert data[TASK_KEY]["runs"] >= 3
    assert [j.id for j in jobs.get_jobs(db, "tick")] == [EVERY_JOB_ID]


def test_adding_a_recurring_job_by_hand_makes_no_second_chain(db):
    """Adding the chain's own id by hand moves it (one job); a job added under another id
    runs once (the chain is the pending or running job of the smallest id), so that one
    chain is left however many were added."""
    p = Processor(db)
    seen = []

    @p.handler("tick", timeout=10, every=0.05)
    def tick(ctx):
        seen.append(dict(ctx.data))
        return {"ok": True}

    with running(p):
        assert wait_until(lambda: len(seen) >= 1)
        jobs.add(db, "tick", EVERY_JOB_ID, {})
        jobs.add(db, "tick", "zz-by-hand", {"once": True})
        assert wait_until(lambda: jobs.get_job_state(db, "tick", "zz-by-hand") == "finished")
        assert jobs.get_job_data(db, "tick", "zz-by-hand") == {"ok": True}  # a one-off's result
        count = len(seen)
        assert wait_until(lambda: len(seen) >= count + 3)  # the chain goes on
        assert live(db, "tick") == [EVERY_JOB_ID]
    assert sum(1 for d in seen if d.get("once")) == 1


# --- run-time limits ---------------------------------------------------------------------------


def test_a_run_over_its_time_limit_is_interrupted_and_retried_then_fails(db):
    """A sync handler spinning in Python and an async one sleeping are stopped at their
    limit; each such run is a failed attempt (TimeLimitExceeded), retried by the policy."""
    p = Processor(db)
    calls = {"spin": 0, "nap": 0}

    @p.handler("spin", timeout=30, time_limit=0.2, retry=Retry(max_attempts=2, backoff=0.01, max_backoff=0.01))
    def spin(ctx):
        calls["spin"] += 1
        while True:
            pass

    @p.handler("nap", timeout=30, time_limit=0.2, retry=Retry(max_attempts=2, backoff=0.01, max_backoff=0.01))
    async def nap(ctx):
        calls["nap"] += 1
        await anyio.sleep(3600)

    with running(p, concurrency=2):
        futures = [p.submit("spin", {}), p.submit("nap", {})]
        for future in futures:
            with pytest.raises(TaskFailed) as failed:
                future.result(DEADLINE)
            assert failed.value.error["type"] == TimeLimitExceeded.__qualname__
            assert "time limit of 0.2 s" in failed.value.error["message"]
    assert calls == {"spin": 2, "nap": 2}
    assert p.stats["retried"] == 2 and p.stats["failed"] == 2


def test_a_handler_blocked_in_c_code_is_shown_over_its_limit_until_it_returns(db):
    """A handler blocked in C (a lock wait) cannot be interrupted: while it is, its job's
    document (``jobsctl show``) says it is over its time limit, and so do the workers
    registry and ``jobsctl status`` (its running jobs and the worker's held ones); once it
    returns, the run is a failed attempt all the same, and the mark is gone."""
    p = Processor(db, worker_heartbeat=0.5)
    release = threading.Event()

    @p.handler("stuck", timeout=30, time_limit=0.2)
    def stuck(ctx):
        release.wait(DEADLINE)  # (C code: an interrupt waits for it to return)
        return {"done": True}

    def mark(job_id):
        return job_document(db, "stuck", job_id)["data"].get(TASK_KEY, {}).get(OVER_TIME_LIMIT)

    with running(p):
        future = p.submit("stuck", {"x": 1})
        assert wait_until(lambda: mark(future.job_id) is not None)
        assert mark(future.job_id)["limit"] == 0.2
        assert jobs.get_job_state(db, "stuck", future.job_id) == "running"
        assert wait_until(lambda: ("stuck", future.job_id) in views.over_time_limit(status.gather(db)))
        text = views.human_status(status.gather(db))
        assert f"{future.job_id} (over its time limit)" in text and "1 (1 over time limit)" in text
        release.set()
        with pytest.raises(TaskFailed) as failed:
            future.result(DEADLINE)
        assert failed.value.error["type"] == TimeLimitExceeded.__qualname__
    data = jobs.get_job_data(db, "stuck", future.job_id)
    assert OVER_TIME_LIMIT not in data[TASK_KEY] and data["x"] == 1


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), float("inf"), True, "5", [1]])
def test_a_bad_time_limit_is_refused_clearly(db, bad):
    p = Processor(db)
    with pytest.raises(ValueError, match="time_limit must be a positive number of seconds"):
        p.handler("t", timeout=5, time_limit=bad)
    p.handler("t", timeout=5, time_limit=2)(lambda ctx: None)  # (a good one)


def test_timeout_is_documented_as_the_heartbeat_timeout():
    doc = Processor.handler.__doc__
    assert "``timeout``: the heartbeat timeout" in doc and "``time_limit``" in doc


# --- a batch runs best first ----------------------------------------------------------------------


def test_a_batch_is_handed_to_the_lanes_best_priority_first_across_job_keys(db):
    """A batch taken across job keys comes in the keys' turns; the lanes take its runs by
    priority, then scheduled time (and a batch accepted while the buffer holds runs goes
    in among them by the same order)."""
    from processors.feed import Feed

    jobs.set_type_timeout(db, "b", 30)
    plan = {"k0": [(5, 1.0), (6, 1.0)], "k1": [(-3, 2.0), (7, 1.0)], "k2": [(0, 2.0), (0, 1.0)]}
    for key, entries in plan.items():
        for n, (priority, at) in enumerate(entries):
            jobs.add(db, "b", f"{key}-{n}", {"p": priority, "at": at}, scheduled_time=at, priority=priority, key=key)

    class Outcomes:  # (none queued)
        def __len__(self):
            return 0

        def take(self, room=None):
            return []

    feed = Feed(db, ["b"], 4, 64, hold=lambda taken: [types.SimpleNamespace(job=j) for j in taken],
                in_hand=lambda: 0, finishes=Outcomes(), stopping=threading.Event(), stats=collections.Counter())
    feed.pace.run, feed.pace.measured = 1e-6, True  # (short jobs: the whole queue in one batch)
    try:
        taken = [feed.take().job for _ in range(6)]
    finally:
        feed.stop()
    assert [(j.data["p"], j.data["at"]) for j in taken] == [(-3, 2.0), (0, 1.0), (0, 2.0), (5, 1.0), (6, 1.0),
                                                            (7, 1.0)]

    late = jobs.Job("b", "late", {"p": -9}, b"", None, priority=-9, scheduled_time=0.0)
    first = jobs.Job("b", "first", {"p": 1}, b"", None, priority=1, scheduled_time=0.0)
    feed._ready.extend([types.SimpleNamespace(job=first)])
    feed.acceptor.step = lambda slice_seconds, limit, also=None: [late]
    feed._fill(1)
    assert [r.job.id for r in feed._ready] == ["late", "first"]


# --- an idle worker stops at once ---------------------------------------------------------------


def test_stop_wakes_the_idle_lost_job_watcher_rather_than_waiting_out_its_wait(db, monkeypatch):
    """The lost-job watcher of an idle processor waits in a thread the event loop must
    join before serve() returns; stop() ends that wait: with the wait made an hour long,
    the processor still stops (and the wait returned because it was woken)."""
    monkeypatch.setattr(holding, "WATCH_WAIT", 3600.0)
    returned = []
    wait_added = holding.Held.wait_added

    def recorded(self, timeout):
        wait_added(self, timeout)
        returned.append(self._closed)

    monkeypatch.setattr(holding.Held, "wait_added", recorded)
    p = Processor(db)

    @p.handler("t", timeout=30)
    def h(ctx):
        return None

    thread = threading.Thread(target=p.run, kwargs={"signals": False}, daemon=True)
    thread.start()
    assert wait_until(p.ready.is_set)
    p.stop()
    thread.join(DEADLINE)
    assert not thread.is_alive(), "the idle processor did not stop: its watcher still waits"
    assert returned and returned[-1] is True  # (woken by stop, not by a job or the time)


WORKER_MODULE = """\
import jobs
import processors
from processors import holding

holding.WATCH_WAIT = 3600.0  # (an idle watcher's wait: it ends because SIGTERM woke it)
processor = processors.Processor(jobs.open())


@processor.handler("idle", timeout=30)
def idle(ctx):
    return None
"""


def test_an_idle_worker_process_exits_soon_after_sigterm(db, engine_name, tmp_path):
    """An idle ``jobsctl worker`` exits on SIGTERM without waiting out the waits of its
    threads (here the lost-job watcher's, made an hour long), and unregisters."""
    if engine_name == "memory":
        pytest.skip("a worker process cannot reach a private memory store")
    url = store_url(engine_name, tmp_path)
    (tmp_path / "idle_worker_mod.py").write_text(WORKER_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "JOBS_STORE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])  # (this tree's code, and the module)
    with open(tmp_path / "err.txt", "w") as err:  # (the worker keeps its own descriptor)
        proc = subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", url, "worker",
                                 "idle_worker_mod:processor"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                stderr=err)

    def registered():
        return any(w.pid == proc.pid for w in jobs.observe.workers.live_workers(db))

    try:
        assert wait_until(lambda: registered() or proc.poll() is not None), (tmp_path / "err.txt").read_text()
        assert registered(), (tmp_path / "err.txt").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE / 4) == 0, (tmp_path / "err.txt").read_text()
        assert not registered()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- tracebacks start at the handler --------------------------------------------------------------


def _helper_that_fails(n):
    raise ValueError(f"bad input {n}")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_failed_jobs_traceback_starts_at_the_handler(db, kind):
    p = Processor(db)

    if kind == "sync":
        @p.handler("boom", timeout=30)
        def boom(ctx):
            _helper_that_fails(ctx.data["n"])
    else:
        @p.handler("boom", timeout=30)
        async def boom(ctx):
            _helper_that_fails(ctx.data["n"])

    with running(p), pytest.raises(TaskFailed) as failed:
        p.submit("boom", {"n": 3}).result(DEADLINE)
    tb = failed.value.error["traceback"]
    lines = tb.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "in boom" in lines[1] and __file__ in lines[1], tb  # the handler's frame first
    assert "_helper_that_fails" in tb and tb.rstrip().endswith("ValueError: bad input 3")
    package = os.path.dirname(processors.__file__)
    assert not any(f'File "{package}{os.sep}' in line for line in lines), tb
