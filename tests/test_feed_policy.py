"""The feed's policy (``processors/feed_policy.py``) on made-up numbers and clocks: how many
jobs to ask for, when to accept ahead, what an accept carries, when to linger, when to
hold a trickle's outcomes, and the two state machines' transitions.  No store, no threads."""

from __future__ import annotations

import dataclasses

import pytest

from processors import feed
from processors.feed_policy import (
    FeedPolicy,
    FeedState,
    LastLook,
    Pace,
    after_batch,
    found_none,
    in_line,
    looks_now,
    took,
)

POLICY = FeedPolicy(lanes=4, prefetch=64, window=0.05, linger=0.0025, keep_turn=0.002, late_gaps=2.0,
                    row_bytes=100_000, transaction_rows=96, error_pause_max=5.0)


def _pace(run=1.0, measured=False, accept=0.0, gap=None, last_taken=0.0) -> Pace:
    pace = Pace(0.2)
    pace.run, pace.measured, pace.accept, pace.gap, pace.last_taken = run, measured, accept, gap, last_taken
    return pace


# --- how many jobs to ask for -------------------------------------------------------------------


def test_a_batch_is_what_the_lanes_run_in_the_window_between_the_idle_lanes_and_prefetch():
    assert POLICY.batch_size(run_seconds=1.0, idle=0) == 1  # (the guess before a run: one at a time)
    assert POLICY.batch_size(run_seconds=1.0, idle=3) == 3  # one for each lane waiting
    assert POLICY.batch_size(run_seconds=0.01, idle=1) == 20  # 4 lanes x 50 ms / 10 ms
    assert POLICY.batch_size(run_seconds=0.0, idle=1) == 64  # (prefetch at most, however short)
    assert dataclasses.replace(POLICY, prefetch=1).batch_size(run_seconds=0.0, idle=4) == 1


def test_an_accept_takes_no_more_than_the_room_in_hand():
    # prefetch 64: 60 held, 2 of their outcomes carried by this accept
    assert POLICY.room(in_hand=60, carried=2) == 6
    assert POLICY.take_limit(20, in_hand=60, carried=2, idle=4, ahead=True) == 6
    # a lane's own accept does not count the jobs the other (busy) lanes run
    assert POLICY.take_limit(20, in_hand=60, carried=2, idle=1, ahead=False) == 9
    assert POLICY.take_limit(5, in_hand=0, carried=0, idle=1, ahead=False) == 5  # (asked, at most)
    assert POLICY.take_limit(5, in_hand=64, carried=0, idle=4, ahead=True) == 0  # (no room: it waits)


# --- what an accept carries ----------------------------------------------------------------------


def test_an_accept_carries_the_outcomes_that_fit_beside_its_rows_unless_jobs_trickle_in():
    assert POLICY.outcome_bytes(trickle=False, asked=64) == 32 * 100_000
    assert POLICY.outcome_bytes(trickle=False, asked=96) == 0
    assert POLICY.outcome_bytes(trickle=True, asked=1) is None  # (read-only: it sets its own watch)


# --- accepting ahead -----------------------------------------------------------------------------


def test_the_next_batch_is_accepted_ahead_once_the_buffer_runs_out_sooner_than_an_accept_takes():
    assert POLICY.accepts_ahead(buffered=2, run_seconds=0.001, accept_seconds=0.003)
    assert not POLICY.accepts_ahead(buffered=3, run_seconds=0.001, accept_seconds=0.003)  # (as long)
    assert not POLICY.accepts_ahead(buffered=0, run_seconds=0.001, accept_seconds=0.003)  # (a lane's own)
    assert not POLICY.accepts_ahead(buffered=1, run_seconds=0.001, accept_seconds=0.0)  # (no accept timed)


# --- the feed's state ----------------------------------------------------------------------------


@pytest.mark.parametrize("taken, asked, state", [
    (0, 8, FeedState.READY),  # nothing: the accept waited already
    (1, 8, FeedState.READY),  # a lone job: a trickle, never waits
    (8, 8, FeedState.READY),  # a full batch: a backlog
    (3, 8, FeedState.LINGERING),  # short: the queue drained while jobs keep coming
    (2, 2, FeedState.READY),
])
def test_a_short_batch_makes_the_next_accept_linger(taken, asked, state):
    assert after_batch(taken, asked) is state


def test_only_a_lanes_or_the_feeders_accept_is_under_way():
    assert [s for s in FeedState if s.accepting] == [FeedState.ACCEPTING, FeedState.AHEAD]


# --- what the last looks found -------------------------------------------------------------------


def test_a_look_that_takes_jobs_says_whether_the_queue_drained_and_whether_they_trickled_in():
    for look in LastLook:
        assert took(look, 4, 4)[0] is LastLook.FULL
        assert took(look, 1, 4)[0] is LastLook.SHORT
        assert took(look, 1, 4)[1] is (look in (LastLook.NONE, LastLook.NONE_IN_LINE))
    assert took(LastLook.NONE_IN_LINE, 1, 1) == (LastLook.FULL, True)  # (a lone job after a wait)
    assert took(LastLook.FULL, 1, 1) == (LastLook.FULL, False)


def test_a_look_that_finds_none_remembers_a_wait_in_line():
    assert found_none(LastLook.FULL) is LastLook.NONE
    assert found_none(LastLook.SHORT) is LastLook.NONE
    assert found_none(LastLook.NONE) is LastLook.NONE
    assert found_none(LastLook.SHORT_IN_LINE) is LastLook.NONE_IN_LINE
    assert found_none(LastLook.NONE_IN_LINE) is LastLook.NONE_IN_LINE


def test_a_drained_idle_step_without_the_turn_waits_in_line_once_then_looks():
    for look in (LastLook.SHORT, LastLook.NONE):
        assert not looks_now(look, carries=False, watching=False)
        assert looks_now(in_line(look), carries=False, watching=False)
        assert looks_now(look, carries=True, watching=False)  # (its outcomes are written now)
        assert looks_now(look, carries=False, watching=True)  # (it holds the turn)
    assert in_line(LastLook.SHORT) is LastLook.SHORT_IN_LINE and in_line(LastLook.NONE) is LastLook.NONE_IN_LINE
    assert looks_now(LastLook.FULL, carries=False, watching=False)  # (a backlog: every processor looks)
    assert [look for look in LastLook if not look.drained] == [LastLook.FULL]


# --- the pace ------------------------------------------------------------------------------------


def test_the_first_run_measured_replaces_the_guess_and_later_ones_move_the_average():
    pace = Pace(0.2)
    assert (pace.run, pace.measured) == (1.0, False)
    pace.ran(0.01)
    assert (pace.run, pace.measured) == (0.01, True)
    pace.ran(0.11)
    assert pace.run == pytest.approx(0.03)


def test_accepts_that_took_jobs_measure_their_own_time_and_the_gaps_between_them():
    pace = Pace(0.5)
    pace.accepted(began=10.0, ended=10.004)
    assert pace.accept == pytest.approx(0.002) and pace.gap is None and pace.last_taken == 10.0
    pace.accepted(began=10.1, ended=10.102)
    assert pace.accept == pytest.approx(0.002) and pace.gap == pytest.approx(0.1) and pace.last_taken == 10.1
    pace.accepted(began=10.4, ended=10.402)
    assert pace.gap == pytest.approx(0.2)


# --- the turn kept through short runs ------------------------------------------------------------


def test_the_turn_is_kept_only_through_jobs_measured_to_run_within_keep_turn():
    assert not POLICY.keeps_turn(1, _pace(run=0.0))  # (not measured yet)
    assert POLICY.keeps_turn(7, _pace(run=0.001, measured=True))  # 7 ms over 4 lanes < 2 ms x 4
    assert not POLICY.keeps_turn(8, _pace(run=0.001, measured=True))


def test_the_jobs_the_turn_is_kept_through_are_those_keeps_turn_keeps_it_through():
    """``turn_kept_through``: the number the feed hands its acceptor before a step, the
    most jobs taken at once that :meth:`keeps_turn` keeps the turn through."""
    assert POLICY.turn_kept_through(_pace(run=0.0)) == 0  # (not measured yet)
    assert POLICY.turn_kept_through(_pace(run=0.001, measured=True)) == 7
    for run in (0.0, 1e-7, 3e-5, 0.0001, 0.00025, 0.001, 0.0013, 0.002, 0.008, 0.1):  # (0.00025: 32 x run = 8 ms)
        pace = _pace(run=run, measured=True)
        through = POLICY.turn_kept_through(pace)
        assert all(POLICY.keeps_turn(n, pace) == (n <= through) for n in range(1, POLICY.prefetch + 1)), run


# --- when a trickle's outcomes are committed -----------------------------------------------------


def test_a_trickles_outcomes_are_held_for_the_next_job_only_while_that_commits_them_in_time():
    hold = POLICY.hold_outcomes_until
    pace = _pace(gap=0.004, last_taken=100.0)  # jobs 4 ms apart, the last taken at 100.0
    # late at 100.008 (two gaps); the oldest outcome's delay ends at 100.011
    assert hold(100.002, True, pace, oldest=100.001, finish_delay=0.01) == pytest.approx(100.008)
    # the oldest's delay ends first: then
    assert hold(100.002, True, pace, oldest=99.997, finish_delay=0.01) == pytest.approx(100.007)
    # the next chance (a gap from now) comes too late: commit now
    assert hold(100.005, True, pace, oldest=100.001, finish_delay=0.01) is None
    assert hold(100.002, False, pace, oldest=100.001, finish_delay=0.01) is None  # (not watching)
    assert hold(100.002, True, _pace(), oldest=100.001, finish_delay=0.01) is None  # (no gap yet)
    assert hold(100.002, True, pace, oldest=None, finish_delay=0.01) is None  # (none queued)


# --- after an error ------------------------------------------------------------------------------


def test_the_pause_after_store_errors_doubles_from_50_ms_up_to_the_most():
    pauses = [0.0]
    for _ in range(10):
        pauses.append(POLICY.error_pause(pauses[-1]))
    assert pauses[1:4] == [0.05, 0.1, 0.2] and pauses[-1] == 5.0


def test_the_feed_builds_its_policy_from_its_tunables(db):
    """(The constants of ``feed.py`` are the policy's numbers, read as a feed is made.)"""
    f = feed.Feed(db, ["t"], 3, 16, hold=None, in_hand=lambda: 0, finishes=[], stopping=None, stats={})
    assert (f.policy.lanes, f.policy.prefetch, f.policy.window, f.policy.linger) == (3, 16, feed.PREFETCH_WINDOW,
                                                                                   feed.ACCEPT_LINGER)
    assert f.state is FeedState.READY and f.acceptor.look is LastLook.FULL and not f.pace.measured
