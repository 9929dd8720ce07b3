"""Where a processor's lanes get their jobs: batches accepted in one transaction each,
sized to what the lanes will run soon.

A lane that needs a job takes one from the feed's buffer; when the buffer is empty, one
lane (the others wait) accepts a batch, in a transaction that also writes the outcomes
waiting to be written (one commit finishes the last batch and takes the next).  The
batch is at least one job per waiting lane and at most ``prefetch``; between those, as
many as the lanes run in ``PREFETCH_WINDOW`` seconds at the recent pace.  So short jobs
go by the dozen per commit, while long ones are taken one at a time and never
sit in one worker's buffer while another worker idles.  Accepted jobs are held (running,
heartbeated) from the moment they are taken, and handed back at shutdown if not started.

Pipelined: when what is left in the buffer will run out sooner than an accept takes (on a
cluster, a few read round trips and a commit's), the next batch is accepted in the
background (the feeder thread) while the lanes go on running the rest, so they do not stop
for each commit.  A buffer of one job or none never triggers it: ``prefetch=1`` and long
jobs still take one job at a time.  Nor does it hold more jobs at once: a batch accepted
ahead is no larger than ``prefetch`` less the jobs still held (whose outcomes are not
written yet, or not by this transaction).

A trickle: once the last job came after a look that found none, the next look likely
finds none too.  Written with the outcomes, it would need a second transaction to set its
watch (a watch is a read: it must not go in a transaction that writes).  So it carries
none: it stays read-only and sets its watch itself.  The outcomes are committed as its
wait begins; or, while jobs come sooner than ``FINISH_DELAY`` apart and the wait after
the next job still commits them in time, with that job's (two or so a commit), or once
the next job is late (``LATE_GAPS``) or the oldest has waited ``FINISH_DELAY``, the watch
kept meanwhile.  (Carried by the accept of the next job instead, they cost fewer commits
still, but that job then waits for their writes: its start comes later.)

Order: the lanes take the buffer's runs best first, lower priority then earlier scheduled
time, whatever order the batches came in.

Lingering: after a batch that came back short but not single (jobs come faster than one
at a time, and the queue was drained), the next accept waits until ``ACCEPT_LINGER``
after that one began, and none is made ahead: the jobs added meanwhile go in one batch,
not in a transaction each.

Every decision above (how many jobs to ask for, when to accept ahead, what an accept
carries, when to linger, how long to hold a trickle's outcomes) is made by
``feed_policy.py`` without I/O; the two state machines it defines, ``FeedState`` (who is
accepting) and ``LastLook`` (what the last looks found), are held here, by ``Feed`` and
``Acceptor``, which ask the policy, do the I/O and feed the result back.  The tunables
below are read as a feed is made.

Calls go one way: the ``Feed`` calls its ``Acceptor``, never the other way.  A step of the
acceptor that finds no job to take returns where it would begin to wait (``waits``); the
feed then commits or holds the outcomes queued and waits through ``Acceptor.wait``, until
the time the policy gave to commit those it held, and again.  Whether the turn is kept
through the jobs a step takes is a number the feed sets before the step (the policy's
answer at the pace measured: ``keep_turn_through``).
"""

from __future__ import annotations

import collections
import logging
import math
import random
import threading
import time

import jobs
from jobs.queue.accepting import AcceptCall, Wait

from . import feed_policy, finishes, tracing
from .feed_policy import FeedPolicy, FeedState, LastLook, Pace
from .finishes import ROW_BYTES, TRANSACTION_ROWS, OutcomesNotCarried
from .turns import Turn, lock_path as turn_lock_path

log = logging.getLogger("processors")

ACCEPT_SLICE = 0.5  # longest blocking accept step, so stop() is seen soon
PREFETCH_WINDOW = 0.05  # prefetch what the lanes run in this many seconds (at the recent pace)
ERROR_PAUSE_MAX = 5.0  # longest pause after a store error in the accept loop
# A processor holding the turn that takes jobs it will have run within this long keeps
# the turn through them (its next accept looks, watching): handing it over costs the
# next holder a wake-up and a look, and the jobs added meanwhile wait for those.
KEEP_TURN = 0.002
PACE_WEIGHT = 0.2  # weight of the newest run (and accept) in the moving averages of their times
# An accept that took more than one job but fewer than it asked for found the queue
# drained while jobs keep coming: the processor's next accept waits until this long after
# that one began, and none is made ahead meanwhile, so that the next batch is bigger (an
# accept taking the two or three jobs added since costs a whole transaction, and its CPU
# and write lock are what a producer adding at full speed needs).  A lone job (a trickle)
# or a full batch (a backlog) never waits.
ACCEPT_LINGER = 0.0025
# A trickle's outcomes wait for the next ones, to share their commit, until the next job
# is this many of the usual gaps between jobs late (the trickle paused: they go), and
# ``FINISH_DELAY`` at most.
LATE_GAPS = 2.0


class Acceptor:
    """Accepts jobs of any of ``types``: an attempt per type (random order), then one wait
    on all their pending watches.  The caller (the feed) calls it, never the other way:
    ``step`` looks, and a step that takes nothing and would wait returns with ``waits``
    set; the caller then waits with ``wait`` (a slice at most, so that it can stop; in
    parts if it asks to be back at a time of its own) before its next step.  ``wake`` cuts
    a wait short (stop).  ``stats`` (a Counter) counts the accepts that took jobs
    (``accept_batches``), those that took none (``accept_empty``: nothing due, or only
    outcomes written), the accept attempts retried (``accept_retries``) and, of them, the
    conflicts (``accept_conflicts``: another worker took a picked job first), the second
    transactions of accepts that wrote outcomes and found nothing (``accept_rearms``:
    each set the watch, or took a job that came meanwhile), and the turns to watch this
    processor held (``watch_turns``).

    Only the idle processor holding its machine's turn watches (``turns.py``); another
    looks once a slice without a watch, and waits for the turn.  A step that takes jobs
    gives the turn up (or keeps it through jobs run within ``KEEP_TURN``:
    ``keep_turn_through``), and so does an attempt that conflicts.

    ``look`` (a ``feed_policy.LastLook``) is what the last looks found.  Once the queue
    is drained (the last look took fewer jobs than it asked for), jobs come a few at a
    time and the holder takes them as they come: a processor without the turn that looked
    too would pick among those same few jobs, and one of the two accepts would conflict.
    So it waits for the turn first, a slice at most (a stuck holder delays jobs by no more
    than before), and a busy one commits its outcomes on their own (``defers``) rather
    than in an accept.  A full batch (a backlog) ends it: every processor looks again at
    once.  ``trickle``: the last jobs taken came after a look that found none."""

    def __init__(self, db, types: list[str], stats):
        self.db = db
        self.types = list(types)
        self.stats = stats
        self.wake = threading.Event()
        # The most jobs a step may take and keep the turn through (``Turn.keep``) rather
        # than hand it over: they run so soon (set by the caller before a step, from its
        # pace); 0: handed over whenever jobs are taken.
        self.keep_turn_through = 0
        self.look = LastLook.FULL
        self.trickle = False
        self._calls: dict[str, AcceptCall] = {}  # a call (and its lock) lives until it returns jobs (1021)
        self._waits: list[Wait] = []
        self._wait_end: float | None = None  # (monotonic; ``waits``) when the wait a step ended in ends
        self._turn: Turn | None = None  # (made at the first step: it reads the store id)
        self._turns_counted = 0
        self._closed = False

    def step(self, slice_seconds: float, limit: int = 1, carry=None) -> list[jobs.Job]:
        """Up to ``limit`` jobs of one type, or [] (if ``waits``, the caller then waits a slice
        at most: ``wait``).  ``carry(tr)`` writes in the first accept transaction (committed
        whatever it finds; what it raises, e.g. ``finishes.OutcomesNotCarried``, ends the
        step; a step that wrote it does not wait, so that the caller learns it committed)."""
        self._wait_end = None  # (no wait, unless this step ends in one)
        carries = carry is not None
        turn = self._turn or self._make_turn()
        turn.resume()
        # (attempt now: ``carry`` is written now; or the turn came: look again, watching this time)
        if carries or (self._waits and not self._watching() and turn.take()):
            self._cancel_waits()
        if self._waits:
            return self._ends_waiting(turn, slice_seconds)
        self.wake.clear()
        watching = self._watches(turn, carries)
        if not feed_policy.looks_now(self.look, carries, watching):
            self.look = feed_policy.in_line(self.look)
            return self._ends_waiting(turn, slice_seconds)
        for type in self._in_random_order():
            out = self._attempt(type, limit, carry, watching)
            carry = None
            if isinstance(out, list):
                return self._took(type, out, limit, turn)
            if out is None:  # a stale queue entry was dropped: look again at once
                self._cancel_waits()
                return []
            self._wait_on(out)
        self.look = feed_policy.found_none(self.look)
        return [] if carries else self._ends_waiting(turn, slice_seconds)  # (carried: the next step waits)

    def _watches(self, turn: Turn, carries: bool) -> bool:
        """Whether this step's look watches: it holds the turn.  A step that carries
        outcomes may be a busy processor's: it watches only if it holds the turn already;
        an idle step takes the turn if it is free."""
        watching = turn.held if carries else turn.take()
        self._count_turns()
        return watching

    def _in_random_order(self) -> list[str]:
        """The types in a random order, none first for ever (one type needs no shuffle)."""
        return self.types if len(self.types) == 1 else random.sample(self.types, len(self.types))

    def _attempt(self, type: str, limit: int, carry, watching: bool):
        """One accept call's attempt for ``type`` (see ``AcceptCall.attempt``), counted."""
        call = self._calls.get(type)
        if call is None:
            call = self._calls[type] = AcceptCall(self.db, type)
        call.limit = limit  # (a retry after 1021 returns what committed, whatever the limit)
        call.watching = watching
        call.on_conflict = self._pass_turn if watching else None
        retries, conflicts, rearms = call.retries, call.conflicts, call.rearms
        try:
            out = call.attempt(carry)
        finally:
            self.stats["accept_retries"] += call.retries - retries
            self.stats["accept_conflicts"] += call.conflicts - conflicts
            self.stats["accept_rearms"] += call.rearms - rearms
        self.stats["accept_batches" if isinstance(out, list) else "accept_empty"] += 1
        return out

    def _wait_on(self, out: Wait) -> None:
        """Wait on ``out``'s watch too (if it has one): it wakes the step's wait."""
        self._waits.append(out)
        if out.watch is not None:
            out.watch.on_ready(lambda _f: self.wake.set())

    def _took(self, type: str, taken: list, limit: int, turn: Turn) -> list:
        """A step took jobs of ``type``: its call is done; the turn is given up (busy:
        another idle processor watches) unless the jobs run so soon it is kept
        (``keep_turn_through``)."""
        self.look, self.trickle = feed_policy.took(self.look, len(taken), limit)
        del self._calls[type]
        self._cancel_waits()
        if not (len(taken) <= self.keep_turn_through and turn.keep(KEEP_TURN)):
            turn.release()
        return taken

    def defers(self) -> bool:
        """Whether a busy processor's next step should not look (its outcomes go on their
        own): the queue drained at its last look and another processor holds the turn (if
        it is free, this processor takes it, and looks watching)."""
        if not self.look.drained:
            return False
        turn = self._turn or self._make_turn()
        return not turn.take()

    def _ends_waiting(self, turn: Turn, slice_seconds: float) -> list:
        """The end of a step that took nothing and waits for a job (watching), or for the
        turn (in line: a look again when it comes): the wait (``wait``) ends a slice from
        now at most, or as a job falls due."""
        if not self._watching():
            turn.wait(self.wake)
        self._wait_end = time.monotonic() + min(slice_seconds, max(0.0, self._due() - time.time()))
        return []

    @property
    def waits(self) -> bool:
        """The last step took nothing and waits for jobs: the caller calls ``wait`` before
        the next step."""
        return self._wait_end is not None

    @property
    def watching(self) -> bool:
        """This processor's wait is on a watch (it takes the next job): it holds the turn."""
        return self._watching()

    def wait(self, until: float | None = None) -> bool:
        """(After a step that ``waits``.)  Wait for a job, or for the turn, until the wait
        ends (a slice after the step) or until ``until`` (monotonic) if sooner: False if
        back at ``until`` with the wait going on (the caller calls again: the watch stays
        set); True once the wait is over: woken (a job added, the turn came, stop), a job
        fell due, or the slice ended (then the next step waits again if it still watches,
        or looks)."""
        end = self._wait_end
        woken = self.wake.wait(max(0.0, (end if until is None else min(end, until)) - time.monotonic()))
        if not woken and until is not None and time.monotonic() < end:
            return False
        self._wait_end = None
        if woken or time.time() >= self._due() or not self._watching():
            self._cancel_waits()  # something changed (or no watch: look again each slice)
        return True

    def close(self) -> None:
        """Give the turn up for good (the processor stops; any thread)."""
        self._closed = True
        if self._turn is not None:
            self._turn.close()

    def _make_turn(self) -> Turn:
        turn = Turn(None if self._closed else turn_lock_path(self.db, self.types))
        self._turn = turn
        if self._closed:  # (closed meanwhile: the lock is not kept)
            turn.close()
        return turn

    def _count_turns(self) -> None:
        taken = self._turn.taken
        self.stats["watch_turns"] += taken - self._turns_counted
        self._turns_counted = taken

    def _pass_turn(self, call: AcceptCall) -> None:
        """(After a conflict of an attempt made holding the turn.)  Give the turn to
        another idle processor, which watches: this one backs off before its next attempt
        (up to ``accepting.ACCEPT_MAX_RETRY_DELAY_MS`` after several conflicts in a row),
        and meanwhile the machine's new jobs would wait for a look once a slice.  Its next
        attempts look without a watch."""
        if self._turn.release():
            call.watching = False

    def _watching(self) -> bool:
        return any(w.watch is not None for w in self._waits)

    def _due(self) -> float:
        """(Wall clock) when the first job scheduled later that a wait is on falls due."""
        return min((w.due for w in self._waits if w.due is not None), default=math.inf)

    def _cancel_waits(self) -> None:
        for w in self._waits:
            if w.watch is not None:
                w.watch.cancel()
        self._waits = []


class Feed:
    """The buffer of accepted jobs shared by a processor's ``lanes`` threads.

    ``hold(jobs)`` turns accepted jobs into held runs (the processor registers them);
    ``in_hand()`` counts them (until their outcome is written);
    ``finishes``: the outcomes waiting to be written, written by each accept transaction;
    ``stopping`` ends every ``take``.  A ``jobs.StoreError`` from accepting is kept in
    ``fatal`` (the processor stops with it).  ``state`` (a ``feed_policy.FeedState``) says
    who is accepting; ``policy`` decides how many jobs to ask for, when to accept ahead
    and what an accept carries, from the measurements in ``pace``.  ``waiting``: the
    accept under way waits for jobs to be added, so the outcomes queued will not ride an
    accept transaction soon (while it is still in its transaction, they ride the next
    one)."""

    def __init__(self, db, types: list[str], lanes: int, prefetch: int, *, hold, in_hand, finishes,
                 stopping: threading.Event, stats):
        self.policy = FeedPolicy(lanes, prefetch, window=PREFETCH_WINDOW, linger=ACCEPT_LINGER,
                                 keep_turn=KEEP_TURN, late_gaps=LATE_GAPS, row_bytes=ROW_BYTES,
                                 transaction_rows=TRANSACTION_ROWS, error_pause_max=ERROR_PAUSE_MAX)
        self.pace = Pace(PACE_WEIGHT)
        self.acceptor = Acceptor(db, types, stats)
        self._hold = hold
        self._in_hand = in_hand
        self._finishes = finishes
        self._stopping = stopping
        self._stats = stats
        self._cond = threading.Condition()  # guards what follows, down to the feeder
        self.state = FeedState.READY
        self._ready: collections.deque = collections.deque()  # the runs, best first
        self._idle = 0  # lanes inside take()
        self._linger_until = 0.0  # (monotonic; LINGERING) no accept before then
        self._ahead_size = 0  # (AHEAD) the batch the feeder asks for
        self._feeder: threading.Thread | None = None
        self._ahead = threading.Event()  # the feeder has a batch to accept
        self._pause = 0.0  # (the accepting thread's) the pause after the last store error
        self.waiting = False  # (set by the accepting thread, read by the lanes)
        self.fatal: BaseException | None = None

    def take(self):
        """The next run for the calling lane; None once stopping."""
        with self._cond:
            self._idle += 1
        try:
            while True:
                with self._cond:
                    while True:
                        if self._stopping.is_set() or self.fatal is not None:
                            return None
                        if self._ready:
                            run = self._ready.popleft()
                            if self._ahead_due():
                                self._start_ahead()
                            return run
                        if not self.state.accepting:
                            linger = self._linger_until - time.monotonic()
                            if self.state is FeedState.LINGERING and linger > 0:
                                self._cond.wait(linger)
                                continue
                            self.state = FeedState.ACCEPTING
                            limit = self.policy.batch_size(self.pace.run, self._idle)
                            break
                        self._cond.wait(ACCEPT_SLICE)
                self._fill(limit)
        finally:
            with self._cond:
                self._idle -= 1

    def _fill(self, limit: int, ahead: bool = False) -> None:
        """Accept up to ``limit`` jobs into the buffer (the caller set ``state`` to
        ACCEPTING, or AHEAD: ``ahead``)."""
        runs, asked = [], 0
        began = time.monotonic()
        try:
            runs, asked = self._accept(limit, ahead)
        finally:
            with self._cond:
                if runs:
                    self.pace.accepted(began, time.monotonic())
                self.state = feed_policy.after_batch(len(runs), asked)
                self._linger_until = began + self.policy.linger
                if runs:  # (the buffer runs best first: priority, then scheduled time)
                    self._ready = collections.deque(sorted([*self._ready, *runs], key=_run_order))
                self._cond.notify_all()

    def _ahead_due(self) -> bool:
        """(Under the lock.)  No accept is under way or lingering, the buffer runs out
        sooner than an accept takes, and there is room for more jobs in hand: accept ahead."""
        return (self.state is FeedState.READY
                and self.policy.accepts_ahead(len(self._ready), self.pace.run, self.pace.accept)
                and self.policy.room(self._in_hand(), len(self._finishes)) >= 1)

    def _start_ahead(self) -> None:
        """(Under the lock.)  Have the feeder thread accept the next batch."""
        self.state = FeedState.AHEAD
        self._ahead_size = self.policy.batch_size(self.pace.run, self._idle)
        if self._feeder is None:
            self._feeder = threading.Thread(target=self._feed_loop, name="feeder", daemon=True)
            self._feeder.start()
        self._ahead.set()

    def _feed_loop(self) -> None:
        while True:
            self._ahead.wait(ACCEPT_SLICE)
            self._ahead.clear()
            with self._cond:
                if self._stopping.is_set() or self.fatal is not None:  # no more accepts
                    if self.state is FeedState.AHEAD:
                        self.state = FeedState.READY
                    self._cond.notify_all()
                    return
                if self.state is not FeedState.AHEAD:  # nothing asked of the feeder
                    continue
                size = self._ahead_size
            self._fill(size, ahead=True)

    def empty(self) -> bool:
        return not self._ready

    def _wait_for_jobs(self) -> None:
        """(The accepting thread, after a step that found no job to take: ``acceptor.waits``.)
        Wait for one, a slice at most.  The outcomes queued are committed first, or held
        (``_commit_or_hold``): then the acceptor comes back at the time they must go, and
        waits on, the watch kept.  ``waiting`` is set before the outcomes are looked at: a
        lane that queues one after that commits it itself."""
        self.waiting = True
        try:
            watching = self.acceptor.watching
            hold = self._commit_or_hold(watching)
            while not self.acceptor.wait(hold):  # (back at ``hold``: what it held goes)
                hold = self._commit_or_hold(watching)
        finally:
            self.waiting = False

    def _commit_or_hold(self, watching: bool) -> float | None:
        """(As the accepting thread begins to wait for jobs, and at the time this returns.)
        Commit the outcomes queued: no accept carries them until a job comes; but while
        this processor watches (it takes the next job) and, at the pace jobs came, the wait
        after that job still commits them within ``FINISH_DELAY``, hold them for that wait,
        with that job's outcome; and return when the job is late (``LATE_GAPS`` of the
        usual gaps after the last one was taken) or the oldest outcome will have waited
        ``FINISH_DELAY``: then they go, the watch kept."""
        if not len(self._finishes):
            return None
        until = self.policy.hold_outcomes_until(time.monotonic(), watching, self.pace, self._finishes.oldest(),
                                                finishes.FINISH_DELAY)
        if until is not None:
            self._stats["outcomes_deferred"] += 1
            return until
        self._finishes.flush(wait=False)
        return None

    def ran(self, seconds: float) -> None:
        """A lane ran a job in ``seconds``: the pace the next batches are sized by."""
        self.pace.ran(seconds)

    def stop(self) -> None:
        self.acceptor.close()
        self.acceptor.wake.set()
        self._ahead.set()
        with self._cond:
            self._cond.notify_all()

    def _accept(self, limit: int, ahead: bool = False) -> tuple[list, int]:
        """Accept up to ``limit`` jobs (``ahead``: a batch ahead of the lanes), writing the
        waiting outcomes in the same transaction, within the room in hand: the runs, and the
        number of jobs asked for (after that cap)."""
        room = self.policy.outcome_bytes(self.acceptor.trickle, limit)
        carried = [] if room is None else self._finishes.take(room)
        limit = self.policy.take_limit(limit, self._in_hand(), len(carried), self._idle, ahead)
        if limit < 1:
            # Every slot is held by outcomes being committed on their own (a batch ahead
            # cannot meet this: the room only grew since it was due): wait for them.
            if carried:
                self._finishes.commit(carried)
            if not ahead:
                self._finishes.flush()
            return [], limit
        if carried and self.acceptor.defers():  # (another processor takes the few jobs coming)
            self._finishes.commit(carried)
            carried = []
        write, lost = self._finishes.writer(carried) if carried else (None, None)
        began = tracing.clock()
        try:
            self.acceptor.keep_turn_through = self.policy.turn_kept_through(self.pace)
            taken = self.acceptor.step(ACCEPT_SLICE, limit, write)
            if self.acceptor.waits:
                self._wait_for_jobs()
            self._pause = 0.0
        except Exception as exc:  # noqa: BLE001 - sorted by _step_failed
            self._step_failed(exc, carried)
            return [], limit
        if carried:
            self._finishes.report(carried, lost)
        if not taken:
            return [], limit
        runs = self._hold(taken)
        tracing.accepted(taken, began)  # (after: the jobs are held whatever tracing does)
        return runs, limit

    def _step_failed(self, exc: Exception, carried: list) -> None:
        """An accept step raised ``exc``: the outcomes it carried go on their own (an
        accept retried too often hands them back: ``OutcomesNotCarried``); a store that
        cannot be used stops the processor; any other error is logged, then a pause."""
        if carried:  # not written: on their own, then
            self._finishes.commit(carried)
        if isinstance(exc, OutcomesNotCarried):
            return
        if isinstance(exc, jobs.StoreError):  # the store cannot be used (layout, corruption): stop
            self.fatal = exc
            return
        log.exception("accept failed", exc_info=exc)  # the store failing: log, pause, go on
        self._stats["errors"] += 1
        self._pause = self.policy.error_pause(self._pause)
        self._stopping.wait(self._pause)


def _run_order(run) -> tuple:
    """Where a run goes in the buffer: lower priority first, then earlier scheduled time
    (the order accept takes jobs in; a batch taken across job keys, or one accepted ahead
    while the buffer still held jobs, is not in that order as it comes)."""
    return run.job.priority, run.job.scheduled_time
