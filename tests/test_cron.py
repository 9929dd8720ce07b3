"""Cron handlers (``@processor.handler(..., cron=, tz=)``): checked at registration, each
tick run exactly once by several processors on one store, a tick missed during a restart
run once, a changed expression taking effect as processors start; ``jobsctl schedules`` and
the status line.  The schedules' clock is a fake one the tests step (``test_schedules``'
``clock`` fixture): no test waits for a minute to pass."""

from __future__ import annotations

import contextlib
import threading

import orjson
import pytest

import jobs
import processors.processor
from jobs.upkeep import schedules
from jobsctl import cli
from processors import Processor
from processors.behaviors import TASK_KEY
from test_schedules import T0, clock, utc  # noqa: F401 - the clock fixture
from waiting import running, wait_until

EVERY_5 = "*/5 * * * *"
lock = threading.Lock()  # (the handlers of several processors append to one list)


@pytest.fixture(autouse=True)
def quick_ticker(monkeypatch):
    monkeypatch.setattr(processors.processor, "CRON_POLL", 0.01)


def cron_processor(db, runs: list, name: str = "p", cron: str | None = EVERY_5, **kw) -> Processor:
    p = Processor(db, grace=5)

    @p.handler("report", timeout=10, cron=cron, **kw)
    def report(ctx):
        with lock:
            runs.append((name, ctx.data))
        return {"by": name}

    return p


def runs_recorded(db) -> int:
    """Runs the scheduled job's data records (finished ones)."""
    try:
        info = jobs.get_job(db, "report", schedules.JOB_ID)
    except jobs.NotFound:
        return 0
    return info.data.get(TASK_KEY, {}).get("runs", 0) if info.state == "finished" else -1


def test_bad_cron_arguments_are_refused_at_registration(db):
    p = Processor(db)
    for kwargs, problem in [({"cron": "* * *"}, "bad cron expression"),
                            ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
                            ({"cron": "0 0 30 2 *"}, "Bad day-of-month"),
                            ({"cron": "* * * * *", "every": 60}, "give one of them"),
                            ({"tz": "Europe/Paris"}, "give cron= too")]:
        with pytest.raises(ValueError, match=problem):
            p.handler("t", **kwargs)
    assert p.types == []


def test_three_processors_run_each_tick_exactly_once(db, clock):
    runs: list = []
    procs = [cron_processor(db, runs, name) for name in ("a", "b", "c")]
    with contextlib.ExitStack() as stack:
        for p in procs:
            stack.enter_context(running(p))
        for n in range(1, 5):  # ticks 10:05, 10:10, 10:15, 10:20
            clock.step(300)
            assert wait_until(lambda: runs_recorded(db) == n), (n, runs)
            assert schedules.get_schedule(db, "report").last == utc(2024, 3, 1, 10, 5 * n)
    assert len(runs) == 4 and all(data == {} for _name, data in runs)
    assert sum(p.stats["succeeded"] for p in procs) == 4
    assert jobs.get_job(db, "report", schedules.JOB_ID).data[TASK_KEY]["last_result"]["by"] in "abc"


def test_a_tick_missed_during_a_restart_runs_once_and_none_run_twice(db, clock):
    runs: list = []
    with running(cron_processor(db, runs, "first")):
        clock.step(300)  # 10:07: the 10:05 tick
        assert wait_until(lambda: runs_recorded(db) == 1)
    clock.step(300)  # 10:12, no processor: 10:10 is missed
    with running(cron_processor(db, runs, "second")):
        assert wait_until(lambda: runs_recorded(db) == 2)
    assert [name for name, _ in runs] == ["first", "second"]
    clock.step(3 * 300)  # 10:27, down for three ticks: they come as one run
    with running(cron_processor(db, runs, "third")):
        assert wait_until(lambda: runs_recorded(db) == 3)
        assert schedules.get_schedule(db, "report").last == utc(2024, 3, 1, 10, 25)
    assert [name for name, _ in runs] == ["first", "second", "third"]


def test_a_changed_expression_takes_effect_when_processors_start(db, clock):
    runs: list = []
    with running(cron_processor(db, runs)):
        pass
    assert schedules.get_schedule(db, "report").expression == EVERY_5
    with running(cron_processor(db, runs, cron="0 12 * * *", tz="Europe/Paris")):
        s = schedules.get_schedule(db, "report")
        assert (s.expression, s.tz, s.next) == ("0 12 * * *", "Europe/Paris", utc(2024, 3, 1, 11))
        clock.step(10 * 60)  # 10:12 UTC: past ticks of the old expression only
        assert schedules.enqueue_due(db, ["report"]) == []
        clock.step(50 * 60)  # 11:02 UTC = 12:02 in Paris
        assert wait_until(lambda: runs_recorded(db) == 1)
    assert len(runs) == 1 and schedules.get_schedule(db, "report").last == utc(2024, 3, 1, 11)
    with running(cron_processor(db, runs, cron=None)):  # no cron any more: no schedule
        assert schedules.get_schedule(db, "report") is None


def test_jobs_schedules_and_status_show_the_next_tick(tmp_path, capsys, clock):
    url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    db = jobs.open(url)
    try:
        jobs.set_type_timeout(db, "report", 10)
        schedules.set_schedule(db, "report", EVERY_5, "Europe/Paris")
    finally:
        db.close()
    assert cli.main(["--store", url, "schedules", "--json"]) == 0
    [doc] = orjson.loads(capsys.readouterr().out)
    assert doc == {"type": "report", "expression": EVERY_5, "tz": "Europe/Paris", "last": T0,
                   "next": utc(2024, 3, 1, 10, 5)}
    assert cli.main(["--store", url, "schedules"]) == 0
    out = capsys.readouterr().out
    assert "report" in out and EVERY_5 in out and "(due)" in out  # the fake clock is in the past
    assert cli.main(["--store", url, "status"]) == 0
    out = capsys.readouterr().out
    assert "cron schedules" in out and f"{EVERY_5} (Europe/Paris)" in out
    assert cli.main(["--store", url, "--json", "status"]) == 0
    assert orjson.loads(capsys.readouterr().out)["schedules"] == [doc]
    assert cli.main(["--store", url, "schedules", "--clear", "report"]) == 0
    assert "cleared the schedule of report" in capsys.readouterr().out
    assert cli.main(["--store", url, "schedules", "--clear", "report"]) == 1
    assert "has no cron schedule" in capsys.readouterr().err
    assert cli.main(["--store", url, "schedules"]) == 0
    assert "(no cron schedules)" in capsys.readouterr().out
