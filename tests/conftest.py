"""Shared fixtures of the job-layer tests.

``db``: a fresh store, opened with ``jobs.open``, on each engine:

* ``embedded``: the embedded engine on a file in ``tmp_path`` (``sqlite:PATH``);
* ``memory``: the embedded engine on a private store (``memory:``);
* ``fdb``: a real FoundationDB cluster, only when ``FDB_CLUSTER_FILE`` is set (skipped
  otherwise).  Every prefix the project owns (``jobs.prefixes``) and those the tests
  write (``stores.TEST_PREFIXES``) are cleared before and after each test, so no test sees
  another's leftovers: point it at a test cluster only.

The store is closed after the test.  ``app``: a subspace for the application's own keys
(tests that write them next to job calls in one transaction), cleared like the job layer's
prefix on ``fdb``.  ``tests/engine/conftest.py`` has fixtures of its own
(its ``db`` overrides this one for the engine tests).
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "engine"))  # enginekit, as engine/conftest.py
from stores import APP_PREFIX, clear_store, store_url  # noqa: E402

import jobs  # noqa: E402

JOB_ENGINES = ["embedded", "memory", "fdb"]


@pytest.fixture(params=JOB_ENGINES)
def db(request, tmp_path):
    """A database with no jobs, on each engine."""
    name = request.param
    database = jobs.open(store_url(name, tmp_path))
    try:
        if name == "fdb":
            clear_store(database)
        yield database
    finally:
        try:
            if name == "fdb":
                clear_store(database)
        finally:
            jobs.store.close(database)


class SharedStore:
    """A store an application already uses, given to a program by URL (``shared_store``)."""

    def __init__(self, url: str):
        self.url = url
        self.before = self.contents()

    def contents(self) -> list[tuple[bytes, bytes]]:
        """Every key and value of the store (below the system keys)."""
        with jobs.store.opened(self.url) as db:
            return [(bytes(kv.key), bytes(kv.value)) for kv in db.get_range(b"", b"\xff")]

    def unchanged(self) -> bool:
        return self.contents() == self.before


@pytest.fixture(params=["embedded", "fdb"])
def shared_store(request, tmp_path):
    """A store holding an application's own job (type ``demo``, id ``theirs``), on the
    embedded engine and on FoundationDB (``FDB_CLUSTER_FILE``): for the demos and benchmarks
    given a store, which must leave it as it was (``jobsctl/scratch.py``)."""
    url = store_url(request.param, tmp_path)
    with jobs.store.opened(url) as db:
        if request.param == "fdb":
            clear_store(db)
        jobs.set_type_timeout(db, "demo", 30)
        jobs.add(db, "demo", "theirs", {"mine": True})
    yield SharedStore(url)
    if request.param == "fdb":
        with jobs.store.opened(url) as db:
            clear_store(db)


@pytest.fixture
def engine_name(request, db) -> str:
    """Name of the engine ``db`` runs on ("embedded", "memory" or "fdb")."""
    return request.node.callspec.params["db"]


@pytest.fixture
def commit_version(db):
    """A function returning the embedded store's commit counter (bumped by every writing
    commit and only by those), or None on an engine that has none (``fdb``): tests use it
    to prove that a call wrote nothing, and skip that assertion when it returns None."""
    counter = getattr(db, "commit_version", None)

    def version():
        return None if counter is None else counter()

    return version


@pytest.fixture
def app(db, engine_name):
    """Subspace of the application's own keys, empty at the start of the test (``db``
    clears it on ``fdb``)."""
    from jobs.engine import Subspace

    return Subspace(APP_PREFIX)


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole run (started by the first test that needs it, ~10 s),
    stopped at the end; the test is skipped, with the reason, where Spark is unavailable."""
    import pipeline
    from pipeline.errors import SparkUnavailable

    try:
        session = pipeline.spark_session(app_name="fdb-jobs-tests")
    except SparkUnavailable as exc:
        pytest.skip(f"Spark is not available here: {exc}")
    yield session
    pipeline.stop_spark_session()


# --- a real Spark: a standalone cluster and a Spark Connect server (pipeline.spark_cluster) ---

REQUIRE_CLUSTER_ENV = "JOBS_REQUIRE_SPARK_CLUSTER"  # set (as .ci/run does): fail instead of skip


def _unavailable(what: str, exc: BaseException):
    """Skip (or, with $JOBS_REQUIRE_SPARK_CLUSTER, fail) a test whose Spark cannot start."""
    if os.environ.get(REQUIRE_CLUSTER_ENV):
        pytest.fail(f"{REQUIRE_CLUSTER_ENV} is set but {what} cannot start here: {exc}")
    pytest.skip(f"{what} cannot start here: {exc}")


@pytest.fixture
def spark_unavailable():
    """What a test that starts a Spark of its own calls when it cannot start (skip or fail)."""
    return _unavailable


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone master and one worker (1 core, 1 GiB) on loopback for the whole
    run, stopped at the end; its logs stay in pytest's tmp directory ("spark-cluster*")."""
    from pipeline.errors import SparkUnavailable
    from pipeline.spark_cluster import LocalSparkCluster

    try:
        cluster = LocalSparkCluster(str(tmp_path_factory.mktemp("spark-cluster")), cores=1, memory="1g")
    except SparkUnavailable as exc:
        _unavailable("a Spark standalone cluster", exc)
    with cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """A Spark Connect server on loopback (its Spark in local[1] mode) for the whole run,
    stopped at the end; skipped without Java or pyspark's Connect client dependencies."""
    from pipeline import spark as pspark
    from pipeline.errors import SparkUnavailable
    from pipeline.spark_cluster import ConnectServer

    try:
        pspark.check_connect_client()
        server = ConnectServer(str(tmp_path_factory.mktemp("spark-connect")), master="local[1]")
    except SparkUnavailable as exc:
        _unavailable("a Spark Connect server", exc)
    with server:
        yield server
