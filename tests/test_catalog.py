"""The catalog (``pipeline.catalog``): databases, tables, staged/committed versions,
partitions, the trash, on each engine of the ``db`` fixture, composed with job calls in
one transaction, and under injected commit faults.

"Nothing was written" is proven by the catalog's keys (every engine) and, on the embedded
engine, by its commit counter.
"""

from __future__ import annotations

import os
import types

import orjson
import pytest

import jobs
import pipeline
from jobs import prefixes
from jobs.engine import tuple as fdb_tuple
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import run
from pipeline import catalog, collector, ingest, layout
from pipeline.errors import (
    CatalogLayoutError,
    CatalogStoreError,
    DatabaseBusy,
    DatabaseExists,
    DatabaseNotEmpty,
    DatabaseNotFound,
    DatabaseNotPublished,
    LocationInUse,
    PartitionBusy,
    PartitionNotFound,
    TableExists,
    TableIncomplete,
    TableNotFound,
    TableStateError,
)
from processors import Processor
from stored import age_trash, collector_runs
from waiting import running, wait_until

SCHEMA = [
    {"name": "id", "type": "bigint", "nullable": False},
    {"name": "chunk", "type": "int", "nullable": False},
    {"name": "ra", "type": "double", "check": "ra >= 0 AND ra < 360"},
    {"name": "name", "type": "string"},
]


@pytest.fixture
def cdb(db):
    """``db`` with an empty catalog (the ``db`` fixture clears every prefix on ``fdb``)."""
    return db


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    return str(path)


def catalog_snapshot(db) -> list:
    r = layout.ROOT.range()
    return [(bytes(k), bytes(v)) for k, v in db.get_range(r.start, r.stop)]


class NothingWritten:
    """``with NothingWritten(db, commit_version): ...``: the block changed no catalog key
    and, on the embedded engine, committed nothing at all."""

    def __init__(self, db, commit_version):
        self.db, self.commit_version = db, commit_version

    def __enter__(self):
        self.snapshot, self.version = catalog_snapshot(self.db), self.commit_version()

    def __exit__(self, *exc):
        assert catalog_snapshot(self.db) == self.snapshot
        assert self.commit_version() == self.version


def make_db(tr, root, name="sky", publish=False):
    database = pipeline.create_database(tr, name, location=os.path.join(root, name))
    return pipeline.publish_database(tr, name) if publish else database


def fill(tr, table, rows=10, token=None):
    """Record data for every partition of ``table``."""
    return [
        pipeline.set_partition(tr, table, pid, table.partition_location(pid, token), rows=rows, bytes=100)
        for pid in table.partition_ids
    ]


# --- public names ----------------------------------------------------------------------------


def test_exported_names_match_the_public_names():
    import pipeline.catalog as cat_module
    import pipeline.errors as err_module

    public = {n for n in dir(pipeline) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(pipeline, n), types.ModuleType)}
    assert set(pipeline.__all__) == public - modules
    for name in cat_module.__all__:
        assert hasattr(cat_module, name)
    errors = {n for n, v in vars(err_module).items() if isinstance(v, type) and issubclass(v, jobs.JobsError)}
    assert errors - {"JobsError"} <= set(pipeline.__all__)
    for name in errors - {"JobsError"}:
        assert issubclass(getattr(pipeline, name), pipeline.PipelineError)


# --- databases -------------------------------------------------------------------------------


def test_database_lifecycle(cdb, root):
    created = make_db(cdb, root)
    assert created.name == "sky" and not created.published
    assert created.location == os.path.join(root, "sky")
    with pytest.raises(DatabaseExists, match="'sky' already exists"):
        make_db(cdb, root)
    assert pipeline.get_database(cdb, "sky") == created
    assert pipeline.list_databases(cdb) == []  # readers see published databases only
    assert pipeline.list_databases(cdb, published_only=False) == [created]

    published = pipeline.publish_database(cdb, "sky")
    assert published.published and published.id == created.id
    assert pipeline.publish_database(cdb, "sky") == published  # a no-op
    assert pipeline.list_databases(cdb) == [published]

    assert pipeline.drop_database(cdb, "sky") == published
    with pytest.raises(DatabaseNotFound, match="'sky' does not exist"):
        pipeline.get_database(cdb, "sky")
    with pytest.raises(DatabaseNotFound):
        pipeline.drop_database(cdb, "sky")
    with pytest.raises(DatabaseNotFound):
        pipeline.publish_database(cdb, "sky")


def test_default_database_location_is_under_the_data_root(cdb, root, monkeypatch):
    monkeypatch.setenv(catalog.DATA_ROOT_ENV, root)
    assert pipeline.create_database(cdb, "a").location == os.path.join(root, "a")
    monkeypatch.delenv(catalog.DATA_ROOT_ENV)
    monkeypatch.chdir(root)
    assert pipeline.create_database(cdb, "b").location == os.path.join(root, ".jobs", "data", "b")


def test_readers_see_published_databases_only(cdb, root):
    make_db(cdb, root)
    table = pipeline.create_table(cdb, "sky", "objects", SCHEMA)
    with pytest.raises(DatabaseNotPublished, match="'sky' is not published"):
        pipeline.get_table(cdb, "sky", "objects")
    with pytest.raises(DatabaseNotPublished):
        pipeline.list_tables(cdb, "sky")
    assert pipeline.get_table(cdb, "sky", "objects", published_only=False) == table
    assert pipeline.list_tables(cdb, "sky", published_only=False) == [table]
    pipeline.publish_database(cdb, "sky")
    assert pipeline.get_table(cdb, "sky", "objects") == table
    assert pipeline.list_tables(cdb, "sky") == [table]


def test_drop_database_refuses_tables_unless_cascade(cdb, root, commit_version):
    make_db(cdb, root, publish=True)
    committed = pipeline.create_table(cdb, "sky", "objects", SCHEMA)
    fill(cdb, committed)
    staged = pipeline.stage_table(cdb, "sky", "sources", SCHEMA)
    with NothingWritten(cdb, commit_version), pytest.raises(DatabaseNotEmpty, match=r"\(objects, sources\)"):
        pipeline.drop_database(cdb, "sky")
    pipeline.drop_database(cdb, "sky", cascade=True)
    assert pipeline.list_databases(cdb, published_only=False) == []
    assert pipeline.list_staged_tables(cdb) == []
    assert pipeline.get_trash(cdb) == sorted([committed.location, staged.location])
    # Only the trash is left of it.
    assert all(layout.TRASH.contains(k) or k == layout.LAYOUT_KEY for k, _v in catalog_snapshot(cdb))
    # A new database of the same name starts empty.
    make_db(cdb, root, publish=True)
    assert pipeline.list_tables(cdb, "sky") == []


def test_publish_waits_for_staged_partition_data(cdb, root):
    make_db(cdb, root)
    table = pipeline.create_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=2)
    pipeline.set_partition(cdb, table, 1, table.partition_location(1, "t1"), rows=5, staged=True, tag="t1")
    with pytest.raises(PartitionBusy, match="partition 1 of table 'objects' has staged data"):
        pipeline.publish_database(cdb, "sky")
    pipeline.publish_partitions(cdb, table, tag="t1")
    assert pipeline.publish_database(cdb, "sky").published


def test_publish_waits_for_open_writers(cdb, root, commit_version):
    make_db(cdb, root)
    with pytest.raises(DatabaseNotFound):
        pipeline.open_writer(cdb, "nope", "ingest-1", "super-transaction 1")
    for _ in range(2):  # idempotent
        pipeline.open_writer(cdb, "sky", "ingest-1", "super-transaction 1")
    pipeline.open_writer(cdb, "sky", "ingest-2", "super-transaction 2")
    assert pipeline.get_writers(cdb, "sky") == ["super-transaction 1", "super-transaction 2"]
    with NothingWritten(cdb, commit_version), pytest.raises(
            DatabaseBusy, match=r"'sky' cannot be published .* \(super-transaction 1, super-transaction 2 open\)"):
        pipeline.publish_database(cdb, "sky")
    for _ in range(2):
        pipeline.close_writer(cdb, "sky", "ingest-1")
    with pytest.raises(DatabaseBusy, match=r"\(super-transaction 2 open\)"):
        pipeline.publish_database(cdb, "sky")
    pipeline.close_writer(cdb, "sky", "ingest-2")
    assert pipeline.publish_database(cdb, "sky").published


# --- tables ----------------------------------------------------------------------------------


def test_create_table_records_a_checked_schema(cdb, root):
    database = make_db(cdb, root, publish=True)
    schema = [dict(c) for c in SCHEMA]
    schema[2] = {"name": "ra", "type": "DECIMAL( 10 , 2 )", "check": "  ra >= 0  "}
    table = pipeline.create_table(cdb, "sky", "objects", schema, partition_by="chunk", partitions=8)
    assert table.state == "committed" and table.managed and not table.regular
    assert table.partitions == 8 and table.partition_ids == range(8) and table.partition_by == "chunk"
    assert table.location == os.path.join(database.location, "objects", table.id)
    assert table.schema[2] == {"name": "ra", "type": "decimal(10,2)", "nullable": True, "check": "ra >= 0"}
    assert table.schema[0] == SCHEMA[0] and table.schema[3] == {**SCHEMA[3], "nullable": True}
    assert pipeline.get_table(cdb, "sky", "objects") == table
    with pytest.raises(TableExists, match="sky.objects already exists"):
        pipeline.create_table(cdb, "sky", "objects", SCHEMA)
    with pytest.raises(DatabaseNotFound):
        pipeline.create_table(cdb, "nope", "objects", SCHEMA)

    regular = pipeline.create_table(cdb, "sky", "filters", SCHEMA[:1])
    assert regular.regular and regular.partitions == 1 and regular.partition_ids == range(1)
    external = pipeline.create_table(cdb, "sky", "legacy", SCHEMA, location=root + "/legacy/./")
    assert not external.managed and external.location == os.path.join(root, "legacy")
    assert [t.name for t in pipeline.list_tables(cdb, "sky")] == ["filters", "legacy", "objects"]


BAD_TABLES = [
    # (name, schema, kwargs, error, message)
    ("Objects", SCHEMA, {}, ValueError, "lower-case"),
    ("1objects", SCHEMA, {}, ValueError, "not a valid name"),
    ("o" * 65, SCHEMA, {}, ValueError, "not a valid name"),
    ("objects", [], {}, ValueError, "at least one column"),
    ("objects", {"id": "int"}, {}, TypeError, "must be a list of columns"),
    ("objects", [{"name": "id"}], {}, ValueError, "column 0 has no 'type'"),
    ("objects", [{"name": "id", "type": "long"}], {}, ValueError, "did you mean 'bigint'"),
    ("objects", [{"name": "id", "type": "decimal(40,2)"}], {}, ValueError, "precision"),
    ("objects", [{"name": "id", "type": "int", "nullabel": False}], {}, ValueError, r"unknown keys \['nullabel'\]"),
    ("objects", [{"name": "id", "type": "int", "nullable": "no"}], {}, TypeError, "true or false"),
    ("objects", [{"name": "a b", "type": "int"}], {}, ValueError, "not an identifier"),
    ("objects", [{"name": "id", "type": "int"}, {"name": "ID", "type": "int"}], {}, ValueError, "'id' and 'ID'"),
    ("objects", [{"name": "id", "type": "int", "check": " "}], {}, ValueError, "check must be a SQL expression"),
    ("objects", SCHEMA, {"partitions": 4}, ValueError, "needs partition_by"),
    ("objects", SCHEMA, {"partition_by": "nope", "partitions": 4}, ValueError, "not a column"),
    ("objects", SCHEMA, {"partition_by": "ra", "partitions": 4}, ValueError, "nullable: false"),
    ("objects", SCHEMA, {"partition_by": "chunk", "partitions": 0}, ValueError, "between 1 and"),
    ("objects", SCHEMA, {"partition_by": "chunk", "partitions": 2.0}, TypeError, "must be an int"),
    ("objects", SCHEMA, {"location": "relative/dir"}, ValueError, "absolute path"),
    ("objects", SCHEMA, {"location": "/"}, ValueError, "root directory"),
]


@pytest.mark.parametrize("name, schema, kwargs, error, message", BAD_TABLES)
def test_bad_tables_are_refused_before_anything_is_written(cdb, root, commit_version, name, schema, kwargs, error, message):
    make_db(cdb, root)
    with NothingWritten(cdb, commit_version):
        with pytest.raises(error, match=message):
            pipeline.create_table(cdb, "sky", name, schema, **kwargs)
        with pytest.raises(error, match=message):
            pipeline.stage_table(cdb, "sky", name, schema, **kwargs)


def test_a_schema_too_large_for_one_value_is_refused_inside_the_transaction(cdb, root, commit_version):
    make_db(cdb, root)
    huge = [{"name": f"c{i}", "type": "string", "check": "x" * 100} for i in range(1500)]
    with NothingWritten(cdb, commit_version), pytest.raises(pipeline.CatalogError, match="value limit"):
        pipeline.create_table(cdb, "sky", "wide", huge)


def test_stage_then_commit_makes_the_table_visible_at_once(cdb, root):
    make_db(cdb, root, publish=True)
    staged = pipeline.stage_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=3, owner="op-7")
    assert staged.state == "staged" and staged.owner == "op-7"
    with pytest.raises(TableNotFound):
        pipeline.get_table(cdb, "sky", "objects")
    assert pipeline.list_tables(cdb, "sky") == []
    assert pipeline.list_staged_tables(cdb, "sky") == [staged] == pipeline.list_staged_tables(cdb, owner="op-7")
    assert pipeline.list_staged_tables(cdb, owner="op-8") == []

    pipeline.set_partition(cdb, staged, 0, staged.partition_location(0), rows=1)
    with pytest.raises(TableIncomplete, match=r"2 of its 3 partitions have no data \(1, 2\)"):
        pipeline.commit_table(cdb, staged)
    fill(cdb, staged)
    committed = pipeline.commit_table(cdb, staged)
    assert committed.state == "committed" and committed.id == staged.id
    assert pipeline.get_table(cdb, "sky", "objects") == committed
    assert pipeline.list_staged_tables(cdb) == []
    assert [p.rows for p in pipeline.get_partitions(cdb, committed)] == [10, 10, 10]
    assert pipeline.get_partitions(cdb, staged) == pipeline.get_partitions(cdb, committed)  # same version
    assert pipeline.commit_table(cdb, staged) == committed  # committing again: a no-op
    with pytest.raises(TableStateError, match="was committed"):
        pipeline.abort_table(cdb, staged)


def test_commit_may_skip_the_completeness_check(cdb, root):
    make_db(cdb, root)
    staged = pipeline.stage_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=3)
    assert pipeline.commit_table(cdb, staged, require_complete=False).state == "committed"


def test_committing_a_replacement_swaps_versions_in_one_transaction(cdb, root, engine_name):
    make_db(cdb, root, publish=True)
    old = pipeline.create_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=2)
    fill(cdb, old, rows=5)
    new = pipeline.stage_table(cdb, "sky", "objects", SCHEMA[:2], partition_by="chunk", partitions=4, replace=True)
    fill(cdb, new, rows=7)
    assert pipeline.get_table(cdb, "sky", "objects") == old  # readers still see the old version

    committed = pipeline.commit_table(cdb, new)
    current = pipeline.get_table(cdb, "sky", "objects")
    assert current == committed and current.partitions == 4 and len(current.columns) == 2
    assert [p.rows for p in pipeline.get_partitions(cdb, current)] == [7, 7, 7, 7]
    assert pipeline.get_trash(cdb) == [old.location]  # the old version's data, to delete
    # The old version's records are gone, and a writer holding it is fenced off.
    assert not list(cdb.get_range(*layout.span(layout.partition_space("sky", "objects", old.id))))
    with pytest.raises(TableNotFound, match="dropped, replaced or aborted"):
        pipeline.get_partitions(cdb, old)
    with pytest.raises(TableNotFound):
        pipeline.set_partition(cdb, old, 0, old.partition_location(0, "late"), rows=1)


def test_a_name_taken_while_staged_without_replace_blocks_the_commit(cdb, root, commit_version):
    make_db(cdb, root)
    staged = pipeline.stage_table(cdb, "sky", "objects", SCHEMA)
    fill(cdb, staged)
    winner = pipeline.create_table(cdb, "sky", "objects", SCHEMA)
    with NothingWritten(cdb, commit_version), pytest.raises(TableExists, match="stage it again with replace=True"):
        pipeline.commit_table(cdb, staged)
    with pytest.raises(TableExists, match="pass replace=True"):
        pipeline.stage_table(cdb, "sky", "objects", SCHEMA)
    pipeline.abort_table(cdb, staged)
    assert pipeline.get_table(cdb, "sky", "objects", published_only=False) == winner


def test_abort_drops_the_staged_version_and_may_be_repeated(cdb, root):
    make_db(cdb, root)
    staged = pipeline.stage_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=2)
    fill(cdb, staged)
    pipeline.abort_table(cdb, staged)
    pipeline.abort_table(cdb, staged)
    assert pipeline.list_staged_tables(cdb) == []
    assert pipeline.get_trash(cdb) == [staged.location]
    with pytest.raises(TableNotFound, match="aborted"):
        pipeline.commit_table(cdb, staged)
    with pytest.raises(TableNotFound):
        pipeline.get_partitions(cdb, staged)
    assert all(layout.TRASH.contains(k) or k in (layout.LAYOUT_KEY, layout.database_key("sky")) for k, _ in catalog_snapshot(cdb))


def test_drop_table_leaves_staged_versions_alone(cdb, root):
    make_db(cdb, root, publish=True)
    table = pipeline.create_table(cdb, "sky", "objects", SCHEMA)
    fill(cdb, table)
    staged = pipeline.stage_table(cdb, "sky", "objects", SCHEMA, replace=True)
    assert pipeline.drop_table(cdb, "sky", "objects") == table
    with pytest.raises(TableNotFound, match="sky.objects does not exist"):
        pipeline.drop_table(cdb, "sky", "objects")
    with pytest.raises(DatabaseNotFound):
        pipeline.drop_table(cdb, "nope", "objects")
    assert pipeline.get_trash(cdb) == [table.location]
    assert pipeline.list_staged_tables(cdb) == [staged]
    fill(cdb, staged)
    pipeline.commit_table(cdb, staged)
    assert pipeline.get_table(cdb, "sky", "objects").id == staged.id


def test_external_tables_never_send_data_to_the_trash(cdb, root):
    make_db(cdb, root)
    external = pipeline.create_table(cdb, "sky", "legacy", SCHEMA, location=os.path.join(root, "legacy"))
    pipeline.set_partition(cdb, external, 0, "/anywhere/a", rows=1)
    pipeline.set_partition(cdb, external, 0, "/anywhere/b", rows=2)
    pipeline.drop_table(cdb, "sky", "legacy")
    assert pipeline.get_trash(cdb) == []


# --- partitions --------------------------------------------------------------------------------


def test_partition_records(cdb, root, commit_version):
    make_db(cdb, root)
    table = pipeline.create_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=3)
    assert pipeline.get_partitions(cdb, table) == []
    first = pipeline.set_partition(cdb, table, 2, table.partition_location(2), rows=3, bytes=4096)
    assert (first.pid, first.rows, first.bytes, first.staged, first.tag) == (2, 3, 4096, False, None)
    assert first.location == os.path.join(table.location, "part-00002")
    assert pipeline.get_partitions(cdb, table) == [first]
    # Same location again: the record is updated, nothing goes to the trash.
    again = pipeline.set_partition(cdb, table, 2, table.partition_location(2), rows=4)
    assert pipeline.get_partitions(cdb, table) == [again] and pipeline.get_trash(cdb) == []
    # New data in a new directory: the old one goes to the trash.
    newer = pipeline.set_partition(cdb, table, 2, table.partition_location(2, "b"), rows=5)
    assert pipeline.get_partitions(cdb, table) == [newer]
    assert pipeline.get_trash(cdb) == [first.location]
    with pytest.raises(LocationInUse, match="in the trash"):
        pipeline.set_partition(cdb, table, 2, table.partition_location(2), rows=1)

    with NothingWritten(cdb, commit_version):
        with pytest.raises(ValueError, match=r"out of range: table sky.objects has partitions 0..2"):
            pipeline.set_partition(cdb, table, 3, table.partition_location(2), rows=1)
        with pytest.raises(ValueError, match="not a directory of partition 1"):
            pipeline.set_partition(cdb, table, 1, table.partition_location(2), rows=1)
        with pytest.raises(ValueError, match="not a directory of partition 1"):
            pipeline.set_partition(cdb, table, 1, os.path.join(root, "elsewhere"), rows=1)
        with pytest.raises(ValueError, match="zero or more"):
            pipeline.set_partition(cdb, table, 1, table.partition_location(1), rows=-1)
        with pytest.raises(ValueError, match="needs staged=True"):
            pipeline.set_partition(cdb, table, 1, table.partition_location(1), rows=1, tag="t")
        with pytest.raises(TypeError, match="expected a Table"):
            pipeline.get_partitions(cdb, ("sky", "objects"))


def test_staged_partition_data_is_published_or_discarded(cdb, root, commit_version):
    make_db(cdb, root, publish=True)
    table = pipeline.create_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=4)
    published = fill(cdb, table, rows=1)
    # Ingest transaction "t1" stages new data for partitions 0 and 1; "t2" for partition 3.
    for pid in (0, 1):
        pipeline.set_partition(cdb, table, pid, table.partition_location(pid, "t1"), rows=2, staged=True, tag="t1")
    pipeline.set_partition(cdb, table, 3, table.partition_location(3, "t2"), rows=9, staged=True, tag="t2")
    assert pipeline.get_partitions(cdb, table) == published  # readers don't see staged data
    assert [(p.pid, p.tag) for p in pipeline.get_partitions(cdb, table, staged=True)] == [(0, "t1"), (1, "t1"), (3, "t2")]

    with pytest.raises(PartitionBusy, match="staged by 't2'"):
        pipeline.set_partition(cdb, table, 3, table.partition_location(3, "t1"), rows=1, staged=True, tag="t1")
    with pytest.raises(LocationInUse, match="already the published data"):
        pipeline.set_partition(cdb, table, 2, table.partition_location(2), rows=1, staged=True)
    with NothingWritten(cdb, commit_version), pytest.raises(PartitionNotFound, match=r"partitions \[2\] .* by 't1'"):
        pipeline.publish_partitions(cdb, table, [1, 2], tag="t1")

    done = pipeline.publish_partitions(cdb, table, tag="t1")
    assert [(p.pid, p.rows, p.staged, p.tag) for p in done] == [(0, 2, False, None), (1, 2, False, None)]
    assert [p.rows for p in pipeline.get_partitions(cdb, table)] == [2, 2, 1, 1]
    assert pipeline.get_trash(cdb) == sorted(p.location for p in published[:2])

    dropped = pipeline.discard_partitions(cdb, table, tag="t2")
    assert [p.pid for p in dropped] == [3]
    assert pipeline.discard_partitions(cdb, table, tag="t2") == []
    assert pipeline.get_partitions(cdb, table, staged=True) == []
    assert [p.rows for p in pipeline.get_partitions(cdb, table)] == [2, 2, 1, 1]
    assert dropped[0].location in pipeline.get_trash(cdb)


# --- the trash ----------------------------------------------------------------------------------


def test_collect_garbage_deletes_what_the_catalog_dropped(cdb, root):
    make_db(cdb, root)
    table = pipeline.create_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=2)
    for part in fill(cdb, table):
        os.makedirs(part.location)
        open(os.path.join(part.location, "data.parquet"), "wb").close()
    keep = pipeline.create_table(cdb, "sky", "keep", SCHEMA)
    os.makedirs(keep.location)
    pipeline.drop_table(cdb, "sky", "objects")
    assert os.path.isdir(table.location)  # nothing is deleted before collection

    assert pipeline.collect_garbage(cdb) == [table.location]
    assert not os.path.exists(table.location) and os.path.isdir(keep.location)
    assert pipeline.get_trash(cdb) == []
    assert pipeline.collect_garbage(cdb) == []


def test_collect_garbage_stops_at_a_failure_and_keeps_the_rest(cdb, root):
    make_db(cdb, root)
    tables = [pipeline.create_table(cdb, "sky", f"t{i}", SCHEMA) for i in range(3)]
    for t in tables:
        pipeline.drop_table(cdb, "sky", t.name)
    trash = pipeline.get_trash(cdb)
    seen = []

    def remove(location):
        if len(seen) == 1:
            raise PermissionError(location)
        seen.append(location)

    with pytest.raises(PermissionError):
        pipeline.collect_garbage(cdb, remove=remove)
    assert pipeline.get_trash(cdb) == trash[1:]
    assert pipeline.collect_garbage(cdb, remove=lambda loc: None, limit=1) == trash[1:2]
    with pytest.raises(TypeError, match="pass a database"):
        run(cdb, lambda tr: pipeline.collect_garbage(tr))


def dropped_tables(db, root, names) -> list:
    """Tables created with a directory each, then dropped: their locations are in the trash."""
    if "sky" not in [d.name for d in pipeline.list_databases(db, published_only=False)]:
        make_db(db, root)
    tables = [pipeline.create_table(db, "sky", name, SCHEMA) for name in names]
    for t in tables:
        os.makedirs(t.location)
        pipeline.drop_table(db, "sky", t.name)
    return tables


def test_collect_garbage_keeps_what_was_trashed_within_the_grace_period(cdb, root, monkeypatch):
    monkeypatch.setattr(catalog.trash, "GARBAGE_BATCH", 3)  # pages of 3 entries: young pages are passed over
    tables = dropped_tables(cdb, root, [f"t{i}" for i in range(8)])
    trash = pipeline.get_trash(cdb)
    old = {t.location for t in tables[5:]} | {tables[1].location}  # after 4 young entries in key order
    for location in old:
        age_trash(cdb, location, 3600)
    assert pipeline.collect_garbage(cdb, grace=600) == sorted(old)
    assert pipeline.get_trash(cdb) == sorted(set(trash) - old)
    assert all(os.path.isdir(t.location) == (t.location not in old) for t in tables)
    assert pipeline.collect_garbage(cdb, grace=600) == []
    assert pipeline.collect_garbage(cdb, grace=600, limit=1) == []
    assert pipeline.collect_garbage(cdb, limit=2) == sorted(set(trash) - old)[:2]  # grace 0: all, as before
    with pytest.raises(ValueError, match="grace"):
        pipeline.collect_garbage(cdb, grace=-1)


def test_a_processor_collects_the_trash_once_the_grace_period_is_over(cdb, root):
    """The recurring collector job, run by processors: old trash is deleted, trash younger
    than the grace period is kept (and expired ingest worker records are forgotten);
    however many processors attach it, there is one job."""
    old, young = dropped_tables(cdb, root, ["old", "young"])
    age_trash(cdb, old.location, 3600)
    ingest.register_worker(cdb, "gone", ttl=0.001)  # expired: the job forgets its record too
    first, second = Processor(cdb), Processor(cdb)
    for p in (first, second):
        collector.attach(p, grace=600, every=0.05)
    assert [j.id for j in jobs.get_jobs(cdb, collector.JOB_TYPE)] == [collector.JOB_ID]
    with running(first), running(second):
        assert wait_until(lambda: collector_runs(cdb) >= 3)
    assert not os.path.exists(old.location)
    assert os.path.isdir(young.location) and pipeline.get_trash(cdb) == [young.location]
    assert [j.id for j in jobs.get_jobs(cdb, collector.JOB_TYPE)] == [collector.JOB_ID]
    assert first.stats["succeeded"] + second.stats["succeeded"] >= 3 and not first.stats["failed"]
    assert ingest.forget_expired_workers(cdb) == []
    # a removed (or failed for good) collector job is enqueued again by the next processor
    jobs.remove(cdb, collector.JOB_TYPE, collector.JOB_ID)
    collector.attach(Processor(cdb))
    assert jobs.get_job_state(cdb, collector.JOB_TYPE, collector.JOB_ID) == "pending"


def test_attaching_the_collector_leaves_a_scheduled_run_alone(cdb, commit_version):
    collector.schedule(cdb)
    info = jobs.get_job(cdb, collector.JOB_TYPE, collector.JOB_ID)
    before = commit_version()
    collector.attach(Processor(cdb))
    assert jobs.get_job(cdb, collector.JOB_TYPE, collector.JOB_ID) == info
    assert commit_version() == before  # nothing written


# --- composition with the job layer ---------------------------------------------------------------


def test_catalog_changes_and_jobs_commit_in_one_transaction(cdb, root):
    make_db(cdb, root, publish=True)
    jobs.set_type_timeout(cdb, "ctas", 30)

    @jobs.transactional
    def start_ctas(tr, fail=False):
        table = pipeline.stage_table(tr, "sky", "summary", SCHEMA, partition_by="chunk", partitions=3, owner="op-1")
        for pid in table.partition_ids:
            jobs.add(tr, "ctas", f"{table.id}-{pid}", {"table": table.id, "pid": pid})
        if fail:
            raise RuntimeError("the application changed its mind")
        return table

    with pytest.raises(RuntimeError):
        start_ctas(cdb, fail=True)
    assert pipeline.list_staged_tables(cdb) == [] and jobs.get_jobs(cdb, "ctas") == []

    table = start_ctas(cdb)
    assert pipeline.list_staged_tables(cdb, owner="op-1") == [table]
    assert sorted(j.id for j in jobs.get_jobs(cdb, "ctas")) == [f"{table.id}-{pid}" for pid in range(3)]

    # Each worker records its partition in the transaction that finishes its job.
    for _ in table.partition_ids:
        job = jobs.accept(cdb, "ctas", timeout=0)

        @jobs.transactional
        def finish(tr, job=job):
            pid = job.data["pid"]
            pipeline.set_partition(tr, table, pid, table.partition_location(pid, job.lock.hex()), rows=pid)
            jobs.finish(tr, job, {"ok": True})

        finish(cdb)
    assert {j.state for j in jobs.get_jobs(cdb, "ctas")} == {"finished"}
    committed = pipeline.commit_table(cdb, table)
    assert [p.rows for p in pipeline.get_partitions(cdb, committed)] == [0, 1, 2]

    # The two layers keep to their own prefixes: nothing was written under the others.
    for prefix in prefixes.ALL:
        if prefix not in (prefixes.JOBS, prefixes.CATALOG):
            r = fdb_tuple.range(prefix)
            assert cdb.get_range(r.start, r.stop) == [], prefix


def test_a_failed_catalog_call_leaves_the_callers_transaction_clean(cdb, root, app):
    make_db(cdb, root)
    staged = pipeline.stage_table(cdb, "sky", "objects", SCHEMA, partition_by="chunk", partitions=2)
    pipeline.set_partition(cdb, staged, 0, staged.partition_location(0), rows=1)

    def body(tr):
        tr.set(app.pack(("mine",)), b"1")
        with pytest.raises(TableIncomplete):
            pipeline.commit_table(tr, staged)

    run(cdb, body)
    assert cdb.get(app.pack(("mine",))) == b"1"
    assert pipeline.list_staged_tables(cdb) == [staged]
    with pytest.raises(TableNotFound):
        pipeline.get_table(cdb, "sky", "objects", published_only=False)


# --- faults -------------------------------------------------------------------------------------------


def scenario(tr, root):
    """Every writing catalog call once; returns what a reader sees at the end."""
    make_db(tr, root, publish=False)
    base = pipeline.create_table(tr, "sky", "objects", SCHEMA, partition_by="chunk", partitions=3)
    fill(tr, base, rows=1)
    pipeline.set_partition(tr, base, 0, base.partition_location(0, "t1"), rows=2, staged=True, tag="t1")
    pipeline.set_partition(tr, base, 1, base.partition_location(1, "t1"), rows=2, staged=True, tag="t1")
    pipeline.publish_partitions(tr, base, [0], tag="t1")
    pipeline.discard_partitions(tr, base, tag="t1")
    pipeline.publish_database(tr, "sky")
    staged = pipeline.stage_table(tr, "sky", "objects", SCHEMA, partition_by="chunk", partitions=2, replace=True)
    fill(tr, staged, rows=3)
    pipeline.commit_table(tr, staged)
    doomed = pipeline.stage_table(tr, "sky", "doomed", SCHEMA)
    pipeline.abort_table(tr, doomed)
    extra = pipeline.create_table(tr, "sky", "extra", SCHEMA)
    pipeline.drop_table(tr, "sky", "extra")
    table = pipeline.get_table(tr, "sky", "objects")
    return {
        "tables": [t.name for t in pipeline.list_tables(tr, "sky")],
        "staged": pipeline.list_staged_tables(tr),
        "rows": [p.rows for p in pipeline.get_partitions(tr, table)],
        "trash": sorted(pipeline.get_trash(tr)),
        "expected_trash": sorted([base.location, doomed.location, extra.location]),
    }


# The writing calls of scenario(), each of which must commit exactly once: create_database,
# create_table, 3 + 2 set_partition, publish_partitions, discard_partitions,
# publish_database, stage_table, 2 set_partition, commit_table, stage_table, abort_table,
# create_table, drop_table.
WRITING_CALLS = 18


def test_every_call_commits_once_when_each_commit_reports_an_unknown_result(cdb, root):
    """Each writing commit happens and then raises 1021: the retry must recognise the
    call's own commit (no DatabaseExists/TableExists/NotFound, no second write)."""
    faulty = FaultInjectingDatabase(cdb, unknown_committed=1.0)
    seen = scenario(faulty, root)
    assert faulty.commits == faulty.injected["unknown_committed"] == WRITING_CALLS
    assert seen["tables"] == ["objects"] and seen["staged"] == []
    assert seen["rows"] == [3, 3]
    assert seen["trash"] == seen["expected_trash"]


def test_the_scenario_survives_random_commit_faults(cdb, root):
    faulty = FaultInjectingDatabase(
        cdb, conflict=0.2, unknown_committed=0.2, unknown_not_committed=0.15, too_old=0.1, seed=5
    )
    seen = scenario(faulty, root)
    assert faulty.faults > 0
    assert seen["tables"] == ["objects"] and seen["staged"] == [] and seen["rows"] == [3, 3]
    assert seen["trash"] == seen["expected_trash"]


def test_the_same_scenario_in_one_transaction(cdb, root):
    seen = run(cdb, lambda tr: scenario(tr, root))
    assert seen["tables"] == ["objects"] and seen["rows"] == [3, 3]
    assert seen["trash"] == seen["expected_trash"]


# --- layout -------------------------------------------------------------------------------------------


def test_a_catalog_written_by_a_newer_release_is_refused(tmp_path):
    url = "sqlite:" + str(tmp_path / "store.sqlite")
    first = jobs.open(url)
    try:
        first.set(layout.LAYOUT_KEY, fdb_tuple.pack((layout.LAYOUT_VERSION + 1,)))
    finally:
        first.close()
    second = jobs.open(url)
    try:
        with pytest.raises(CatalogLayoutError, match="upgrade the package"):
            pipeline.list_databases(second)
    finally:
        second.close()


def test_a_corrupt_record_is_reported_with_its_key(cdb, root):
    make_db(cdb, root)
    cdb.set(layout.database_key("sky"), orjson.dumps({"name": "sky"}))
    with pytest.raises(CatalogStoreError, match="database record 'sky' is corrupt"):
        pipeline.get_database(cdb, "sky")
    cdb.set(layout.database_key("sky"), b"\xff not json")
    with pytest.raises(CatalogStoreError, match="corrupt"):
        pipeline.list_databases(cdb, published_only=False)
