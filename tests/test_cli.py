"""The ``jobs`` console script: every command in-process (``jobsctl.cli.main``) on a store file
in tmp_path, human and ``--json`` output, the store chosen by ``--store`` or
``$JOBS_STORE``, bad input (one ``jobsctl: error:`` line, no traceback), and the installed
script end to end, ``worker`` included."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest

import jobs
from jobs import keys
from jobs.observe import status_ranges
from jobsctl import cli
from jobsctl.arguments import parse_rate
from jobs.engine.urls import ENV_VAR
from stored import add_unchecked, age_finished, age_trash, snapshot
from waiting import DEADLINE, wait_until

JOBSCTL_SCRIPT = Path(sys.executable).parent / "jobsctl"


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No $JOBS_STORE (restored after the test even if ``worker`` set it), the working
    directory in tmp_path (where a default store would be created), sys.path restored."""
    monkeypatch.setenv(ENV_VAR, "recorded-so-that-it-is-restored")
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def url(tmp_path) -> str:
    return "sqlite:" + str(tmp_path / "jobs.sqlite")


@pytest.fixture
def db(url):
    database = jobs.open(url)
    yield database
    database.close()


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return orjson.loads(out)


# --- help --------------------------------------------------------------------------------


def test_help(capsys):
    code, out, _ = run(capsys, "help")
    assert code == 0
    for name in ("add", "remove", "show", "list", "types", "set-timeout", "worker", "monitor", "status", "set-limits",
                 "clear-limits", "limits"):
        assert name in out
    assert run(capsys, "-h")[0] == 0
    code, out, _ = run(capsys, "help", "add")
    assert code == 0 and "--data" in out and "--at" in out
    code, _, err = run(capsys)
    assert code == 2 and "required" in err
    assert run(capsys, "nosuch")[0] == 2
    code, _, err = run(capsys, "help", "nosuch")
    assert code == 2 and "argument COMMAND: invalid choice: 'nosuch'" in err  # a usage error


# --- the commands ------------------------------------------------------------------------


def test_set_timeout_and_types(capsys, url, db):
    code, out, _ = run(capsys, "--store", url, "types")  # an empty store (db made it)
    assert code == 0 and "no job types" in out
    code, out, _ = run(capsys, "--store", url, "set-timeout", "resize", "30")
    assert code == 0 and "resize" in out and "30s" in out
    assert run_json(capsys, "--store", url, "set-timeout", "email", "2.5") == {"type": "email", "timeout": 2.5}
    code, out, _ = run(capsys, "--store", url, "types")
    lines = out.splitlines()
    assert lines[0].split() == ["TYPE", "TIMEOUT"] and lines[1].split() == ["email", "2.5s"]
    assert lines[2].split() == ["resize", "30s"]
    assert run_json(capsys, "--store", url, "types") == [
        {"type": "email", "timeout": 2.5},
        {"type": "resize", "timeout": 30.0},
    ]


def test_add_and_show(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    code, out, _ = run(capsys, "--store", url, "add", "t", "a", "--data", '{"path": "a.png", "n": [1, 2]}')
    assert code == 0 and "pending" in out and "a.png" in out
    assert jobs.get_job(db, "t", "a") == ("t", "a", "pending", {"path": "a.png", "n": [1, 2]}, 0.0, 0, None)
    code, out, _ = run(capsys, "--store", url, "show", "t", "a")
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.splitlines()[:4])
    assert fields == {"type": "t", "id": "a", "state": "pending", "scheduled": "asap"}
    assert '"path": "a.png"' in out
    doc = run_json(capsys, "--store", url, "show", "t", "a")
    assert doc.pop("times")["enqueued"] == pytest.approx(time.time(), abs=60)  # a pending job's only time
    assert doc == {"type": "t", "id": "a", "state": "pending", "data": {"path": "a.png", "n": [1, 2]},
                   "scheduled_time": 0.0}
    # re-adding a pending job at another time replaces time and data (couch_jobs' rule)
    doc = run_json(capsys, "--store", url, "add", "t", "a", "--at", "1000")
    assert doc["data"] == {} and doc["scheduled_time"] == 1000.0


def test_show_names_the_trace_a_job_carries(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    jobs.add(db, "t", "a", {"x": 1, "_task": {"trace": {"traceparent": parent}}})
    jobs.add(db, "t", "b", {"x": 1, "_task": {"trace": {"traceparent": "garbage"}}})
    code, out, _ = run(capsys, "--store", url, "show", "t", "a")
    assert code == 0 and "trace      4bf92f3577b34da6a3ce929d0e0e4736\n" in out
    code, out, _ = run(capsys, "--store", url, "show", "t", "b")
    assert code == 0 and "\ntrace " not in out


def test_add_at_forms(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    assert run_json(capsys, "--store", url, "add", "t", "unix", "--at", "1700000000.5")["scheduled_time"] == 1700000000.5
    iso = run_json(capsys, "--store", url, "add", "t", "iso", "--at", "2030-01-02T03:04:05+00:00")
    assert iso["scheduled_time"] == datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()
    before = time.time()
    rel = run_json(capsys, "--store", url, "add", "t", "rel", "--at", "+5m")["scheduled_time"]
    assert before + 300 <= rel <= time.time() + 300
    code, out, _ = run(capsys, "--store", url, "show", "t", "rel")
    assert "(in " in out


def test_parse_time():
    assert cli.parse_time("12.5", now=100) == 12.5
    assert cli.parse_time("+30", now=100) == 130
    assert cli.parse_time("+30s", now=100) == 130
    assert cli.parse_time("+2m", now=100) == 220
    assert cli.parse_time("+1h", now=100) == 3700
    assert cli.parse_time("+1d", now=100) == 86500
    assert cli.parse_time("2030-01-02T03:04:05") == datetime(2030, 1, 2, 3, 4, 5).timestamp()  # local time
    for bad in ("soon", "+", "+xs", "2030-13-01", "-", "-xm"):
        with pytest.raises(Exception, match="bad time"):
            cli.parse_time(bad)


def test_parse_time_in_the_past():
    assert cli.parse_time("-30", now=1000) == 970
    assert cli.parse_time("-2m", now=1000) == 880
    assert cli.parse_time("-1.5h", now=10000) == 4600
    with pytest.raises(Exception, match="bad time '-1d': the time must be zero or more"):
        cli.parse_time("-1d", now=100)


def test_add_at_a_time_in_the_past(capsys, url, db):
    """``--at -5m``: argparse would take -5m for an option (it is not a plain number)."""
    jobs.set_type_timeout(db, "t", 30)
    for argv in (["--at", "-5m"], ["--at=-5m"]):
        before = time.time()
        doc = run_json(capsys, "--store", url, "add", "t", "past", *argv)
        assert before - 300 <= doc["scheduled_time"] <= time.time() - 300
    assert run_json(capsys, "--store", url, "add", "t", "past", "--at", "-.5h", "--data", "{}")["scheduled_time"] \
        <= time.time() - 1800
    code, out, _ = run(capsys, "--store", url, "show", "t", "past")
    assert code == 0 and "ago)" in out


def _three_states(db):
    """t/p pending, t/r running, t/f finished, u/x pending."""
    for t in ("t", "u"):
        jobs.set_type_timeout(db, t, 30)
    jobs.add(db, "t", "f", {"k": 1})
    jobs.finish(db, jobs.accept(db, "t", timeout=0), {"done": True})
    jobs.add(db, "t", "r", {"k": 2})
    running = jobs.accept(db, "t", timeout=0)
    jobs.add(db, "t", "p", {"k": 3})
    jobs.add(db, "u", "x")
    return running


def test_list(capsys, url, db):
    assert run_json(capsys, "--store", url, "list") == []
    code, out, _ = run(capsys, "--store", url, "list")
    assert code == 0 and "no jobs" in out
    _three_states(db)
    code, out, _ = run(capsys, "--store", url, "list")
    rows = [line.split()[:3] for line in out.splitlines()]
    assert rows == [["TYPE", "ID", "STATE"], ["t", "f", "finished"], ["t", "p", "pending"],
                    ["t", "r", "running"], ["u", "x", "pending"]]
    assert [d["id"] for d in run_json(capsys, "--store", url, "list", "t")] == ["f", "p", "r"]
    docs = run_json(capsys, "--store", url, "list", "--state", "pending")
    assert [(d["type"], d["id"], d["data"]) for d in docs] == [("t", "p", {"k": 3}), ("u", "x", {})]
    assert [d["id"] for d in run_json(capsys, "--store", url, "list", "t", "--state", "running")] == ["r"]


@pytest.mark.parametrize("as_json", [False, True])
def test_list_shows_the_jobs_it_can_read_and_names_the_others(capsys, url, db, as_json):
    _three_states(db)
    db[keys.data_key("t", "p")] = b"not a row"
    code, out, err = run(capsys, "--store", url, "list", *(["--json"] if as_json else []))
    assert code == 1 and err.splitlines() == ["jobsctl: error: the row of job t/p is corrupt: Unknown data type in DB: "
                                              "b'not a row' (jobs.remove_unreadable, or 'jobsctl remove --unreadable', "
                                              "removes such a job)"]
    ids = [d["id"] for d in orjson.loads(out)] if as_json else [line.split()[1] for line in out.splitlines()[1:]]
    assert ids == ["f", "r", "x"]


def test_list_says_failed_for_a_failed_job(capsys, url, db):
    """As jobsctl show and status: a failed job is listed as failed, not finished, and
    --state tells them apart."""
    jobs.set_type_timeout(db, "t", 30)
    # (priorities: which job each accept takes is decided, not drawn within a band)
    jobs.add_many(db, "t", [jobs.NewJob("bad", priority=-2), jobs.NewJob("ok", priority=-1), "waiting"])
    jobs.finish(db, jobs.accept(db, "t", timeout=0), failed="boom")
    jobs.finish(db, jobs.accept(db, "t", timeout=0))
    assert [(d["id"], d["state"]) for d in run_json(capsys, "--store", url, "list")] == [
        ("bad", "failed"), ("ok", "finished"), ("waiting", "pending")]
    assert [d["id"] for d in run_json(capsys, "--store", url, "list", "--state", "failed")] == ["bad"]
    assert [d["id"] for d in run_json(capsys, "--store", url, "list", "t", "--state", "finished")] == ["ok"]
    code, out, _ = run(capsys, "--store", url, "list")
    assert [line.split()[:3] for line in out.splitlines()][1] == ["t", "bad", "failed"]


def test_remove(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "a")
    jobs.add(db, "t", "b")
    code, out, _ = run(capsys, "--store", url, "remove", "t", "a")
    assert code == 0 and "removed t/a" in out
    assert run_json(capsys, "--store", url, "remove", "t", "b") == {"removed": {"type": "t", "id": "b"}}
    assert jobs.get_jobs(db) == []
    code, _, err = run(capsys, "--store", url, "show", "t", "a")
    assert code == 1 and err == f"jobsctl: error: job t/a not found in the store {url} (named when opened; JOBS_STORE not read)\n"


def test_remove_a_job_whose_row_cannot_be_read(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    for job_id in ("a", "b", "c"):
        jobs.add(db, "t", job_id)
    for job_id in ("a", "b"):
        db[keys.data_key("t", job_id)] = b"not a row"
    code, _, err = run(capsys, "--store", url, "remove", "t", "a")
    assert code == 1 and "the row of job t/a is corrupt" in err and "'jobsctl remove --unreadable'" in err
    code, out, _ = run(capsys, "--store", url, "remove", "--unreadable", "t", "a")
    assert code == 0 and out == ("removed t/a (its row could not be read; it had 1 queue entry, not running, "
                                 "not in the finished index)\n")
    assert run_json(capsys, "--store", url, "remove", "t", "b", "--unreadable") == {
        "removed": {"type": "t", "id": "b"},
        "found": {"queue_entries": 1, "running": False, "slots": 0, "finished": None}}
    code, _, err = run(capsys, "--store", url, "remove", "--unreadable", "t", "c")
    assert code == 1 and err == ("jobsctl: error: the row of job t/c can be read: remove it with jobs.remove "
                             "('jobsctl remove' without --unreadable)\n")
    assert [info.id for info in jobs.get_jobs(db)] == ["c"] and jobs.pending_count(db, "t") == 1


def test_gc_deletes_trash_older_than_the_grace_period(capsys, url, db, tmp_path):
    import pipeline
    from pipeline import collector

    assert cli.GC_GRACE == collector.DEFAULT_GRACE  # `jobsctl gc` and the collector job agree
    pipeline.create_database(db, "sky", location=str(tmp_path / "data"))
    schema = [{"name": "id", "type": "bigint"}]
    old, young = (pipeline.create_table(db, "sky", name, schema) for name in ("old", "young"))
    for t in (old, young):
        os.makedirs(t.location)
        pipeline.drop_table(db, "sky", t.name)
    age_trash(db, old.location, 3600)
    code, out, _ = run(capsys, "--store", url, "gc")  # default grace: 600 s
    assert code == 0 and out.splitlines() == [
        old.location, "deleted 1 location(s) trashed more than 600s ago; 1 left in the trash"]
    assert not os.path.exists(old.location) and os.path.isdir(young.location)
    assert run_json(capsys, "--store", url, "gc", "--grace", "60") == {"deleted": [], "grace": 60.0, "left": 1}
    assert run_json(capsys, "--store", url, "gc", "--grace", "0") == {"deleted": [young.location], "grace": 0.0,
                                                                      "left": 0}
    assert not os.path.exists(young.location) and pipeline.get_trash(db) == []
    for bad in ("-1", "soon", "nan"):
        code, _, err = run(capsys, "--store", url, "gc", "--grace", bad)
        assert code == 2 and "--grace" in err
    code, _, err = run(capsys, "--store", "sqlite:" + str(tmp_path / "nosuch.sqlite"), "gc")
    assert code == 1 and "jobsctl: error:" in err and not (tmp_path / "nosuch.sqlite").exists()


def test_status(capsys, url, db, monkeypatch):
    assert run_json(capsys, "--store", url, "status")["types"] == []
    running = _three_states(db)
    jobs.add(db, "t", "r2")
    second = jobs.accept(db, "t", timeout=0)  # r or r2 was pending; one of them stays
    jobs.update(db, running)  # r is now the most recently active
    jobs.add(db, "t", "late", scheduled_time=time.time() - 500)  # due long ago, enqueued now
    with monkeypatch.context() as m:  # a job enqueued 100 s ago, by the enqueuer's clock
        m.setattr(jobs.indexes.pending, "time", type("Clock", (), {"time": staticmethod(lambda: time.time() - 100)}))
        jobs.add(db, "t", "old")
    jobs.add(db, "t", "future", scheduled_time=time.time() + 3600)
    jobs.set_type_timeout(db, "cleared", 5)
    jobs.add(db, "cleared", "c")
    jobs.clear_type_timeout(db, "cleared")  # its job still shows

    doc = run_json(capsys, "--store", url, "status")
    assert doc["versions"] == "versions"  # versions measure time on both engines
    by_type = {t["type"]: t for t in doc["types"]}
    assert list(by_type) == ["cleared", "t", "u"]
    t = by_type["t"]
    pending_left = {"p", "r2"} - {second.id}
    assert (t["timeout"], t["running"], t["finished"]) == (30.0, 2, 1)
    assert (t["pending"], t["due"], t["due_asap"]) == (len(pending_left) + 3, len(pending_left) + 2,
                                                       len(pending_left) + 1)
    assert 100 <= t["oldest_due_age"] < 500  # waits since enqueued or due, whichever is later
    ids = [r["id"] for r in t["running_jobs"]]
    assert ids == [second.id, "r"]  # least recently active first
    older, newer = (r["last_activity"] for r in t["running_jobs"])
    assert older["behind"] > newer["behind"] >= 0 and older["age"] >= newer["age"] >= 0
    assert older["age"] < 60  # (a generous bound: seconds, not the commit counts of old)
    assert t["last_change"]["behind"] <= newer["behind"]
    assert by_type["cleared"]["timeout"] is None and by_type["cleared"]["pending"] == 1
    assert by_type["u"]["oldest_due_age"] >= 0 and by_type["u"]["due_asap"] == 1

    assert [len(t["running_jobs"]) for t in run_json(capsys, "--store", url, "status", "--limit", "1")["types"]] == [0, 1, 0]
    assert run_json(capsys, "--store", url, "status", "--limit", "0")["types"][1]["running"] == 2

    code, out, _ = run(capsys, "--store", url, "status")
    assert code == 0
    head, *rows = out.split("\n\n")[0].splitlines()
    assert head.split()[:3] == ["TYPE", "TIMEOUT", "PENDING"]
    assert rows[1].split()[:2] == ["t", "30s"]
    assert "s ago" in out and "commits ago" not in out and "running jobs" in out


def test_pause_and_resume(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "a")
    code, out, _ = run(capsys, "--store", url, "pause", "t")
    assert code == 0 and out.strip() == "paused t: no worker takes its jobs until 'jobsctl resume t'"
    assert jobs.is_paused(db, "t") and jobs.accept(db, "t", timeout=0) is None
    assert run_json(capsys, "--store", url, "pause", "later") == {"type": "later", "paused": True}  # no timeout yet

    doc = run_json(capsys, "--store", url, "status")
    assert [(t["type"], t["paused"]) for t in doc["types"]] == [("later", True), ("t", True)]
    code, out, _ = run(capsys, "--store", url, "status")
    section = out.split("paused types: no worker takes their jobs ('jobsctl resume TYPE'):\n")[1].split("\n\n")[0]
    head, *rows = section.splitlines()
    assert head.split() == ["TYPE", "PAUSED", "SINCE"] and [r.split()[0] for r in rows] == ["later", "t"]
    assert "ago)" in rows[1]

    code, out, _ = run(capsys, "--store", url, "resume", "t")
    assert code == 0 and out.strip() == "resumed t: workers take its jobs again"
    assert not jobs.is_paused(db, "t") and jobs.accept(db, "t", timeout=0).id == "a"
    assert run_json(capsys, "--store", url, "resume", "later") == {"type": "later", "paused": False, "was_paused": True}
    code, out, _ = run(capsys, "--store", url, "status")
    assert "paused types" not in out
    code, _, err = run(capsys, "--store", url, "pause")
    assert code == 2 and "TYPE" in err
    code, _, err = run(capsys, "--store", url, "pause", "a\tb")
    assert code == 1 and "jobsctl: error:" in err and "control character" in err
    nowhere = "sqlite:" + str(Path(url[len("sqlite:"):]).parent / "nosuch.sqlite")
    code, _, err = run(capsys, "--store", nowhere, "resume", "t")
    assert code == 1 and "jobsctl: error:" in err and not Path(nowhere[len("sqlite:"):]).exists()


def test_pausing_a_type_the_store_has_never_seen_warns(capsys, url, db):
    """Pausing ahead of deployment is legitimate (exit status 0, the type is paused), but a
    mistyped name is likelier: stderr says the store does not know it."""
    jobs.set_type_timeout(db, "email", 30)
    code, out, err = run(capsys, "--store", url, "pause", "emial")
    assert code == 0 and out.strip() == "paused emial: no worker takes its jobs until 'jobsctl resume emial'"
    assert err == (f"jobsctl: warning: type 'emial' is unknown in the store {url} (named when opened; JOBS_STORE "
                   "not read) (no timeout, no jobs, no limits): paused all the same, for workers still to come; "
                   "check the name\n")
    assert jobs.is_paused(db, "emial")
    code, out, err = run(capsys, "--store", url, "--json", "pause", "emial")  # known now: paused
    assert code == 0 and err == ""
    code, out, err = run(capsys, "--store", url, "pause", "email")
    assert code == 0 and err == ""
    jobs.add(db, "email", "a")
    jobs.resume(db, "email")
    jobs.clear_type_timeout(db, "email")  # a type with jobs is known without a timeout
    code, out, err = run(capsys, "--store", url, "pause", "email")
    assert code == 0 and err == ""


def test_resuming_a_type_that_is_not_paused_says_so(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    code, out, err = run(capsys, "--store", url, "resume", "t")
    assert code == 0 and err == "" and out.strip() == "t was not paused: nothing to resume (workers take its jobs)"
    assert run_json(capsys, "--store", url, "resume", "t") == {"type": "t", "paused": False, "was_paused": False}
    jobs.pause(db, "t")
    assert run_json(capsys, "--store", url, "resume", "t") == {"type": "t", "paused": False, "was_paused": True}



def test_status_counts_past_one_page(capsys, url, db, monkeypatch):
    """Ranges longer than a page are counted over several transactions (``--exact``), to
    the numbers the counters have."""
    monkeypatch.setattr(status_ranges, "BATCH", 3)
    monkeypatch.setattr(status_ranges, "DATA_BATCH", 2)
    jobs.set_type_timeout(db, "t", 30)
    for i in range(7):
        jobs.add(db, "t", f"p{i}")
    for _ in range(4):
        jobs.accept(db, "t", timeout=0)
    for i in range(5):
        jobs.add(db, "t", f"f{i}")
        jobs.finish(db, jobs.accept(db, "t", timeout=0))
    for exact in ([], ["--exact"]):
        (t,) = run_json(capsys, "--store", url, "status", *exact)["types"]
        assert (t["pending"], t["due"], t["running"], t["finished"]) == (3, 3, 4, 5)


def test_store_from_env_or_flag(capsys, monkeypatch, tmp_path, url):
    other = "sqlite:" + str(tmp_path / "other.sqlite")
    monkeypatch.setenv(ENV_VAR, url)
    assert run(capsys, "set-timeout", "t", "30")[0] == 0
    assert run(capsys, "add", "t", "in-env")[0] == 0
    assert run(capsys, "--store", other, "set-timeout", "t", "30")[0] == 0
    assert run(capsys, "add", "t", "in-other", "--store", other)[0] == 0  # --store after the command
    assert [d["id"] for d in run_json(capsys, "list")] == ["in-env"]
    assert [d["id"] for d in run_json(capsys, "--store", other, "list")] == ["in-other"]
    assert [d["id"] for d in run_json(capsys, "list", "--store", other)] == ["in-other"]
    monkeypatch.delenv(ENV_VAR)
    assert run(capsys, "set-timeout", "t", "30")[0] == 0  # the default store, made in the working directory
    assert (tmp_path / ".jobs" / "jobs.sqlite").exists()
    assert run_json(capsys, "list") == []


# --- bad input ---------------------------------------------------------------------------

BAD = [
    (["add", "t"], 2, "required: ID"),
    (["add", "t", "a", "--data", "{"], 1, "--data is not valid JSON"),
    (["add", "t", "a", "--data", "[1, 2]"], 1, "must be a dict (a JSON object)"),
    (["add", "t", "a", "--data", '"text"'], 1, "must be a dict (a JSON object)"),
    (["add", "t", "a", "--at", "soon"], 2, "bad time 'soon'"),
    (["add", "t", "a", "--at", "-1e12"], 2, "bad time '-1e12': the time must be zero or more"),
    (["add", "notype", "a"], 1, "run 'jobsctl set-timeout notype SECONDS' first"),
    (["set-timeout", "t", "-1"], 1, "type timeout must be positive"),
    (["set-timeout", "t", "0"], 1, "type timeout must be positive"),
    (["set-timeout", "t", "abc"], 2, "invalid float value"),
    (["set-timeout", "t"], 2, "required: SECONDS"),
    (["list", "--state", "done"], 2, "invalid choice: 'done'"),
    (["show", "t", "nope"], 1, "job t/nope not found"),
    (["remove", "t", "nope"], 1, "job t/nope not found"),
    (["show", "t", ""], 1, "job id must not be empty"),
    (["status", "--limit", "-1"], 2, "expected an integer >= 0"),
    (["set-limits", "t"], 2, "give at least one of --concurrency, --rate, --key-concurrency, --key-rate (to remove "
                             "every limit: 'jobsctl clear-limits t')"),
    (["set-limits"], 2, "required: TYPE"),
    (["set-limits", "t", "--rate", "100"], 2, "argument --rate: bad rate '100': expected COUNT/SECONDS"),
    (["set-limits", "t", "--rate", "5/x"], 2, "bad rate '5/x': expected COUNT/SECONDS, such as 100/60"),
    (["set-limits", "t", "--rate", "1.5/60"], 2, "bad rate '1.5/60'"),
    (["set-limits", "t", "--key-rate", "0/60"], 2, "argument --key-rate: bad rate '0/60': the count must be from 1 "
                                                   "to 10000 and the seconds a positive number"),
    (["set-limits", "t", "--rate", "10/0"], 2, "bad rate '10/0': the count must be from 1 to 10000"),
    (["set-limits", "t", "--rate", "10/nan"], 2, "bad rate '10/nan'"),
    (["set-limits", "t", "--rate", "10/inf"], 2, "bad rate '10/inf'"),
    (["set-limits", "t", "--concurrency", "0"], 2, "argument --concurrency: expected an integer from 1 to 10000, not '0'"),
    (["set-limits", "t", "--key-concurrency", "10001"], 2, "argument --key-concurrency: expected an integer from 1 to "
                                                          "10000, not '10001'"),
    (["set-limits", "t", "--concurrency", "two"], 2, "expected an integer from 1 to 10000, not 'two'"),
    (["set-limits", "a\tb", "--concurrency", "1"], 1, "control character"),
    (["clear-limits"], 2, "required: TYPE"),
    (["add", "t", "a", "--key", "a\nb"], 1, "key "),
    (["add", "t", "a", "--key", ""], 1, "key "),
    (["worker", "tasks"], 2, "expected MODULE:PROCESSOR"),
    (["worker", "tasks:p", "--concurrency", "0"], 2, "expected an integer >= 1"),
    (["--store", "bogus", "list"], 1, "bad store URL 'bogus'"),
    (["list", "--store", "memory:x"], 1, "memory: takes no path"),
    (["--store", "sqlite:/no/such/dir/x.sqlite", "types"], 1, "does not exist"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
]


@pytest.mark.parametrize("argv, code, message", BAD, ids=[" ".join(a) for a, _c, _m in BAD])
def test_bad_input(capsys, url, db, argv, code, message):
    jobs.set_type_timeout(db, "t", 30)
    got, out, err = run(capsys, *(["--store", url] if "--store" not in argv else []), *argv)
    assert got == code
    assert out == ""
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("jobs") and "error: " in last and message in last


@pytest.mark.parametrize("at", ["1e30", "253402300800", "9999-06-01T00:00:00", "+1e30s", "inf", "nan"])
def test_add_refuses_a_time_no_date_can_show_and_writes_nothing(capsys, url, db, at):
    """Such a job was written, then crashed ``jobsctl show`` and ``jobsctl list`` until removed."""
    jobs.set_type_timeout(db, "t", 30)
    before = snapshot(db)
    code, out, err = run(capsys, "--store", url, "add", "t", "j", "--at", at)
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"argument --at: bad time '{at}': the time must be " in err.splitlines()[-1]
    assert snapshot(db) == before


@pytest.mark.parametrize("data", ["null", " null "])
def test_add_refuses_null_data(capsys, url, db, data):
    jobs.set_type_timeout(db, "t", 30)
    before = snapshot(db)
    code, _, err = run(capsys, "--store", url, "add", "t", "j", "--data", data)
    assert code == 1 and err == "jobsctl: error: --data null is not a JSON object: give one, such as '{\"k\": 1}', " \
                                "or leave --data out for {}\n"
    assert snapshot(db) == before


@pytest.mark.parametrize("job_id", ["a\nb", "a\tb", "\x1b[2Jx", "a\rb", "a\u2028b"])
def test_add_refuses_ids_with_control_characters(capsys, url, db, job_id):
    jobs.set_type_timeout(db, "t", 30)
    before = snapshot(db)
    code, _, err = run(capsys, "--store", url, "add", "t", job_id)
    assert code == 1 and err.startswith("jobsctl: error: job id ") and "control character" in err
    assert err.count("\n") == 1  # the id is shown escaped
    assert snapshot(db) == before


def test_views_show_whatever_another_program_stored(capsys, url, db):
    """Times no date can show and names with control characters: every view shows them,
    on one line each, and they can be removed."""
    add_unchecked(db, "t", "far", 1e30)
    add_unchecked(db, "t", "y10k", 253402300800.0)
    add_unchecked(db, "t", "a\nb\x1b[31m")
    add_unchecked(db, "we\tird", "w")
    code, out, err = run(capsys, "--store", url, "list")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 5 and len({line.index("pending") for line in lines[1:]}) == 1  # one column
    assert "a\\nb\\x1b[31m" in out and "we\\tird" in out
    assert "1e+30 (seconds since the epoch, not a date)" in out
    assert "253402300800 (seconds since the epoch, not a date)" in out
    for job_id in ("far", "y10k", "a\nb\x1b[31m"):
        code, out, err = run(capsys, "--store", url, "show", "t", job_id)
        assert code == 0 and len(out.splitlines()) == 6 and "enqueued" in out, err  # its entry's time
    assert run_json(capsys, "--store", url, "show", "t", "far")["scheduled_time"] == 1e30
    assert {d["id"] for d in run_json(capsys, "--store", url, "list")} == {"far", "y10k", "a\nb\x1b[31m", "w"}
    code, out, err = run(capsys, "--store", url, "status")
    assert code == 0 and "we\\tird" in out and "\t" not in out, err
    assert run_json(capsys, "--store", url, "status")["types"][0]["pending"] == 3
    code, out, _ = run(capsys, "--store", url, "remove", "t", "a\nb\x1b[31m")
    assert code == 0 and out == "removed t/a\\nb\\x1b[31m\n"


READ_ONLY = [["status"], ["list"], ["list", "t"], ["show", "t", "j"], ["types"], ["remove", "t", "j"]]


@pytest.mark.parametrize("argv", READ_ONLY, ids=[" ".join(a) for a in READ_ONLY])
def test_read_only_commands_never_create_a_store(capsys, tmp_path, argv):
    """A mistyped path was a new empty store: "(no job types)", exit 0."""
    path = tmp_path / "typo.sqlite"
    code, out, err = run(capsys, "--store", f"sqlite:{path}", *argv)
    assert code == 1 and out == ""
    assert err == f"jobsctl: error: cannot open store 'sqlite:{path}': store file '{path}' does not exist; check the path\n"
    code, _, err = run(capsys, *argv)  # the default store (.jobs/jobs.sqlite in the working directory)
    assert code == 1 and "store file '.jobs/jobs.sqlite' does not exist" in err
    assert os.listdir(tmp_path) == []


def test_serve_status_never_creates_a_store(tmp_path):
    path = tmp_path / "typo.sqlite"
    done = _script("--store", f"sqlite:{path}", "serve-status", "--port", "0")
    assert done.returncode == 1 and "does not exist" in done.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv", [["types"], ["set-timeout", "t", "5"], ["add", "t", "j"], ["status"]])
def test_another_applications_sqlite_file_is_left_alone(capsys, tmp_path, argv):
    import sqlite3

    path = tmp_path / "app.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('keep me')")
        conn.commit()
    before = path.read_bytes()
    code, out, err = run(capsys, "--store", f"sqlite:{path}", *argv)
    assert code == 1 and out == "" and "is an SQLite database but not a job store (it has tables notes)" in err
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["app.sqlite"]


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "http"])
def test_serve_status_port_out_of_range_is_a_usage_error(capsys, port):
    code, out, err = run(capsys, "serve-status", "--port", port)
    assert code == 2 and out == "" and f"argument --port: expected an integer from 0 to 65535, not '{port}'" in err


def test_bad_store_file(capsys, tmp_path):
    (tmp_path / "not-a-store").write_text("hello, this is not SQLite" * 100)
    code, _, err = run(capsys, "--store", f"sqlite:{tmp_path / 'not-a-store'}", "types")
    assert code == 1 and err.startswith("jobsctl: error: cannot open store") and err.count("\n") == 1


# --- worker: finding the processor ----------------------------------------------------------


def _module(tmp_path, body: str) -> str:
    name = f"cli_test_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(body)
    return name


def test_worker_reports_what_is_wrong(capsys, tmp_path, url):
    mod = _module(tmp_path, "import os\nseen = os.environ['JOBS_STORE']\nnot_a_processor = 3\n")
    code, _, err = run(capsys, "--store", url, "worker", f"{mod}:not_a_processor")
    assert code == 1 and "is not a processors.Processor but an int: name a Processor" in err
    assert sys.modules[mod].seen == url  # --store reached the module through $JOBS_STORE
    code, _, err = run(capsys, "--store", url, "worker", f"{mod}:missing")
    assert code == 1 and f"module '{mod}' has no attribute 'missing'" in err
    code, _, err = run(capsys, "--store", url, "worker", "no_such_module_here:p")
    assert code == 1 and "cannot import 'no_such_module_here'" in err and "Traceback" not in err
    opens = _module(tmp_path, "import jobs\ndb = jobs.open()\n")
    code, _, err = run(capsys, "--store", "sqlite:/no/such/dir/x.sqlite", "worker", f"{opens}:db")
    assert code == 1 and err.startswith("jobsctl: error: cannot open store") and "Traceback" not in err
    broken = _module(tmp_path, "raise RuntimeError('boom at import')\n")
    code, _, err = run(capsys, "--store", url, "worker", f"{broken}:p")
    assert code == 1  # the user's own code failed: its traceback is shown, then one error line
    assert "RuntimeError: boom at import" in err and err.splitlines()[-1].startswith("jobsctl: error: importing")


# --- monitor -----------------------------------------------------------------------------


def run_monitor_until(capsys, url, condition, as_json: bool):
    """``jobsctl monitor`` until ``condition()`` holds (then SIGTERM): (code, out, err)."""
    def stop_when_done():
        try:
            wait_until(condition)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # in case main() returned first
    try:
        thread = threading.Thread(target=stop_when_done)
        thread.start()
        done = run(capsys, "--store", url, "monitor", *(["--json"] if as_json else []))
        thread.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return done


@pytest.mark.parametrize("as_json", [False, True])
def test_monitor_reenqueues_until_sigterm(capsys, url, db, as_json):
    jobs.set_type_timeout(db, "t", 0.2)
    jobs.add(db, "t", "a")
    jobs.accept(db, "t", timeout=0)  # a worker that never updates
    code, out, err = run_monitor_until(capsys, url, lambda: jobs.get_job_state(db, "t", "a") == "pending", as_json)
    assert code == 0, err
    assert jobs.get_job_state(db, "t", "a") == "pending"
    if as_json:
        assert orjson.loads(out) == {"reenqueued": 1, "pruned": 0, "failed_passes": 0, "unreadable": []}
    else:
        assert "re-enqueued 1 job(s), 1 in all" in out and out.splitlines()[-1] == "stopped; re-enqueued 1 job(s)"


@pytest.mark.parametrize("as_json", [False, True])
def test_monitor_says_what_it_pruned_and_the_rows_it_cannot_read(capsys, url, db, as_json):
    jobs.set_type_timeout(db, "t", 0.2)
    jobs.set_retention(db, "t", finished=60)
    jobs.add(db, "t", "old")
    jobs.finish(db, jobs.accept(db, "t", timeout=0))
    age_finished(db, "t", ["old"], 120)
    for job_id in ("bad", "dead"):  # (workers that never update)
        jobs.add(db, "t", job_id)
        jobs.accept(db, "t", timeout=0)
    db[keys.data_key("t", "bad")] = b"not a row"

    def done() -> bool:  # (the dead job and the bad one are due together: one batch)
        try:
            jobs.get_job_state(db, "t", "old")
        except jobs.NotFound:
            return jobs.get_job_state(db, "t", "dead") == "pending"
        return False

    code, out, err = run_monitor_until(capsys, url, done, as_json)
    assert code == 0, err
    if as_json:
        assert orjson.loads(out) == {"reenqueued": 1, "pruned": 1, "failed_passes": 0, "unreadable": ["t/bad"]}
    else:
        assert "pruned 1 finished job(s), 1 in all" in out
        assert out.splitlines()[-1] == "stopped; re-enqueued 1 job(s), pruned 1; rows that cannot be read: t/bad"


# --- the installed script ------------------------------------------------------------------


def _script(*argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(JOBSCTL_SCRIPT), *argv], capture_output=True, text=True, timeout=DEADLINE, **kw)


def test_the_command_is_jobsctl_and_a_shell_reaches_it():
    """``jobs`` is a bash and zsh builtin: the console script is ``jobsctl``, and no script
    named ``jobs`` is installed (a venv's ``bin`` first on PATH, as ``activate`` puts it)."""
    assert JOBSCTL_SCRIPT.exists() and not (JOBSCTL_SCRIPT.parent / "jobs").exists()
    env = {**os.environ, "PATH": f"{JOBSCTL_SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", "jobsctl --help"], capture_output=True, text=True, timeout=DEADLINE, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: jobsctl ") and "'jobsctl help COMMAND'" in done.stdout


def test_script_add_and_show(tmp_path, url):
    env = {**os.environ, ENV_VAR: url}
    assert _script("set-timeout", "t", "30", env=env).returncode == 0
    done = _script("add", "t", "a", "--data", '{"x": 1}', "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["state"] == "pending"
    shown = orjson.loads(_script("--store", url, "--json", "show", "t", "a").stdout)
    assert set(shown.pop("times")) == {"enqueued"}
    assert shown == {"type": "t", "id": "a", "state": "pending", "data": {"x": 1}, "scheduled_time": 0.0}
    missing = _script("--store", url, "show", "t", "b")
    assert missing.returncode == 1
    assert missing.stderr == f"jobsctl: error: job t/b not found in the store {url} (named when opened; JOBS_STORE not read)\n"


WORKER_MODULE = """\
import jobs
import processors

processor = processors.Processor(jobs.open())  # the store given to `jobsctl --store ...`


@processor.handler("double", timeout=30)
def double(ctx):
    return {"result": ctx.data["n"] * 2}
"""


def test_script_worker_runs_jobs_until_sigterm(tmp_path, url, db):
    (tmp_path / "cli_worker_mod.py").write_text(WORKER_MODULE)
    out, err = open(tmp_path / "out.txt", "w"), open(tmp_path / "err.txt", "w")
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    proc = subprocess.Popen(
        [str(JOBSCTL_SCRIPT), "--store", url, "worker", "cli_worker_mod:processor", "--concurrency", "2"],
        cwd=tmp_path, env=env, stdout=out, stderr=err,
    )
    try:
        jobs.set_type_timeout(db, "double", 30)
        for n in range(5):
            jobs.add(db, "double", f"j{n}", {"n": n})
        finished = lambda: all(info.state == "finished" for info in jobs.get_jobs(db, "double"))  # noqa: E731
        assert wait_until(lambda: finished() or proc.poll() is not None), (tmp_path / "err.txt").read_text()
        assert finished(), (tmp_path / "err.txt").read_text()
        assert {i.id: i.data for i in jobs.get_jobs(db, "double")} == {f"j{n}": {"result": 2 * n} for n in range(5)}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0, (tmp_path / "err.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        err.close()
    assert "succeeded 5" in (tmp_path / "out.txt").read_text()


# --- priorities ----------------------------------------------------------------------------


def test_add_with_a_priority_and_status_per_band(capsys, url, db):
    assert run(capsys, "--store", url, "set-timeout", "t", "30")[0] == 0
    assert run_json(capsys, "--store", url, "add", "t", "a", "--priority", "-3")["priority"] == -3
    assert "priority" not in run_json(capsys, "--store", url, "add", "t", "b")  # the default, as before
    jobs.add(db, "t", "later", priority=-3, scheduled_time=time.time() + 3600)
    code, out, _err = run(capsys, "--store", url, "show", "t", "a")
    assert code == 0 and "priority   -3" in out
    bands = run_json(capsys, "--store", url, "status")["types"][0]["bands"]
    assert bands == [{"priority": -3, "pending": 2, "due": 1}, {"priority": 0, "pending": 1, "due": 1}]
    code, out, _err = run(capsys, "--store", url, "status")
    assert code == 0 and "pending per priority (lower runs first): t: -3: 2 (1 due), 0: 1 (1 due)" in out
    before = snapshot(db)
    for bad in ("1.5", "true", str(2**63)):
        code, _out, err = run(capsys, "--store", url, "add", "t", "c", "--priority", bad)
        assert code == 2 and "priority" in err
    assert snapshot(db) == before


# --- limits and job keys ---------------------------------------------------------------------


def test_parse_rate():
    assert parse_rate("100/60") == (100, 60.0)
    assert parse_rate(" 5/1.5 ") == (5, 1.5)
    assert parse_rate("1000/1h") == (1000, 3600.0)
    assert parse_rate("10/2m") == (10, 120.0)
    assert parse_rate("10000/1d") == (10000, 86400.0)
    for bad in ("", "100", "/60", "100/", "a/60", "1e3/60", "100/60x", "100 60", "10001/1", "-1/1", "1/-1", "1/0s"):
        with pytest.raises(Exception, match=f"bad rate {bad!r}"):
            parse_rate(bad)


def test_set_limits_limits_and_clear_limits(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    code, out, _ = run(capsys, "--store", url, "limits")
    assert code == 0 and out == "(no limits: 'jobsctl set-limits TYPE ...' sets some)\n"
    code, out, err = run(capsys, "--store", url, "set-limits", "t", "--concurrency", "10", "--rate", "100/60",
                         "--key-concurrency", "2", "--key-rate", "5/1.5")
    assert code == 0, err
    assert out == "t: running 10, rate 100/60s, per key running 2, per key rate 5/1.5s (only jobs started while a " \
                  "limit is set count against it)\n"
    assert jobs.get_limits(db, "t") == jobs.Limits(10, jobs.Rate(100, 60.0), 2, jobs.Rate(5, 1.5))
    doc = run_json(capsys, "--store", url, "set-limits", "u", "--rate", "1000/1h")  # replaces, or sets, them all
    assert doc == {"type": "u", "concurrency": None, "rate": {"count": 1000, "seconds": 3600.0},
                   "key_concurrency": None, "key_rate": None}
    assert run_json(capsys, "--store", url, "limits") == [
        {"type": "t", "concurrency": 10, "rate": {"count": 100, "seconds": 60.0}, "key_concurrency": 2,
         "key_rate": {"count": 5, "seconds": 1.5}}, doc]
    code, out, _ = run(capsys, "--store", url, "limits")
    head, *rows = out.splitlines()
    assert head.split() == ["TYPE", "RUNNING", "RATE", "PER", "KEY", "RUNNING", "PER", "KEY", "RATE"]
    assert [r.split() for r in rows] == [["t", "10", "100/60s", "2", "5/1.5s"], ["u", "-", "1000/3600s", "-", "-"]]
    run(capsys, "--store", url, "set-limits", "t", "--key-concurrency", "3")  # the others are removed
    assert jobs.get_limits(db, "t") == jobs.Limits(key_concurrency=3)
    code, out, _ = run(capsys, "--store", url, "clear-limits", "t")
    assert code == 0 and out == "t: no limits\n" and jobs.get_limits(db, "t") is None
    assert run_json(capsys, "--store", url, "clear-limits", "u") == {
        "type": "u", "concurrency": None, "rate": None, "key_concurrency": None, "key_rate": None}
    assert run_json(capsys, "--store", url, "limits") == []
    assert run(capsys, "--store", url, "clear-limits", "never-limited")[0] == 0  # nothing to clear: no error


def test_a_refused_set_limits_writes_nothing(capsys, url, db):
    jobs.set_limits(db, "t", concurrency=4)
    before = snapshot(db)
    for argv in (["t"], ["t", "--rate", "5/x"], ["t", "--concurrency", "0"], ["a\tb", "--concurrency", "1"]):
        code, out, _ = run(capsys, "--store", url, "set-limits", *argv)
        assert code in (1, 2) and out == ""
    assert snapshot(db) == before and jobs.get_limits(db, "t") == jobs.Limits(concurrency=4)


@pytest.mark.parametrize("argv", [["limits"], ["clear-limits", "t"], ["set-limits", "t", "--concurrency", "2"]])
def test_limits_commands_never_create_a_store(capsys, tmp_path, argv):
    path = tmp_path / "typo.sqlite"
    code, out, err = run(capsys, "--store", f"sqlite:{path}", *argv)
    assert code == 1 and out == "" and "does not exist; check the path" in err
    assert os.listdir(tmp_path) == []


def test_add_with_a_key(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    doc = run_json(capsys, "--store", url, "add", "t", "a", "--key", "tenant-1", "--priority", "-1")
    assert (doc["key"], doc["priority"], doc["state"]) == ("tenant-1", -1, "pending")
    assert "key" not in run_json(capsys, "--store", url, "add", "t", "b")  # no key: as before
    code, out, _ = run(capsys, "--store", url, "add", "t", "c", "--key", "tenant-2")
    assert code == 0 and "key        tenant-2" in out
    code, out, _ = run(capsys, "--store", url, "show", "t", "a")
    assert code == 0 and "key        tenant-1" in out
    assert run_json(capsys, "--store", url, "show", "t", "a")["key"] == "tenant-1"
    (t,) = run_json(capsys, "--store", url, "status")["types"]
    assert (t["pending"], t["due"], t["finished"]) == (3, 3, 0)
    assert t["keys"] == {"turns": 2, "asleep": 0, "full": 0}
    assert {jobs.accept(db, "t", timeout=0).id for _ in range(3)} == {"a", "b", "c"}
    assert run_json(capsys, "--store", url, "show", "t", "a")["key"] == "tenant-1"  # running, still its key


def test_status_shows_limits_and_keys(capsys, url, db):
    jobs.set_type_timeout(db, "t", 30)
    jobs.set_type_timeout(db, "plain", 30)
    jobs.add(db, "plain", "p")
    for i in range(3):
        jobs.add(db, "t", f"a{i}", key="a")
    jobs.add(db, "t", "b0", key="b")
    jobs.add(db, "t", "c0", key="c", scheduled_time=time.time() + 3600)
    jobs.add(db, "t", "u")
    code, out, _ = run(capsys, "--store", url, "status")
    assert code == 0 and "limits" not in out
    assert "job keys with pending jobs (each key takes its turn):\nt: 2 in turn, 1 asleep, 0 at their limit" in out
    jobs.set_limits(db, "t", concurrency=10, rate=(100, 60), key_concurrency=1, key_rate=(5, 1))
    jobs.set_limits(db, "k", key_rate=(5, 1.5))  # a type with only a limit, and only per key
    taken = jobs.accept_many(db, "t", 10, timeout=0)
    assert sorted(j.id[0] for j in taken) == ["a", "b", "u"]  # one job of each key: its running limit
    code, out, _ = run(capsys, "--store", url, "status")
    section = out.split("limits (only jobs started while a limit is set count against it; 'jobsctl limits' lists "
                        "them):\n")[1].split("\n\n")[0]
    assert section.splitlines() == ["k: per key: rate 5/1.5s",
                                    "t: running 3/10, started 3/100 per 60s; per key: running 1, rate 5/1s"]
    assert "t: 0 in turn, 1 asleep, 1 at their limit" in out  # a full, c asleep, b has no job left
    by_type = {t["type"]: t for t in run_json(capsys, "--store", url, "status")["types"]}
    t = by_type["t"]
    assert t["limits"] == {"concurrency": 10, "rate": {"count": 100, "seconds": 60.0}, "key_concurrency": 1,
                           "key_rate": {"count": 5, "seconds": 1.0}}
    assert (t["running_slots"], t["started_in_period"], t["running"], t["pending"]) == (3, 3, 3, 3)
    assert t["keys"] == {"turns": 0, "asleep": 1, "full": 1}
    assert by_type["plain"]["limits"] is None and by_type["plain"]["running_slots"] is None
    assert by_type["k"]["limits"]["key_rate"] == {"count": 5, "seconds": 1.5}
    assert (by_type["k"]["running_slots"], by_type["k"]["started_in_period"]) == (None, None)
