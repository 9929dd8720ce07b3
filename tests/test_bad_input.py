"""Bad input (issue section 4): each case gets a clear ``JobsError`` subclass or a
``ValueError`` naming the problem, and nothing is half-written."""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
import uuid

import pytest

import jobs
from jobs.indexes import counts
from jobs import keys
from jobs.checks import MAX_TIME
from jobs.codec import DATA_LIMIT
from jobs.engine import tuple as fdb_tuple
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import run
from jobs.engine.urls import open_database
from stored import add_unchecked, opened_anew
from stored import snapshot as store_snapshot

T = "t"
NAN, INF = math.nan, math.inf


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


@pytest.fixture
def running(db):
    """A running job "r" (data {"v": 1}) and its Job, plus a pending job "p"."""
    jobs.add(db, T, "r", {"v": 1})
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, "p", {"v": 2})
    return job


@dataclasses.dataclass
class Point:
    x: int


# --- job data ----------------------------------------------------------------------------

NOT_JSON = {
    "list": [1, 2],
    "string": "x",
    "int keys": {1: 2},
    "tuple keys": {(1, 2): 3},
    "set": {"s": {1, 2}},
    "bytes": {"b": b"raw"},
    "nan": {"x": NAN},
    "nested inf": {"x": [1, {"y": -INF}]},
    "datetime": {"when": datetime.datetime(2024, 1, 1)},
    "uuid": {"id": uuid.uuid4()},
    "dataclass": {"p": Point(1)},
    "object": {"o": object()},
    "huge int": {"n": 2**80},
    "lone surrogate": {"s": "\ud800"},
    "too large": {"blob": "x" * (DATA_LIMIT + 1)},
}


@pytest.mark.parametrize("data", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_add_refuses_data_that_is_not_a_json_object_and_writes_nothing(db, data):
    before = store_snapshot(db)
    with pytest.raises(jobs.JobDataError) as info:
        jobs.add(db, T, "j", data)
    assert str(info.value).startswith("job data")
    assert store_snapshot(db) == before


def test_data_error_names_the_offending_value(db):
    with pytest.raises(jobs.JobDataError, match=r"data\['a'\]\[1\]\['when'\] is a date "):
        jobs.add(db, T, "j", {"a": [0, {"when": datetime.date(2024, 1, 1)}]})
    with pytest.raises(jobs.JobDataError, match="over the limit"):
        jobs.add(db, T, "j", {"blob": "x" * 200_000})


def test_data_up_to_the_limit_round_trips(db):
    data = {"blob": "x" * (DATA_LIMIT - 20), "nested": [None, True, 1.5, {"k": []}]}
    data["blob"] = data["blob"][: DATA_LIMIT - len(jobs.codec.encode_data({**data, "blob": ""}))]
    jobs.add(db, T, "big", data)
    assert jobs.get_job_data(db, T, "big") == data
    job = jobs.accept(db, T, timeout=0)
    assert job.data == data
    jobs.finish(db, job, data)
    assert jobs.get_job_data(db, T, "big") == data


@pytest.mark.parametrize("data", [NOT_JSON["int keys"], NOT_JSON["nan"], NOT_JSON["too large"], ["x"]])
def test_update_finish_resubmit_refuse_bad_data_and_write_nothing(db, running, data):
    before = store_snapshot(db)
    for call in (
        lambda: jobs.update(db, running, data),
        lambda: jobs.finish(db, running, data),
        lambda: jobs.resubmit(db, running, data=data),
        lambda: jobs.resubmit(db, jobs.get_job(db, T, "p"), data=data),
    ):
        with pytest.raises(jobs.JobDataError):
            call()
        assert store_snapshot(db) == before
    assert jobs.get_job(db, T, "r")[2:4] == ("running", {"v": 1})
    jobs.finish(db, running)  # the worker still holds its job


def test_bad_data_in_the_application_transaction_leaves_it_unwritten(db, running):
    @jobs.transactional
    def work(tr):
        tr.set(b"app/out", b"1")
        jobs.finish(tr, running, {"x": NAN})

    with pytest.raises(jobs.JobDataError):
        work(db)
    assert db.get(b"app/out") is None
    assert jobs.get_job_state(db, T, "r") == "running"


# --- types and ids -----------------------------------------------------------------------

BAD_NAMES = {
    "empty": ("", ValueError),
    "int": (42, TypeError),
    "None": (None, TypeError),
    "bytes": (b"j", TypeError),
    "lone surrogate": ("\udc80", ValueError),
}


@pytest.mark.parametrize("value,error", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_bad_types_and_ids_are_value_errors_naming_the_argument(db, value, error):
    before = store_snapshot(db)
    calls = {
        "type": [
            lambda: jobs.add(db, value, "j"),
            lambda: jobs.set_type_timeout(db, value, 5),
            lambda: jobs.get_type_timeout(db, value),
            lambda: jobs.clear_type_timeout(db, value),
            *([] if value is None else [lambda: jobs.get_jobs(db, value)]),  # None: every type
            lambda: jobs.get_active_jobs_ids(db, value),
            lambda: jobs.pending_count(db, value),
            lambda: jobs.accept(db, value, timeout=0),
        ],
        "job id": [
            lambda: jobs.add(db, T, value),
            lambda: jobs.remove(db, T, value),
            lambda: jobs.get_job(db, T, value),
            lambda: jobs.get_job_data(db, T, value),
            lambda: jobs.get_job_state(db, T, value),
        ],
    }
    for what, fns in calls.items():
        for fn in fns:
            with pytest.raises(ValueError, match=what) as info:
                fn()
            assert isinstance(info.value, error)  # wrong types are TypeErrors too
    assert store_snapshot(db) == before


CONTROL = {"newline": "a\nb", "tab": "a\tb", "NUL": "a\x00b", "escape": "\x1b[31mred", "DEL": "a\x7f",
           "C1 next line": "a\x85b", "line separator": "a\u2028b", "carriage return": "a\rb"}


@pytest.mark.parametrize("value", CONTROL.values(), ids=CONTROL.keys())
def test_names_with_control_characters_are_refused_when_written(db, value):
    """Every text view (jobsctl list, show, status, logs) would break on them."""
    before = store_snapshot(db)
    for what, call in [("job id", lambda: jobs.add(db, T, value)),
                       ("type", lambda: jobs.add(db, value, "j")),
                       ("type", lambda: jobs.set_type_timeout(db, value, 5))]:
        with pytest.raises(ValueError, match=f"{what} .*control character") as info:
            call()
        assert type(info.value) is ValueError
    assert store_snapshot(db) == before


def test_a_stored_name_with_control_characters_can_be_shown_and_removed(db):
    """Another program stored it: lookups take it, so that it can be cleaned up."""
    add_unchecked(db, T, "a\nb")
    assert jobs.get_job(db, T, "a\nb").state == "pending"
    assert [i.id for i in jobs.get_jobs(db, T)] == ["a\nb"]
    jobs.remove(db, T, "a\nb")
    assert jobs.get_jobs(db, T) == []


def test_ids_too_long_for_a_key(db):
    with pytest.raises(ValueError, match="too long"):
        jobs.add(db, T, "x" * 20_000)
    assert jobs.get_jobs(db) == []
    jobs.add(db, T, "x" * 5_000)  # long, but fits
    assert jobs.pending_count(db, T) == 1


# --- times and timeouts --------------------------------------------------------------------

BAD_SECONDS = {"negative": -1, "nan": NAN, "inf": INF, "-inf": -INF, "bool": True, "str": "5"}


@pytest.mark.parametrize("value", BAD_SECONDS.values(), ids=BAD_SECONDS.keys())
def test_bad_scheduled_times(db, running, value):
    before = store_snapshot(db)
    with pytest.raises(ValueError, match="scheduled_time"):
        jobs.add(db, T, "j", {}, value)
    with pytest.raises(ValueError, match="scheduled_time"):
        jobs.resubmit(db, running, value)
    assert store_snapshot(db) == before


UNSHOWABLE_TIMES = {"1e30": 1e30, "year 10000": 253402300800, "year 9999": MAX_TIME, "max float": 1.7e308}


@pytest.mark.parametrize("value", UNSHOWABLE_TIMES.values(), ids=UNSHOWABLE_TIMES.keys())
def test_scheduled_times_no_date_can_show_are_refused(db, running, value):
    before = store_snapshot(db)
    with pytest.raises(ValueError, match="scheduled_time must be before the year 9999") as info:
        jobs.add(db, T, "j", {}, value)
    assert type(info.value) is ValueError
    with pytest.raises(ValueError, match="scheduled_time"):
        jobs.resubmit(db, running, value)
    with pytest.raises(ValueError, match="scheduled_time"):
        jobs.resubmit(db, jobs.get_job(db, T, "p"), value)
    assert store_snapshot(db) == before


def test_the_latest_scheduled_time_is_a_date_in_every_time_zone(db):
    latest = MAX_TIME - 1
    jobs.add(db, T, "j", {}, latest)
    assert jobs.get_job(db, T, "j").scheduled_time == latest
    for hours in (-12, 14):  # the furthest time zones from UTC
        zone = datetime.timezone(datetime.timedelta(hours=hours))
        assert datetime.datetime.fromtimestamp(latest, zone).year == 9998 + (hours > 0)


@pytest.mark.parametrize("value", [0, *BAD_SECONDS.values()], ids=["zero", *BAD_SECONDS.keys()])
def test_bad_type_timeouts(db, value):
    with pytest.raises(ValueError, match="type timeout"):
        jobs.set_type_timeout(db, "new", value)
    assert jobs.get_type_timeout(db, "new") is None
    assert jobs.get_types(db) == [T]


@pytest.mark.parametrize("value", [-1, NAN, -INF, True, "1"], ids=["negative", "nan", "-inf", "bool", "str"])
def test_bad_accept_timeouts_and_max_sched_times(db, value):
    jobs.add(db, T, "j", {})
    with pytest.raises(ValueError, match="timeout"):
        jobs.accept(db, T, timeout=value)
    with pytest.raises(ValueError, match="max_sched_time"):
        jobs.accept(db, T, max_sched_time=value, timeout=0)
    with pytest.raises(ValueError, match="max_sched_time"):
        jobs.pending_count(db, T, max_sched_time=value)
    assert jobs.get_job_state(db, T, "j") == "pending"


def test_no_schedule_with_a_max_sched_time(db):
    jobs.add(db, T, "j", {})
    for value in (1, 5000.5, INF):
        with pytest.raises(ValueError, match="no_schedule"):
            jobs.accept(db, T, no_schedule=True, max_sched_time=value)
    assert jobs.accept(db, T, no_schedule=True, max_sched_time=0, timeout=0).id == "j"


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_bad_pending_count_limits(db, limit):
    with pytest.raises(ValueError, match="limit"):
        jobs.pending_count(db, T, limit=limit)


def test_pending_count_limit_zero_counts_nothing(db):
    jobs.add(db, T, "j", {})
    assert jobs.pending_count(db, T, limit=0) == 0
    assert jobs.pending_count(db, T, limit=5) == 1


# --- wrong objects -----------------------------------------------------------------------


def test_accept_needs_a_database(db):
    tr = db.create_transaction()
    with pytest.raises(ValueError, match="database"):
        jobs.accept(tr, T, timeout=0)


def test_worker_calls_need_a_job(db, running):
    info = jobs.get_job(db, T, "r")
    for fn in (jobs.update, jobs.finish, jobs.release):
        with pytest.raises(TypeError, match="Job"):
            fn(db, info)
        with pytest.raises(TypeError, match="Job"):
            fn(db, {"type": T, "id": "r"})
    with pytest.raises(TypeError):
        jobs.is_resubmitted(info)
    with pytest.raises(TypeError):
        jobs.resubmit(db, ("t", "r"))


def test_a_job_from_another_store_is_refused_and_writes_nothing(db, running):
    other = open_database("memory:")
    try:
        jobs.set_type_timeout(other, T, 60)
        jobs.add(other, T, "r", {"other": True})  # same type and id in the other store
        theirs = jobs.accept(other, T, timeout=0)
        before = store_snapshot(other)
        for call in (
            lambda: jobs.update(other, running),
            lambda: jobs.finish(other, running),
            lambda: jobs.release(other, running),
            lambda: jobs.resubmit(other, running),
        ):
            with pytest.raises(jobs.ForeignJobError, match="another store"):
                call()
        assert store_snapshot(other) == before
        jobs.finish(other, theirs)  # each store's own Job still works
        jobs.finish(db, running)
    finally:
        other.close()


def test_a_store_written_by_a_newer_layout_is_refused(db):
    jobs.add(db, T, "j", {})
    newer = fdb_tuple.pack((keys.LAYOUT_VERSION + 1,))

    @jobs.transactional
    def bump(tr):
        tr.set(keys.LAYOUT_KEY, newer)

    bump(db)
    opened_anew(db)
    before = store_snapshot(db)
    for call in (
        lambda: jobs.add(db, T, "k", {}),
        lambda: jobs.get_jobs(db),
        lambda: jobs.accept(db, T, timeout=0),
        lambda: jobs.set_type_timeout(db, "u", 1),
    ):
        with pytest.raises(jobs.LayoutError, match="newer"):
            call()
    assert store_snapshot(db) == before


def test_a_corrupt_row_is_a_store_error(db):
    @jobs.transactional
    def corrupt(tr):
        tr.set(keys.data_key(T, "bad"), b"\x99not a tuple")

    corrupt(db)
    with pytest.raises(jobs.StoreError, match="t/bad"):
        jobs.get_job(db, T, "bad")
    with pytest.raises(jobs.StoreError):
        jobs.get_jobs(db)


def test_a_pending_job_whose_row_cannot_be_read_is_taken_off_the_queue(db, caplog):
    """Not a stop for every worker of the type: an accept takes it off the queue unrun,
    logs it once, leaves its row as it is (counted as ended, finished: it will not run),
    and takes the next job."""
    jobs.set_type_timeout(db, T, 30)
    for job_id in ("bad", "good"):
        jobs.add(db, T, job_id)
    db[keys.data_key(T, "bad")] = b"\x99not a tuple"
    with caplog.at_level("ERROR", logger="jobs"):
        taken = [jobs.accept(db, T, timeout=0) for _ in range(3)]
    assert [job.id for job in taken if job is not None] == ["good"]
    assert jobs.pending_count(db, T) == 0 and db[keys.data_key(T, "bad")] == b"\x99not a tuple"
    assert run(db, counts.read, T, time.time()) == counts.Counts(1, 1, 0, {})  # (good running, bad ended)
    said = [r.getMessage() for r in caplog.records if "t/bad" in r.getMessage()]
    assert len(said) == 1 and "taken off the queue" in said[0]


@pytest.mark.parametrize("fault", ["unknown_committed", "unknown_not_committed"])
def test_a_job_whose_row_cannot_be_read_is_named_once_when_its_accept_ends_in_1021(db, caplog, fault):
    """An accept that took such a job off the queue and committed behind 1021 is retried;
    the retry no longer finds the entry, and names the job all the same (once).  One whose
    commit did not happen finds the entry again, takes it, and names it once too."""

    class Scripted(FaultInjectingDatabase):
        script = [fault]

        def _draw(self):
            return self.script.pop(0) if self.script else None

    jobs.set_type_timeout(db, T, 30)
    for job_id in ("bad", "good"):
        jobs.add(db, T, job_id)
    db[keys.data_key(T, "bad")] = b"\x99not a tuple"
    faulty = Scripted(db)
    with caplog.at_level("ERROR", logger="jobs"):
        taken = jobs.accept_many(faulty, T, 5, timeout=0)  # (both: the batch is the queue)
    assert not faulty.script  # the fault happened
    assert [job.id for job in taken] == ["good"]
    assert jobs.pending_count(db, T) == 0
    assert run(db, counts.read, T, time.time()) == counts.Counts(1, 1, 0, {})
    said = [r.getMessage() for r in caplog.records if "t/bad" in r.getMessage()]
    assert len(said) == 1 and "taken off the queue" in said[0]


def test_listing_jobs_can_pass_over_the_rows_it_cannot_read(db):
    jobs.set_type_timeout(db, T, 30)
    for job_id in ("a", "bad", "c"):
        jobs.add(db, T, job_id)
    db[keys.data_key(T, "bad")] = b"\x99not a tuple"
    unreadable = []
    assert [info.id for info in jobs.get_jobs(db, T, unreadable=unreadable)] == ["a", "c"]
    assert [(t, job_id) for t, job_id, _error in unreadable] == [(T, "bad")] and "t/bad" in unreadable[0][2]
