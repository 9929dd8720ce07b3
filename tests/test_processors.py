"""Processors: the worker loop (accept, heartbeat, finish; Halt; shutdown) and the task
behaviors (retry, recurring, unique ids, submit futures).

Each test runs a Processor on a thread (signals off) over the ``db`` fixture's store and
waits on conditions with generous deadlines; no test asserts how long anything took.
"""

from __future__ import annotations

import threading
import time

import anyio
import pytest

import jobs
import processors
from processors import Processor, Retry, TaskFailed
from processors.behaviors import TASK_KEY
from waiting import DEADLINE, running, wait_until


def state(db, type, job_id):
    try:
        return jobs.get_job_state(db, type, job_id)
    except jobs.NotFound:
        return "not_found"


# --- the loop ---------------------------------------------------------------------------


def test_sync_and_async_handlers_finish_with_their_results(db):
    p = Processor(db)

    @p.handler("square", timeout=10)
    def square(ctx):
        return {"y": ctx.data["x"] ** 2}

    @p.handler("double", timeout=10)
    async def double(ctx):
        await anyio.sleep(0)
        return {"y": ctx.data["x"] * 2}

    with running(p, concurrency=3):
        squares = [p.submit("square", {"x": i}) for i in range(10)]
        doubles = [p.submit("double", {"x": i}) for i in range(10)]
        assert [f.result(DEADLINE)["y"] for f in squares] == [i * i for i in range(10)]
        assert [f.result(DEADLINE)["y"] for f in doubles] == [2 * i for i in range(10)]
    for f in squares:
        assert jobs.get_job(db, "square", f.job_id).state == "finished"
    assert p.stats["succeeded"] == 20 and p.stats["accepted"] == 20


def test_handler_returning_none_keeps_the_data_and_update_records_progress(db):
    p = Processor(db)
    seen = threading.Event()
    go = threading.Event()

    @p.handler("t", timeout=10)
    def handler(ctx):
        ctx.update({**ctx.data, "progress": 50})
        seen.set()
        go.wait(DEADLINE)
        return None

    with running(p):
        f = p.submit("t", {"x": 1})
        assert seen.wait(DEADLINE)
        assert jobs.get_job_data(db, "t", f.job_id) == {"x": 1, "progress": 50}
        go.set()
        assert f.result(DEADLINE) == {"x": 1, "progress": 50}


def test_a_pending_job_whose_row_cannot_be_read_does_not_stop_the_workers(db):
    """It is taken off the queue unrun (``jobs.queue.accepting``), and the other jobs run."""
    jobs.set_type_timeout(db, "t", 10)
    ids = ["bad", *(f"g{i}" for i in range(5))]
    for job_id in ids:
        jobs.add(db, "t", job_id, {"x": 1})
    db[jobs.keys.data_key("t", "bad")] = b"not a row"
    p = Processor(db)

    @p.handler("t", timeout=10)
    def handler(ctx):
        return {"done": True}

    with running(p):
        assert wait_until(lambda: all(state(db, "t", job_id) == "finished" for job_id in ids[1:]))
    assert p.stats["succeeded"] == 5 and db[jobs.keys.data_key("t", "bad")] == b"not a row"


def test_heartbeats_keep_a_long_job_alive_past_its_type_timeout(db):
    """Type timeout 1 s, a job running for several timeouts: the processor's heartbeats
    keep it, so the activity monitor (run by the processor) never re-enqueues it."""
    p = Processor(db)
    calls = []

    @p.handler("slow", timeout=1)
    def slow(ctx):
        calls.append(ctx.job_id)
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            ctx.check()
            time.sleep(0.05)
        return {"done": True}

    with running(p):
        f = p.submit("slow")
        assert f.result(DEADLINE) == {"done": True}
    assert calls == [f.job_id]  # ran once: never re-enqueued
    assert p.stats["halted"] == 0


@pytest.mark.parametrize("kind", ["sync", "async", "cooperative"])
def test_removed_job_halts_its_handler_and_nothing_more_is_written(db, kind):
    p = Processor(db)
    started = threading.Event()
    stopped = threading.Event()
    writes = []

    if kind == "async":

        @p.handler("t", timeout=1)
        async def handler(ctx):
            started.set()
            try:
                await anyio.sleep(DEADLINE)
            finally:
                stopped.set()
            writes.append("too late")
            return {"out": 1}

    else:

        @p.handler("t", timeout=1, interrupt=(kind == "sync"))
        def handler(ctx):
            started.set()
            try:
                while not (kind == "cooperative" and ctx.halted):
                    time.sleep(0.01)
            finally:
                stopped.set()
            writes.append("too late")
            return {"out": 1}

    with running(p):
        jobs.add(db, "t", "j1", {"in": 1})
        assert started.wait(DEADLINE)
        jobs.remove(db, "t", "j1")
        assert stopped.wait(DEADLINE), "the handler was not stopped"
        assert wait_until(lambda: p.stats["halted"] == 1)
        assert state(db, "t", "j1") == "not_found"
    assert writes == ([] if kind != "cooperative" else ["too late"])
    assert p.stats["succeeded"] == 0


def test_a_halted_run_never_commits_its_result_even_if_the_job_came_back(db):
    """The job is removed and re-added while a handler that ignores halts runs: its
    result is not written; the new instance runs and finishes with its own result."""
    p = Processor(db)
    first = threading.Event()
    release_first = threading.Event()
    runs = []

    @p.handler("t", timeout=1, interrupt=False)
    def handler(ctx):
        runs.append(ctx.data["n"])
        if ctx.data["n"] == 1:
            first.set()
            release_first.wait(DEADLINE)
        return {"by": ctx.data["n"]}

    with running(p):
        jobs.add(db, "t", "j", {"n": 1})
        assert first.wait(DEADLINE)
        jobs.remove(db, "t", "j")
        jobs.add(db, "t", "j", {"n": 2})
        assert wait_until(lambda: state(db, "t", "j") == "finished")
        release_first.set()
        assert wait_until(lambda: p.stats["halted"] == 1)
    assert jobs.get_job_data(db, "t", "j") == {"by": 2}
    assert runs == [1, 2]


def test_one_worker_serves_several_types_and_future_jobs_when_due(db):
    p = Processor(db)
    done = []

    @p.handler("a", timeout=10)
    def a(ctx):
        done.append(("a", ctx.job_id))

    @p.handler("b", timeout=10)
    async def b(ctx):
        done.append(("b", ctx.job_id))

    with running(p, concurrency=1):
        jobs.add(db, "a", "later", {}, scheduled_time=time.time() + 0.5)
        jobs.add(db, "b", "now", {})
        assert wait_until(lambda: len(done) == 2)
        assert done[0] == ("b", "now")
        assert wait_until(lambda: state(db, "a", "later") == "finished")  # (written after the handler)


# --- user code failing ------------------------------------------------------------------


def test_retry_with_backoff_records_attempts_then_succeeds(db):
    p = Processor(db)
    attempts = []
    retry = Retry(max_attempts=4, backoff=0.2, max_backoff=0.3, jitter=0.5)

    @p.handler("flaky", timeout=10, retry=retry)
    def flaky(ctx):
        scheduled = jobs.get_job(db, "flaky", ctx.job_id).scheduled_time  # (a running job keeps it)
        attempts.append((ctx.attempt, ctx.last_error or {}, scheduled, time.time()))
        if ctx.attempt < 3:
            raise RuntimeError(f"boom {ctx.attempt}")
        assert TASK_KEY not in ctx.data
        return {"ok": True}

    with running(p):
        assert p.submit("flaky", {"x": 1}).result(DEADLINE) == {"ok": True}
    assert [(n, error.get("message")) for n, error, _s, _t in attempts] == [(1, None), (2, "boom 1"), (3, "boom 2")]
    assert p.stats["retried"] == 2 and p.stats["succeeded"] == 1
    # Each retry waited its backoff: the job was rescheduled at least the backoff (less the
    # most jitter can take off) after the failure was recorded, and ran no earlier.
    for failed, (n, error, scheduled, started) in enumerate(attempts[1:], start=1):
        least = min(retry.max_backoff, retry.backoff * 2 ** (failed - 1)) * (1 - retry.jitter)
        assert scheduled >= error["at"] + least, (n, scheduled - error["at"], least)
        assert started >= scheduled


def test_retry_delay_doubles_up_to_the_cap_less_the_jitter():
    exact = Retry(max_attempts=9, backoff=0.2, max_backoff=1.0, jitter=0)
    assert [exact.delay(n) for n in (1, 2, 3, 4, 100)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    jittered = Retry(max_attempts=9, backoff=0.2, max_backoff=1.0, jitter=0.5)
    for n, base in ((1, 0.2), (3, 0.8), (5, 1.0)):
        assert all(base / 2 <= jittered.delay(n) <= base for _ in range(200))


def test_last_failed_attempt_finishes_the_job_with_the_error(db):
    p = Processor(db)

    @p.handler("bad", timeout=10, retry=2)
    async def bad(ctx):
        raise ValueError("no good")

    with running(p):
        f = p.submit("bad", {"x": 1})
        with pytest.raises(TaskFailed) as info:
            f.result(DEADLINE)
    assert info.value.error["type"] == "ValueError" and info.value.error["message"] == "no good"
    data = jobs.get_job_data(db, "bad", f.job_id)
    assert data["x"] == 1
    assert data[TASK_KEY]["attempts"] == 2 and data[TASK_KEY]["failed"] is True
    assert "ValueError: no good" in data[TASK_KEY]["last_error"]["traceback"]
    assert jobs.get_job_state(db, "bad", f.job_id) == "finished"


@pytest.mark.parametrize(
    "result, problem",
    [("a string", "TypeError"), ({"x": object()}, "JobDataError"), ({TASK_KEY: 1}, "ValueError")],
)
def test_a_bad_result_is_a_failure_not_a_stuck_job(db, result, problem):
    p = Processor(db)

    @p.handler("t", timeout=10)
    def handler(ctx):
        return result

    with running(p):
        with pytest.raises(TaskFailed) as info:
            p.submit("t").result(DEADLINE)
    assert info.value.error["type"] == problem


def test_handler_exceptions_never_stop_the_loop(db):
    p = Processor(db)

    @p.handler("t", timeout=10)
    def handler(ctx):
        if ctx.data["i"] % 2:
            raise KeyError("odd")
        return {"i": ctx.data["i"]}

    with running(p, concurrency=2):
        futures = [p.submit("t", {"i": i}) for i in range(20)]
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result(DEADLINE)["i"])
            except TaskFailed:
                outcomes.append("failed")
    assert outcomes == [i if i % 2 == 0 else "failed" for i in range(20)]
    assert jobs.get_active_jobs_ids(db, "t") == []


# --- recurring and unique tasks ---------------------------------------------------------


def test_recurring_job_runs_again_after_each_run(db):
    """A job added by hand before the processor starts is the type's chain (the processor
    adds none of its own) and keeps its params, run after run."""
    p = Processor(db)
    runs = []

    @p.handler("tick", timeout=10, every=0.05)
    def tick(ctx):
        runs.append(ctx.data)
        return {"n": len(runs)}

    jobs.set_type_timeout(db, "tick", 10)
    jobs.add(db, "tick", "clock", {"cfg": 1})
    with running(p):
        assert wait_until(lambda: len(runs) >= 3)
    assert all(r == {"cfg": 1} for r in runs)  # the params, run after run
    data = jobs.get_job_data(db, "tick", "clock")
    assert data["cfg"] == 1 and data[TASK_KEY]["runs"] >= 3
    assert data[TASK_KEY]["last_result"]["n"] == data[TASK_KEY]["runs"]
    assert jobs.get_job_state(db, "tick", "clock") in ("pending", "running")


def test_periodic_duties_run_while_serving_and_stop_with_the_processor(db):
    p = Processor(db)
    calls, stops = [], []

    def duty():
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise RuntimeError("a failing call is logged, and the duty goes on")

    p.periodic(0.01, duty, stop=lambda: stops.append(len(calls)))
    with pytest.raises(ValueError):
        p.periodic(0, duty)
    with pytest.raises(TypeError):
        p.periodic(1, duty, stop="not callable")

    @p.handler("t", timeout=10)
    def handle(ctx):
        return {}

    with running(p):
        assert wait_until(lambda: len(calls) >= 5)
        assert stops == []
    assert len(stops) == 1 and stops[0] == len(calls)  # once, after the last call
    with running(p):  # a processor run again runs its duties again
        assert wait_until(lambda: len(calls) >= stops[0] + 2)
    assert len(stops) == 2


def test_unique_tasks_have_deterministic_ids_and_join_the_one_in_flight(db):
    assert processors.task_id("t", {"a": 1, "b": 2}) == processors.task_id("t", {"b": 2, "a": 1})
    assert processors.task_id("t", {"a": 1}) != processors.task_id("t", {"a": 2})
    assert processors.task_id("t", {"a": 1}) != processors.task_id("u", {"a": 1})
    jobs.set_type_timeout(db, "purge", 10)
    f1 = processors.submit(db, "purge", {"table": "x"}, unique=True)
    f2 = processors.submit(db, "purge", {"table": "x"}, unique=True)
    assert f1.job_id == f2.job_id == processors.task_id("purge", {"table": "x"})
    assert len(jobs.get_jobs(db, "purge")) == 1
    p = Processor(db)

    @p.handler("purge")
    def purge(ctx):
        return {"purged": ctx.data["table"]}

    with running(p):
        assert f1.result(DEADLINE) == f2.result(DEADLINE) == {"purged": "x"}
        # finished: submitting again runs it again
        f3 = processors.submit(db, "purge", {"table": "x"}, unique=True)
        assert f3.job_id == f1.job_id and f3.result(DEADLINE) == {"purged": "x"}


# --- submit, client only ----------------------------------------------------------------


def test_submit_works_without_any_worker_machinery(db):
    jobs.set_type_timeout(db, "t", 10)
    f = processors.submit(db, "t", {"x": 3})
    assert not f.done()
    with pytest.raises(TimeoutError):
        f.result(timeout=0.05)
    assert jobs.get_job(db, "t", f.job_id).state == "pending"
    assert threading.active_count() < 10  # no accept loop, no monitor: at most the notifier

    p = Processor(db)

    @p.handler("t")
    def handler(ctx):
        return {"y": ctx.data["x"] + 1}

    with running(p):
        assert f.result(DEADLINE) == {"y": 4}
    assert f.done()


def test_submit_future_is_awaitable(db):
    p = Processor(db)

    @p.handler("t", timeout=10)
    async def handler(ctx):
        return {"y": ctx.data["x"] * 10}

    async def client():
        f = await processors.asubmit(db, "t", {"x": 2})
        return await f

    with running(p):
        assert anyio.run(client) == {"y": 20}


def test_future_of_a_removed_task_raises_not_found(db):
    jobs.set_type_timeout(db, "t", 10)
    f = processors.submit(db, "t", {})
    jobs.remove(db, "t", f.job_id)
    with pytest.raises(jobs.NotFound):
        f.result(DEADLINE)


# --- shutdown ---------------------------------------------------------------------------


def test_stop_lets_running_handlers_finish_within_the_grace_period(db):
    p = Processor(db, grace=DEADLINE)
    started = threading.Event()

    @p.handler("t", timeout=10)
    def handler(ctx):
        started.set()
        time.sleep(0.3)
        return {"done": True}

    with running(p):
        jobs.add(db, "t", "j", {})
        assert started.wait(DEADLINE)
    assert jobs.get_job(db, "t", "j").state == "finished"
    assert p.stats["released"] == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_stop_hands_unfinished_jobs_back_after_the_grace_period(db, kind):
    p = Processor(db, grace=0.1)
    started = threading.Event()
    stopped = threading.Event()

    if kind == "sync":

        @p.handler("t", timeout=60)
        def handler(ctx):
            started.set()
            try:
                while True:
                    time.sleep(0.01)
            finally:
                stopped.set()

    else:

        @p.handler("t", timeout=60)
        async def handler(ctx):
            started.set()
            try:
                await anyio.sleep(DEADLINE)
            finally:
                stopped.set()

    with running(p):
        jobs.add(db, "t", "j", {"keep": 1}, scheduled_time=5)
        assert started.wait(DEADLINE)
    # pending again at once (not after the 60 s type timeout), data and time kept
    assert jobs.get_job(db, "t", "j") == jobs.JobInfo("t", "j", "pending", {"keep": 1}, 5.0)
    assert stopped.wait(DEADLINE)
    assert p.stats["released"] == 1


def test_cancelling_serve_hands_jobs_back_at_once(db):
    p = Processor(db, grace=DEADLINE)
    seen = threading.Event()

    @p.handler("t", timeout=60)
    async def handler(ctx):
        seen.set()
        await anyio.sleep(DEADLINE)

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(p.serve, 1)
            await anyio.to_thread.run_sync(p.ready.wait, DEADLINE)
            await anyio.to_thread.run_sync(jobs.add, db, "t", "j", {})
            await anyio.to_thread.run_sync(seen.wait, DEADLINE)
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert jobs.get_job_state(db, "t", "j") == "pending"


# --- bad input --------------------------------------------------------------------------


def test_registration_and_run_errors_are_clear(db):
    p = Processor(db)
    with pytest.raises(ValueError, match="no handlers"):
        p.run(signals=False)

    @p.handler("t", timeout=5)
    def h(ctx):
        pass

    with pytest.raises(ValueError, match="already registered"):
        p.handler("t")(h)
    with pytest.raises(ValueError, match="timeout"):
        p.handler("u", timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        p.handler("u", timeout=0)
    with pytest.raises(TypeError, match="retry"):
        p.handler("u", retry="3")
    with pytest.raises(ValueError, match="max_attempts"):
        Retry(max_attempts=0)
    with pytest.raises(ValueError, match="type"):
        p.handler("")
    with pytest.raises(ValueError, match="concurrency"):
        p.run(concurrency=0, signals=False)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="prefetch"):
            Processor(db, prefetch=bad)
    with pytest.raises(ValueError, match="reserved"):
        processors.submit(db, "t", {TASK_KEY: 1})
    with pytest.raises(ValueError, match="not both"):
        processors.submit(db, "t", {}, job_id="x", unique=True)
    q = Processor(db)

    @q.handler("no-timeout")
    def g(ctx):
        pass

    with pytest.raises(jobs.NoTypeTimeout, match="set-timeout"):
        q.run(signals=False)


# --- the handler's own writes, committed with the finish --------------------------------


def _count_output(tr, space, job_id):
    tr.add(space.pack((job_id,)), (1).to_bytes(8, "little"))


def test_run_id_is_one_per_run_and_can_be_asked_in_on_commit(db):
    """A run's id is the same whenever asked, also first inside its ``on_commit`` write
    (which runs under the run's lock), and another for the next run of the same job."""
    p = Processor(db)
    seen = []

    @p.handler("t", timeout=10, retry=Retry(max_attempts=2, backoff=0.01, max_backoff=0.01))
    def handler(ctx):
        if ctx.attempt == 1:
            seen.append((ctx.run_id, ctx.run_id))
            raise RuntimeError("once more")
        ctx.on_commit(lambda tr: seen.append((ctx.run_id, ctx.run_id)))
        return {"done": True}

    with running(p):
        assert p.submit("t").result(DEADLINE) == {"done": True}
    assert len(seen) == 2 and all(a == b and len(a) == 32 for a, b in seen)
    assert seen[0][0] != seen[1][0]


def _outputs(db, space) -> dict:
    r = space.range()
    return {space.unpack(kv.key)[0]: int.from_bytes(kv.value, "little") for kv in db.get_range(r.start, r.stop)}


@pytest.mark.parametrize("faulty", [False, True])
def test_on_commit_writes_commit_with_the_finish_exactly_once(db, app, engine_name, faulty):
    """With commits failing at random (1020, and 1021 after really committing or not),
    each job's output counter ends at exactly 1: written with its finish, never twice."""
    from jobs.engine.faults import FaultInjectingDatabase

    if faulty and engine_name == "fdb":
        pytest.skip("fault injection wraps the embedded engines here")
    store = FaultInjectingDatabase(db, conflict=0.1, unknown_committed=0.15, unknown_not_committed=0.1, seed=7) \
        if faulty else db
    p = Processor(store)

    @p.handler("t", timeout=10)
    def handler(ctx):
        ctx.on_commit(lambda tr: _count_output(tr, app, ctx.job_id))
        return {"done": ctx.data["i"]}

    with running(p, concurrency=3):
        futures = [p.submit("t", {"i": i}, job_id=f"j{i:02}") for i in range(30)]
        assert [f.result(DEADLINE)["done"] for f in futures] == list(range(30))
    assert _outputs(db, app) == {f"j{i:02}": 1 for i in range(30)}


def test_a_failing_on_commit_is_a_failed_run_and_writes_nothing(db, app):
    p = Processor(db)

    @p.handler("t", timeout=10)
    def handler(ctx):
        def write(tr):
            _count_output(tr, app, ctx.job_id)
            raise RuntimeError("output rejected")

        ctx.on_commit(write)
        return {"done": True}

    with running(p):
        with pytest.raises(TaskFailed, match="output rejected"):
            p.submit("t").result(DEADLINE)
    assert _outputs(db, app) == {}


# --- batches: prefetch and group commit ---------------------------------------------------


def _active(db, type):
    return len(jobs.get_active_jobs_ids(db, type))


def test_short_jobs_are_accepted_and_finished_in_batches(db):
    """One lane holds several short jobs at once (taken in one transaction), never more
    than ``prefetch``, and every job still runs and finishes exactly once."""
    p = Processor(db, prefetch=8)
    seen = []

    @p.handler("t", timeout=30)
    def handler(ctx):
        seen.append((ctx.job_id, _active(db, "t")))

    jobs.set_type_timeout(db, "t", 30)
    for i in range(300):
        jobs.add(db, "t", f"j{i}", {})
    with running(p, concurrency=1):
        assert wait_until(lambda: len(seen) >= 300 and _active(db, "t") == 0)
    assert sorted(job_id for job_id, _ in seen) == sorted(f"j{i}" for i in range(300))
    held = [n for _, n in seen]
    assert max(held) > 1 and max(held) <= 8
    assert all(j.state == "finished" for j in jobs.get_jobs(db, "t"))
    assert p.stats["succeeded"] == 300 and p.stats["accepted"] == 300


def test_long_jobs_are_taken_one_at_a_time(db):
    """Jobs that take long are not prefetched: an idle worker elsewhere can take them."""
    p = Processor(db, prefetch=32)
    held = []

    @p.handler("t", timeout=30)
    def handler(ctx):
        held.append(_active(db, "t"))
        time.sleep(0.1)

    jobs.set_type_timeout(db, "t", 30)
    for i in range(5):
        jobs.add(db, "t", f"j{i}", {})
    with running(p, concurrency=1):
        assert wait_until(lambda: len(held) == 5 and _active(db, "t") == 0)
    assert held == [1] * 5


def test_one_short_job_is_enough_to_take_the_next_jobs_in_a_batch(db, monkeypatch):
    """The pace starts as a guess that takes jobs one at a time; the first job measured
    replaces it, so the next accept already takes a full batch of short jobs."""
    from processors import feed

    # (a wider window: a full batch even if a slow machine makes a job take 60 ms, one
    # job at a time while the guess of a second a job counts, as before)
    monkeypatch.setattr(feed, "PREFETCH_WINDOW", 0.5)
    p = Processor(db, prefetch=8)
    held = []

    @p.handler("t", timeout=30)
    def handler(ctx):
        held.append(_active(db, "t"))

    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "first", {})
    with running(p, concurrency=1):
        assert wait_until(lambda: len(held) == 1 and _active(db, "t") == 0)

        @jobs.transactional
        def add_more(tr):
            for i in range(20):
                jobs.add(tr, "t", f"j{i}", {})

        add_more(db)
        assert wait_until(lambda: len(held) == 21 and _active(db, "t") == 0)
    assert held[:2] == [1, 8]


def test_after_a_short_batch_the_next_accept_lingers_but_not_after_a_lone_job_or_a_full_batch(db, monkeypatch):
    """A batch of more than one job but fewer than asked (the queue drained while jobs
    keep coming): the processor's next accept begins ACCEPT_LINGER after that one began at
    the earliest, and none is made ahead meanwhile.  Lone jobs and full batches go on at
    once (with the linger at a minute, these jobs would not all run in the deadline).
    (Accepts ahead are off in the run: capped by the room in hand, their sizes depend on
    timing; the rule that keeps them off while lingering is checked on its own.)"""
    from types import SimpleNamespace

    from processors import feed

    ahead_due = feed.Feed._ahead_due
    policy = feed.FeedPolicy(1, 8, window=0.05, linger=60.0, keep_turn=0.002, late_gaps=2.0, row_bytes=1,
                             transaction_rows=96, error_pause_max=5.0)
    pace = SimpleNamespace(run=0.0, accept=1.0)
    state = dict(_ready=[object()], pace=pace, policy=policy, _finishes=[], _in_hand=lambda: 0)
    assert ahead_due(SimpleNamespace(**state, state=feed.FeedState.READY))
    assert not ahead_due(SimpleNamespace(**state, state=feed.FeedState.LINGERING))
    monkeypatch.setattr(feed.Feed, "_ahead_due", lambda self: False)
    monkeypatch.setattr(feed, "ACCEPT_LINGER", 60.0)
    monkeypatch.setattr(feed, "PREFETCH_WINDOW", 0.5)  # (full batches of 8 even on a slow machine)
    accepts = []  # (began, jobs asked, jobs taken)
    accept = feed.Feed._accept

    def spied(self, limit, ahead=False):
        began = time.monotonic()
        runs, asked = accept(self, limit, ahead)
        accepts.append((began, asked, len(runs)))
        return runs, asked

    monkeypatch.setattr(feed.Feed, "_accept", spied)
    p = Processor(db, prefetch=8)
    done = []

    @p.handler("t", timeout=30)
    def handler(ctx):
        done.append(ctx.job_id)

    jobs.set_type_timeout(db, "t", 30)
    with running(p, concurrency=1):
        for i in range(3):  # lone jobs, one after another
            jobs.add(db, "t", f"lone{i}")
            assert wait_until(lambda: len(done) == i + 1)

        @jobs.transactional
        def add_many(tr):
            for i in range(20):
                jobs.add(tr, "t", f"j{i}", {})

        add_many(db)  # in batches of 8, 8, then 4: a short one
        assert wait_until(lambda: len(done) == 23)
        short = [began for began, asked, taken in accepts if 1 < taken < asked]
        assert len(short) == 1
        jobs.add(db, "t", "late")
        time.sleep(1.0)
        assert jobs.get_job_state(db, "t", "late") == "pending"  # (the linger: a minute)
        assert [a for a in accepts if a[0] > short[0]] == []
    assert sorted(done) == sorted([f"lone{i}" for i in range(3)] + [f"j{i}" for i in range(20)])



@pytest.mark.parametrize("prefetch", [None, 96])
def test_batches_of_the_largest_jobs_and_results_fit_one_transaction(db, monkeypatch, prefetch):
    """An accept that takes a batch also writes the outcomes waiting: with jobs and results
    near FoundationDB's value limit (100 kB), it carries only the outcomes that fit beside
    the rows it may take, so the transaction stays under the 10 MB limit whatever the
    prefetch (the default, or the most allowed) and no accept fails for it."""
    from processors import feed, finishes

    # The most outcomes waiting when a batch is taken: they wait for an accept to carry
    # them, and none is accepted ahead (one lane accepts as the other runs the last job).
    monkeypatch.setattr(finishes, "FINISH_DELAY", 60.0)
    monkeypatch.setattr(feed.Feed, "_ahead_due", lambda self: False)
    carried = []
    take = finishes.Finishes.take

    def spied(self, room=None):
        batch = take(self, room)
        if room is not None:
            carried.append((room, len(batch)))
        return batch

    monkeypatch.setattr(finishes.Finishes, "take", spied)
    p = Processor(db) if prefetch is None else Processor(db, prefetch=prefetch)
    done = []

    @p.handler("t", timeout=60)
    def handler(ctx):
        done.append(ctx.job_id)
        return {"result": "y" * 90_000}

    jobs.set_type_timeout(db, "t", 60)
    for lo in range(0, 300, 50):  # (in transactions of 50: 300 such jobs exceed one)
        jobs.add_many(db, "t", [jobs.NewJob(f"j{i}", {"blob": "x" * 90_000}) for i in range(lo, lo + 50)])
    with running(p, concurrency=2):
        assert wait_until(lambda: len(done) >= 300 and _active(db, "t") == 0)
    assert sorted(done) == sorted(f"j{i}" for i in range(300))
    assert p.stats["errors"] == 0 and p.stats["succeeded"] == 300
    assert all(j.state == "finished" for j in jobs.get_jobs(db, "t"))
    assert all(n * 90_000 <= room for room, n in carried)
    if prefetch is None:  # (a batch of 64 leaves room for 32 such outcomes; 96 for none)
        assert any(n for _room, n in carried)


def test_an_outcome_queued_during_another_lanes_accept_is_written_before_that_accept_waits(db, monkeypatch):
    """A lane that queues an outcome while another lane's accept is still in its
    transaction leaves it to the accepts (the next one may carry it); that accept, finding
    nothing, commits it before it waits for jobs.  (FINISH_DELAY and the accept's wait at
    a minute: nothing else would write it sooner.)"""
    from jobs.queue.accepting import AcceptCall
    from processors import feed, finishes

    monkeypatch.setattr(finishes, "FINISH_DELAY", 60.0)
    monkeypatch.setattr(feed, "ACCEPT_SLICE", 60.0)
    queued, go = threading.Event(), threading.Event()
    add, body = finishes.Finishes.add, AcceptCall._body

    def spied_add(self, *args, **kwargs):
        out = add(self, *args, **kwargs)
        queued.set()
        return out

    def held_body(self, tr, also=None):  # the accept after the one that took j1: in its transaction
        if not queued.is_set() and jobs.get_job_state(db, "t", "j1") == "running":
            go.set()  # j1's handler returns, its lane queues the outcome
            assert queued.wait(DEADLINE)
        return body(self, tr, also)

    monkeypatch.setattr(finishes.Finishes, "add", spied_add)
    monkeypatch.setattr(AcceptCall, "_body", held_body)
    p = Processor(db)

    @p.handler("t", timeout=60)
    def handler(ctx):
        assert go.wait(DEADLINE)

    jobs.set_type_timeout(db, "t", 60)
    with running(p, concurrency=2):
        jobs.add(db, "t", "j1")
        assert wait_until(lambda: jobs.get_job_state(db, "t", "j1") == "finished")
    assert queued.is_set() and p.stats["succeeded"] == 1


def _trickle(db, monkeypatch, late_gaps: float):
    """A Processor (one lane) and its handler's runs, for jobs added one at a time, with
    ``FINISH_DELAY`` at ten minutes (no timer writes an outcome) and ``LATE_GAPS`` as given."""
    from processors import feed, finishes

    monkeypatch.setattr(finishes, "FINISH_DELAY", 600.0)
    monkeypatch.setattr(feed, "LATE_GAPS", late_gaps)
    p = Processor(db, monitor=False)
    ran = []

    @p.handler("t", timeout=600)
    def handler(ctx):
        ran.append(ctx.job_id)
        return {"ran": ctx.job_id}

    jobs.set_type_timeout(db, "t", 600)
    return p, ran


def test_a_trickles_outcomes_wait_for_the_next_ones_and_its_looks_set_their_own_watches(db, monkeypatch):
    """Jobs coming one at a time: the look after a run carries no outcome, so it stays
    read-only and sets its watch itself (no second transaction: ``accept_rearms`` stays
    0); the first outcome, with no pace measured yet, is committed as the wait begins;
    once jobs came sooner than ``FINISH_DELAY`` apart, an outcome waits to share the
    commit of the next ones (here until the stop: the next job is never late)."""
    p, ran = _trickle(db, monkeypatch, late_gaps=1e9)
    with running(p, concurrency=1):
        assert wait_until(lambda: p.stats["accept_empty"] >= 1)  # (watching: the jobs trickle in)
        jobs.add(db, "t", "j1")
        assert wait_until(lambda: jobs.get_job_state(db, "t", "j1") == "finished")
        assert p.stats["outcomes_deferred"] == 0
        jobs.add(db, "t", "j2")  # the pace: sooner than FINISH_DELAY after j1
        assert wait_until(lambda: p.stats["outcomes_deferred"] >= 1)
        jobs.add(db, "t", "j3")
        assert wait_until(lambda: ran == ["j1", "j2", "j3"] and p.stats["outcomes_deferred"] >= 2)
        assert [jobs.get_job_state(db, "t", j) for j in ("j2", "j3")] == ["running"] * 2  # (queued together)
    assert [jobs.get_job_state(db, "t", j) for j in ("j1", "j2", "j3")] == ["finished"] * 3
    assert jobs.get_job(db, "t", "j3").data == {"ran": "j3"}
    assert p.stats["succeeded"] == 3 and p.stats["accept_rearms"] == 0 and p.stats["errors"] == 0


def test_a_trickles_held_outcome_goes_once_the_next_job_is_late(db, monkeypatch):
    """An outcome held for the next ones is committed, the watch kept, once the next job
    is ``LATE_GAPS`` usual gaps late: the trickle paused (``FINISH_DELAY`` is ten minutes
    here; nothing else writes it)."""
    p, ran = _trickle(db, monkeypatch, late_gaps=2.0)
    with running(p, concurrency=1):
        assert wait_until(lambda: p.stats["accept_empty"] >= 1)
        jobs.add(db, "t", "j1")
        assert wait_until(lambda: jobs.get_job_state(db, "t", "j1") == "finished")
        jobs.add(db, "t", "j2")
        assert wait_until(lambda: jobs.get_job_state(db, "t", "j2") == "finished")
        assert p.stats["outcomes_deferred"] >= 1
        jobs.add(db, "t", "j3")  # (taken on the watch kept)
        assert wait_until(lambda: ran == ["j1", "j2", "j3"])
    assert p.stats["succeeded"] == 3 and p.stats["accept_rearms"] == 0


def test_a_trickles_held_outcomes_under_commit_faults_finish_each_job_once(db, engine_name, monkeypatch):
    """Commits failing at random (1020, and 1021 after really committing or not) while a
    trickle's outcomes are held and then committed on their own, two or so at once, and
    its looks set their own watches: every job runs once and ends finished."""
    from jobs.engine.faults import FaultInjectingDatabase

    if engine_name == "fdb":
        pytest.skip("fault injection wraps the embedded engines here")
    store = FaultInjectingDatabase(db, conflict=0.1, unknown_committed=0.15, unknown_not_committed=0.1, seed=5)
    p, ran = _trickle(store, monkeypatch, late_gaps=2.0)
    ids = [f"j{i}" for i in range(16)]
    with running(p, concurrency=1):
        assert wait_until(lambda: p.stats["accept_empty"] >= 1)
        for job_id in ids:  # (each added once the one before ran: they trickle in)
            jobs.add(db, "t", job_id)
            assert wait_until(lambda: job_id in ran)
        assert wait_until(lambda: all(jobs.get_job_state(db, "t", j) == "finished" for j in ids))
    assert sorted(ran) == sorted(ids) and p.stats["succeeded"] == 16
    assert p.stats["outcomes_deferred"] >= 1 and store.injected["unknown_committed"] > 0


def test_finishes_take_only_the_outcomes_that_fit_the_room(db):
    """``Finishes.take(room)``: the first queued outcomes whose data fit ``room`` bytes
    together, in order; the others stay queued for the next transaction."""
    from processors.finishes import Finishes
    from processors.run import RunState

    class _Run:
        def __init__(self):
            self.state = RunState("job t/x")

    f = Finishes(db, written=lambda run, kind: None, failed=lambda run: None)
    runs = [_Run() for _ in range(5)]
    for run, size in zip(runs, [40, 30, 20, 50, 10]):
        assert f.add(run, object(), "succeeded", size)
    assert [r for r, _o, _k in f.take(95)] == runs[:3]  # (40 + 30 + 20; the next makes 140)
    assert [r for r, _o, _k in f.take(49)] == []  # (the first left does not fit: nothing)
    assert [r for r, _o, _k in f.take()] == runs[3:]
    assert len(f) == 0


@pytest.mark.parametrize("prefetch", [0, 97, True, 1.5])
def test_a_prefetch_a_transaction_cannot_hold_is_refused(db, prefetch):
    with pytest.raises(ValueError, match="prefetch must be an int from 1 to 96"):
        Processor(db, prefetch=prefetch)
    assert Processor(db, prefetch=96).prefetch == 96 and Processor(db).prefetch == processors.processor.PREFETCH == 64


def test_prefetched_jobs_are_handed_back_at_stop(db):
    """Jobs accepted in a batch but not started when the processor stops go back to
    pending at once, never run by it, never left running."""
    p = Processor(db, grace=0.1, prefetch=16)
    ran = []

    @p.handler("t", timeout=60)
    def handler(ctx):
        ran.append(ctx.job_id)
        while ctx.data.get("block"):  # until interrupted by the hand-back
            time.sleep(0.01)

    jobs.set_type_timeout(db, "t", 60)
    for i in range(50):  # short jobs first: the pace that makes the next batches large
        jobs.add(db, "t", f"warm{i}", {})

    @jobs.transactional
    def add_blocking(tr):
        for i in range(30):
            jobs.add(tr, "t", f"b{i}", {"block": True})

    with running(p, concurrency=1):
        assert wait_until(lambda: len(ran) == 50)
        add_blocking(db)
        # one is running, some were prefetched behind it
        assert wait_until(lambda: len(ran) == 51 and _active(db, "t") > 1)
    assert _active(db, "t") == 0
    assert [jobs.get_job_state(db, "t", f"b{i}") for i in range(30)] == ["pending"] * 30
    assert len(ran) == 51
    assert p.stats["released"] > 1


def test_outcomes_are_not_held_by_an_accept_that_keeps_conflicting(db, monkeypatch):
    """The next accept transaction carries the queued outcomes, but only in its first
    attempt: one that conflicts again and again (each time backing off longer) would hold
    them, unheartbeated, past their type timeout, and the jobs would run twice.  Here every
    accept that carries outcomes conflicts; the outcomes are committed on their own."""
    from jobs.queue.accepting import AcceptCall
    from jobs.engine.errors import NOT_COMMITTED, FDBError

    body = AcceptCall._body
    carried = []

    def conflicting(self, tr, also=None):
        if also is None:
            return body(self, tr)
        also(tr)  # (raises OutcomesNotCarried from its second attempt on)
        carried.append(1)
        raise FDBError(NOT_COMMITTED)

    monkeypatch.setattr(AcceptCall, "_body", conflicting)
    ids, ran, stats = _run_to_the_end(db, db, 12, concurrency=1, backlog=True)
    assert sorted(ran) == sorted(ids) and carried  # each ran once; accepts did carry outcomes
    # every conflict was counted, as a retried accept attempt (stats read after the stop;
    # adds racing an accept's snapshot may add a real conflict or two)
    assert stats["accept_retries"] >= stats["accept_conflicts"] >= len(carried)
    assert 1 <= stats["accept_batches"] <= stats["accepted"] == 12


def test_an_accept_that_conflicts_once_carries_the_outcomes_in_its_retry(db, monkeypatch):
    """A conflict costs one more attempt, not a transaction of the outcomes' own besides:
    the first retry of an accept (backing off 10 ms at most) carries the outcomes too,
    and each is written once."""
    from jobs.queue.accepting import AcceptCall
    from jobs.engine.errors import NOT_COMMITTED, FDBError
    from processors.finishes import OutcomesNotCarried

    body = AcceptCall._body
    first, retries = [], []  # the outcomes' writer of the accept that conflicted; its retries

    def once(self, tr, also=None):
        if also is None:
            return body(self, tr)
        if not first:  # (the first accept that carries outcomes conflicts, once)
            first.append(also)
            also(tr)
            raise FDBError(NOT_COMMITTED)
        if also is not first[0]:
            return body(self, tr, also)

        def carried(tr):
            try:
                also(tr)
            except OutcomesNotCarried:
                retries.append("alone")
                raise
            retries.append("carried")

        return body(self, tr, carried)

    monkeypatch.setattr(AcceptCall, "_body", once)
    ids, ran, stats = _run_to_the_end(db, db, 12, concurrency=1, backlog=True)
    assert sorted(ran) == sorted(ids) and first
    assert retries[0] == "carried"  # (a real conflict of that retry with an add may follow)
    assert stats["succeeded"] == 12
    assert [jobs.get_job_state(db, "t", job_id) for job_id in ids] == ["finished"] * 12


def test_accepts_that_find_nothing_are_counted(db):
    """Once the queue is empty the processor's accepts find nothing (``accept_empty``):
    the one that writes the last outcomes (and arms the watches after its commit)."""
    ids, ran, stats = _run_to_the_end(db, db, 5, concurrency=1)
    assert sorted(ran) == sorted(ids)
    assert stats["accept_empty"] >= 1 and stats["accept_batches"] >= 1


def _run_to_the_end(db, store, n: int, concurrency: int, backlog: bool = False):
    """Run ``n`` no-op jobs through a Processor on ``store`` until all are finished (read
    in ``db``); their ids, the ids of the runs in the order they started, and the
    processor's stats.  ``backlog``: the jobs are added before the processor starts (its
    first accept takes one, at the pace it guesses; the next, carrying that one's outcome,
    the rest), else while it runs (jobs it takes one at a time leave their outcomes to
    commits of their own)."""
    p = Processor(store)
    ran = []

    @p.handler("t", timeout=60)
    def handler(ctx):
        ran.append(ctx.job_id)
        return {"done": True}

    jobs.set_type_timeout(db, "t", 60)
    ids = [p.submit("t", {"i": i}).job_id for i in range(n)] if backlog else []
    with running(p, concurrency=concurrency):
        ids = ids or [p.submit("t", {"i": i}).job_id for i in range(n)]
        assert wait_until(lambda: all(jobs.get_job_state(db, "t", i) == "finished" for i in ids))
    return ids, ran, p.stats


def test_group_committed_outcomes_under_commit_faults_finish_each_job_once(db, engine_name):
    """Commits failing at random (1020, and 1021 after really committing or not) while
    accepts carry outcomes: an accept retried after its commit really happened has
    finished its outcomes and taken jobs; the outcomes, committed again on their own, are
    repeats, and the call returns the jobs it took.  Every job ends finished, run once."""
    from jobs.engine.faults import FaultInjectingDatabase

    if engine_name == "fdb":
        pytest.skip("fault injection wraps the embedded engines here")
    store = FaultInjectingDatabase(db, conflict=0.1, unknown_committed=0.15, unknown_not_committed=0.1, seed=11)
    ids, ran, _stats = _run_to_the_end(db, store, 40, concurrency=2)
    assert sorted(ran) == sorted(ids)
    assert store.injected["unknown_committed"] > 0


def test_group_commit_writes_each_outcome_under_its_own_fence(db, caplog):
    """A job lost before the shared transaction commits writes nothing (and the log says
    so: its handler ran, and another worker may run it again); the others in the same
    transaction are finished (or resubmitted) all the same."""
    from processors.behaviors import Outcome
    from processors.context import Run
    from processors.finishes import Finishes

    jobs.set_type_timeout(db, "t", 60)
    for job_id in "abc":
        jobs.add(db, "t", job_id, {"v": job_id})
    taken = {j.id: j for j in jobs.accept_many(db, "t", 3, timeout=0)}
    runs = {job_id: Run(db, job, 20.0) for job_id, job in taken.items()}
    written = {}
    finishes = Finishes(db, written=lambda run, kind: written.update({run.job.id: kind}),
                        failed=lambda run: written.update({run.job.id: "error"}))
    jobs.remove(db, "t", "b")  # b is lost
    assert finishes.add(runs["a"], Outcome({"done": "a"}), "succeeded")
    assert finishes.add(runs["b"], Outcome({"done": "b"}), "succeeded")
    assert finishes.add(runs["c"], Outcome({"again": "c"}, time.time() + 3600), "retried")
    with caplog.at_level("WARNING", logger="processors"):
        finishes.flush()
    assert written == {"a": "succeeded", "b": None, "c": "retried"}
    said = [r.getMessage() for r in caplog.records if "outcome was not written" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("job t/b: ")
    assert jobs.get_job(db, "t", "a").data == {"done": "a"} and jobs.get_job_state(db, "t", "a") == "finished"
    assert state(db, "t", "b") == "not_found" and runs["b"].halted.is_set()
    c = jobs.get_job(db, "t", "c")
    assert c.state == "pending" and c.data == {"again": "c"} and c.scheduled_time > time.time()
    assert len(finishes) == 0


def test_an_interrupt_meant_for_an_ended_call_never_hits_the_next_one():
    from processors.interrupt import Interruptible, Interrupted

    lane = Interruptible()
    first = lane.start()
    assert lane.run(lambda: "one") == ("one", None)
    second = lane.start()

    def work():
        first()  # late: its call ended
        for _ in range(200):
            time.sleep(0.001)
        return "two"

    assert lane.run(work) == ("two", None) and not lane.interrupted

    def interrupted():
        second_now = lane.start()  # (a third call)
        second()  # meant for the second call: nothing
        second_now()
        for _ in range(5000):
            time.sleep(0.001)
        return "never"

    result, error = lane.run(interrupted)
    assert result is None and isinstance(error, Interrupted) and lane.interrupted


class _InFlight:
    """Finishes with ``queued`` outcomes for an accept to carry; ``flush`` (which waits for
    the outcomes being committed on their own) is counted."""

    def __init__(self, queued: int):
        self.queued, self.flushed, self.committed = queued, 0, []

    def __len__(self):
        return self.queued

    def take(self, room=None):
        batch, self.queued = ["outcome"] * self.queued, 0
        return batch

    def writer(self, batch):
        return (lambda tr: None), set()

    def report(self, batch, lost):
        pass

    def commit(self, batch):
        self.committed.append(batch)

    def flush(self, wait=True):
        self.flushed += 1


def _stepping_nowhere(db, finishes):
    """A Feed (one lane, idle; prefetch 8, two jobs in hand) on ``finishes`` whose accept
    steps take nothing, and the list of what each was given to write (``also``)."""
    from processors.feed import Feed

    feed = Feed(db, ["t"], 1, 8, hold=lambda taken: taken, in_hand=lambda: 2, finishes=finishes,
                stopping=threading.Event(), stats={})
    writes = []
    feed.acceptor.step = lambda slice_seconds, limit, also=None: writes.append(also) or []
    feed._idle = 1
    return feed, writes


def test_an_accept_deferring_to_the_turns_holder_commits_its_outcomes_on_their_own(db):
    """Once the queue drained, a busy processor without the turn does not look
    (``Acceptor.defers``): the outcomes it would have carried are committed on their own
    and its step writes nothing; otherwise they ride the accept, as before."""
    finishes = _InFlight(queued=2)
    feed, writes = _stepping_nowhere(db, finishes)
    feed.acceptor.defers = lambda: True
    feed._accept(8)
    assert finishes.committed == [["outcome", "outcome"]] and writes == [None]

    feed.acceptor.defers = lambda: False
    finishes.queued = 1
    feed._accept(8)
    assert len(finishes.committed) == 1 and writes[-1] is not None  # (carried)


def test_a_look_after_a_wait_carries_no_outcomes(db):
    """A processor whose last job came after a look that found none (jobs trickle in)
    looks without its outcomes: the look likely finds nothing again, and, writing
    nothing, sets its own watch; the outcomes stay queued (committed as its wait begins,
    or with the next ones: ``Feed._commit_or_hold``)."""
    finishes = _InFlight(queued=2)
    feed, writes = _stepping_nowhere(db, finishes)
    feed.acceptor.defers = lambda: False
    feed.acceptor.trickle = True
    feed._accept(8)
    assert writes == [None] and finishes.queued == 2 and finishes.committed == [] and finishes.flushed == 0
    feed.acceptor.trickle = False
    feed._accept(8)
    assert writes[-1] is not None and finishes.queued == 0 and finishes.committed == []  # (carried)


class _Waiting:
    """An acceptor whose steps take nothing and wait (``waits``), ``watching`` or not: each
    wait given a time comes back then, the clock moved there (``clock``); one given none
    ends.  ``waits_seen``: each wait's ``until`` and whether the feed was ``waiting``."""

    def __init__(self, clock: list, watching: bool):
        self.clock, self.watching = clock, watching
        self.trickle, self.waits, self.waits_seen, self.keep_turn_through = True, False, [], None

    def step(self, slice_seconds, limit, carry=None):
        self.waits = True
        return []

    def wait(self, until=None):
        self.waits_seen.append((until, self.feed.waiting))
        if until is None:
            return True
        self.clock[0] = until
        return False


class _Trickled:
    """One outcome queued since ``oldest`` (monotonic); ``flush`` commits it."""

    def __init__(self, oldest: float):
        self._oldest, self.queued, self.flushed = oldest, 1, []

    def __len__(self):
        return self.queued

    def oldest(self):
        return self._oldest if self.queued else None

    def flush(self, wait=True):
        self.flushed.append(wait)
        self.queued = 0


def _waiting_feed(monkeypatch, watching: bool):
    """A Feed (one lane, idle) over ``_Waiting`` and ``_Trickled`` on a made-up clock at
    100.002: jobs came 4 ms apart, the last taken at 100.0, the outcome queued at 100.001."""
    from types import SimpleNamespace

    from processors import feed as feed_module

    clock = [100.002]
    monkeypatch.setattr(feed_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    finishes = _Trickled(oldest=100.001)
    feed = feed_module.Feed(None, ["t"], 1, 8, hold=None, in_hand=lambda: 0, finishes=finishes,
                            stopping=threading.Event(), stats={"outcomes_deferred": 0})
    feed.acceptor = _Waiting(clock, watching)
    feed.acceptor.feed = feed
    feed.pace.gap, feed.pace.last_taken = 0.004, 100.0
    feed.pace.run, feed.pace.measured = 0.001, True
    return feed, finishes


def test_a_step_that_waits_has_the_feed_hold_a_trickles_outcome_until_the_policys_time(monkeypatch):
    """The feed's side of a wait for jobs, on a made-up clock and acceptor: the step
    returns where it would wait; the feed, watching, holds the outcome queued (the next
    job, a gap away, commits it in time) and asks the acceptor to come back when the next
    job is ``LATE_GAPS`` gaps late (100.008, before the oldest's ``FINISH_DELAY``); back
    then, it commits it and the wait goes on, to its end.  ``waiting`` is set throughout;
    the turn is kept through the jobs run within ``KEEP_TURN`` at the pace (one, here)."""
    feed, finishes = _waiting_feed(monkeypatch, watching=True)
    assert feed._accept(8) == ([], 8)
    assert feed.acceptor.keep_turn_through == 1  # (two 1 ms runs on one lane: not within KEEP_TURN)
    assert feed.acceptor.waits_seen == [(pytest.approx(100.008), True), (None, True)]
    assert finishes.flushed == [False] and feed._stats["outcomes_deferred"] == 1 and not feed.waiting


def test_a_step_that_waits_without_watching_has_the_feed_commit_the_outcomes_at_once(monkeypatch):
    """Not watching (another processor takes the next job), the feed commits the outcome
    queued as the wait begins, and waits to the end."""
    feed, finishes = _waiting_feed(monkeypatch, watching=False)
    assert feed._accept(8) == ([], 8)
    assert feed.acceptor.waits_seen == [(None, True)]
    assert finishes.flushed == [False] and feed._stats["outcomes_deferred"] == 0 and not feed.waiting


def test_a_lanes_accept_leaves_room_for_the_outcomes_being_committed_on_their_own(db):
    """A lane's accept (not one ahead) takes no more than prefetch less the jobs still in
    hand beyond the outcomes it carries, the jobs other lanes run excepted; with no room
    left it waits for them (``flush``) and takes nothing this time."""
    from dataclasses import replace

    from processors.feed import Feed

    hand = {"runs": 8}  # (held until their outcomes are written)
    finishes = _InFlight(queued=1)  # (and 7 being committed on their own)
    feed = Feed(db, ["t"], 1, 8, hold=lambda taken: taken, in_hand=lambda: hand["runs"], finishes=finishes,
                stopping=threading.Event(), stats={})
    asked = []
    feed.acceptor.step = lambda slice_seconds, limit, also=None: asked.append(limit) or []
    feed._idle = 1  # (the lane accepting)
    feed._accept(8)
    assert asked == [1] and not finishes.flushed  # 8 in hand, 1 carried: room for 1

    assert feed._accept(8) == ([], 0)  # 8 in hand, none to carry: it waits for them
    assert finishes.flushed == 1 and asked == [1]

    feed.policy, hand["runs"] = replace(feed.policy, lanes=4), 3  # three other lanes running their jobs
    feed._accept(8)
    assert asked == [1, 8]  # (theirs are not prefetched jobs)


def test_the_lost_job_watcher_checks_only_jobs_held_for_a_while(db, monkeypatch):
    """The watcher that halts taken-away jobs at once runs no check for jobs held less than
    LOST_CHECK (a busy processor of short jobs would check every one of them); once held
    that long, a job taken away is found."""
    from processors import holding
    from processors.run import Run

    jobs.set_type_timeout(db, "t", 60)
    jobs.add(db, "t", "j1")
    held = holding.Held()
    run = Run(db, jobs.accept(db, "t", timeout=0), beat_every=20)
    held.add([run])
    checks = []
    check = holding.run_transaction
    monkeypatch.setattr(holding, "run_transaction", lambda db, fn: (checks.append(1), check(db, fn))[1])
    jobs.remove(db, "t", "j1")
    assert holding._lost_jobs(db, held) == [] and checks == []  # (held for less than LOST_CHECK)
    run.held_since -= holding.LOST_CHECK
    assert holding._lost_jobs(db, held) == [run] and checks == [1]
