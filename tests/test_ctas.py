"""Atomic CTAS (the Flink seed): a table made from a Spark SQL query over catalog tables,
staged with the operation's start, written per partition by processors on threads, and
committed or aborted in one transaction when the operation ends.

One SparkSession for the module (skipped, with the reason, when pyspark or Java is
missing); small tables; tests wait on conditions, never on durations.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest

import jobs
import pipeline
from jobs.queue import activity
from jobs.engine.transactional import run
from jobs.engine.faults import FaultInjectingDatabase
from pipeline import ctas as pctas
from pipeline.errors import CtasFailed, QueryError, TableExists, TableNotFound
from pipeline.partition_files import read_partition, write_partition
from pipeline.runtime import table_partitions
from processors import Processor
from processors.operations import OperationRefused, Operations, coordinator_type
from test_poison import lose_worker
from waiting import DEADLINE, running, wait_until

ORDERS = [
    {"name": "id", "type": "bigint", "nullable": False},
    {"name": "chunk", "type": "int", "nullable": False},
    {"name": "customer", "type": "bigint"},
    {"name": "qty", "type": "bigint"},
    {"name": "note", "type": "string"},
]
CUSTOMERS = [{"name": "id", "type": "bigint", "nullable": False}, {"name": "name", "type": "string"}]
NAMES = ["ann", "bob", "cat", "dan", "eve", "fay"]
N_ORDERS = 90

SUMMARY = (
    "SELECT c.name AS customer, count(*) AS orders, sum(o.qty) AS qty\n"
    "FROM shop.orders o JOIN `shop`.`customers` c ON o.customer = c.id  -- shop.not_a_table\n"
    "WHERE o.note != 'shop.orders' GROUP BY c.name"
)
BIG = "SELECT id, qty * 2 AS qty2, note FROM shop.orders WHERE qty > 3"


def _order(i):
    return (i, i % 3, i % 6, i % 7, f"n{i}")


def expected_summary() -> dict:
    out = {}
    for i in range(N_ORDERS):
        name = NAMES[i % 6]
        count, qty = out.get(name, (0, 0))
        out[name] = (count + 1, qty + i % 7)
    return out


@pytest.fixture(scope="module")
def source_files(spark, tmp_path_factory):
    """The sources' partition directories, written once: stores copy them (fast)."""
    root = tmp_path_factory.mktemp("sources")
    files = {}
    orders = {pid: [_order(i) for i in range(N_ORDERS) if i % 3 == pid] for pid in range(3)}
    for name, columns, parts in (("orders", ORDERS, orders), ("customers", CUSTOMERS, {0: list(enumerate(NAMES))})):
        for pid, rows in parts.items():
            frame = spark.createDataFrame(rows, pipeline.spark_schema(columns))
            files[name, pid] = write_partition(frame, str(root / f"{name}-{pid}"), columns=columns, files=1)
    return files


def _load(db, files, name, columns, pids, **kw):
    table = pipeline.stage_table(db, "shop", name, columns, **kw)
    for pid in pids:
        src = files[name, pid]
        location = table.partition_location(pid, "load")
        shutil.copytree(src.location, location)
        pipeline.set_partition(db, table, pid, location, rows=src.rows, bytes=src.bytes)
    return pipeline.commit_table(db, table)


@pytest.fixture
def store(source_files, tmp_path):
    """Published database shop: orders (3 partitions by chunk, 90 rows), customers (6)."""
    db = jobs.open("sqlite:" + str(tmp_path / "jobs.sqlite"))
    pipeline.create_database(db, "shop", location=str(tmp_path / "data"))
    _load(db, source_files, "orders", ORDERS, range(3), partition_by="chunk", partitions=3)
    _load(db, source_files, "customers", CUSTOMERS, [0])
    pipeline.publish_database(db, "shop")
    yield db
    db.close()


def operations_for(db, kind=None) -> Operations:
    ops = Operations(db, table_partitions)
    ops.register(kind or pctas.CreateTableAs(db))
    return ops


def processor_for(db, ops, **kw) -> Processor:
    p = Processor(db, **kw)
    ops.attach(p)
    return p


class Gate:
    """Replaces ctas.write_partition: writes, records the location, then holds the job
    until ``hold`` is set (only the first ``first`` writes when given)."""

    def __init__(self, monkeypatch, first: int | None = None):
        self.hold = threading.Event()
        self.writes: list[str] = []
        self.first = first
        real = pctas.write_partition

        def gated(df, location, **kw):
            out = real(df, location, **kw)
            self.writes.append(location)
            if self.first is None or len(self.writes) <= self.first:
                while not self.hold.wait(0.01):
                    pass
            return out

        monkeypatch.setattr(pctas, "write_partition", gated)


def rows_of(spark, db, qualified):
    dbname, name = qualified.split(".")
    table = pipeline.get_table(db, dbname, name)
    found = {}
    for part in pipeline.get_partitions(db, table):
        found[part.pid] = [r.asDict() for r in read_partition(spark, part.location, columns=table).collect()]
        assert len(found[part.pid]) == part.rows
    return table, found


def assert_assigned(spark, db, table):
    """Every row is in the partition the rule gives it."""
    from pyspark.sql import functions as F

    expr = pctas.table_partition_expr(table)
    for part in pipeline.get_partitions(db, table):
        df = read_partition(spark, part.location, columns=table)
        assert df.where(F.expr(expr) != F.lit(part.pid)).count() == 0


def assert_aborted(db, staged_location):
    """No table, no staging left; the staging is in the trash, then collected."""
    with pytest.raises(TableNotFound):
        pipeline.get_table(db, "shop", "out")
    assert pipeline.list_staged_tables(db, "shop") == []
    assert staged_location in pipeline.get_trash(db)
    assert staged_location in pipeline.collect_garbage(db)
    assert not os.path.exists(staged_location)


def only_staged(db):
    staged = pipeline.list_staged_tables(db, "shop")
    assert len(staged) == 1
    return staged[0]


# --- without processors ---------------------------------------------------------------------


def test_partition_rule_and_query_rewrite():
    assert pctas.partition_expr("chunk", "int", 8) == "pmod(`chunk`, 8)"
    assert pctas.partition_expr("day", "string", 4) == "pmod(xxhash64(`day`), 4)"
    assert pctas.partition_expr("d", "decimal(10,2)", 3) == "pmod(xxhash64(`d`), 3)"
    with pytest.raises(ValueError):
        pctas.partition_expr("x", "int", 0)
    sql = pctas.rewrite_query(SUMMARY, ["shop.orders", "shop.customers"])
    assert "FROM shop__orders o JOIN shop__customers c" in sql
    assert "'shop.orders'" in sql and "-- shop.not_a_table" in sql  # strings and comments untouched
    assert pctas.rewrite_query("SELECT shop.orders.id, a.shop.orders FROM shop.orders", ["shop.orders"]) == (
        "SELECT shop__orders.id, a.shop.orders FROM shop__orders")


# --- with processors ------------------------------------------------------------------------


def test_ctas_builds_a_partitioned_table_that_readers_see_only_once_committed(store, spark, source_files,
                                                                               monkeypatch):
    ops = operations_for(store)
    gate = Gate(monkeypatch)
    with running(processor_for(store, ops), concurrency=2):
        instance = pctas.ctas(store, ops, "shop.summary", SUMMARY, partition_by="customer", partitions=3)
        assert wait_until(lambda: len(gate.writes) == 2)  # two partitions written, not registered
        staged = only_staged(store)
        assert staged.name == "summary" and staged.owner.startswith("ctas.")
        with pytest.raises(TableNotFound):  # readers never see the staged table
            pipeline.get_table(store, "shop", "summary")
        assert [t.name for t in pipeline.list_tables(store, "shop")] == ["customers", "orders"]
        assert pctas.outcome(store, ops, "shop.summary", instance) is None
        # a source changes meanwhile: the jobs still to run read the snapshot pinned at the start
        orders = pipeline.get_table(store, "shop", "orders")
        changed = orders.partition_location(0, "changed")
        shutil.copytree(source_files["orders", 1].location, changed)
        pipeline.set_partition(store, orders, 0, changed, rows=30)
        gate.hold.set()
        done = pctas.wait(ops, "shop.summary", instance, timeout=DEADLINE)
    assert done.committed and done.operation.state == "success"
    table, parts = rows_of(spark, store, "shop.summary")
    assert table.id == staged.id == done.table_id and table.partitions == 3
    assert [(c.name, c.type, c.nullable) for c in table.columns] == [
        ("customer", "string", False), ("orders", "bigint", False), ("qty", "bigint", True)]
    got = {r["customer"]: (r["orders"], r["qty"]) for rows in parts.values() for r in rows}
    assert got == expected_summary()
    assert_assigned(spark, store, table)
    # only the registered directories are left in the table's location once the collector
    # ran (attempts that were not registered went to the trash with the commit); the pins are gone
    pipeline.collect_garbage(store)
    assert sorted(os.listdir(table.location)) == sorted(os.path.basename(p.location)
                                                        for p in pipeline.get_partitions(store, table))
    assert pipeline.list_staged_tables(store) == []
    assert ops.running_operations(store, "shop.summary") == []


def test_integer_keys_and_a_processor_stopped_mid_ctas(store, spark, monkeypatch):
    """The first processor stops (grace 0) after writing a partition, before registering
    it; the next one writes the partition again, and only its attempt is committed."""
    ops = operations_for(store)
    gate = Gate(monkeypatch, first=1)
    instance = pctas.ctas(store, ops, "shop.big", BIG, partition_by="id", partitions=2)
    with running(processor_for(store, ops, grace=0), concurrency=1):
        assert wait_until(lambda: len(gate.writes) == 1)
    lost = gate.writes[0]
    assert os.path.isdir(lost)
    gate.hold.set()
    with running(processor_for(store, ops), concurrency=2):
        done = pctas.wait(ops, "shop.big", instance, timeout=DEADLINE)
    assert done.committed
    table, parts = rows_of(spark, store, "shop.big")
    want = {i: ((i % 7) * 2, f"n{i}") for i in range(N_ORDERS) if i % 7 > 3}
    got = [(r["id"], (r["qty2"], r["note"])) for rows in parts.values() for r in rows]
    assert dict(got) == want and len(got) == len(want)  # every row exactly once
    assert all(r["id"] % 2 == pid for pid, rows in parts.items() for r in rows)  # pmod(id, 2)
    assert lost in pipeline.get_trash(store)  # the lost attempt's directory went to the trash with the commit
    assert lost in pipeline.collect_garbage(store) and not os.path.exists(lost)
    assert lost not in {p.location for p in pipeline.get_partitions(store, table)}


def test_replace_keeps_the_old_table_readable_until_the_commit_swaps_it(store, spark, monkeypatch):
    ops = operations_for(store)
    with running(processor_for(store, ops), concurrency=2):
        first = pctas.ctas(store, ops, "shop.out", "SELECT id, note FROM shop.orders WHERE id < 10")
        created = pctas.wait(ops, "shop.out", first, timeout=DEADLINE)
        old = pipeline.get_table(store, "shop", "out")
        assert old.id == created.table_id and old.partition_by is None
        with pytest.raises(TableExists):  # without replace, the name is taken
            pctas.ctas(store, ops, "shop.out", "SELECT 1 AS x")
        gate = Gate(monkeypatch)
        # it reads the version it replaces (pinned when it starts)
        second = pctas.ctas(store, ops, "shop.out", "SELECT o.id + 100 AS id, s.note, o.qty "
                            "FROM shop.out s JOIN shop.orders o ON s.id = o.id", replace=True)
        assert wait_until(lambda: len(gate.writes) == 1)
        current, parts = rows_of(spark, store, "shop.out")  # still the old version, readable
        assert current.id == old.id and sorted(r["id"] for r in parts[0]) == list(range(10))
        gate.hold.set()
        done = pctas.wait(ops, "shop.out", second, timeout=DEADLINE)
    table, parts = rows_of(spark, store, "shop.out")
    assert table.id == done.table_id != old.id
    assert [c.name for c in table.columns] == ["id", "note", "qty"]
    assert sorted((r["id"], r["note"], r["qty"]) for r in parts[0]) == [(100 + i, f"n{i}", i % 7) for i in range(10)]
    assert old.location in pipeline.get_trash(store)  # the replaced version goes to the trash


def test_a_failing_query_leaves_no_table_and_its_staging_in_the_trash(store, spark):
    ops = operations_for(store)
    query = "SELECT id, CASE WHEN id = 17 THEN raise_error('bad row 17') ELSE qty END AS qty FROM shop.orders"
    with running(processor_for(store, ops), concurrency=2):
        instance = pctas.ctas(store, ops, "shop.out", query, partition_by="id", partitions=2)
        staged = only_staged(store)
        with pytest.raises(CtasFailed, match="bad row 17") as failed:
            pctas.wait(ops, "shop.out", instance, timeout=DEADLINE)
    assert failed.value.outcome.state == "aborted"
    assert failed.value.outcome.operation.state == "failed"
    assert failed.value.outcome.operation.partitions["1"] == "failed"  # 17 % 2
    assert_aborted(store, staged.location)
    assert ops.running_operations(store, "shop.out") == []


def test_a_null_partition_key_fails_the_ctas(store):
    ops = operations_for(store)
    query = "SELECT CASE WHEN id = 4 THEN NULL ELSE note END AS k, id FROM shop.orders"
    with running(processor_for(store, ops), concurrency=2):
        instance = pctas.ctas(store, ops, "shop.out", query, partition_by="k", partitions=2)
        staged = only_staged(store)
        assert [c.nullable for c in staged.columns] == [False, False]
        with pytest.raises(CtasFailed, match="partition column k is NULL"):
            pctas.wait(ops, "shop.out", instance, timeout=DEADLINE)
    assert_aborted(store, staged.location)


def test_cancel_leaves_no_table(store, monkeypatch):
    ops = operations_for(store)
    gate = Gate(monkeypatch)
    with running(processor_for(store, ops), concurrency=2):
        instance = pctas.ctas(store, ops, "shop.out", BIG, partition_by="id", partitions=2)
        staged = only_staged(store)
        assert wait_until(lambda: len(gate.writes) >= 1)
        assert pctas.cancel(ops, "shop.out", instance) is True
        with pytest.raises(CtasFailed, match="cancelled") as failed:
            pctas.wait(ops, "shop.out", instance, timeout=DEADLINE)
        gate.hold.set()
    assert failed.value.outcome.operation.state == "cancelled"
    assert pctas.cancel(ops, "shop.out", instance) is False
    assert_aborted(store, staged.location)


def test_a_coordinator_that_lost_its_lock_commits_nothing_catalog_included(store, spark):
    """The first coordinator's job is taken away while it commits the table (re-enqueued,
    as the activity monitor does for a dead worker): the catalog commit goes in the
    transaction that finishes its job, so none of it commits (no table, the staging still
    staged, the operation running); the next coordinator commits the table, once."""
    seen = []

    class Fragile(pctas.CreateTableAs):
        calls = 0

        def complete_operation(self, tr, arg, table, success, results):
            self.calls += 1
            if self.calls == 2:  # the next coordinator: what did the lost one leave?
                seen.append((len(pipeline.list_staged_tables(store, "shop")),
                             "out" in [t.name for t in pipeline.list_tables(store, "shop")],
                             ops.operation_status(store, "shop.out", "ctas", instance).state))
            committed = super().complete_operation(tr, arg, table, success, results)
            if self.calls == 1:
                assert lose_worker(store, coordinator_type(pctas.TYPE)) == 1
            return committed

    kind = Fragile(store)
    ops = operations_for(store, kind)
    instance = pctas.ctas(store, ops, "shop.out", "SELECT id FROM shop.orders WHERE chunk = 1")
    with running(processor_for(store, ops), concurrency=2):
        done = pctas.wait(ops, "shop.out", instance, timeout=DEADLINE)
    assert seen == [(1, False, "running")]  # the lost coordinator committed nothing
    assert kind.calls == 2 and run(store, activity.lost_total, coordinator_type(pctas.TYPE)) == 1
    table, parts = rows_of(spark, store, "shop.out")
    assert done.committed and table.id == done.table_id
    assert sorted(r["id"] for r in parts[0]) == list(range(1, N_ORDERS, 3))
    assert pipeline.list_staged_tables(store, "shop") == []
    assert table.location not in pipeline.get_trash(store)


def test_the_start_is_one_transaction_that_a_retry_recognises(store, spark):
    """Every writing commit of the start reports an unknown result after committing: the
    retry finds its own start, so one operation and one staged table exist; then it runs."""
    faulty = FaultInjectingDatabase(store, unknown_committed=1.0)
    instance = pctas.ctas(faulty, operations_for(faulty), "shop.out", BIG)
    assert faulty.injected["unknown_committed"] == 1
    ops = operations_for(store)
    assert [r["instance"] for r in ops.running_operations(store, "shop.out")] == [instance]
    assert len(pipeline.list_staged_tables(store, "shop")) == 1
    with running(processor_for(store, ops), concurrency=2):
        assert pctas.wait(ops, "shop.out", instance, timeout=DEADLINE).committed
    _table, parts = rows_of(spark, store, "shop.out")
    assert len(parts[0]) == sum(1 for i in range(N_ORDERS) if i % 7 > 3)


def test_bad_queries_and_arguments_write_nothing(store):
    ops = operations_for(store)
    bad = [
        ("shop", "SELECT 1 AS x", {}, ValueError, "database.table"),
        ("shop.out", "  ", {}, ValueError, "empty"),
        ("shop.out", "SELECT * FROM shop.nope", {}, QueryError, "TABLE_OR_VIEW_NOT_FOUND"),
        ("shop.out", "SELECT id, rand() AS r FROM shop.orders", {}, QueryError, "not deterministic"),
        ("shop.out", "SELECT count(*) FROM shop.orders", {}, QueryError, "cannot be a table"),
        ("shop.out", "SELECT array(1, 2) AS a", {}, QueryError, "cannot be a table"),
        ("shop.out", "SELECT id FROM shop.orders", {"partition_by": "nope", "partitions": 2}, ValueError, "nope"),
        ("shop.out", "SELECT id FROM shop.orders", {"partitions": 2}, ValueError, "needs partition_by"),
        ("shop.orders", "SELECT id FROM shop.orders", {}, TableExists, "already exists"),
        ("nodb.out", "SELECT 1 AS x", {}, pipeline.DatabaseNotFound, "nodb"),
    ]
    for target, query, kw, error, match in bad:
        with pytest.raises(error, match=match):
            pctas.ctas(store, ops, target, query, **kw)
    with pytest.raises(ValueError, match="register CreateTableAs"):
        pctas.ctas(store, Operations(store, table_partitions), "shop.out", "SELECT 1 AS x")
    assert pipeline.list_staged_tables(store) == []
    assert ops.running_operations(store, "shop.out") == []
    # one CTAS per target at a time: the second start writes nothing either
    pctas.ctas(store, ops, "shop.out", "SELECT 1 AS x")
    with pytest.raises(OperationRefused):
        pctas.ctas(store, ops, "shop.out", "SELECT 2 AS x")
    assert len(pipeline.list_staged_tables(store)) == 1
