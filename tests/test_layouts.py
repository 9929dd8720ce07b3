"""Stored layout versions: every subspace the project writes is a versioned Layout, each at
version 1 in release 1.0; a store written by a newer release is refused by reads and writes
alike, with the same clear message; a store with no version key yet keeps working and gets
one; and a store of an older layout (here a made-up layout 2 with its migration from 1) is
refused until ``jobsctl migrate`` has migrated it, which no call of the API ever does."""

from __future__ import annotations

import os

import orjson
import pytest

import jobs
import pipeline
from jobs import keys, layouts, prefixes
from jobs.engine import tuple as fdb_tuple
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import run
from jobs.layouts import Layout
from jobsctl import cli, commands
from pipeline import ctas_store, index
from pipeline import layout as catalog_layout
from pipeline.errors import CatalogLayoutError, CatalogStoreError, IngestStoreError
from pipeline.ingest import layout as ingest_layout
from processors import submit
from processors import operations
from processors.submit import LAYOUT as SUBMIT_LAYOUT
from processors.operations import Operation, Operations
from stored import opened_anew

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


def test_every_prefix_is_one_versioned_layout_at_version_1_and_jobsctl_migrates_them_all():
    spaces = sorted(layout.space.key() for layout, *_ in CASES.values())
    assert spaces == sorted(fdb_tuple.pack(p) for p in prefixes.ALL)
    assert all(isinstance(layout, Layout) and layout.version == 1 for layout, *_ in CASES.values())
    assert {layout.name: layout for layout in commands.store_layouts()} == {n: c[0] for n, c in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_a_store_written_by_a_newer_release_is_refused_by_reads_and_writes(db, tmp_path, name):
    layout, error, read, write = CASES[name]
    root = str(tmp_path)
    jobs.set_type_timeout(db, T, 60)
    jobs.add(db, T, "there", {})
    db.set(layout.key, fdb_tuple.pack((layout.version + 1,)))
    opened_anew(db)
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
    opened_anew(db)
    base = {jobs.LayoutError: jobs.StoreError, CatalogLayoutError: CatalogStoreError}.get(error, error)
    with pytest.raises(base, match=f"{name} layout key is corrupt"):
        read(db, str(tmp_path))


# --- stores with no version key yet ----------------------------------------------------------


def _unversioned(db, layout) -> None:
    """Make the store look as one whose layout's version key was never written."""
    db.clear(layout.key)
    opened_anew(db)


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


# --- the mechanism, on a made-up layout 2 ---------------------------------------------------


HELPER = prefixes.JOBS + ("layout-test",)  # (cleared with the project's keys)
V1 = Layout("test", HELPER, 1, error=jobs.StoreError, newer=jobs.LayoutError)


def _layout_2(steps: list) -> Layout:
    """Layout 2 of the records under HELPER: their values upper-cased, moved 3 records a
    transaction by its migration from 1 (``steps`` notes each call); idempotent, so that a
    step retried after its commit happened finds its records moved."""

    def step(tr) -> bool:
        steps.append(1)
        r = V1.space["r"].range()
        todo = [(k, v) for k, v in tr.get_range(r.start, r.stop) if v != v.upper()][:3]
        for k, v in todo:
            tr.set(k, v.upper())
        return len(todo) < 3

    return Layout("test", HELPER, 2, error=jobs.StoreError, newer=jobs.LayoutError, migrations={1: step})


def _store_of_layout_1(db, n: int = 8) -> None:
    def body(tr):
        V1.ensure(tr)
        for i in range(n):
            tr.set(V1.space["r"].pack((i,)), b"old")
    run(db, body)


def _records(db) -> list[bytes]:
    r = V1.space["r"].range()
    return [bytes(v) for _k, v in db.get_range(r.start, r.stop)]


def test_an_older_store_is_refused_and_never_migrated_on_the_hot_path(db):
    steps: list = []
    v2 = _layout_2(steps)
    _store_of_layout_1(db)
    before = everything(db)
    for call in (v2.check, v2.ensure):
        with pytest.raises(jobs.StoreError, match="test layout is version 1, older than this release's 2: stop the "
                                                  "processes of the older release and run `jobsctl migrate`"):
            run(db, call)
    assert steps == [] and everything(db) == before


def test_jobsctl_migrate_runs_the_migration_in_bounded_steps_then_the_older_release_refuses(tmp_path, capsys,
                                                                                           monkeypatch):
    url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    store = jobs.open(url)
    steps: list = []
    v2 = _layout_2(steps)
    _store_of_layout_1(store)
    monkeypatch.setattr(commands, "store_layouts", lambda: [keys.LAYOUT, v2])
    assert cli.main(["--store", url, "migrate"]) == 0
    assert capsys.readouterr().out.strip() == "test: migrated from version 1 to 2"
    assert len(steps) == 3 and _records(store) == [b"OLD"] * 8  # 3, 3, then 2: done
    assert fdb_tuple.unpack(store.get(v2.key)) == (2,) and run(store, v2.check) == 2
    with pytest.raises(jobs.LayoutError, match="test layout is version 2, newer than this release's 1"):
        run(store, V1.check)
    assert cli.main(["--store", url, "--json", "migrate"]) == 0
    assert orjson.loads(capsys.readouterr().out) == {"layouts": {"job": {"from": 1, "to": 1},
                                                                 "test": {"from": 2, "to": 2}}}
    assert len(steps) == 3  # nothing more to do


def test_jobsctl_migrate_with_nothing_to_migrate(tmp_path, capsys):
    url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    jobs.set_type_timeout(jobs.open(url), T, 60)
    assert cli.main(["--store", url, "migrate"]) == 0
    assert capsys.readouterr().out.strip() == "nothing to migrate: every layout is at this release's version"


def test_a_migration_survives_unknown_commit_results(db):
    steps: list = []
    v2 = _layout_2(steps)
    _store_of_layout_1(db)
    assert layouts.migrate(FaultInjectingDatabase(db, unknown_committed=1.0), v2) == (1, 2)
    assert _records(db) == [b"OLD"] * 8 and run(db, v2.check) == 2


def test_a_store_with_no_version_key_is_version_1_and_gets_it_with_the_migration(db):
    steps: list = []
    v2 = _layout_2(steps)
    run(db, lambda tr: tr.set(V1.space["r"].pack((0,)), b"old"))  # written by a path that records no version
    assert run(db, V1.check) is None
    assert layouts.migrate(db, v2) == (1, 2) and fdb_tuple.unpack(db.get(v2.key)) == (2,)


def test_a_store_too_old_to_migrate_is_refused(db):
    v3 = Layout("test", HELPER, 3, error=jobs.StoreError, newer=jobs.LayoutError, migrations={2: lambda tr: True})
    _store_of_layout_1(db)
    for call in (lambda: run(db, v3.check), lambda: layouts.migrate(db, v3)):
        with pytest.raises(jobs.StoreError, match="version 1, older than this release's 3: no migration from "
                                                  "version 1: migrate it with an older release first"):
            call()
    assert fdb_tuple.unpack(db.get(V1.key)) == (1,)


def test_a_newer_store_is_not_migrated(db):
    steps: list = []
    _store_of_layout_1(db)
    run(db, lambda tr: tr.set(V1.key, fdb_tuple.pack((3,))))
    with pytest.raises(jobs.LayoutError, match="version 3, newer than this release's 2"):
        layouts.migrate(db, _layout_2(steps))
    assert steps == []
