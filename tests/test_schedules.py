"""Cron schedules in the job layer (``jobs/upkeep/schedules.py``, ``jobs/controls/cron.py``): setting one,
each tick enqueued exactly once by any number of callers and under
``commit_unknown_result``, ticks missed while nobody ticked coalesced, DST kept as cronsim
(Debian cron) has it.  The schedules' clock is a fake one the tests step: no test waits for
a minute to pass."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

import jobs
from jobs.upkeep import schedules
from jobs.controls.cron import Cron
from jobs.engine.faults import FaultInjectingDatabase
from stored import snapshot

UTC = timezone.utc
PARIS = ZoneInfo("Europe/Paris")
T0 = datetime(2024, 3, 1, 10, 2, tzinfo=UTC).timestamp()  # in the past: enqueued ticks are due


class Clock:
    """The schedules' clock, stepped by the test."""

    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def step(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock(T0)
    monkeypatch.setattr(schedules, "now", c)
    return c


def utc(*args) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


def run_pending(db, type: str) -> int:
    """Accept and finish the type's due jobs, as a worker would; how many."""
    n = 0
    while (job := jobs.accept(db, type, timeout=0)) is not None:
        jobs.finish(db, job, {})
        n += 1
    return n


def test_bad_schedules_are_refused_and_write_nothing(db, clock):
    jobs.set_type_timeout(db, "r", 10)
    before = snapshot(db)
    for expression, tz, problem in [("* * *", "UTC", "bad cron expression"), ("61 * * * *", "UTC", "Bad minute"),
                                    ("* * * * *", "Mars/Olympus", "unknown time zone"),
                                    ("* * * * *", "", "unknown time zone"),
                                    ("0 0 30 2 *", "UTC", "Bad day-of-month")]:
        with pytest.raises(ValueError, match=problem):
            schedules.set_schedule(db, "r", expression, tz)
    with pytest.raises(TypeError):
        schedules.set_schedule(db, "r", 5)
    with pytest.raises(ValueError, match="control character"):
        schedules.set_schedule(db, "r\n", "* * * * *")
    with pytest.raises(jobs.NoTypeTimeout):
        schedules.set_schedule(db, "untimed", "* * * * *")
    assert snapshot(db) == before


def test_setting_the_same_schedule_again_writes_nothing_and_another_replaces_it(db, clock):
    jobs.set_type_timeout(db, "r", 10)
    assert schedules.set_schedule(db, "r", "*/5 * * * *") is True
    before = snapshot(db)
    clock.step(60)
    assert schedules.set_schedule(db, "r", "*/5  *  * * *", "UTC") is False  # the same, spaced out
    assert snapshot(db) == before
    [s] = schedules.get_schedules(db)
    assert (s.type, s.expression, s.tz, s.last, s.next) == ("r", "*/5 * * * *", "UTC", T0, utc(2024, 3, 1, 10, 5))
    assert schedules.set_schedule(db, "r", "0 * * * *", "Europe/Paris") is True
    s = schedules.get_schedule(db, "r")
    assert (s.expression, s.tz, s.last, s.next) == ("0 * * * *", "Europe/Paris", T0 + 60, utc(2024, 3, 1, 11))
    clock.step(600)  # past 10:05, a tick of the old expression only
    assert schedules.enqueue_due(db, ["r"]) == []
    assert schedules.clear_schedule(db, "r") is True and schedules.clear_schedule(db, "r") is False
    assert schedules.get_schedule(db, "r") is None and schedules.get_schedules(db) == []


def test_each_tick_is_enqueued_and_run_once_by_many_callers_and_after_unknown_results(db, clock):
    jobs.set_type_timeout(db, "r", 10)
    schedules.set_schedule(db, "r", "*/5 * * * *")
    faulty = FaultInjectingDatabase(db, unknown_committed=1.0)  # every writing commit: 1021
    runs = []
    for _minute in range(20):  # 10:03 .. 10:22: ticks 10:05, 10:10, 10:15, 10:20
        clock.step(60)
        for caller in (faulty, db, faulty):
            schedules.enqueue_due(caller, ["r", "unscheduled"])
        runs += [clock.t] * run_pending(db, "r")
    assert runs == [utc(2024, 3, 1, 10, m) for m in (5, 10, 15, 20)]
    assert faulty.injected["unknown_committed"] == 4  # each tick enqueued behind a 1021, once
    assert schedules.get_schedule(db, "r").last == utc(2024, 3, 1, 10, 20)


def test_missed_ticks_come_once_a_tick_due_while_running_runs_after(db, clock):
    jobs.set_type_timeout(db, "r", 10)
    schedules.set_schedule(db, "r", "*/5 * * * *")
    clock.step(4 * 60)  # 10:06: one tick (10:05) missed, as after a short restart
    assert schedules.enqueue_due(db, ["r"]) == [("r", utc(2024, 3, 1, 10, 5))]
    clock.step(20 * 60)  # 10:26: four more missed: the latest comes, once
    assert schedules.enqueue_due(db, ["r"]) == [("r", utc(2024, 3, 1, 10, 25))]
    assert jobs.get_job(db, "r", schedules.JOB_ID).scheduled_time == utc(2024, 3, 1, 10, 25)
    job = jobs.accept(db, "r", timeout=0)
    clock.step(5 * 60)  # 10:31: the next tick while the run still runs
    assert schedules.enqueue_due(db, ["r"]) == [("r", utc(2024, 3, 1, 10, 30))]
    jobs.finish(db, job, {"n": 1})
    info = jobs.get_job(db, "r", schedules.JOB_ID)
    assert (info.state, info.scheduled_time, info.data) == ("pending", utc(2024, 3, 1, 10, 30), {"n": 1})
    assert run_pending(db, "r") == 1 and run_pending(db, "r") == 0


def ticks_over(db, clock, start: datetime, hours: int, expressions: dict[str, str]) -> dict[str, list[str]]:
    """Step the clock minute by minute from ``start`` for ``hours``, enqueueing and running
    the due ticks: the local times of the ticks enqueued, per type."""
    clock.t = start.timestamp()
    for type, expression in expressions.items():
        jobs.set_type_timeout(db, type, 10)
        schedules.clear_schedule(db, type)  # (set anew: ticks from start on)
        schedules.set_schedule(db, type, expression, "Europe/Paris")
    seen: dict[str, list[str]] = {type: [] for type in expressions}
    for _minute in range(hours * 60):
        clock.step(60)
        for type, tick in schedules.enqueue_due(db, list(expressions)):
            seen[type].append(datetime.fromtimestamp(tick, PARIS).isoformat())
        for type in expressions:
            run_pending(db, type)
    return seen


def test_daylight_saving_time_follows_the_library(db, clock):
    """Paris, 2024: clocks go from 02:00 to 03:00 on 31 March and from 03:00 back to 02:00
    on 27 October.  As Debian cron: the skipped 02:30 runs at 03:00; a fixed 02:30 runs
    once in the repeated hour, a wildcard hour's ticks in both of its occurrences."""
    spring = ticks_over(db, clock, datetime(2024, 3, 31, 1, 0, tzinfo=PARIS), 2,  # to 04:00 (summer time)
                        {"daily": "30 2 * * *", "half": "*/30 * * * *"})
    assert spring == {"daily": ["2024-03-31T03:00:00+02:00"],
                      "half": ["2024-03-31T01:30:00+01:00", "2024-03-31T03:00:00+02:00",
                               "2024-03-31T03:30:00+02:00", "2024-03-31T04:00:00+02:00"]}
    autumn = ticks_over(db, clock, datetime(2024, 10, 27, 1, 0, tzinfo=PARIS), 3,  # to 03:00 (winter time)
                        {"daily": "30 2 * * *", "half": "*/30 * * * *"})
    assert autumn == {"daily": ["2024-10-27T02:30:00+02:00"],
                      "half": ["2024-10-27T01:30:00+02:00", "2024-10-27T02:00:00+02:00",
                               "2024-10-27T02:30:00+02:00", "2024-10-27T02:00:00+01:00",
                               "2024-10-27T02:30:00+01:00", "2024-10-27T03:00:00+01:00"]}


def test_cron_ticks_inside_the_repeated_hour_go_forward():
    cron = Cron("*/30 * * * *", "Europe/Paris")
    second_two = datetime(2024, 10, 27, 2, 0, tzinfo=PARIS, fold=1).timestamp()
    assert cron.after(second_two) == second_two + 1800
    assert cron.latest(second_two + 1799) == second_two
    assert cron.latest(second_two - 1) == second_two - 1800  # 02:30, first occurrence
    assert Cron("30 2 * * *", "Europe/Paris").latest(second_two + 3600) == second_two - 1800
    assert cron.local(second_two) == "2024-10-27T02:00:00+01:00"
    with pytest.raises(ValueError, match="unknown time zone"):
        Cron("* * * * *", "Nowhere/Land")
    assert Cron(" 0  *  * * * ") == Cron("0 * * * *", "UTC") != Cron("0 * * * *", "Europe/Paris")
    assert timedelta(seconds=cron.after(utc(2024, 1, 1)) - utc(2024, 1, 1)) == timedelta(minutes=30)
