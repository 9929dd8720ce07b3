"""Stored layout versions: every subspace the project writes is a versioned Layout; a store
written by a newer release is refused by reads and writes alike, with the same clear
message; a store written before a layout carried a version keeps working and gets one."""

from __future__ import annotations

import os

import orjson
import pytest

import jobs
import pipeline
from jobs import keys, prefixes
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import run
from jobs.layouts import Layout
from pipeline import ctas_store, index
from pipeline import layout as catalog_layout
from pipeline.errors import CatalogLayoutError, CatalogStoreError, IngestStoreError
from pipeline.ingest import layout as ingest_layout
from processors import submit
from processors import operations
from processors.submit import LAYOUT as SUBMIT_LAYOUT
from processors.operations import Operation, Operations

T = "layout-test"


class Noop(Operation):
    type = "noop"


def _ops(db) -> Operations:
    ops = Operations(db, lambda tr, table: ["0"])
    ops.register(Noop())
    return ops


def everything(db) -> list[tuple[bytes, bytes]]:
    out = []
    for prefix in prefixes.ALL:
        r = fdb_tuple.range(prefix)
        out += [(bytes(k), bytes(v)) for k, v in db.get_range(r.start, r.stop)]
    return out


def _catalog_db(db, root, name="sky"):
    return pipeline.create_database(db, name, location=os.path.join(root, name))


# layout, error, (read, write): calls that read, and that write, the layout's keys
CASES = {
    "job": (keys.LAYOUT, jobs.LayoutError,
            lambda db, root: jobs.get_jobs(db),
            lambda db, root: jobs.set_type_timeout(db, "other", 1)),
    "catalog": (catalog_layout.LAYOUT, CatalogLayoutError,
                lambda db, root: pipeline.list_databases(db),
                lambda db, root: _catalog_db(db, root, "other")),
    "ingest": (ingest_layout.LAYOUT, IngestStoreError,
               lambda db, root: pipeline.ingest.list_transactions(db),
               lambda db, root: pipeline.ingest.register_database(db, "other", chunks=2,
                                                                  location=os.path.join(root, "other"))),
    "operations": (operations.LAYOUT, jobs.LayoutError,
                   lambda db, root: _ops(db).running_operations(db, "t"),
                   lambda db, root: _ops(db).start_operation("noop", "t")),
    "submissions": (SUBMIT_LAYOUT, jobs.LayoutError,
                    lambda db, root: submit(db, T, job_id="there"),  # joins: reads only
                    lambda db, root: submit(db, T, job_id="new")),
    "CTAS": (ctas_store.LAYOUT, CatalogLayoutError,
             lambda db, root: run(db, lambda tr: ctas_store.read_record(tr, "c1", "start")),
             lambda db, root: run(db, lambda tr: ctas_store.pin_sources(tr, "c1", {}))),
    "index": (index.LAYOUT, CatalogLayoutError,
              lambda db, root: index.get_index(db, "sky.t", "i"),
              lambda db, root: run(db, lambda tr: index._put(tr, "sky.t", "i", {"state": "ready"}))),
}


def test_every_prefix_is_one_versioned_layout():
    spaces = sorted(layout.space.key() for layout, *_ in CASES.values())
    assert spaces == sorted(fdb_tuple.pack(p) for p in prefixes.ALL)
    assert all(isinstance(layout, Layout) for layout, *_ in CASES.values())


@pytest.mark.parametrize("name", list(CASES))
def test_a_store_written_by_a_newer_release_is_refused_by_reads_and_writes(db, tmp_path, name):
    layout, error, read, write = CASES[name]
    root = str(tmp_path)
    jobs.set_type_timeout(db, T, 60)
    jobs.add(db, T, "there", {})
    db.set(layout.key, fdb_tuple.pack((layout.version + 1,)))
    layout.checked.discard(db)  # as a process opening the store for the first time
    before = everything(db)
    for call in (read, write):
        with pytest.raises(error, match=f"{name} layout is version {layout.version + 1}, newer than this "
                                        f"release's {layout.version}: upgrade the package"):
            call(db, root)
    assert everything(db) == before


@pytest.mark.parametrize("name", list(CASES))
def test_a_corrupt_version_key_is_reported(db, tmp_path, name):
    layout, error, read, _write = CASES[name]
    db.set(layout.key, b"\xff junk")
    layout.checked.discard(db)
    base = {jobs.LayoutError: jobs.StoreError, CatalogLayoutError: CatalogStoreError}.get(error, error)
    with pytest.raises(base, match=f"{name} layout key is corrupt"):
        read(db, str(tmp_path))


# --- stores written before ops, CTAS, indexes and submissions were versioned -------------------


def _unversioned(db, layout) -> None:
    """Make the store look as a release before versioned layouts left it."""
    db.clear(layout.key)
    layout.checked.discard(db)


def _version(db, layout):
    raw = db.get(layout.key)
    return None if raw is None else fdb_tuple.unpack(raw)


def test_an_unversioned_operations_store_keeps_working_and_gets_versioned(db):
    ops = _ops(db)
    first = ops.start_operation("noop", "t")
    _unversioned(db, operations.LAYOUT)
    assert [r["instance"] for r in ops.running_operations(db, "t")] == [first]
    assert ops.operation_status(db, "t", "noop", first).state == "running"
    assert _version(db, operations.LAYOUT) is None  # reading wrote nothing
    second = ops.start_operation("noop", "u")
    assert second == 1 and _version(db, operations.LAYOUT) == (1,)


def test_an_unversioned_submissions_store_keeps_working_and_gets_versioned(db):
    jobs.set_type_timeout(db, T, 60)
    futures = [submit(db, T, job_id="a")]
    _unversioned(db, SUBMIT_LAYOUT)
    futures.append(submit(db, T, job_id="a"))  # joins the pending task
    assert jobs.pending_count(db, T) == 1 and _version(db, SUBMIT_LAYOUT) is None
    futures.append(submit(db, T, job_id="b"))
    for future in futures:
        future.cancel()
    assert jobs.pending_count(db, T) == 2 and _version(db, SUBMIT_LAYOUT) == (1,)


def test_an_unversioned_ctas_store_keeps_working_and_gets_versioned(db):
    db.set(ctas_store.record_key("c1", "start"), orjson.dumps({"target": "sky.t", "instance": 3}))
    db.set(ctas_store.record_key("c1", "source", "sky.s"), orjson.dumps({"view": "v", "table_id": "x", "columns": []}))
    _unversioned(db, ctas_store.LAYOUT)
    assert run(db, lambda tr: ctas_store.read_record(tr, "c1", "start")) == {"target": "sky.t", "instance": 3}
    assert list(run(db, lambda tr: ctas_store.pinned_sources(tr, "c1"))) == ["sky.s"]
    assert _version(db, ctas_store.LAYOUT) is None
    run(db, lambda tr: ctas_store.pin_sources(tr, "c2", {}))
    assert _version(db, ctas_store.LAYOUT) == (1,)


def test_an_unversioned_index_store_keeps_working_and_gets_versioned(db):
    db.set(index._key("sky.t", "i"), orjson.dumps({"column": "c", "state": "ready"}))
    _unversioned(db, index.LAYOUT)
    assert index.get_index(db, "sky.t", "i") == {"column": "c", "state": "ready"}
    assert _version(db, index.LAYOUT) is None
    run(db, lambda tr: index._put(tr, "sky.t", "j", {"column": "c", "state": "building"}))
    assert _version(db, index.LAYOUT) == (1,)
    assert index.get_index(db, "sky.t", "i")["state"] == "ready"


def test_version_keys_sort_apart_from_every_record():
    """``(None, "layout")`` under a prefix whose record keys start with a str: no record key
    equals it or starts with it."""
    for layout in (operations.LAYOUT, SUBMIT_LAYOUT, ctas_store.LAYOUT, index.LAYOUT):
        assert layout.space.unpack(layout.key) == (None, "layout")
        first_record = layout.space.pack(("",))
        assert layout.key < first_record and not first_record.startswith(layout.key)


# --- the helper itself -------------------------------------------------------------------------


HELPER = prefixes.JOBS + ("layout-test",)  # (cleared with the project's keys)


def test_a_migration_runs_once_with_the_first_write_and_readers_accept_the_old_version(db):
    ran = []
    v1 = Layout("test", HELPER, 1, error=jobs.StoreError, newer=jobs.LayoutError)
    v3 = Layout("test", HELPER, 3, error=jobs.StoreError, newer=jobs.LayoutError,
                migrations={1: None, 2: lambda tr: ran.append(2)})
    run(db, v1.upgrade)
    assert run(db, v3.check) == 1 and ran == []
    run(db, v3.upgrade)
    assert ran == [2] and run(db, v3.check) == 3
    run(db, v3.upgrade)  # seen at 3: no read, nothing to do
    assert ran == [2]
    with pytest.raises(jobs.LayoutError, match="version 3, newer than this release's 1"):
        run(db, v1.check)


def test_a_store_too_old_to_migrate_is_refused(db):
    v1 = Layout("test", HELPER, 1, error=jobs.StoreError, newer=jobs.LayoutError)
    v2 = Layout("test", HELPER, 2, error=jobs.StoreError, newer=jobs.LayoutError)
    run(db, v1.upgrade)
    with pytest.raises(jobs.StoreError, match="version 1, older than this release can migrate"):
        run(db, v2.check)
    with pytest.raises(jobs.StoreError, match="older than this release can migrate"):
        run(db, v2.upgrade)
