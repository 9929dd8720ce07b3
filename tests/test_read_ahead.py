"""``jobs.read_ahead(tr, held)``: the rows of a batch of held jobs read together (one round
trip on a cluster), with every call in the block behaving exactly as without it: fenced on
its own row, seeing the transaction's own writes (a row or a retention written earlier in
the block), and a Processor pipelining its accepts behind a cluster's latencies still runs
every job exactly once, never holding more than ``prefetch``."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

import jobs
from jobs.queue import finished as finished_index
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.latency import Late
from processors import Processor
from waiting import running, wait_until

T = "t"


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def _accept(db, n):
    jobs.add_many(db, T, [f"j{i}" for i in range(n)])
    return jobs.accept_many(db, T, n, timeout=0)


@contextlib.contextmanager
def round_trips():
    """The waits, behind a ``read_latency`` of 0.05 s, that took most of a round trip (a
    read answered sooner was already under way): one per round trip a call waited for."""
    waited = []
    arrived = Late._arrived

    def counting(self):
        if self._at - time.monotonic() > 0.025:
            waited.append(self)
        return arrived(self)

    Late._arrived = counting
    try:
        yield waited
    finally:
        Late._arrived = arrived


def test_a_batch_finishes_in_one_round_trip_of_reads(db):
    """Behind a read latency, finishing 16 jobs waits for two round trips (the read version,
    then every read at once), not seventeen."""
    held = _accept(db, 16)
    slow = FaultInjectingDatabase(db, read_latency=0.05)
    with round_trips() as waited:
        @jobs.transactional
        def finish_all(tr):
            waited.clear()
            with jobs.read_ahead(tr, held):
                return [jobs.finish(tr, job) for job in held]

        assert finish_all(slow) == [True] * 16
    assert len(waited) <= 2
    assert all(j.state == "finished" for j in jobs.get_jobs(db, T))


def test_each_call_still_fences_on_its_own_row(db):
    held = _accept(db, 3)
    jobs.remove(db, T, held[1].id)  # the second worker's job is gone

    @jobs.transactional
    def finish_all(tr):
        with jobs.read_ahead(tr, held):
            out = [jobs.finish(tr, held[0])]
            with pytest.raises(jobs.Halt):
                jobs.finish(tr, held[1])
            return out + [jobs.finish(tr, held[2])]

    assert finish_all(db) == [True, True]
    assert jobs.get_job_state(db, T, held[0].id) == "finished"
    assert jobs.get_job_state(db, T, held[2].id) == "finished"


def test_a_row_written_earlier_in_the_block_is_read_as_written(db):
    """A resubmission flags the row; the finish after it must see the flag (not the row
    read ahead) and make the job pending again."""
    held = _accept(db, 2)

    @jobs.transactional
    def resubmit_then_finish(tr):
        with jobs.read_ahead(tr, held):
            jobs.resubmit(tr, held[0])
            jobs.finish(tr, held[0])
            jobs.finish(tr, held[1])

    resubmit_then_finish(db)
    assert jobs.get_job_state(db, T, held[0].id) == "pending"
    assert jobs.get_job_state(db, T, held[1].id) == "finished"


def test_a_retention_set_earlier_in_the_block_indexes_the_finishes(db):
    held = _accept(db, 2)

    @jobs.transactional
    def retain_then_finish(tr):
        with jobs.read_ahead(tr, held):
            jobs.set_retention(tr, T, finished=3600)
            for job in held:
                jobs.finish(tr, job)

    retain_then_finish(db)
    for job in held:
        assert jobs.transactional(lambda tr: finished_index.entry_of(tr, T, job.id))(db) is not None


def test_read_ahead_needs_a_transaction(db):
    with pytest.raises(TypeError, match="read_ahead needs a transaction"):
        jobs.read_ahead(db, [])


def test_a_processor_behind_latencies_and_faults_runs_each_job_once_holding_at_most_prefetch(db):
    slow = FaultInjectingDatabase(db, commit_latency=0.002, read_latency=0.0005, conflict=0.05,
                                  unknown_committed=0.05, unknown_not_committed=0.05, seed=5)
    p = Processor(slow, prefetch=8)
    seen, lock = [], threading.Lock()

    @p.handler(T, timeout=60)
    def handler(ctx):
        with lock:
            seen.append((ctx.job_id, len(jobs.get_active_jobs_ids(db, T))))

    jobs.add_many(db, T, [f"j{i}" for i in range(300)])
    with running(p, concurrency=1):
        assert wait_until(lambda: len(seen) >= 300 and not jobs.get_active_jobs_ids(db, T))
    assert sorted(job_id for job_id, _ in seen) == sorted(f"j{i}" for i in range(300))
    assert max(n for _, n in seen) <= 8
    assert all(j.state == "finished" for j in jobs.get_jobs(db, T))
    assert slow.faults > 0


def test_an_accept_carrying_a_finish_asks_for_the_queue_head_with_its_first_reads(db):
    """Behind a read latency, an accept that writes the last job's finish (as a processor's
    does) waits for the read version, its first reads (the finish's row and the queue's
    head among them), the rows of the jobs it picked: three round trips, where asking for
    the head only once the first reads came back took four."""
    from jobs.queue.accepting import AcceptCall

    (last,) = _accept(db, 1)
    jobs.add_many(db, T, ["next-1", "next-2"])
    slow = FaultInjectingDatabase(db, read_latency=0.05)
    call = AcceptCall(slow, T, timeout=0)
    with round_trips() as waited:
        taken = call.attempt(lambda tr: jobs.finish(tr, last))
    assert [job.id for job in taken] in (["next-1"], ["next-2"]) and call.retries == 0
    assert len(waited) <= 3, len(waited)
    assert jobs.get_job_state(db, T, last.id) == "finished"
