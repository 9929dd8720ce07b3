"""Idle processors of one machine take turns watching for new jobs
(``processors/turns.py``): only the turn's holder is woken by an add; the others look once
a slice.  Processors here share a process, each with its own lock file description, as
processes would."""

from __future__ import annotations

import collections
import fcntl
import os
import signal
import threading
import time

import pytest

import jobs
from processors import Processor
from processors.feed import Acceptor
from processors.feed_policy import LastLook
from processors.turns import Turn, lock_path
from waiting import DEADLINE, running, wait_until


def _processors(db, n: int, done: list) -> list[Processor]:
    out = []
    for _ in range(n):
        p = Processor(db, monitor=False)

        @p.handler("t", timeout=10)
        def handler(ctx):
            done.append(ctx.job_id)

        out.append(p)
    return out


def _watching(processors) -> int:
    """Processors whose idle accept waits on a watch."""
    return sum(p._feed is not None and p._feed.acceptor._watching() for p in processors)


def _add_one_at_a_time(db, done: list, n: int) -> None:
    for _ in range(n):
        before = len(done)
        jobs.add(db, "t", f"j{before}", {})
        assert wait_until(lambda: len(done) == before + 1), f"job j{before} was not run"


def test_only_the_processor_holding_the_turn_watches_and_the_turn_passes_on(db):
    done: list = []
    a, b, c = _processors(db, 3, done)
    with running(a, concurrency=1), running(b, concurrency=1):
        with running(c, concurrency=1):
            assert wait_until(lambda: _watching([a, b, c]) == 1)
            _add_one_at_a_time(db, done, 12)
            assert wait_until(lambda: _watching([a, b, c]) == 1)
            assert sum(p.stats["watch_turns"] for p in (a, b, c)) >= 2  # (it passed on)
            holder = next(p for p in (a, b, c) if p._feed.acceptor._watching())
        if holder is not c:  # stop the holder: another takes its turn
            holder.stop()
        assert wait_until(lambda: _watching([p for p in (a, b) if p is not holder]) == 1)
        _add_one_at_a_time(db, done, 3)
    assert len(done) == 15


def test_a_stopped_processor_leaves_the_turn(db):
    done: list = []
    first, a, b = _processors(db, 3, done)
    with running(first, concurrency=1):
        assert wait_until(lambda: _watching([first]) == 1)  # (it holds the turn)
    with running(a, concurrency=1), running(b, concurrency=1):
        assert wait_until(lambda: _watching([a, b]) == 1)
        _add_one_at_a_time(db, done, 2)


def test_a_turn_held_by_a_process_that_never_watches_delays_jobs_but_loses_none(db):
    done: list = []
    a, b = _processors(db, 2, done)
    jobs.set_type_timeout(db, "t", 10)
    stranger = _stranger_holding(db)
    try:
        with running(a, concurrency=1), running(b, concurrency=1):
            for i in range(3):
                jobs.add(db, "t", f"j{i}", {})
            assert wait_until(lambda: len(done) == 3)  # taken by the looks once a slice
            assert _watching([a, b]) == 0
            fcntl.flock(stranger, fcntl.LOCK_UN)
            assert wait_until(lambda: _watching([a, b]) == 1)
    finally:
        os.close(stranger)


def _stranger_holding(db):
    """A descriptor holding the turn of type ``t`` (as a stopped process would keep it)."""
    path = lock_path(db, ["t"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    stranger = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(stranger, fcntl.LOCK_EX)
    return stranger


def test_an_idle_step_after_one_that_wrote_outcomes_waits_in_line_for_the_turn(db):
    """A processor that finished a job writes its outcome in an accept that finds nothing
    (without a watch: it does not hold the turn); its next step must wait for the turn,
    or it would look only once a slice while new jobs wait for a watcher."""
    jobs.set_type_timeout(db, "t", 10)
    stranger = _stranger_holding(db)
    acceptor = Acceptor(db, ["t"], collections.Counter())
    try:
        assert acceptor.step(0.01, carry=lambda tr: None) == []  # (wrote: returns at once)
        assert acceptor.step(0.01) == []
        assert acceptor._turn._wanted and not acceptor._turn.held
        fcntl.flock(stranger, fcntl.LOCK_UN)
        assert wait_until(lambda: acceptor._turn.held)
        assert acceptor.wake.is_set()  # (its next step looks, watching)
        assert acceptor.step(0.01) == [] and acceptor._watching()
    finally:
        acceptor.close()
        os.close(stranger)


def test_once_the_queue_drained_a_processor_without_the_turn_waits_a_slice_for_it_before_it_looks(db):
    """After a look that took fewer jobs than it asked for, the jobs come a few at a time
    and the turn's holder takes them as they come: a processor without the turn does not
    look at once (its pick would race the holder's for those jobs), but waits in line a
    slice, then looks as before (a stuck holder delays jobs by no more than a slice).  A
    full batch ends it, and a free turn is taken and looked with at once."""
    jobs.set_type_timeout(db, "t", 10)
    stranger = _stranger_holding(db)
    acceptor = Acceptor(db, ["t"], collections.Counter())
    try:
        jobs.add(db, "t", "j0")
        assert [job.id for job in acceptor.step(0.01, limit=4)] == ["j0"]  # (a look without the turn)
        assert acceptor.look is LastLook.SHORT  # (1 of 4)
        jobs.add(db, "t", "j1")
        looks = acceptor.stats["accept_batches"] + acceptor.stats["accept_empty"]
        assert acceptor.step(0.01, limit=4) == []
        assert acceptor.stats["accept_batches"] + acceptor.stats["accept_empty"] == looks  # (no look)
        assert acceptor._turn._wanted and jobs.get_job_state(db, "t", "j1") == "pending"
        assert [job.id for job in acceptor.step(0.01, limit=4)] == ["j1"]  # (a slice went by: it looks)

        acceptor.step(0.01, limit=4)  # (drained again: in line)
        jobs.add(db, "t", "j2")
        jobs.add(db, "t", "j3")
        assert sorted(job.id for job in acceptor.step(0.01, limit=2)) == ["j2", "j3"]  # a full batch
        assert acceptor.look is LastLook.FULL
        jobs.add(db, "t", "j4")
        assert [job.id for job in acceptor.step(0.01, limit=4)] == ["j4"]  # (looks at once)

        assert acceptor.look is LastLook.SHORT
        fcntl.flock(stranger, fcntl.LOCK_UN)
        assert wait_until(lambda: not acceptor._turn._blocked)  # (its thread in line passed it on)
        jobs.add(db, "t", "j5")
        assert [job.id for job in acceptor.step(0.01, limit=4)] == ["j5"]  # (the turn was free)
        assert acceptor.stats["watch_turns"] == 1
    finally:
        acceptor.close()
        os.close(stranger)


def test_a_busy_processor_defers_to_the_turns_holder_only_once_the_queue_drained(db):
    """``defers``: the feed of a busy processor whose last look came back short commits its
    outcomes on their own, rather than in an accept that would race the holder's, while
    another processor holds the turn; it takes a free turn (and looks, watching)."""
    jobs.set_type_timeout(db, "t", 10)
    stranger = _stranger_holding(db)
    acceptor = Acceptor(db, ["t"], collections.Counter())
    try:
        assert not acceptor.defers()  # (a backlog, or not known yet: look)
        acceptor.look = LastLook.SHORT
        assert acceptor.defers()
        fcntl.flock(stranger, fcntl.LOCK_UN)
        assert not acceptor.defers() and acceptor._turn.held
    finally:
        acceptor.close()
        os.close(stranger)


def test_a_holder_whose_accept_conflicts_passes_the_turn_on_before_it_backs_off(db, monkeypatch):
    """An accept made holding the turn that conflicts (another worker took a job it
    picked) backs off before it attempts again, up to a second after several conflicts
    in a row: meanwhile the turn goes to another idle processor, which watches (the
    machine's new jobs would otherwise wait for a look once a slice), and the conflicting
    accept's next attempts look without a watch."""
    from jobs.queue.accepting import AcceptCall
    from jobs.engine.errors import NOT_COMMITTED, FDBError

    jobs.set_type_timeout(db, "t", 10)
    jobs.add(db, "t", "j1")
    holder = Acceptor(db, ["t"], collections.Counter())
    other = Acceptor(db, ["t"], collections.Counter())
    body, seen = AcceptCall._body, []

    def conflicting_once(self, tr, also=None):
        if not seen:  # the holder's first attempt
            seen.append(self.watching)
            raise FDBError(NOT_COMMITTED)
        if len(seen) == 1:  # its next: the turn was passed on
            seen.append((wait_until(lambda: other._turn.held), self.watching))
        return body(self, tr, also)

    monkeypatch.setattr(AcceptCall, "_body", conflicting_once)
    try:
        assert holder._make_turn().take()
        other._make_turn().wait(threading.Event())  # (in line for the turn)
        assert [job.id for job in holder.step(1.0)] == ["j1"]
        assert seen == [True, (True, False)]
        assert not holder._turn.held and other._turn.held
        assert holder.stats["accept_conflicts"] == 1
    finally:
        holder.close()
        other.close()


def test_with_turns_off_every_idle_processor_watches(db, monkeypatch):
    monkeypatch.setenv("JOBS_IDLE_TURNS", "off")
    done: list = []
    ps = _processors(db, 3, done)
    with running(ps[0], concurrency=1), running(ps[1], concurrency=1), running(ps[2], concurrency=1):
        assert wait_until(lambda: _watching(ps) == 3)
        _add_one_at_a_time(db, done, 3)
    assert sum(p.stats["watch_turns"] for p in ps) == 0


# --- the lock itself -----------------------------------------------------------------------


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "turns" / "store-types")


def test_a_turn_goes_to_the_waiter_when_its_holder_releases_it(path):
    first, second = Turn(path), Turn(path)
    assert first.take() and first.held
    assert not second.take() and not second.held
    came = threading.Event()
    second.wait(came)
    assert not came.wait(0.1)
    first.release()
    assert came.wait(DEADLINE) and second.held
    assert not first.take()
    assert (first.taken, second.taken) == (1, 1)
    first.close()
    second.close()


def test_a_turn_kept_through_a_run_goes_to_the_waiter_if_the_run_outlasts_it(path):
    """``keep``: the holder goes on holding the turn through a short run; back in time
    (``resume``), it still holds it; not back by the deadline, its waiting thread gives
    the turn to the waiter."""
    first, second = Turn(path), Turn(path)
    assert first.take() and first.keep(0.05)
    came = threading.Event()
    second.wait(came)
    first.resume()  # (back before the deadline)
    assert not came.wait(0.3) and first.held
    assert first.keep(0.05)  # (this time the run outlasts it)
    assert came.wait(DEADLINE) and second.held and not first.held
    assert not first.keep(0.05)  # (not held: nothing to keep)
    first.close()
    second.close()


def test_a_holder_keeping_the_turn_job_after_job_does_not_wake_its_waiting_thread_each_time(path, monkeypatch):
    """A busy processor keeps the turn after each short run (``keep``, then ``resume`` as
    its next accept begins): the waiting thread, in a wait that ends by the deadline,
    looks at the deadline then, rather than being woken at every keep.  A run that
    outlasts the last keep still gives the turn to a waiter."""
    roused = collections.Counter()
    rouse = Turn._rouse_waiter
    monkeypatch.setattr(Turn, "_rouse_waiter", lambda self: (roused.update([self]), rouse(self)))
    first, second = Turn(path), Turn(path)
    assert first.take() and first.keep(5.0)
    assert wait_until(lambda: first._wake_at is not None)  # (its thread waits, until the deadline)
    first.resume()
    roused.clear()
    for _ in range(200):
        assert first.keep(5.0)
        first.resume()
    assert roused[first] == 0
    came = threading.Event()
    second.wait(came)
    assert first.keep(0.05)  # (a shorter deadline than the thread's wait: it is told)
    assert came.wait(DEADLINE) and second.held and not first.held
    first.close()
    second.close()


def test_one_thread_waits_for_the_turn_over_many_hand_overs_and_ends_at_close(path):
    first, second = Turn(path), Turn(path)
    assert first.take()
    threads = set()
    for _ in range(5):  # the turn goes back and forth: each waits with its one thread
        waiter, holder = (second, first) if first.held else (first, second)
        came = threading.Event()
        waiter.wait(came)
        holder.release()
        assert came.wait(DEADLINE) and waiter.held and not holder.held
        threads.add(waiter._waiter)
    assert len(threads) == 2 and all(t.is_alive() for t in threads)
    first.close()
    second.close()
    for thread in threads:
        thread.join(DEADLINE)
        assert not thread.is_alive()
    assert first._fd is None and second._fd is None


def test_a_waiter_that_stopped_wanting_the_turn_passes_it_on(path):
    holder, busy, idle = Turn(path), Turn(path), Turn(path)
    assert holder.take()
    busy.wait(threading.Event())
    busy.release()  # took jobs meanwhile: no longer wants it
    holder.release()
    assert wait_until(idle.take)
    assert not busy.held
    for turn in (holder, busy, idle):
        turn.close()


def test_closing_gives_the_turn_up_and_refuses_it_after(path):
    first, second = Turn(path), Turn(path)
    assert first.take()
    first.close()
    assert second.take()
    assert not first.take() and not first.held
    second.close()


def test_closing_the_turns_removes_their_lock_file_and_a_remaining_one_makes_it_again(path):
    """A processor closing its turn removes the lock file when no one holds it (a machine
    does not gather a file for every store and types ever served).  A processor still
    open takes the path's new file at its next take, and excludes newcomers there."""
    first, second = Turn(path), Turn(path)
    assert first.take()
    first.close()
    assert not os.path.exists(path)
    assert second.take() and os.path.exists(path)
    third = Turn(path)
    assert not third.take()
    second.close()
    assert third.take()
    third.close()
    assert not os.path.exists(path)


def test_a_waiter_given_a_removed_files_lock_waits_for_the_paths_new_file(path):
    """The file is removed under a holder (a cleaner of the temporary directory): its
    waiter, given the removed file's lock, takes the path's new file's, which excludes
    a newcomer."""
    holder, waiter = Turn(path), Turn(path)
    assert holder.take()
    came = threading.Event()
    waiter.wait(came)
    os.unlink(path)
    holder.release()
    assert came.wait(DEADLINE) and waiter.held
    assert os.path.exists(path)
    newcomer = Turn(path)
    assert not newcomer.take()
    for turn in (holder, waiter, newcomer):
        turn.close()


def test_without_a_lock_file_every_processor_holds_its_own_turn(tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    turn = Turn(str(blocked / "turns" / "lock"))  # (its directory cannot be made)
    assert turn.take() and turn.held
    alone = Turn(None)  # (no store id yet)
    assert alone.take() and alone.held
    turn.close()
    alone.close()


def test_a_forked_child_does_not_keep_a_dead_holders_turn(path):
    """A process holding the turn forks a child and dies: the turn is free while the
    child lives (the child closed its copy of the lock's descriptor at fork)."""
    r, w = os.pipe()
    holder = os.fork()
    if holder == 0:  # (the holder: takes the turn, forks, dies without letting go)
        try:
            turn = Turn(path)
            assert turn.take()
            child = os.fork()
            if child == 0:
                time.sleep(600)  # (outlives the wait below: killed at the end)
                os._exit(0)
            os.write(w, b"%d\n" % child)
        finally:
            os._exit(0)
    os.waitpid(holder, 0)
    child = int(os.read(r, 64).split()[0])
    try:
        other = Turn(path)
        assert wait_until(other.take)
        other.close()
    finally:
        os.kill(child, signal.SIGKILL)  # (a grandchild: not ours to reap)
        os.close(r)
        os.close(w)


def test_an_accept_that_keeps_conflicting_backs_off_a_bounded_time(monkeypatch):
    """A conflict of an accept means another worker took a job it picked: the next
    attempt picks again, after a back-off that grows as FoundationDB's client's does but
    stops at ``ACCEPT_MAX_RETRY_DELAY_MS`` (the client's own grows to a second, which on a
    cluster became the start latency of the jobs waiting meanwhile)."""
    import jobs.engine.transaction as transaction
    from jobs.queue import accepting
    from jobs.engine.errors import NOT_COMMITTED, FDBError

    db = jobs.open("memory:")
    jobs.set_type_timeout(db, "t", 10)
    jobs.add(db, "t", "j1")
    take, attempts, slept = accepting.AcceptCall._take, [], []

    def conflicting(self, tr, also, tally):
        attempts.append(1)
        if len(attempts) <= 9:
            raise FDBError(NOT_COMMITTED)
        return take(self, tr, also, tally)

    monkeypatch.setattr(accepting.AcceptCall, "_take", conflicting)
    monkeypatch.setattr(transaction.time, "sleep", slept.append)
    job = jobs.accept(db, "t", timeout=0)
    assert job is not None and job.id == "j1" and len(attempts) == 10
    assert len(slept) == 9 and max(slept) <= accepting.ACCEPT_MAX_RETRY_DELAY_MS / 1000 <= 0.1
    db.close()
