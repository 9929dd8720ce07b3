"""Errors whose meaning depends on which store was opened name it: its URL and how
``JOBS_STORE`` chose it.  A program run from another directory without ``JOBS_STORE`` opens
(and creates) the default store there; its first ``add`` then fails for want of a type
timeout, and the error must say which store that was."""

from __future__ import annotations

import os

import pytest

import jobs
from jobs.engine.cluster import load_bindings, resolve_cluster_file
from jobs.engine.embedded import EmbeddedDatabase
from jobs.engine.urls import ENV_VAR
from jobsctl import cli

DEFAULT_NOTE = "(JOBS_STORE unset: the default in the working directory)"


@pytest.fixture
def elsewhere(monkeypatch, tmp_path):
    """The working directory a new, empty one, and no $JOBS_STORE."""
    monkeypatch.setenv(ENV_VAR, "recorded-so-that-it-is-restored")
    monkeypatch.delenv(ENV_VAR)
    where = tmp_path / "elsewhere"
    where.mkdir()
    monkeypatch.chdir(where)
    return where


def test_the_default_store_is_named_in_a_missing_timeout(elsewhere):
    with jobs.store.opened() as db:
        with pytest.raises(jobs.NoTypeTimeout) as caught:
            jobs.add(db, "aecho", "j1", {})
    store = f"sqlite:{elsewhere / '.jobs' / 'jobs.sqlite'}"
    assert str(caught.value) == (f"job type 'aecho' has no timeout in the store {store} {DEFAULT_NOTE}: "
                                 "call set_type_timeout(db, 'aecho', seconds) first")


def test_a_store_chosen_by_jobs_store_says_so(elsewhere, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "sqlite:chosen.sqlite")
    with jobs.store.opened() as db:
        with pytest.raises(jobs.NoTypeTimeout, match=r"^job type 'aecho' has no timeout in the store "
                           + f"sqlite:{elsewhere / 'chosen.sqlite'} " + r"\(chosen by JOBS_STORE\):"):
            jobs.add_many(db, "aecho", ["a", "b"])
        jobs.set_type_timeout(db, "aecho", 30)
        with pytest.raises(jobs.NotFound) as caught:
            jobs.get_job(db, "aecho", "nope")
    assert str(caught.value) == f"job aecho/nope not found in the store sqlite:{elsewhere / 'chosen.sqlite'} " \
                                "(chosen by JOBS_STORE)"


def test_a_store_named_when_opened_says_so(db, engine_name, tmp_path):
    """Every engine; in a transaction as on the database."""
    expected = {"embedded": lambda: f"sqlite:{tmp_path / 'jobs.sqlite'}", "memory": lambda: "memory:",
                "fdb": lambda: f"fdb:{resolve_cluster_file(os.environ.get('FDB_CLUSTER_FILE'))}"}[engine_name]()
    where = f"in the store {expected} (named when opened; JOBS_STORE not read)"
    with pytest.raises(jobs.NoTypeTimeout) as caught:
        jobs.add(db, "t", "a")
    assert str(caught.value).startswith(f"job type 't' has no timeout {where}: ")

    @jobs.transactional
    def read(tr):
        return jobs.get_job_data(tr, "t", "a")

    jobs.set_type_timeout(db, "t", 30)
    for call in (lambda: read(db), lambda: jobs.remove(db, "t", "a"), lambda: jobs.subscribe(db, "t", "a")):
        with pytest.raises(jobs.NotFound) as caught:
            call()
        assert str(caught.value) == f"job t/a not found {where}"


def test_a_database_not_opened_by_jobs_open_is_named_by_what_it_holds(tmp_path):
    db = EmbeddedDatabase(tmp_path / "direct.sqlite")
    try:
        with pytest.raises(jobs.NoTypeTimeout, match=r"^job type 't' has no timeout in the store "
                           + f"sqlite:{tmp_path / 'direct.sqlite'} " + r"\(not opened by jobs.open\): "):
            jobs.add(db, "t", "a")
    finally:
        db.close()


def test_an_applications_own_fdb_handle_is_named_by_its_cluster_file():
    cluster_file = os.environ.get("FDB_CLUSTER_FILE")
    if not cluster_file:
        pytest.skip("FDB_CLUSTER_FILE is not set")
    jobs.open("fdb:" + cluster_file)  # (the bindings loaded, at the API version the engine uses)
    fdb = load_bindings()
    # (another spelling of the path: not the handle jobs.open() got from the bindings' cache)
    own_path = os.path.join(os.path.dirname(os.path.abspath(cluster_file)), ".", os.path.basename(cluster_file))
    own = fdb.open(own_path)
    with pytest.raises(jobs.NotFound) as caught:
        jobs.get_job(own, "no-such-type", "nope")
    assert str(caught.value) == (f"job no-such-type/nope not found in the FoundationDB store of cluster file "
                                 f"{own_path} (not opened by jobs.open)")


def test_jobsctl_names_the_store(elsewhere, capsys):
    store = f"sqlite:{elsewhere / '.jobs' / 'jobs.sqlite'}"
    assert cli.main(["add", "aecho", "j1"]) == 1
    err = capsys.readouterr().err
    assert err == (f"jobsctl: error: job type 'aecho' has no timeout in the store {store} {DEFAULT_NOTE}: "
                   "run 'jobsctl set-timeout aecho SECONDS' first\n")
    assert cli.main(["show", "aecho", "j1"]) == 1
    assert capsys.readouterr().err == f"jobsctl: error: job aecho/j1 not found in the store {store} {DEFAULT_NOTE}\n"


def test_a_processor_names_the_store_of_a_type_without_timeout(elsewhere):
    from processors import Processor

    with jobs.store.opened() as db:
        p = Processor(db)

        @p.handler("no-timeout")
        def g(ctx):
            pass

        with pytest.raises(jobs.NoTypeTimeout) as caught:
            p.run(signals=False)
    assert str(caught.value).startswith(f"type 'no-timeout' has no timeout in the store "
                                        f"sqlite:{elsewhere / '.jobs' / 'jobs.sqlite'} {DEFAULT_NOTE}: ")


def test_a_store_that_cannot_be_opened_says_how_its_url_was_chosen(elsewhere, monkeypatch, capsys):
    with pytest.raises(jobs.StoreOpenError) as caught:
        jobs.open(create=False)
    assert str(caught.value) == (f"cannot open store 'sqlite:.jobs/jobs.sqlite' (JOBS_STORE unset: the default in "
                                 f"the working directory {elsewhere}): store file '.jobs/jobs.sqlite' does not "
                                 "exist; check the path")
    assert cli.main(["status"]) == 1
    assert capsys.readouterr().err == f"jobsctl: error: {caught.value}\n"
    monkeypatch.setenv(ENV_VAR, "typo")
    with pytest.raises(jobs.StoreOpenError, match=r"^bad store URL 'typo' \(chosen by JOBS_STORE\): expected "):
        jobs.open()
    with pytest.raises(jobs.StoreOpenError, match=r"^bad store URL 'typo': expected "):
        jobs.open("typo")  # (named by the caller: no note)
