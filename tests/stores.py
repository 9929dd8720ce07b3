"""The stores the tests open, and how a shared cluster is cleaned: for the fixtures of
``conftest.py`` and for test modules that open stores of their own (imported as
``stores``: ``conftest`` names two modules in one run, this one and the engine tests')."""

from __future__ import annotations

import os

from enginekit import skip_without_fdb

import jobs

APP_PREFIX = ("jobs-tests-app",)  # the application's own keys in composition tests
# Keys the tests write as an application would: tuple prefixes, and raw ones (b"app/...").
TEST_PREFIXES = (APP_PREFIX, ("app-writes",), ("chaos",))
RAW_TEST_PREFIXES = (b"app/",)
FDB_SKIP_REASON = "fdb engine: FDB_CLUSTER_FILE is not set (point it at a test cluster's cluster file)"


def clear_store(db) -> None:
    """Remove every key the project and the tests write (on a shared cluster)."""
    from jobs import prefixes
    from jobs.engine import strinc
    from jobs.engine import tuple as fdb_tuple

    def body(tr):
        prefixes.clear_all(tr)
        for prefix in TEST_PREFIXES:
            r = fdb_tuple.range(prefix)
            tr.clear_range(r.start, r.stop)
        for raw in RAW_TEST_PREFIXES:
            tr.clear_range(raw, strinc(raw))

    jobs.transactional(body)(db)


def store_url(name: str, tmp_path) -> str:
    """The URL ``jobs.open`` gets for engine ``name`` (skips ``fdb`` without a cluster)."""
    if name == "embedded":
        return "sqlite:" + str(tmp_path / "jobs.sqlite")
    if name == "memory":
        return "memory:"
    cluster_file = os.environ.get("FDB_CLUSTER_FILE")
    if not cluster_file:
        skip_without_fdb(FDB_SKIP_REASON)
    return "fdb:" + cluster_file
