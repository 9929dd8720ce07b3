"""The API's contract beyond couch_jobs' scenarios: public names, composition with the
application's transaction, idempotency under ``commit_unknown_result`` (1021), the data
model's versionstamps, waking on future jobs, ``timeout``, and the async twins."""

from __future__ import annotations

import threading
import time
import uuid

import anyio
import pytest

import jobs
import jobs.aio
from jobs.queue import activity, rows
from jobs import keys
from jobs.engine import tuple as fdb_tuple
from jobs.engine.errors import COMMIT_UNKNOWN_RESULT, FDBError
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.futures import Future
from waiting import DEADLINE, wait_until

T = "t"
WAIT = 30.0  # generous bound for threads; never a timing assertion


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


# --- public names ------------------------------------------------------------------------

PINNED = {
    "set_type_timeout", "get_type_timeout", "clear_type_timeout", "add", "remove",
    "get_job_data", "get_job_state", "get_job", "get_types", "get_jobs", "get_active_jobs_ids",
    "pending_count", "accept", "update", "finish", "resubmit", "is_resubmitted", "transactional",
    "JobsError", "NotFound", "Halt", "NoTypeTimeout", "JobDataError",
}  # fmt: skip
EXTRA = {"open", "Job", "JobInfo", "release", "is_held", "accept_many", "subscribe", "wait", "unsubscribe", "ForeignJobError", "StoreError", "LayoutError", "StoreOpenError",
         "set_retention", "get_retention", "clear_retention", "prune", "Retention"}
EXTRA |= {"pause", "resume", "is_paused", "set_limits", "get_limits", "clear_limits", "Limits", "Rate"}  # queue controls
EXTRA |= {"add_many", "NewJob"}  # bulk add
EXTRA |= {"read_ahead", "finish_many"}  # a batch of finishes in one round trip
EXTRA |= {"remove_unreadable"}  # a job whose row cannot be read
EXTRA |= {"get_run_info", "get_times"}  # a job's runs and times, for people (jobsctl show)


def test_exported_names():
    assert set(jobs.__all__) == PINNED | EXTRA
    assert len(jobs.__all__) == len(set(jobs.__all__))
    for name in jobs.__all__:
        assert getattr(jobs, name) is not None
    public = {n for n in vars(jobs) if not n.startswith("_") and not isinstance(getattr(jobs, n), type(jobs))}
    assert public == set(jobs.__all__)
    from jobs.store import open as open_store

    assert jobs.open is open_store


def test_error_tree():
    for cls in (jobs.NotFound, jobs.Halt, jobs.NoTypeTimeout, jobs.JobDataError, jobs.ForeignJobError, jobs.StoreError):
        assert issubclass(cls, jobs.JobsError)
        assert str(cls()) == cls.__doc__  # docstrings are the default messages
    assert issubclass(jobs.LayoutError, jobs.StoreError)


def test_store_open_errors_are_in_the_tree():
    from jobs.engine.errors import StoreOpenError as EngineStoreOpenError

    assert issubclass(jobs.StoreOpenError, jobs.JobsError)
    assert issubclass(jobs.StoreOpenError, ValueError) and issubclass(jobs.StoreOpenError, EngineStoreOpenError)
    with pytest.raises(jobs.JobsError, match="did you mean 'sqlite:nowhere'"):
        jobs.open("nowhere")


def test_async_twins_cover_the_blocking_calls():
    """``jobs.aio`` in step with the facade: a twin for each call of ``jobs.__all__``."""
    blocking = {n for n in jobs.__all__ if callable(getattr(jobs, n)) and n[0].islower()}
    # (read_ahead neither blocks nor takes a database: a block inside a transaction)
    assert set(jobs.aio.__all__) == blocking - {"open", "transactional", "read_ahead"}


# --- a type's timeout given with its first add --------------------------------------------------


def test_add_with_a_type_timeout_sets_it_only_for_a_type_without_one(db):
    """An application adds before any worker of the type ran: the type gets its timeout
    with the add, in one transaction; a timeout the type has (a worker's) stays."""
    with pytest.raises(jobs.NoTypeTimeout):
        jobs.add(db, "fresh", "a", {})
    jobs.add(db, "fresh", "a", {}, type_timeout=30)
    assert jobs.get_type_timeout(db, "fresh") == 30.0
    assert jobs.get_job_state(db, "fresh", "a") == "pending"
    jobs.add(db, "fresh", "b", {}, type_timeout=5)
    assert jobs.get_type_timeout(db, "fresh") == 30.0
    jobs.add_many(db, "bulk", ["x", "y"], type_timeout=7)
    assert jobs.get_type_timeout(db, "bulk") == 7.0
    assert sorted(job.id for job in jobs.get_jobs(db, "bulk")) == ["x", "y"]
    assert anyio.run(lambda: jobs.aio.add(db, "async", "z", {}, type_timeout=9)) is None
    assert jobs.get_type_timeout(db, "async") == 9.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "10", True])
def test_a_bad_type_timeout_with_an_add_writes_nothing(db, bad):
    with pytest.raises(ValueError, match="type timeout"):
        jobs.add(db, "fresh", "a", {}, type_timeout=bad)
    with pytest.raises(ValueError, match="type timeout"):
        jobs.add_many(db, "fresh", ["a"], type_timeout=bad)
    assert jobs.get_type_timeout(db, "fresh") is None
    assert list(jobs.get_jobs(db, "fresh")) == []


# --- composition -------------------------------------------------------------------------


def test_finish_and_application_write_commit_together_or_not_at_all(db):
    jobs.add(db, T, "a", {})
    jobs.add(db, T, "b", {})
    job_a = jobs.accept(db, T, timeout=0)
    job_b = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def work(tr, job, key):
        tr.set(key, b"output")
        jobs.finish(tr, job, {"out": key.decode()})

    work(db, job_a, b"app/a")
    assert db.get(b"app/a") == b"output"
    assert jobs.get_job_state(db, T, job_a.id) == "finished"

    jobs.remove(db, T, job_b.id)  # job b is taken away: its worker's transaction must fail whole
    with pytest.raises(jobs.Halt):
        work(db, job_b, b"app/b")
    assert db.get(b"app/b") is None


def test_add_in_the_application_transaction_is_not_committed_on_error(db):
    @jobs.transactional
    def create(tr):
        tr.set(b"app/order", b"1")
        jobs.add(tr, T, "order-1", {"order": 1})
        raise RuntimeError("application fails after enqueueing")

    with pytest.raises(RuntimeError):
        create(db)
    assert db.get(b"app/order") is None
    assert jobs.get_jobs(db) == []


def test_calls_on_a_transaction_do_not_commit_it(db):
    tr = db.create_transaction()
    jobs.add(tr, T, "x", {})
    assert jobs.get_job_state(tr, T, "x") == "pending"  # read-your-writes
    assert jobs.get_jobs(db) == []  # nothing committed yet
    tr.commit().wait()
    assert jobs.get_job_state(db, T, "x") == "pending"


# --- idempotency under commit_unknown_result (1021) ---------------------------------------


class CommitThenUnknown:
    """Database wrapper: the next ``armed`` writing commits really commit, then fail with
    1021, as a real cluster may when a proxy dies just after committing."""

    def __init__(self, db):
        self.db = db
        self.armed = 0
        self.raised = 0

    def create_transaction(self):
        return _CommitThenUnknownTransaction(self, self.db.create_transaction())

    def __getattr__(self, name):
        return getattr(self.db, name)


class _CommitThenUnknownTransaction:
    def __init__(self, owner: CommitThenUnknown, tr):
        self._owner = owner
        self._tr = tr

    def __getattr__(self, name):
        return getattr(self._tr, name)

    def commit(self):
        done = self._tr.commit()
        done.wait()
        if self._owner.armed and self._tr.get_committed_version() >= 0:  # it wrote something
            self._owner.armed -= 1
            self._owner.raised += 1
            failed = Future()
            failed.set_error(FDBError(COMMIT_UNKNOWN_RESULT, "injected after committing"))
            return failed
        return done

    def on_error(self, error):
        code = error.code if isinstance(error, FDBError) else error
        return self._tr.on_error(code)  # the bare code: both engines accept it


@pytest.fixture
def unknown(db):
    return CommitThenUnknown(db)


def running_ids(db) -> list[str]:
    return [i.id for i in jobs.get_jobs(db, T) if i.state == "running"]


def test_accept_retried_after_1021_locks_one_job(db, unknown):
    for n in range(3):
        jobs.add(db, T, f"j{n}", {"n": n})
    unknown.armed = 1
    job = jobs.accept(unknown, T, timeout=0)
    assert unknown.raised == 1
    assert running_ids(db) == [job.id]  # not a second job locked behind the first
    assert jobs.pending_count(db, T) == 2
    assert jobs.get_active_jobs_ids(db, T) == [job.id]
    jobs.finish(db, jobs.update(db, job))  # and the Job holds the lock the store has


def test_accept_retried_after_a_lost_commit_and_1021_returns_each_job_once(db):
    """An attempt that locked the jobs but did not commit (1021, not committed), then one
    that locked them again and committed behind 1021: the call returns each job once."""

    class Scripted(FaultInjectingDatabase):
        script = ["unknown_not_committed", "unknown_committed"]

        def _draw(self):
            return self.script.pop(0) if self.script else None

    for n in range(2):
        jobs.add(db, T, f"j{n}", {"n": n})
    faulty = Scripted(db)
    taken = jobs.accept_many(faulty, T, 5, timeout=0)
    assert not faulty.script  # both faults happened
    assert sorted(job.id for job in taken) == ["j0", "j1"]
    assert sorted(running_ids(db)) == ["j0", "j1"]


def test_accept_retried_after_a_conflict_does_not_read_the_jobs_it_lost(db, monkeypatch):
    """A conflict (1020) commits nothing, so the retry forgets the jobs the failed attempt
    picked: it must not read their rows, which the worker that won them goes on writing
    (here it finishes the lost job while the retry runs), or each such write makes the
    retry conflict again, and a chain of conflicts keeps the worker backing off."""
    from jobs.queue.accepting import AcceptCall

    class Scripted(FaultInjectingDatabase):
        script = ["conflict"]

        def _draw(self):
            return self.script.pop(0) if self.script else None

    jobs.add(db, T, "lost", {})
    body, attempts = AcceptCall._body, []

    def staged(self, tr, also=None):
        if self is not call:  # the other worker's accept
            return body(self, tr, also)
        attempts.append(1)
        if len(attempts) == 2:  # the retry: another worker took "lost"; "next" was added
            other = jobs.accept(db, T, timeout=0)
            assert other.id == "lost"
            jobs.add(db, T, "next", {})
            out = body(self, tr, also)
            jobs.finish(db, other)  # written after the retry's reads, before its commit
            return out
        return body(self, tr, also)

    monkeypatch.setattr(AcceptCall, "_body", staged)
    call = AcceptCall(Scripted(db), T)
    taken = call.attempt()
    assert [job.id for job in taken] == ["next"]
    assert (len(attempts), call.conflicts, call.retries) == (2, 1, 1)  # the injected conflict only
    assert jobs.get_job_state(db, T, "lost") == "finished" and running_ids(db) == ["next"]


def test_finish_retried_after_1021_does_not_halt(db, unknown):
    jobs.add(db, T, "j", {})
    job = jobs.accept(db, T, timeout=0)
    unknown.armed = 1
    jobs.finish(unknown, job, {"result": 1})
    assert unknown.raised == 1
    assert jobs.get_job(db, T, "j")[2:4] == ("finished", {"result": 1})


def test_finish_with_application_write_retried_after_1021(db, unknown):
    jobs.add(db, T, "j", {})
    job = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def work(tr):
        tr.set(b"app/j", b"output")
        jobs.finish(tr, job)

    unknown.armed = 1
    work(unknown)  # the retry must not raise Halt for the finish that did commit
    assert unknown.raised == 1
    assert db.get(b"app/j") == b"output"
    assert jobs.get_job_state(db, T, "j") == "finished"


def test_finish_of_a_resubmitted_job_retried_after_1021(db, unknown):
    jobs.add(db, T, "j", {})
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, "j", {}, 5)  # flagged: the finish re-enqueues it
    unknown.armed = 1
    jobs.finish(unknown, job)
    assert jobs.get_job(db, T, "j")[2:] == ("pending", {}, 5.0, 0, None)
    assert jobs.pending_count(db, T) == 1


def test_repeated_finish_after_the_job_was_readded_halts(db):
    jobs.add(db, T, "j", {})
    job = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job)
    jobs.finish(db, job)  # nothing changed since: a no-op (how a retry sees it)
    jobs.add(db, T, "j", {"again": True})
    with pytest.raises(jobs.Halt):
        jobs.finish(db, job)
    assert jobs.get_job(db, T, "j")[2:4] == ("pending", {"again": True})


def test_add_remove_resubmit_retried_after_1021(db, unknown):
    unknown.armed = 1
    jobs.add(unknown, T, "j", {"v": 1})
    assert jobs.get_job(db, T, "j")[2:4] == ("pending", {"v": 1})
    assert jobs.pending_count(db, T) == 1

    job = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job)
    unknown.armed = 1
    jobs.resubmit(unknown, jobs.get_job(db, T, "j"), data={"v": 2})
    assert jobs.get_job(db, T, "j")[2:4] == ("pending", {"v": 2})
    assert jobs.pending_count(db, T) == 1

    unknown.armed = 1
    jobs.remove(unknown, T, "j")  # the retry finds it gone: not NotFound
    assert jobs.get_jobs(db) == [] and jobs.pending_count(db, T) == 0
    assert unknown.raised == 3


def test_update_and_release_retried_after_1021(db, unknown):
    jobs.add(db, T, "j", {})
    job = jobs.accept(db, T, timeout=0)
    unknown.armed = 1
    job = jobs.update(unknown, job, {"progress": 1})
    assert jobs.get_job_data(db, T, "j") == {"progress": 1}
    assert jobs.get_active_jobs_ids(db, T) == ["j"]  # one activity key, not two
    unknown.armed = 1
    jobs.release(unknown, job)
    assert jobs.get_job_state(db, T, "j") == "pending"
    assert jobs.get_active_jobs_ids(db, T) == []


def test_accepts_under_random_commit_faults_lock_exactly_what_they_return(db):
    """Every fault kind at high rates: each accept returns a job it alone holds, and no
    job is left locked that no accept returned."""
    ids = [f"j{n:02}" for n in range(30)]
    for job_id in ids:
        jobs.add(db, T, job_id, {})
    faulty = FaultInjectingDatabase(db, conflict=0.15, unknown_committed=0.25, unknown_not_committed=0.15, too_old=0.1, seed=11)
    accepted = [jobs.accept(faulty, T, timeout=0) for _ in ids]
    assert faulty.faults > 0
    assert all(job is not None for job in accepted)
    assert sorted(job.id for job in accepted) == ids
    assert sorted(running_ids(db)) == ids
    for job in accepted:
        jobs.finish(faulty, job)
    assert {i.state for i in jobs.get_jobs(db)} == {"finished"}
    assert jobs.get_active_jobs_ids(db, T) == []


# --- data model --------------------------------------------------------------------------


def read_row(db, job_id):
    return jobs.transactional(lambda tr: rows.get(tr, T, job_id))(db)


def activity_seqs(db) -> list:
    begin, end = keys.activity_range(T)
    return [keys.ACTIVITY.unpack(k)[1] for k, _v in db.get_range(begin, end)]


def test_running_row_and_activity_key_share_the_versionstamp(db):
    jobs.add(db, T, "j", {})
    job = jobs.accept(db, T, timeout=0)
    row = read_row(db, "j")
    assert row.seq is not None and row.seq.is_complete()
    assert activity_seqs(db) == [row.seq]
    stamp = jobs.transactional(activity.last_activity)(db, T)
    assert stamp == row.seq.tr_version  # watches_activity: stamped by the same commit

    jobs.update(db, job)
    newer = read_row(db, "j")
    assert newer.seq > row.seq and activity_seqs(db) == [newer.seq]  # the old key is gone
    jobs.finish(db, job)
    assert activity_seqs(db) == []


def test_two_running_jobs_updated_in_one_transaction_keep_two_activity_keys(db):
    jobs.add(db, T, "a", {})
    jobs.add(db, T, "b", {})
    a = jobs.accept(db, T, timeout=0)
    b = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def both(tr):
        return jobs.update(tr, a), jobs.update(tr, b)

    a, b = both(db)
    seqs = activity_seqs(db)
    assert len(seqs) == 2 and seqs[0].tr_version == seqs[1].tr_version
    assert sorted(jobs.get_active_jobs_ids(db, T)) == ["a", "b"]
    assert {read_row(db, "a").seq, read_row(db, "b").seq} == set(seqs)
    jobs.finish(db, a)
    assert jobs.get_active_jobs_ids(db, T) == [b.id]


def test_layout_and_store_id_are_written_with_the_first_type(db):
    layout = db.get(keys.LAYOUT_KEY)
    assert fdb_tuple.unpack(layout) == (keys.LAYOUT_VERSION,)
    store_id = fdb_tuple.unpack(db.get(keys.STORE_ID_KEY))[0]
    jobs.set_type_timeout(db, "other", 1)
    assert fdb_tuple.unpack(db.get(keys.STORE_ID_KEY))[0] == store_id  # written once
    jobs.add(db, T, "j", {})
    assert jobs.accept(db, T, timeout=0).store == store_id


def test_active_jobs_ids_in_order_of_last_activity(db):
    for job_id in "abc":
        jobs.add(db, T, job_id, {})
    held = {}
    for _ in "abc":
        job = jobs.accept(db, T, timeout=0)
        held[job.id] = job
    order = list(jobs.get_active_jobs_ids(db, T))
    jobs.update(db, held[order[0]])
    assert jobs.get_active_jobs_ids(db, T) == order[1:] + order[:1]


def test_dequeues_conflict_only_when_they_take_the_same_job(db, monkeypatch):
    """The pick reads the queue as a snapshot and adds one read conflict key, on the job
    taken: workers taking different jobs both commit; the same job, one gets 1020."""
    from jobs.indexes import pending, places
    from jobs.engine import error_code

    for job_id in "abcd":
        jobs.add(db, T, job_id, {})
    # first and last of the head, then the first twice (places of 16, scaled to a head of 4,
    # then of 2)
    chosen = iter([0, 12, 0, 0])
    monkeypatch.setattr(places, "place", lambda store_id: next(chosen))

    def dequeue():
        tr = db.create_transaction()
        return tr, pending.dequeue(tr, T, max_stime=10**10)

    (tr1, id1), (tr2, id2) = dequeue(), dequeue()
    assert (id1, id2) == ("a", "d")
    tr1.commit().wait()
    tr2.commit().wait()  # no conflict

    (tr3, id3), (tr4, id4) = dequeue(), dequeue()
    assert id3 == id4 == "b"
    tr3.commit().wait()
    with pytest.raises(Exception) as info:
        tr4.commit().wait()
    assert error_code(info.value) == 1020


# --- waiting -----------------------------------------------------------------------------


def test_accept_timeout_returns_none(db):
    assert jobs.accept(db, T, timeout=0) is None
    assert jobs.accept(db, T, timeout=0.2) is None
    assert jobs.accept(db, T, timeout=0.1, max_sched_time=0, no_schedule=True) is None


def test_waiting_accept_wakes_when_a_future_job_falls_due(db):
    due = time.time() + 0.5
    jobs.add(db, T, "soon", {}, due)
    job = jobs.accept(db, T, timeout=WAIT)
    assert job is not None and job.id == "soon"
    assert time.time() >= due  # not taken early


def test_waiting_accept_wakes_for_a_job_scheduled_while_it_waits(db):
    result = []
    thread = threading.Thread(target=lambda: result.append(jobs.accept(db, T, timeout=WAIT)), daemon=True)
    thread.start()
    thread.join(0.2)
    jobs.add(db, T, "later", {}, time.time() + 3600)  # wakes it; not due: it waits again
    jobs.add(db, T, "soon", {}, time.time() + 0.3)
    thread.join(WAIT)
    assert result and result[0] is not None and result[0].id == "soon"


def test_many_waiting_accepts_each_get_one_job(db):
    results: list = []
    lock = threading.Lock()

    def worker():
        job = jobs.accept(db, T, timeout=WAIT)
        with lock:
            results.append(job)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    for n in range(6):
        jobs.add(db, T, f"j{n}", {})
    for t in threads:
        t.join(WAIT)
    assert sorted(job.id for job in results) == [f"j{n}" for n in range(6)]


# --- async twins ---------------------------------------------------------------------------


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_aio_round_trip(db):
    await jobs.aio.add(db, T, "j", {"x": 1})
    job = await jobs.aio.accept(db, T, timeout=0)
    job = await jobs.aio.update(db, job, {"x": 2})
    await jobs.aio.finish(db, job)
    assert (await jobs.aio.get_job(db, T, "j"))[2:4] == ("finished", {"x": 2})
    assert await jobs.aio.accept(db, T, timeout=0.1) is None


@pytest.mark.anyio
async def test_aio_accept_is_cancellable_and_strands_nothing(db):
    with anyio.move_on_after(0.3) as scope:
        await jobs.aio.accept(db, T)
    assert scope.cancelled_caught
    await jobs.aio.add(db, T, "j", {})
    assert await jobs.aio.get_job_state(db, T, "j") == "pending"  # the cancelled accept took nothing


@pytest.mark.anyio
async def test_aio_many_waiting_accepts_leave_threads_for_other_calls(db):
    """More waiting accepts than anyio's default thread limiter (40) holds: add() must
    still get a thread, and every accept a job."""
    count = 45
    got: list = []

    async def worker():
        got.append(await jobs.aio.accept(db, T, timeout=WAIT))

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(worker)
            await anyio.sleep(0.2)
            for n in range(count):
                await jobs.aio.add(db, T, f"j{n:02}", {})
    assert sorted(job.id for job in got) == [f"j{n:02}" for n in range(count)]


@pytest.mark.anyio
async def test_aio_job_accepted_while_cancelled_is_handed_back(db):
    from jobs.aio import _hand_back_if_cancelled

    jobs.add(db, T, "j", {})
    job = jobs.accept(db, T, timeout=0)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await _hand_back_if_cancelled(db, [job])
        pytest.fail("the cancellation was not re-raised")
    assert jobs.get_job_state(db, T, "j") == "pending"


def test_accept_many_takes_a_batch_in_one_transaction(db):
    for i in range(10):
        jobs.add(db, T, f"j{i}", {"i": i})
    jobs.add(db, T, "later", {}, scheduled_time=time.time() + 3600)
    taken = jobs.accept_many(db, T, 4, timeout=0)
    assert len(taken) == 4 and len({j.id for j in taken}) == 4
    assert all(jobs.get_job_state(db, T, j.id) == "running" for j in taken)
    assert all(j.data == {"i": int(j.id[1:])} for j in taken)
    rest = jobs.accept_many(db, T, 100, timeout=0)  # the future job is not taken
    assert sorted(j.id for j in taken + rest) == sorted(f"j{i}" for i in range(10))
    assert jobs.accept_many(db, T, 3, timeout=0) == []
    # each job is fenced on its own: one lost job does not halt the others
    jobs.remove(db, T, taken[0].id)
    with pytest.raises(jobs.Halt):
        jobs.finish(db, taken[0])
    for job in taken[1:] + rest:
        jobs.finish(db, job, {"done": True})
    assert jobs.get_active_jobs_ids(db, T) == []


def test_accept_many_waits_for_the_first_job(db):
    def later():
        time.sleep(0.2)
        jobs.add(db, T, "x", {})

    threading.Thread(target=later).start()
    taken = jobs.accept_many(db, T, 8, timeout=DEADLINE)
    assert [j.id for j in taken] == ["x"]


def test_accept_many_no_schedule_takes_a_run_near_a_random_uuid(db):
    ids = {uuid.uuid4().hex for _ in range(25)}
    for job_id in ids:
        jobs.add(db, T, job_id, {})
    seen = set()
    while batch := jobs.accept_many(db, T, 7, no_schedule=True, timeout=0):
        assert len(batch) <= 7
        seen |= {j.id for j in batch}
    assert seen == ids


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"])
def test_accept_many_bad_limit(db, limit):
    with pytest.raises(ValueError, match="limit"):
        jobs.accept_many(db, T, limit, timeout=0)


def test_accept_many_of_more_large_jobs_than_one_transaction_rewrites_takes_them_in_several(db):
    """150 jobs of 90 kB are 13.5 MB of rows (FoundationDB takes 10 MB a transaction): one
    accept_many takes as many as fit half of that, the next ones the rest, none twice;
    it failed with 2101 (transaction too large) at every call before."""
    for lo in range(0, 150, 25):  # (added 25 at a time: 150 are too large for one add_many too)
        jobs.add_many(db, T, [jobs.NewJob(f"j{i:03d}", {"blob": "x" * 90_000}) for i in range(lo, lo + 25)])
    taken, calls = [], 0
    while batch := jobs.accept_many(db, T, 150, timeout=0):
        calls += 1
        taken += [j.id for j in batch]
    assert sorted(taken) == [f"j{i:03d}" for i in range(150)]
    assert 3 <= calls <= 4  # (about 55 rows fit 5 MB)


def test_accept_many_retried_after_unknown_commit_returns_the_same_batch(db, monkeypatch):
    """1021 after the batch committed: the retry returns the jobs it locked, no others."""
    from jobs.queue.accepting import AcceptCall

    for i in range(6):
        jobs.add(db, T, f"j{i}", {})
    call = AcceptCall(db, T, limit=3)
    first = call.attempt()
    again = call.attempt()  # what a retry of a committed attempt does
    assert [j.id for j in again] == [j.id for j in first]
    assert len(jobs.get_active_jobs_ids(db, T)) == 3


@pytest.mark.anyio
async def test_aio_accept_many(db):
    import jobs.aio

    for i in range(3):
        jobs.add(db, T, f"j{i}", {})
    taken = await jobs.aio.accept_many(db, T, 5, timeout=0)
    assert sorted(j.id for j in taken) == ["j0", "j1", "j2"]


def test_finish_repeated_after_another_worker_took_the_job_halts_unfenced_writes(db):
    """A's finish re-enqueued a job flagged for resubmission and B accepted it: A finishing
    again in its own transaction must raise Halt, so that A's write never commits while B
    holds the job."""
    jobs.add(db, T, "j", {})
    a = jobs.accept(db, T, timeout=0)
    jobs.resubmit(db, a)
    jobs.finish(db, a)
    b = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def work(tr, job):
        tr.set(b"app/j", job.lock)
        jobs.finish(tr, job)

    with pytest.raises(jobs.Halt):
        work(db, a)
    assert db.get(b"app/j") is None and jobs.get_job_state(db, T, "j") == "running"
    work(db, b)
    assert db.get(b"app/j") == b.lock


# --- watches: a watch is a read (FoundationDB) -----------------------------------------------


def test_accept_sets_no_watch_in_a_transaction_that_writes(db, app):
    """An accept attempt that writes the caller's changes (a worker's finishes) and finds
    nothing must not set its watch there: a watch is a read conflict on the type's
    enqueue counter, so every enqueue meanwhile would make it fail and run again.  The
    watch is set after the commit, from what the attempt saw: here an enqueue came after
    its read version, so the second transaction looks again, finds the job not due yet,
    and waits for it."""
    from jobs.queue.accepting import AcceptCall

    jobs.set_type_timeout(db, T, 60)
    calls = []

    def also(tr):
        calls.append(1)
        tr.set(app.pack(("finished", len(calls))), b"1")
        if len(calls) == 1:
            tr.get_read_version().wait()  # (the attempt reads from here)
            jobs.add(db, T, "later", scheduled_time=time.time() + 3600)  # an enqueue meanwhile

    call = AcceptCall(db, T)
    out = call.attempt(also)  # nothing due; the enqueue seen after: looked again
    assert calls == [1]  # committed at once: no conflict, no retry
    assert out.watch is not None and out.due is not None  # (the job added meanwhile)
    out.watch.cancel()


def test_run_cancels_the_watches_of_a_failed_attempt(db, app, engine_name):
    """An attempt that fails before its commit (here a read past the 5 s limit: 1007)
    leaves its watches to ``on_error``, which a cluster was seen not to cancel: ``run``
    cancels those set through ``transactional.watch`` itself (1101, not on_error's 1025)."""
    from jobs.engine import FDBError, error_code
    from jobs.engine.transactional import run, watch

    if engine_name == "fdb":
        import fdb

        FDBError = fdb.FDBError  # noqa: N806 - the engine's own error type, as its reads raise
    watches = []

    def body(tr):
        watches.append(watch(tr, app.pack(("w",))))
        if len(watches) == 1:
            raise FDBError(1007)  # as a read of a too old transaction raises
        tr.set(app.pack(("out",)), b"1")

    run(db, body)
    first, second = watches
    assert wait_until(first.is_ready, 10)
    with pytest.raises(Exception) as info:
        first.wait()
    assert error_code(info.value) == 1101
    assert not second.is_ready()  # the committed attempt's watch is armed
    second.cancel()
