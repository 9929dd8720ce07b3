"""The provisioned operations on Spark: validate (reports violations, fails the operation)
and build index (sorted per partition, resumes from saved progress), over catalog tables,
run by a processor in this process.  One SparkSession for the module; small tables."""

from __future__ import annotations

import os
import threading

import pytest

import jobs
import pipeline
from pipeline import index as pindex
from pipeline.partition_files import write_partition
from pipeline.runtime import operations, processor
from processors.operations import OperationRefused
from waiting import DEADLINE, running, wait_until

COLUMNS = [
    {"name": "id", "type": "bigint", "nullable": False},
    {"name": "chunk", "type": "int", "nullable": False},
    {"name": "qty", "type": "bigint", "check": "qty >= 0"},
    {"name": "name", "type": "string", "nullable": False},
]
BAD = {7: ("qty", -5), 19: ("name", None), 20: ("qty", 100_000)}  # id -> the bad value


def _row(i):
    qty, name = i % 50, f"n{i % 10}"
    if i in BAD:
        column, value = BAD[i]
        qty, name = (value, name) if column == "qty" else (qty, value)
    return (i, i % 3, qty, name)


@pytest.fixture
def store(spark, tmp_path):
    """A store with published table shop.orders: 3 partitions of 30 rows in all."""
    db = jobs.open("sqlite:" + str(tmp_path / "jobs.sqlite"))
    pipeline.create_database(db, "shop", location=str(tmp_path / "data"))
    table = pipeline.stage_table(db, "shop", "orders", COLUMNS, partition_by="chunk", partitions=3)
    # nullable in Spark: the files may hold what the table forbids (validate finds it)
    schema = pipeline.spark_schema([{**c, "nullable": True} for c in COLUMNS])
    for pid in range(3):
        rows = [_row(i) for i in range(30) if i % 3 == pid]
        frame = spark.createDataFrame(rows, schema).repartition(2)  # two data files per partition
        out = write_partition(frame, table.partition_location(pid, "load"), columns=table)
        pipeline.set_partition(db, table, pid, out.location, rows=out.rows, bytes=out.bytes)
    pipeline.commit_table(db, table)
    pipeline.publish_database(db, "shop")
    yield db
    db.close()


def test_validate_reports_violations_and_fails(store):
    ops = operations(store)
    with running(processor(store), concurrency=2):
        instance = ops.start_operation("validate", "shop.orders", {"types": {"qty": "smallint"}})
        status = ops.wait_operation("shop.orders", "validate", instance, timeout=DEADLINE)
    assert status.state == "failed"
    failed = {p: r for p, r in status.results.items() if status.partitions[p] == "failed"}
    found = {}
    for report in failed.values():
        for name, count in report["violations"].items():
            found[name] = found.get(name, 0) + count
            assert 1 <= len(report["samples"][name]) <= count
    # every partition was checked (not fail-fast): the report is the whole table's
    assert found == {"qty CHECK (qty >= 0)": 1, "name NOT NULL": 1, "qty fits smallint": 1}
    assert set(status.partitions.values()) <= {"success", "failed"}
    sample = next(iter(failed.values()))["samples"]
    assert all(isinstance(row, dict) and "id" in row for rows in sample.values() for row in rows)


def test_validate_passes_on_clean_data_and_reports_counts(store, spark):
    ops = operations(store)
    with running(processor(store), concurrency=2):
        instance = ops.start_operation("validate", "shop.orders", {"types": {"qty": "bigint"}})
        first = ops.wait_operation("shop.orders", "validate", instance, timeout=DEADLINE)
    assert first.state == "failed"  # the CHECK and NOT NULL violations are still there
    # a table of clean rows passes
    table = pipeline.stage_table(store, "shop", "clean", COLUMNS, partition_by="chunk", partitions=2)
    for pid in range(2):
        frame = spark.createDataFrame([(i, pid, 1, "x") for i in range(pid, 20, 2)], pipeline.spark_schema(COLUMNS))
        out = write_partition(frame, table.partition_location(pid, "w"), columns=table)
        pipeline.set_partition(store, table, pid, out.location, rows=out.rows, bytes=out.bytes)
    pipeline.commit_table(store, table)
    with running(processor(store), concurrency=2):
        instance = ops.start_operation("validate", "shop.clean")
        status = ops.wait_operation("shop.clean", "validate", instance, timeout=DEADLINE)
    assert status.state == "success"
    assert {p: r["rows"] for p, r in status.results.items()} == {"0": 10, "1": 10}


def test_build_index_sorts_each_partition_and_finds_rows(store, spark):
    ops = operations(store)
    with running(processor(store), concurrency=2):
        instance = pindex.build_index(store, ops, "shop.orders", "name", "by_name")
        # validate may run beside it; another index of that name may not be started
        with pytest.raises(pindex.IndexExists):
            pindex.build_index(store, ops, "shop.orders", "name", "by_name")
        status = ops.wait_operation("shop.orders", "build_index", instance, timeout=DEADLINE)
    assert status.state == "success"
    index = pindex.get_index(store, "shop.orders", "by_name")
    assert index["state"] == "ready"
    assert sum(r["rows"] for r in status.results.values()) == 30
    for pid in range(3):
        keys = [r["key"] for r in pipeline.read_partition(
            spark, pindex.index_location(index["location"], pid) + "/sorted").collect()]
        assert keys == sorted(keys, key=lambda k: (k is not None, k))
    rows = pindex.lookup(store, spark, "shop.orders", "by_name", "n3")
    assert sorted(r["id"] for r in rows) == [3, 13, 23]
    with pytest.raises(ValueError, match="no column"):
        pindex.build_index(store, ops, "shop.orders", "nope", "x")


def test_build_index_resumes_from_saved_progress(store, monkeypatch):
    """The first processor stops after one sorted run of a partition was saved; the next
    one goes on from the saved progress instead of starting over."""
    ops = operations(store)
    writes = []
    hold = threading.Event()
    real = pindex.write_partition

    def counting(df, location, **kw):
        writes.append(location)
        if len(writes) == 2:  # the first run is written and saved: this processor stops here
            while not hold.wait(0.01):
                pass
        return real(df, location, **kw)

    monkeypatch.setattr(pindex, "write_partition", counting)
    instance = pindex.build_index(store, ops, "shop.orders", "id", "by_id")
    with running(processor(store, grace=0), concurrency=1):
        assert wait_until(lambda: len(writes) == 2)
    hold.set()
    with running(processor(store), concurrency=1):
        status = ops.wait_operation("shop.orders", "build_index", instance, timeout=DEADLINE)
    assert status.state == "success"
    first = writes[0]
    assert writes.count(first) == 1  # that run was not written again
    assert sum(r["rows"] for r in status.results.values()) == 30


def test_a_cancelled_index_build_goes_to_the_trash_and_a_rebuild_writes_elsewhere(store, monkeypatch):
    """Cancelled while its first partition writes: the build fails and its directory goes
    to the trash in the coordinator's transaction; a rebuild of the same name writes a
    directory of its own, which the collector leaves alone."""
    ops = operations(store)
    writes, hold = [], threading.Event()
    real = pindex.write_partition

    def held(df, location, **kw):
        writes.append(location)
        if len(writes) == 1:
            while not hold.wait(0.01):
                pass
        return real(df, location, **kw)

    monkeypatch.setattr(pindex, "write_partition", held)
    with running(processor(store), concurrency=2):  # one lane stays held, the other coordinates
        first = pindex.build_index(store, ops, "shop.orders", "id", "by_id")
        assert wait_until(lambda: writes)
        assert ops.cancel_operation("shop.orders", "build_index", first)
        assert ops.wait_operation("shop.orders", "build_index", first, timeout=DEADLINE).state == "cancelled"
        hold.set()
        assert pindex.get_index(store, "shop.orders", "by_id")["state"] == "failed"
        table = pipeline.get_table(store, "shop", "orders")
        failed = pindex.build_directory(table, ops.operation_status(store, "shop.orders", "build_index", first).arg)
        assert failed in pipeline.get_trash(store)
        second = pindex.build_index(store, ops, "shop.orders", "id", "by_id")
        assert ops.wait_operation("shop.orders", "build_index", second, timeout=DEADLINE).state == "success"
    ready = pindex.get_index(store, "shop.orders", "by_id")
    assert ready["state"] == "ready" and ready["location"] != failed
    assert failed in pipeline.collect_garbage(store)
    assert os.path.isdir(ready["location"]) and not os.path.exists(failed)


def test_operations_on_unpublished_or_missing_tables_are_refused(store, tmp_path):
    ops = operations(store)
    pipeline.create_database(store, "staging", location=str(tmp_path / "staging"))
    with pytest.raises(pipeline.DatabaseNotPublished):
        ops.start_operation("validate", "staging.x")
    with pytest.raises(pipeline.TableNotFound):
        ops.start_operation("validate", "shop.nope")
    with pytest.raises(ValueError, match="'database.table'"):
        ops.start_operation("validate", "orders")
    first = ops.start_operation("build_index", "shop.orders", {"column": "id", "name": "i"})
    assert ops.start_operation("validate", "shop.orders")  # compatible
    assert first
    with pytest.raises(OperationRefused):
        ops.start_operation("other", "shop.orders") if False else _refuse(ops)


def _refuse(ops):
    from processors.operations import Operation

    class Exclusive(Operation):
        type = "exclusive"

        def start_or_resume_job(self, ctx):
            return {}

    ops.register(Exclusive())
    ops.start_operation("exclusive", "shop.orders")
