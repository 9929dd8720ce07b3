"""What a processor's feed decides, apart from how it does it: no store, no threads, no
clock read here.  Every decision takes numbers, flags and clock readings, and returns a
number, a flag or a state, so that each is tested with made-up clocks
(``tests/test_feed_policy.py``); ``feed.py`` asks, does the I/O, and feeds the result back.

Two state machines, each an enum whose transitions are the functions below it:

* :class:`FeedState`: who is accepting into the feed's buffer (a lane, the feeder thread
  ahead of the lanes, or no one), and whether the next accept must linger;
* :class:`LastLook`: what this processor's last looks at the queue found, which decides
  whether an idle look waits in line for the turn to watch first (``turns.py``) and
  whether a busy processor's outcomes ride an accept.

And the numbers: :class:`Pace` measures how long runs and accepts take and how far apart
jobs come; :class:`FeedPolicy` turns them into how many jobs to ask for, when to accept
ahead, how many outcome bytes an accept may carry, how many jobs the turn is kept
through, how long to hold a trickle's outcomes and how long to pause after an error.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class FeedState(enum.Enum):
    r"""Who is accepting into the buffer (changed under the feed's lock)::

                a lane finds the buffer empty              the batch is in (a full
        READY ---------------------------------> ACCEPTING ----------------------> READY
          |                                         ^    \    one, or a lone job)
          | the buffer runs out sooner than an      |     \
          | accept takes, and there is room in hand |      +---- a short batch ----> LINGERING
          v                                         |                                  |
        AHEAD --the batch is in--> READY, or        +---- a lane finds the buffer -----+
                                   LINGERING after a       empty, from linger_until on
                                   short batch

    ``AHEAD``: the feeder thread accepts the next batch while the lanes run the rest of
    the buffer.  ``LINGERING`` makes no accept ahead: the next is a lane's.  Stopping ends
    every take whatever the state."""

    READY = "ready"  # no accept under way
    ACCEPTING = "accepting"  # a lane accepts; the other lanes wait for its batch
    AHEAD = "ahead"  # the feeder thread accepts ahead of the lanes
    LINGERING = "lingering"  # after a short batch: the next accept is a lane's, not before linger_until

    @property
    def accepting(self) -> bool:
        """An accept is under way (a lane's or the feeder's)."""
        return self is FeedState.ACCEPTING or self is FeedState.AHEAD


def after_batch(taken: int, asked: int) -> FeedState:
    """The state once an accept that asked for ``asked`` jobs took ``taken``: a short batch
    (more than one job, fewer than asked: the queue drained while jobs keep coming) makes
    the next accept linger, so that the jobs added meanwhile go in one batch; a lone job (a
    trickle) or a full batch (a backlog) never waits."""
    return FeedState.LINGERING if 1 < taken < asked else FeedState.READY


class LastLook(enum.Enum):
    """What this processor's last looks at the queue found (its accept steps' state)::

                  short batch                   a slice in line
        FULL -----------------> SHORT ------------------------> SHORT_IN_LINE
          |                       |                                   |
          +---- found none ---+---+                                   | found none
                              v           a slice in line             v
                            NONE ------------------------------> NONE_IN_LINE

        and from any state, a look that takes jobs: FULL (all it asked for) or SHORT.

    ``FULL``: the last look took all it asked for (or none was made yet): a backlog, every
    processor looks at once.  Any other state is *drained*: jobs come a few at a time, and
    the turn's holder takes them as they come, so a processor without the turn waits in
    line for it a slice before it looks (once an idle spell: the ``_IN_LINE`` states), and
    a busy one commits its outcomes on their own rather than in an accept.  Jobs taken
    after a ``NONE`` look came in a trickle (:func:`took`)."""

    FULL = "full"
    SHORT = "short"
    SHORT_IN_LINE = "short, waited in line"
    NONE = "none"
    NONE_IN_LINE = "none, waited in line"

    @property
    def drained(self) -> bool:
        """The last look took fewer jobs than it asked for, or none."""
        return self is not LastLook.FULL

    @property
    def found_none(self) -> bool:
        return self is LastLook.NONE or self is LastLook.NONE_IN_LINE

    @property
    def waited_in_line(self) -> bool:
        return self is LastLook.SHORT_IN_LINE or self is LastLook.NONE_IN_LINE


def looks_now(look: LastLook, carries: bool, watching: bool) -> bool:
    """Whether a step looks at the queue now, rather than first waiting a slice in line for
    the turn: it does unless the queue drained and this idle spell has not waited yet and
    the step neither carries outcomes (they are written now) nor watches (it holds the
    turn)."""
    return carries or watching or not look.drained or look.waited_in_line


def in_line(look: LastLook) -> LastLook:
    """The state once a drained step waited a slice in line for the turn."""
    return LastLook.NONE_IN_LINE if look.found_none else LastLook.SHORT_IN_LINE


def found_none(look: LastLook) -> LastLook:
    """The state once a look found nothing (a wait in line this spell is remembered)."""
    return LastLook.NONE_IN_LINE if look.waited_in_line else LastLook.NONE


def took(look: LastLook, taken: int, asked: int) -> tuple[LastLook, bool]:
    """The state once a look took ``taken`` of the ``asked`` jobs, and whether they came
    in a trickle (after a look that found none: the next look likely finds none too)."""
    return (LastLook.SHORT if taken < asked else LastLook.FULL), look.found_none


class Pace:
    """The feed's measurements, moving averages weighted ``weight`` for the newest:
    ``run`` (seconds a job's run takes; a pessimistic guess until ``measured``),
    ``accept`` (seconds an accept that took jobs takes), ``gap`` (seconds between the
    starts of two accepts that took jobs; None until two) and ``last_taken`` (monotonic
    start of the last accept that took jobs; 0 before)."""

    __slots__ = ("weight", "run", "measured", "accept", "gap", "last_taken")

    def __init__(self, weight: float, run_guess: float = 1.0):
        self.weight = weight
        self.run = run_guess
        self.measured = False
        self.accept = 0.0
        self.gap: float | None = None
        self.last_taken = 0.0

    def ran(self, seconds: float) -> None:
        """A lane ran a job in ``seconds``.  The first run measured replaces the guess
        (averaged with it, short jobs would still be taken a few at a time for some 30
        runs)."""
        if self.measured:
            self.run += self.weight * (seconds - self.run)
        else:
            self.run, self.measured = seconds, True

    def accepted(self, began: float, ended: float) -> None:
        """An accept that took jobs ran from ``began`` to ``ended`` (monotonic)."""
        self.accept += self.weight * (ended - began - self.accept)
        if self.last_taken:
            gap = began - self.last_taken
            self.gap = gap if self.gap is None else self.gap + self.weight * (gap - self.gap)
        self.last_taken = began


@dataclass(frozen=True)
class FeedPolicy:
    """The feed's decisions for ``lanes`` lanes and at most ``prefetch`` jobs in hand.
    ``window``: seconds of runs a batch holds at the measured pace; ``linger``: seconds
    after a short batch began before the next accept; ``keep_turn``: a turn holder keeps
    the turn through jobs run within this; ``late_gaps``: a trickle's outcomes wait for
    the next job until it is this many usual gaps late; ``row_bytes``, ``transaction_rows``:
    the most bytes of a row, and the rows one transaction writes; ``error_pause_max``:
    the longest pause after a store error."""

    lanes: int
    prefetch: int
    window: float
    linger: float
    keep_turn: float
    late_gaps: float
    row_bytes: int
    transaction_rows: int
    error_pause_max: float

    def batch_size(self, run_seconds: float, idle: int) -> int:
        """Jobs to ask for: as many as the lanes run in ``window`` at ``run_seconds`` a job,
        one for each of the ``idle`` lanes waiting at least, ``prefetch`` at most."""
        by_pace = math.ceil(self.lanes * self.window / max(run_seconds, 1e-6))
        return max(1, min(self.prefetch, max(idle, by_pace)))

    def room(self, in_hand: int, carried: int) -> int:
        """Jobs a transaction writing ``carried`` outcomes may take with ``in_hand`` held
        (``prefetch`` at most in hand; a held job's outcome written frees its place)."""
        return self.prefetch - in_hand + carried

    def take_limit(self, asked: int, in_hand: int, carried: int, idle: int, ahead: bool) -> int:
        """Jobs an accept takes at most: ``asked``, within the room in hand; a lane's own
        accept (not one ``ahead``) does not count the jobs the other lanes are running."""
        return min(asked, self.room(in_hand, carried) + (0 if ahead else self.lanes - idle))

    def outcome_bytes(self, trickle: bool, asked: int) -> int | None:
        """The bytes of outcomes an accept asking for ``asked`` jobs carries (beside rows of
        ``row_bytes`` each, within one transaction); None: it carries none, a trickle's
        look (it likely finds nothing: writing nothing, it sets its own watch)."""
        return None if trickle else (self.transaction_rows - asked) * self.row_bytes

    def accepts_ahead(self, buffered: int, run_seconds: float, accept_seconds: float) -> bool:
        """Whether to accept the next batch now, in the background: the ``buffered`` runs
        (one at least) run out sooner than an accept takes.  (The caller checks the room
        in hand and that no accept is under way or lingering.)"""
        return buffered >= 1 and buffered * run_seconds < accept_seconds

    def keeps_turn(self, taken: int, pace: Pace) -> bool:
        """Whether the lanes will have run ``taken`` jobs within ``keep_turn`` at the pace
        measured: the turn is kept through them rather than handed over."""
        return pace.measured and pace.run * taken < self.keep_turn * self.lanes

    def turn_kept_through(self, pace: Pace) -> int:
        """The most jobs an accept may take and keep the turn through (:meth:`keeps_turn`:
        it keeps it through ``n`` jobs exactly when ``n`` is at most this), ``prefetch`` at
        most (no accept takes more); 0 until the pace is measured."""
        if not pace.measured:
            return 0
        n = self.prefetch if pace.run <= 0 else min(self.prefetch, math.ceil(self.keep_turn * self.lanes / pace.run))
        while n > 0 and not self.keeps_turn(n, pace):  # (a step or two at most: the quotient's rounding)
            n -= 1
        return n

    def hold_outcomes_until(self, now: float, watching: bool, pace: Pace, oldest: float | None,
                            finish_delay: float) -> float | None:
        """As an accept begins to wait for jobs (``now``, monotonic), with outcomes queued
        since ``oldest`` (None: none): None to commit them now, or until when to hold them
        for the wait after the next job, to share its commit.  Held only while this
        processor watches (it takes the next job) and jobs came ``pace.gap`` apart, only
        if that wait, a gap from now, still comes before the next job is ``late_gaps``
        gaps late and the oldest outcome has waited ``finish_delay``."""
        if not watching or pace.gap is None or oldest is None:
            return None
        until = min(pace.last_taken + self.late_gaps * pace.gap, oldest + finish_delay)
        return until if now + pace.gap < until else None

    def error_pause(self, last: float) -> float:
        """Seconds to pause after a store error, ``last`` the pause before (0: none):
        doubling from 50 ms, ``error_pause_max`` at most."""
        return min(self.error_pause_max, max(0.05, last * 2))
