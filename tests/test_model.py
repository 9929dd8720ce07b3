"""The whole job API against a pure-Python model of couch_jobs' semantics (Hypothesis
stateful testing), on the embedded engine (memory store), then again with injected commit
faults (1020, 1021 committed, 1021 not committed, 1007), which the job layer must absorb:
every retried write path is idempotent, so the store ends up exactly where the model says.

The model holds, per job, its state, data, scheduled time, resubmit flag and the token of
the worker that holds it; every ``Job`` object the API ever handed out is kept with the
token it was issued under, so stale ones are used too and must get ``Halt`` (or ``NotFound``)
and write nothing.  After every step the whole store is read back and compared.

Scheduled times are small numbers (long past, so taken by ``accept`` with its default
``max_sched_time`` of now) plus one far in the future (never taken by default).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import jobs
from jobs.observe import status
from jobs.engine import Subspace
from jobs.engine import limits
from jobs.engine.embedded import EmbeddedDatabase
from jobs.engine.faults import FaultInjectingDatabase

TYPES = ("alpha", "beta")
IDS = ("j0", "j1", "j2")  # few, so that steps often meet the same job
FUTURE = 4_000_000_000.0  # 2096: never due while this test runs
STIMES = (0, 1, 2, 3, FUTURE)
MAX_SCHED = (None, 0, 1, 2, 3, FUTURE, math.inf)
APP = Subspace(("app-writes",))  # an application's own keys, written next to finish()

types = st.sampled_from(TYPES)
ids = st.sampled_from(IDS)
stimes = st.sampled_from(STIMES)
# Per step, which commits fail: None (none do), or the seed of a FaultInjectingDatabase
# used for that step alone, so that shrinking can drop one step's faults without moving
# the others' (machines without FAULTS ignore it).
plans = st.none() | st.integers(0, 2**32 - 1)
datas = st.one_of(
    st.none(),
    st.builds(lambda v: {"v": v}, st.integers(0, 4)),
    st.just({}),
    st.just({"nested": {"list": [1, "two", None, 3.5]}, "flag": True}),
)


@dataclass
class ModelJob:
    state: str  # "pending" | "running" | "finished"
    data: dict
    stime: float
    resubmit: bool = False
    lock: int | None = None  # token of the worker holding it (running only)
    active: int = 0  # when it was last accepted/updated: orders get_active_jobs_ids
    # Token of the Job whose finish() was the last change to this job.  Repeating that
    # finish (a retry after 1021 in the caller's own transaction loop) may be a no-op or
    # raise Halt; once anything else changed the job, a stale Job must get Halt.
    finished_by: int | None = None


@dataclass
class Handle:
    """A Job object the API returned, with the token of the accept it descends from."""

    job: jobs.Job
    token: int


class JobModel(RuleBasedStateMachine):
    FAULTS: dict | None = None

    def __init__(self):
        super().__init__()
        self.raw = EmbeddedDatabase(None, memory=True)
        self.wrappers: list[FaultInjectingDatabase] = []
        self.timeouts: dict[str, float] = {}
        self.jobs: dict[tuple[str, str], ModelJob] = {}
        self.handles: list[Handle] = []
        self.app_keys: set[bytes] = set()
        self.clock = 0  # model time: orders activity
        self.tokens = 0

        # Retries back off as on FoundationDB, but shorter here: the search runs more steps.
        self._backoff, limits.INITIAL_BACKOFF = limits.INITIAL_BACKOFF, 0.0005

    def teardown(self):
        limits.INITIAL_BACKOFF = self._backoff
        self.raw.close()

    # --- helpers --------------------------------------------------------------------------

    def store(self, plan):
        """The database a step writes through: the store, or a fault-injecting wrapper."""
        if self.FAULTS is None or plan is None:
            return self.raw
        db = FaultInjectingDatabase(self.raw, seed=plan, **self.FAULTS)
        self.wrappers.append(db)
        return db

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def held(self, h: Handle) -> bool:
        m = self.jobs.get((h.job.type, h.job.id))
        return m is not None and m.state == "running" and m.lock == h.token

    def keep(self, job: jobs.Job, token: int) -> None:
        self.handles.append(Handle(job, token))
        del self.handles[:-40]  # bounded; old ones are as stale as recent stale ones

    # --- type timeouts ----------------------------------------------------------------------

    @rule(faults=plans, type=types, seconds=st.sampled_from([60, 3600.5]))
    def set_type_timeout(self, type, seconds, faults):
        db = self.store(faults)
        jobs.set_type_timeout(db, type, seconds)
        self.timeouts[type] = float(seconds)

    @rule(faults=plans, type=types)
    def clear_type_timeout(self, type, faults):
        db = self.store(faults)
        jobs.clear_type_timeout(db, type)
        self.timeouts.pop(type, None)

    # --- creator side -------------------------------------------------------------------

    @rule(faults=plans, type=types, job_id=ids, data=datas, stime=stimes)
    def add(self, type, job_id, data, stime, faults):
        db = self.store(faults)
        if type not in self.timeouts:
            with pytest.raises(jobs.NoTypeTimeout):
                jobs.add(db, type, job_id, data, scheduled_time=stime)
            return
        jobs.add(db, type, job_id, data, scheduled_time=stime)
        m = self.jobs.get((type, job_id))
        new_data = {} if data is None else data
        if m is None or m.state == "finished":
            self.jobs[(type, job_id)] = ModelJob("pending", new_data, stime)
        elif m.state == "pending":
            if m.stime != stime:  # same time: a read-only no-op, data not replaced
                m.stime, m.data, m.finished_by = stime, new_data, None
        else:  # running: flagged, new time, data ignored
            m.resubmit, m.stime = True, stime

    @rule(faults=plans, entries=st.lists(st.tuples(types, ids, datas), min_size=1, max_size=3))
    def add_several_in_one_transaction(self, entries, faults):
        """Enqueueing as part of the caller's transaction (composition)."""
        db = self.store(faults)
        if any(t not in self.timeouts for t, _i, _d in entries):
            return

        @jobs.transactional
        def enqueue(tr):
            for t, i, d in entries:
                jobs.add(tr, t, i, d, scheduled_time=0)

        enqueue(db)
        for t, i, d in entries:  # applied in order, as the transaction does
            m = self.jobs.get((t, i))
            if m is None or m.state == "finished":
                self.jobs[(t, i)] = ModelJob("pending", {} if d is None else d, 0)
            elif m.state == "pending":
                if m.stime != 0:
                    m.stime, m.data, m.finished_by = 0, {} if d is None else d, None
            else:
                m.resubmit, m.stime = True, 0

    @rule(faults=plans, type=types, job_id=ids)
    def remove(self, type, job_id, faults):
        db = self.store(faults)
        if (type, job_id) not in self.jobs:
            with pytest.raises(jobs.NotFound):
                jobs.remove(db, type, job_id)
            return
        jobs.remove(db, type, job_id)
        del self.jobs[(type, job_id)]

    @rule(faults=plans, type=types, job_id=ids, stime=st.none() | stimes, data=datas)
    def resubmit_as_creator(self, type, job_id, stime, data, faults):
        """resubmit() with the JobInfo from get_job()."""
        db = self.store(faults)
        if (type, job_id) not in self.jobs:
            gone = jobs.JobInfo(type, job_id, "pending", {}, 0.0)
            with pytest.raises(jobs.NotFound):
                jobs.resubmit(db, gone, scheduled_time=stime, data=data)
            return
        info = jobs.get_job(db, type, job_id)
        out = jobs.resubmit(db, info, scheduled_time=stime, data=data)
        assert out == info
        self._resubmit(type, job_id, stime, data)

    def _resubmit(self, type, job_id, stime, data) -> str:
        m = self.jobs[(type, job_id)]
        before = m.state
        new_stime = m.stime if stime is None else stime
        new_data = m.data if data is None else data
        if m.state == "running":  # flagged, new time; data ignored (as re-adding it)
            m.stime, m.resubmit = new_stime, True
        elif m.state == "pending" and (new_stime, new_data) == (m.stime, m.data):
            pass  # nothing changes
        else:  # pending: rescheduled; finished: pending again
            self.jobs[(type, job_id)] = ModelJob("pending", new_data, new_stime)
        return before

    # --- worker side --------------------------------------------------------------------

    @rule(
        type=types,
        max_sched_time=st.sampled_from(MAX_SCHED),
        no_schedule=st.booleans(),
        faults=plans,
    )
    def accept(self, type, max_sched_time, no_schedule, faults):
        db = self.store(faults)
        if no_schedule and max_sched_time not in (None, 0):
            with pytest.raises(ValueError):
                jobs.accept(db, type, max_sched_time=max_sched_time, no_schedule=True, timeout=0)
            return
        limit = time.time() if max_sched_time is None else max_sched_time  # None: now
        eligible = {
            i
            for (t, i), m in self.jobs.items()
            if t == type and m.state == "pending" and m.stime <= limit and (not no_schedule or m.stime == 0)
        }
        kwargs = {} if max_sched_time is None else {"max_sched_time": max_sched_time}
        job = jobs.accept(db, type, no_schedule=no_schedule, timeout=0, **kwargs)
        if not eligible:
            assert job is None
            return
        assert job is not None, f"no job accepted, but {sorted(eligible)} are eligible"
        assert job.type == type and job.id in eligible
        m = self.jobs[(type, job.id)]
        assert job.data == m.data
        assert not jobs.is_resubmitted(job)
        self.tokens += 1
        m.state, m.lock, m.resubmit, m.active, m.finished_by = "running", self.tokens, False, self.tick(), None
        self.keep(job, self.tokens)

    @precondition(lambda self: self.handles)
    @rule(faults=plans, pick=st.integers(0, 10**6), data=datas)
    def update(self, pick, data, faults):
        db = self.store(faults)
        h = self.handles[pick % len(self.handles)]
        if not self.held(h):
            with pytest.raises(jobs.Halt):
                jobs.update(db, h.job, data)
            return
        job = jobs.update(db, h.job, data)
        m = self.jobs[(h.job.type, h.job.id)]
        if data is not None:
            m.data = data
        m.active = self.tick()
        assert (job.type, job.id) == (h.job.type, h.job.id)
        assert job.data == (h.job.data if data is None else data)
        assert jobs.is_resubmitted(job) == m.resubmit
        self.keep(job, h.token)

    def _finish(self, h: Handle, data) -> None:
        m = self.jobs[(h.job.type, h.job.id)]
        final = m.data if data is None else data
        if m.resubmit:
            self.jobs[(h.job.type, h.job.id)] = ModelJob("pending", final, m.stime, finished_by=h.token)
        else:
            m.state, m.data, m.lock, m.finished_by = "finished", final, None, h.token

    def repeats_own_finish(self, h: Handle) -> bool:
        m = self.jobs.get((h.job.type, h.job.id))
        return m is not None and m.finished_by == h.token

    @precondition(lambda self: self.handles)
    @rule(faults=plans, pick=st.integers(0, 10**6), data=datas)
    def finish(self, pick, data, faults):
        db = self.store(faults)
        h = self.handles[pick % len(self.handles)]
        if self.repeats_own_finish(h):
            try:  # either outcome is fine, but nothing may be written
                jobs.finish(db, h.job, data)
            except jobs.Halt:
                pass
            return
        if not self.held(h):
            with pytest.raises(jobs.Halt):
                jobs.finish(db, h.job, data)
            return
        jobs.finish(db, h.job, data)
        self._finish(h, data)

    @precondition(lambda self: self.handles)
    @rule(faults=plans, pick=st.integers(0, 10**6), data=datas)
    def finish_with_application_write(self, pick, data, faults):
        """finish() in the worker's own transaction: the application's write commits with
        the finish, or (Halt) neither does."""
        db = self.store(faults)
        h = self.handles[pick % len(self.handles)]
        self.tokens += 1
        app_key = APP.pack((h.job.type, h.job.id, self.tokens))

        @jobs.transactional
        def work(tr):
            tr.set(app_key, b"result")
            jobs.finish(tr, h.job, data)

        if self.repeats_own_finish(h):
            try:  # a repeated finish may be a no-op (then the application's write commits)
                work(db)
            except jobs.Halt:
                return
            self.app_keys.add(app_key)
            return
        if not self.held(h):
            with pytest.raises(jobs.Halt):
                work(db)
            return
        work(db)
        self._finish(h, data)
        self.app_keys.add(app_key)

    @precondition(lambda self: self.handles)
    @rule(faults=plans, pick=st.integers(0, 10**6), stime=st.none() | stimes, data=datas)
    def resubmit_job(self, pick, stime, data, faults):
        """resubmit() with a Job object, held or stale (it is not fenced: creator's call)."""
        db = self.store(faults)
        h = self.handles[pick % len(self.handles)]
        key = (h.job.type, h.job.id)
        if key not in self.jobs:
            with pytest.raises(jobs.NotFound):
                jobs.resubmit(db, h.job, scheduled_time=stime, data=data)
            return
        job = jobs.resubmit(db, h.job, scheduled_time=stime, data=data)
        before = self._resubmit(*key, stime, data)
        assert (job.type, job.id) == key
        if before == "running":  # flagged only: the worker's Job keeps its data
            assert job.data == h.job.data
        else:  # the data it will run with: the given data, else the stored data
            assert job.data == self.jobs[key].data
        assert jobs.is_resubmitted(job) == (before == "running")
        self.keep(job, h.token)

    @precondition(lambda self: self.handles and hasattr(jobs, "release"))
    @rule(faults=plans, pick=st.integers(0, 10**6))
    def release(self, pick, faults):
        """Hand a running job back (not in the pinned API, but exported)."""
        db = self.store(faults)
        h = self.handles[pick % len(self.handles)]
        if not self.held(h):
            with pytest.raises(jobs.Halt):
                jobs.release(db, h.job)
            return
        jobs.release(db, h.job)
        m = self.jobs[(h.job.type, h.job.id)]
        self.jobs[(h.job.type, h.job.id)] = ModelJob("pending", m.data, m.stime)

    # --- what every step must leave true ----------------------------------------------------

    @invariant()
    def store_matches_model(self):
        db = self.raw  # reads are never faulted; read the store itself
        expected = [
            jobs.JobInfo(t, i, m.state, m.data, m.stime) for (t, i), m in sorted(self.jobs.items())
        ]
        assert jobs.get_jobs(db) == expected
        for type in TYPES:
            mine = [(i, m) for (t, i), m in sorted(self.jobs.items()) if t == type]
            assert jobs.get_jobs(db, type) == [j for j in expected if j.type == type]
            running = sorted((m.active, i) for i, m in mine if m.state == "running")
            assert jobs.get_active_jobs_ids(db, type) == [i for _a, i in running]
            pending = [m.stime for _i, m in mine if m.state == "pending"]
            assert jobs.pending_count(db, type) == len(pending)
            assert jobs.pending_count(db, type, max_sched_time=1) == sum(s <= 1 for s in pending)
            assert jobs.pending_count(db, type, limit=1) == min(1, len(pending))
            assert jobs.get_type_timeout(db, type) == self.timeouts.get(type)
        assert jobs.get_types(db) == sorted(self.timeouts)
        self.counts_match_model(db)
        app = db.get_range(APP.range().start, APP.range().stop)
        assert {kv.key for kv in app} == self.app_keys

    def counts_match_model(self, db):
        """The counters (``jobsctl status``'s numbers) say what the model says, after every
        step: every write path, retried or not, counts each change once."""
        gathered = {t.type: t for t in status.gather(db, limit=0).types}
        for type in TYPES:
            states = [m.state for (t, _i), m in self.jobs.items() if t == type]
            stimes = [m.stime for (t, _i), m in self.jobs.items() if t == type and m.state == "pending"]
            found = gathered.get(type)
            got = (0, 0, 0, 0, 0) if found is None else (
                found.pending, found.due, found.due_asap, found.running, found.finished)
            assert got == (len(stimes), sum(s != FUTURE for s in stimes), stimes.count(0),
                           states.count("running"), states.count("finished"))

    @invariant()
    def single_job_reads(self):
        db = self.store(0)  # read-only calls through a wrapper: they are never faulted
        for type in TYPES:
            for job_id in IDS:
                m = self.jobs.get((type, job_id))
                if m is None:
                    with pytest.raises(jobs.NotFound):
                        jobs.get_job_state(db, type, job_id)
                    with pytest.raises(jobs.NotFound):
                        jobs.get_job_data(db, type, job_id)
                else:
                    assert jobs.get_job_state(db, type, job_id) == m.state
                    assert jobs.get_job_data(db, type, job_id) == m.data
                    assert jobs.get_job(db, type, job_id) == jobs.JobInfo(type, job_id, m.state, m.data, m.stime)


FAULT_RATES = dict(conflict=0.1, unknown_committed=0.1, unknown_not_committed=0.1, too_old=0.1)


class JobModelUnderFaults(JobModel):
    FAULTS = FAULT_RATES

    @invariant()
    def faults_were_injected(self):
        # Sanity of the setup: the wrappers really see this machine's writing commits.
        if sum(w.commits for w in self.wrappers) >= 40:
            assert sum(w.faults for w in self.wrappers) > 0


# JOBS_MODEL_EXAMPLES=2000 for a deeper search than CI's.
SETTINGS = settings(
    max_examples=int(os.environ.get("JOBS_MODEL_EXAMPLES", 100)),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestJobModel = JobModel.TestCase
TestJobModel.settings = SETTINGS
TestJobModelUnderFaults = JobModelUnderFaults.TestCase
TestJobModelUnderFaults.settings = SETTINGS


# --- sequences the search found (or must keep finding), replayed on every run --------------

NESTED = {"nested": {"list": [1, "two", None, 3.5]}, "flag": True}

REGRESSIONS = {
    # Data holding JSON null next to a list or an object must be accepted.
    "null_in_nested_data": [
        ("set_type_timeout", dict(type="alpha", seconds=60)),
        ("add", dict(type="alpha", job_id="j0", data=NESTED, stime=0)),
        ("accept", dict(type="alpha", max_sched_time=None, no_schedule=False)),
        ("update", dict(pick=0, data=NESTED)),
    ],
    # A's Job is stale once the job was finished, re-enqueued and accepted by B:
    # finish with it must raise Halt (and its application write must not commit).
    "stale_finish_after_reaccept": [
        ("set_type_timeout", dict(type="alpha", seconds=60)),
        ("add", dict(type="alpha", job_id="j0", data={"v": 1}, stime=0)),
        ("accept", dict(type="alpha", max_sched_time=None, no_schedule=False)),
        ("finish", dict(pick=0, data=None)),
        ("add", dict(type="alpha", job_id="j0", data={"v": 2}, stime=0)),
        ("accept", dict(type="alpha", max_sched_time=None, no_schedule=False)),
        ("finish", dict(pick=0, data=None)),
        ("finish_with_application_write", dict(pick=0, data=None)),
    ],
    # A's finish re-enqueued the job (it was flagged to run again) and B accepted it:
    # A's Job is stale, a repeated finish with it must raise Halt.
    "stale_finish_after_resubmit_and_reaccept": [
        ("set_type_timeout", dict(type="beta", seconds=60)),
        ("add", dict(type="beta", job_id="j0", data=None, stime=0)),
        ("accept", dict(type="beta", max_sched_time=None, no_schedule=False)),
        ("resubmit_job", dict(pick=0, stime=None, data=None)),
        ("finish", dict(pick=0, data=None)),
        ("finish", dict(pick=0, data=None)),
        ("accept", dict(type="beta", max_sched_time=None, no_schedule=False)),
        ("finish", dict(pick=0, data=None)),
        ("finish_with_application_write", dict(pick=0, data=None)),
    ],
    # The same once the job was only re-enqueued (add after finish), not yet re-accepted.
    "stale_finish_after_readd": [
        ("set_type_timeout", dict(type="alpha", seconds=60)),
        ("add", dict(type="alpha", job_id="j0", data={"v": 1}, stime=0)),
        ("accept", dict(type="alpha", max_sched_time=None, no_schedule=False)),
        ("finish", dict(pick=0, data=None)),
        ("resubmit_as_creator", dict(type="alpha", job_id="j0", stime=2, data=None)),
        ("finish_with_application_write", dict(pick=0, data={"v": 3})),
    ],
}


@pytest.mark.parametrize("machine", [JobModel, JobModelUnderFaults], ids=["plain", "faults"])
@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression(machine, name):
    m = machine()
    try:
        for step, (rule_name, kwargs) in enumerate(REGRESSIONS[name]):
            getattr(m, rule_name)(faults=step if machine.FAULTS else None, **kwargs)
            m.store_matches_model()
            m.single_job_reads()
    finally:
        m.teardown()
