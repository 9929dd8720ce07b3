"""Engine fixtures: every engine test runs on ``embedded`` (a file), ``memory`` and, when
``FDB_CLUSTER_FILE`` names a cluster file, on a real FoundationDB cluster (``fdb``).

On ``fdb`` the tests share the cluster with whatever else is in it: they only touch keys
under :data:`TEST_PREFIX`, cleared before each test.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # enginekit, wherever pytest roots the tests

from enginekit import skip_without_fdb  # noqa: E402

from jobs.engine import Subspace, close  # noqa: E402
from jobs.engine.urls import open_database  # noqa: E402

TEST_PREFIX = ("jobs-engine-tests",)
ENGINES = ["embedded", "memory", "fdb"]
FDB_SKIP_REASON = (  # printed once at the end of the run, see pytest_terminal_summary
    "fdb engine: FDB_CLUSTER_FILE is not set (point it at a running cluster's cluster file, "
    "e.g. one from docker-compose.fdb.yml, to run the conformance suite on FoundationDB)"
)


@dataclass
class Engine:
    """One engine under test.  ``url`` opens the same store again (also from other
    processes); it is None for ``memory``, whose store belongs to one process."""

    name: str
    db: object
    url: str | None
    path: str | None
    ks: Subspace

    @property
    def shared(self) -> bool:
        return self.url is not None

    def require_shared(self) -> None:
        if not self.shared:
            pytest.skip(f"{self.name}: a store of one process; this test needs other processes")

    def open(self):
        """Another handle on the same store (the caller closes it)."""
        self.require_shared()
        return open_database(self.url)


@pytest.fixture(params=ENGINES)
def engine(request, tmp_path):
    name = request.param
    ks = Subspace(TEST_PREFIX)
    path = None
    if name == "embedded":
        path = str(tmp_path / "store.sqlite")
        url = "sqlite:" + path
    elif name == "memory":
        url = None
    else:
        cluster_file = os.environ.get("FDB_CLUSTER_FILE")
        if not cluster_file:
            skip_without_fdb(FDB_SKIP_REASON)
        url = "fdb:" + cluster_file
    db = open_database(url if url is not None else "memory:")
    if name == "fdb":
        db.clear_range(ks.range().start, ks.range().stop)
    try:
        yield Engine(name, db, url, path, ks)
    finally:
        if name == "fdb":
            db.clear_range(ks.range().start, ks.range().stop)
        close(db)


@pytest.fixture
def db(engine):
    return engine.db


@pytest.fixture
def ks(engine) -> Subspace:
    return engine.ks


def pytest_terminal_summary(terminalreporter):
    if not os.environ.get("FDB_CLUSTER_FILE"):
        terminalreporter.write_line(f"engine tests: {FDB_SKIP_REASON}")
