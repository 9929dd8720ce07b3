"""Shared fixtures of the job-layer tests (add fixtures here; don't change existing ones).

``db``: a fresh store on each engine: ``embedded`` (a file in tmp_path), ``memory`` and,
when ``FDB_CLUSTER_FILE`` is set, ``fdb``.  On ``fdb`` the job layer's whole ``("jobs",)``
prefix is cleared before and after each test: point it at a test cluster only.
"""

from __future__ import annotations

import os

import pytest

from jobs.engine.urls import open_database

JOB_ENGINES = ["embedded", "memory", "fdb"]


def _clear_jobs_prefix(db) -> None:
    from jobs import keys

    r = keys.ROOT.range()
    db.clear_range(r.start, r.stop)


@pytest.fixture(params=JOB_ENGINES)
def db(request, tmp_path):
    """A database with no jobs, on each engine."""
    name = request.param
    if name == "embedded":
        url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    elif name == "memory":
        url = "memory:"
    else:
        cluster_file = os.environ.get("FDB_CLUSTER_FILE")
        if not cluster_file:
            pytest.skip("fdb engine: FDB_CLUSTER_FILE is not set")
        url = "fdb:" + cluster_file
    database = open_database(url)
    if name == "fdb":
        _clear_jobs_prefix(database)
    try:
        yield database
    finally:
        if name == "fdb":
            _clear_jobs_prefix(database)
        close = getattr(database, "close", None)
        if close is not None:
            close()
