"""Where a processor's lanes get their jobs: batches accepted in one transaction each,
sized to what the lanes will run soon.

A lane that needs a job takes one from the feed's buffer; when the buffer is empty, one
lane (the others wait) accepts a batch, in a transaction that also writes the outcomes
waiting to be written (one commit finishes the last batch and takes the next).  The batch is at least one job per waiting lane and at most ``prefetch``; between
those, as many as the lanes run in ``PREFETCH_WINDOW`` seconds at the recent pace.  So
short jobs go by the dozen per commit, while long ones are taken one at a time and never
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
"""

from __future__ import annotations

import collections
import logging
import math
import random
import threading
import time

import jobs
from jobs.accepting import AcceptCall, Wait

from . import tracing
from .finishes import ROW_BYTES, TRANSACTION_ROWS, Alone
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
    on all their pending watches, in steps no longer than a slice so the caller can stop.
    ``wake`` cuts a wait short (stop).  ``stats`` (a Counter) counts the accepts
    that took jobs (``accept_batches``), those that took none (``accept_empty``: nothing
    due, or only outcomes written), the accept attempts retried (``accept_retries``)
    and, of them, the conflicts (``accept_conflicts``: another worker took a picked job
    first), the second transactions of accepts that wrote outcomes and found nothing
    (``accept_rearms``: each set the watch, or took a job that came meanwhile), and the
    turns to watch this processor held (``watch_turns``).

    Only the idle processor holding its machine's turn watches (``turns.py``); another
    looks once a slice without a watch, and waits for the turn.  A step that takes jobs
    gives the turn up (or keeps it through jobs run within ``KEEP_TURN``: ``keep_turn``),
    and so does an attempt that conflicts.

    Once the queue is drained (``drained``: this processor's last look took fewer jobs than
    it asked for), jobs come a few at a time and the holder takes them as they come: a
    processor without the turn that looked too would pick among those same few jobs, and
    one of the two accepts would conflict.  So it waits for the turn first, a slice at
    most (a stuck holder delays jobs by no more than before), and a busy one commits its
    outcomes on their own (``defers``) rather than in an accept.  A full batch (a backlog)
    ends it: every processor looks again at once."""

    def __init__(self, db, types: list[str], stats, before_wait=None, keep_turn=None):
        self.db = db
        self.types = list(types)
        self.stats = stats
        self.wake = threading.Event()
        # before_wait(watching), called as a step begins to wait for jobs (``waiting`` set
        # first; ``watching``: this processor's wait is on a watch): the feed commits the
        # outcomes no accept will carry soon, and returns None, or (monotonic) when to be
        # called again, in the same wait, for those it left to share a later commit.
        self.before_wait = before_wait
        # keep_turn(n): whether ``n`` jobs just taken run so soon that the turn is kept
        # through them (``Turn.keep``) rather than handed over; None: always handed over.
        self.keep_turn = keep_turn
        self.waiting = False
        self._calls: dict[str, AcceptCall] = {}
        self._waits: list[Wait] = []
        self._turn: Turn | None = None  # (made at the first step: it reads the store id)
        self._turns_counted = 0
        self._closed = False
        self.drained = False  # the last look took fewer jobs than asked for (or none)
        # the last step that took jobs came after one that found none: jobs trickle in
        self.after_wait = False
        self._found_none = False  # a step found nothing since the last that took jobs
        self._turn_waited = False  # (drained) this idle spell waited a slice for the turn

    def step(self, slice_seconds: float, limit: int = 1, also=None) -> list[jobs.Job]:
        """Up to ``limit`` jobs of one type, or [] after waiting up to a slice.  ``also(tr)``
        writes in the first accept transaction (committed whatever it finds; what it raises,
        e.g. ``finishes.Alone``, ends the step; a step that wrote it returns without
        waiting, so that the caller learns it committed)."""
        wrote = also is not None
        turn = self._turn or self._make_turn()
        turn.resume()
        if wrote:
            self._cancel_waits()  # attempt now, so that ``also`` is written now
        elif self._waits and not self._watching() and turn.take():
            self._cancel_waits()  # the turn came: look again, watching this time
        if not self._waits:
            self.wake.clear()
            # (a step that writes outcomes may be a busy processor's: it watches only if
            # it holds the turn already; an idle step takes it if it is free)
            watching = turn.held if wrote else turn.take()
            self._count_turns()
            if self.drained and not (wrote or watching or self._turn_waited):
                self._turn_waited = True  # (drained: in line for the turn before looking)
                return self._wait(turn, slice_seconds)
            # (the types in a random order, none first for ever; one type needs no shuffle)
            for type in self.types if len(self.types) == 1 else random.sample(self.types, len(self.types)):
                call = self._calls.get(type)
                if call is None:  # a call (and its lock) lives until it returns jobs (1021)
                    call = self._calls[type] = AcceptCall(self.db, type)
                call.limit = limit  # (a retry after 1021 returns what committed, whatever the limit)
                call.watching = watching
                call.on_conflict = self._pass_turn if watching else None
                retries, conflicts, rearms = call.retries, call.conflicts, call.rearms
                try:
                    out = call.attempt(also)
                finally:
                    self.stats["accept_retries"] += call.retries - retries
                    self.stats["accept_conflicts"] += call.conflicts - conflicts
                    self.stats["accept_rearms"] += call.rearms - rearms
                also = None
                if isinstance(out, list):
                    self.stats["accept_batches"] += 1
                    self.drained, self._turn_waited = len(out) < limit, False
                    self.after_wait, self._found_none = self._found_none, False
                    del self._calls[type]
                    self._cancel_waits()
                    if not (self.keep_turn is not None and self.keep_turn(len(out)) and turn.keep(KEEP_TURN)):
                        turn.release()  # busy: another idle processor watches
                    return out
                self.stats["accept_empty"] += 1
                if out is None:  # a stale queue entry was dropped: look again at once
                    self._cancel_waits()
                    return []
                self._waits.append(out)
                if out.watch is not None:
                    out.watch.on_ready(lambda _f: self.wake.set())
            self.drained = self._found_none = True
            if wrote:
                return []  # (the next step waits on these watches)
        return self._wait(turn, slice_seconds)

    def defers(self) -> bool:
        """Whether a busy processor's next step should not look (its outcomes go on their
        own): the queue drained at its last look and another processor holds the turn (if
        it is free, this processor takes it, and looks watching)."""
        if not self.drained:
            return False
        turn = self._turn or self._make_turn()
        return not turn.take()

    def _wait(self, turn: Turn, slice_seconds: float) -> list:
        """The end of a step that took nothing: wait a slice at most for a job (watching),
        or for the turn."""
        self.waiting = True
        try:
            watching = self._watching()
            again = None if self.before_wait is None else self.before_wait(watching)
            if not watching:
                turn.wait(self.wake)  # (in line for the turn: a look again when it comes)
            due = min((w.due for w in self._waits if w.due is not None), default=math.inf)
            end = time.monotonic() + min(slice_seconds, max(0.0, due - time.time()))
            while True:
                until = end if again is None else min(end, again)
                woken = self.wake.wait(max(0.0, until - time.monotonic()))
                if not woken and again is not None and time.monotonic() < end:
                    again = self.before_wait(watching)  # (the time it asked for: what it held goes)
                    continue  # (watching on: the watch stays set)
                break
            if woken or time.time() >= due or not self._watching():
                self._cancel_waits()  # something changed (or no watch: look again each slice)
        finally:
            self.waiting = False
        return []

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
    ``fatal`` (the processor stops with it)."""

    def __init__(self, db, types: list[str], lanes: int, prefetch: int, *, hold, in_hand, finishes,
                 stopping: threading.Event, stats):
        self.acceptor = Acceptor(db, types, stats, before_wait=self._before_wait, keep_turn=self._short_run)
        self.lanes = lanes
        self.prefetch = prefetch
        self._hold = hold
        self._in_hand = in_hand
        self._finishes = finishes
        self._stopping = stopping
        self._stats = stats
        self._cond = threading.Condition()
        self._ready: collections.deque = collections.deque()
        self._accepting = False
        self._idle = 0  # lanes inside take()
        self._pace = 1.0  # moving average of a run's seconds (pessimistic until measured)
        self._paced = False  # a run was measured: the pace is no longer the guess above
        self._accept_pace = 0.0  # moving average of an accept's seconds, when it found jobs
        self._pause = 0.0
        self._linger_until = 0.0  # (monotonic) after a short batch: no accept before then
        self._gap: float | None = None  # moving average of the seconds between accepts that took jobs
        self._last_taken = 0.0  # (monotonic) when the last accept that took jobs began
        self._feeder: threading.Thread | None = None
        self._refill = threading.Event()  # the feeder has a batch to accept
        self._refill_limit = 0
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
                            if self._refill_due():
                                self._start_refill()
                            return run
                        if not self._accepting:
                            linger = self._linger_until - time.monotonic()
                            if linger > 0:
                                self._cond.wait(linger)
                                continue
                            self._accepting = True
                            limit = self._batch_size()
                            break
                        self._cond.wait(ACCEPT_SLICE)
                self._fill(limit)
        finally:
            with self._cond:
                self._idle -= 1

    def _fill(self, limit: int) -> None:
        """Accept up to ``limit`` jobs into the buffer (``_accepting`` was set by the caller)."""
        runs, asked = [], 0
        began = time.monotonic()
        try:
            runs, asked = self._accept(limit)
        finally:
            with self._cond:
                self._linger_until = began + ACCEPT_LINGER if 1 < len(runs) < asked else 0.0
                if runs:
                    self._accept_pace += PACE_WEIGHT * (time.monotonic() - began - self._accept_pace)
                    if self._last_taken:
                        gap = began - self._last_taken
                        self._gap = gap if self._gap is None else self._gap + PACE_WEIGHT * (gap - self._gap)
                    self._last_taken = began
                self._accepting = False
                if runs:  # (the buffer runs best first: priority, then scheduled time)
                    self._ready = collections.deque(sorted([*self._ready, *runs], key=_run_order))
                self._cond.notify_all()

    def _refill_due(self) -> bool:
        """(Under the lock.)  The buffer runs out sooner than an accept takes, and there is
        room for more jobs in hand, and the last batch was not a short one: accept ahead."""
        return (not self._accepting and not self._linger_until and len(self._ready) >= 1
                and len(self._ready) * self._pace < self._accept_pace and self._room(len(self._finishes)) >= 1)

    def _room(self, written: int) -> int:
        """Jobs a transaction writing ``written`` outcomes may take, ``prefetch`` at most in hand."""
        return self.prefetch - self._in_hand() + written

    def _start_refill(self) -> None:
        """(Under the lock.)  Have the feeder thread accept the next batch."""
        self._accepting = True
        self._refill_limit = -self._batch_size()  # (negative: ahead, capped by the room)
        if self._feeder is None:
            self._feeder = threading.Thread(target=self._feed_loop, name="feeder", daemon=True)
            self._feeder.start()
        self._refill.set()

    def _feed_loop(self) -> None:
        while True:
            self._refill.wait(ACCEPT_SLICE)
            self._refill.clear()
            with self._cond:
                if self._stopping.is_set() or self.fatal is not None:  # no more accepts
                    self._accepting = False
                    self._cond.notify_all()
                    return
                if not self._accepting or self._refill_limit >= 0:  # nothing asked of the feeder
                    continue
                limit, self._refill_limit = self._refill_limit, 0
            self._fill(limit)

    def empty(self) -> bool:
        return not self._ready

    @property
    def waiting(self) -> bool:
        """The accept under way waits for jobs to be added: the outcomes queued will not
        ride an accept transaction soon (while it is still in its transaction, they ride
        the next one)."""
        return self.acceptor.waiting

    def _short_run(self, n: int) -> bool:
        """Whether the lanes will have run ``n`` jobs within ``KEEP_TURN``, at the pace
        measured (the turn is kept through them)."""
        return self._paced and self._pace * n < KEEP_TURN * self.lanes

    def _before_wait(self, watching: bool) -> float | None:
        """(The accepting thread, as it begins to wait for jobs, and at the time this
        returns.)  Commit the outcomes queued: no accept carries them until a job comes;
        but while this processor watches (it takes the next job) and, at the pace jobs
        came, the wait after that job still commits them within ``FINISH_DELAY``, hold
        them for that wait, with that job's outcome; and return when the job is late
        (``LATE_GAPS`` of the usual gaps after the last one was taken) or the oldest
        outcome will have waited ``FINISH_DELAY``: then they go, the watch kept.  A lane
        that queues one after this looks at ``waiting`` and commits it itself."""
        if not len(self._finishes):
            return None
        until = None
        if watching and self._gap is not None:
            # (held only if the next wait, a gap from now, still commits them in time: a
            # commit then comes right after a run, not as the next job comes)
            until = self._finishes.hold_until(time.monotonic() + self._gap, self._last_taken + LATE_GAPS * self._gap)
        if until is not None:
            self._stats["outcomes_deferred"] += 1
            return until
        self._finishes.flush(wait=False)
        return None

    def ran(self, seconds: float) -> None:
        """A lane ran a job in ``seconds``: the pace the next batches are sized by.  The
        first run measured replaces the guess (averaged with it, short jobs would still be
        taken a few at a time for some 30 runs)."""
        if self._paced:
            self._pace += PACE_WEIGHT * (seconds - self._pace)
        else:
            self._pace, self._paced = seconds, True

    def stop(self) -> None:
        self.acceptor.close()
        self.acceptor.wake.set()
        self._refill.set()
        with self._cond:
            self._cond.notify_all()

    def _batch_size(self) -> int:
        by_pace = math.ceil(self.lanes * PREFETCH_WINDOW / max(self._pace, 1e-6))
        return max(1, min(self.prefetch, max(self._idle, by_pace)))

    def _accept(self, limit: int) -> tuple[list, int]:
        """Accept up to ``limit`` jobs, writing the waiting outcomes in the same transaction,
        within the room in hand (``-limit``: a batch ahead; a lane's own accept does not
        count the jobs the other lanes are running): the runs, and the number of jobs
        asked for (after that cap)."""
        # The last job came after a look that found none (jobs trickle in): this look
        # likely finds none too.  It carries no outcomes, so it stays read-only and sets
        # its watch itself (a watch is a read: in a transaction that wrote, it would
        # conflict with every add meanwhile, and a second transaction would set it); they
        # go as the wait begins, or with the next ones (_before_wait).
        # (the outcomes carried fit beside the rows taken, each up to ROW_BYTES: the
        # transaction stays under FoundationDB's size limit however large the jobs are)
        batch = [] if self.acceptor.after_wait else self._finishes.take((TRANSACTION_ROWS - abs(limit)) * ROW_BYTES)
        ahead = limit < 0
        room = self._room(len(batch)) + (0 if ahead else self.lanes - self._idle)
        limit = min(abs(limit), room)
        if limit < 1:
            # Every slot is held by outcomes being committed on their own (a batch ahead
            # cannot meet this: the room only grew since it was due): wait for them.
            if batch:
                self._finishes.commit(batch)
            if not ahead:
                self._finishes.flush()
            return [], limit
        if batch and self.acceptor.defers():  # (another processor takes the few jobs coming)
            self._finishes.commit(batch)
            batch = []
        write, lost = self._finishes.writer(batch) if batch else (None, None)
        began = tracing.clock()
        try:
            taken = self.acceptor.step(ACCEPT_SLICE, limit, write)
            self._pause = 0.0
        except Alone:  # the accept is retrying: its outcomes go first, on their own
            self._finishes.commit(batch)
            return [], limit
        except Exception as exc:  # noqa: BLE001 - sorted below
            if batch:  # not written: on their own, then
                self._finishes.commit(batch)
            if isinstance(exc, jobs.StoreError):  # the store cannot be used (layout, corruption): stop
                self.fatal = exc
                return [], limit
            log.exception("accept failed")  # the store failing: log, pause, go on
            self._stats["errors"] += 1
            self._pause = min(ERROR_PAUSE_MAX, max(0.05, self._pause * 2))
            self._stopping.wait(self._pause)
            return [], limit
        if batch:
            self._finishes.report(batch, lost)
        if not taken:
            return [], limit
        runs = self._hold(taken)
        tracing.accepted(taken, began)  # (after: the jobs are held whatever tracing does)
        return runs, limit


def _run_order(run) -> tuple:
    """Where a run goes in the buffer: lower priority first, then earlier scheduled time
    (the order accept takes jobs in; a batch taken across job keys, or one accepted ahead
    while the buffer still held jobs, is not in that order as it comes)."""
    return run.job.priority, run.job.scheduled_time
