"""The Spark helpers: the per-process SparkSession (``pipeline.spark``) and atomic partition
directories (``pipeline.partition_files``), with the catalog recording what was written.

The tests that need Spark share one session (started once, ~10 s on a small machine) and
are skipped, with the reason, when pyspark or Java is missing.  The others check settings
and error paths without starting a JVM.
"""

from __future__ import annotations

import os
import stat
import sys
import time

import pytest

import jobs
import pipeline
from pipeline import spark as pspark
from pipeline.errors import PartitionDataError, PartitionDataExists, SparkUnavailable
from pipeline.partition_files import clean_temporaries, read_partition, write_partition

COLUMNS = [
    {"name": "id", "type": "bigint", "nullable": False},
    {"name": "chunk", "type": "int", "nullable": False},
    {"name": "amount", "type": "decimal(10,2)"},
    {"name": "name", "type": "string"},
]


# --- without a JVM ------------------------------------------------------------------------------


def test_master_resolution(monkeypatch):
    monkeypatch.delenv(pspark.MASTER_ENV, raising=False)
    assert pspark.resolve_master() == "local[2,3]"
    assert pspark.resolve_master("local") == "local[1,3]"
    assert pspark.resolve_master("local[*]") == "local[*,3]"
    assert pspark.resolve_master("local[4, 8]") == "local[4, 8]"  # a failure count given: kept
    assert pspark.resolve_master("spark://head:7077") == "spark://head:7077"
    monkeypatch.setenv(pspark.MASTER_ENV, "spark://env:7077")
    assert pspark.resolve_master() == "spark://env:7077"
    assert pspark.resolve_master("local[2]") == "local[2,3]"  # the argument wins
    with pytest.raises(ValueError, match="master URL"):
        pspark.resolve_master("  ")


def test_local_sessions_stay_on_loopback_and_cluster_ones_do_not():
    local = pspark.session_config("local[2,3]", "app", {"spark.sql.shuffle.partitions": 8, "spark.x": True})
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    assert local["spark.ui.enabled"] == "false" and local["spark.pyspark.python"] == sys.executable
    assert local["spark.sql.shuffle.partitions"] == "8" and local["spark.x"] == "true"
    assert os.path.isfile(local["spark.driver.extraJavaOptions"].split("file:", 1)[1])
    cluster = pspark.session_config("spark://head:7077")
    assert "spark.driver.host" not in cluster and "spark.pyspark.python" not in cluster
    assert cluster["spark.task.maxFailures"] == "3"
    with pytest.raises(ValueError, match="Spark setting"):
        pspark.session_config("local[2,3]", "app", {"spark.x": None})


def _fake_java(tmp_path, version_line: str) -> str:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return str(home)


def test_missing_or_old_java_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(SparkUnavailable, match=r"Java was not found on \$JAVA_HOME"):
        pspark.check_java()
    monkeypatch.setenv("JAVA_HOME", _fake_java(tmp_path, 'openjdk version "11.0.2" 2019-01-15'))
    with pytest.raises(SparkUnavailable, match="is Java 11; this Spark needs Java 17"):
        pspark.check_java(17)
    assert pspark.check_java(8).endswith("/bin/java")
    monkeypatch.setenv("JAVA_HOME", _fake_java(tmp_path / "old", 'java version "1.8.0_392"'))
    with pytest.raises(SparkUnavailable, match="is Java 8"):
        pspark.check_java(11)


def test_missing_pyspark_is_reported(monkeypatch):
    monkeypatch.setattr(pspark, "_running", None)  # as in a process that has no session yet
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(SparkUnavailable, match=r"pyspark is not installed: .*fdb-jobs\[spark\]"):
        pspark.spark_session()


def test_clean_temporaries_removes_only_old_leftovers(tmp_path):
    for name in (".part-00001.tmp-abc", ".part-00002.old-def", ".part-00003.tmp-new", "part-00004", ".hidden"):
        (tmp_path / name).mkdir()
    old = time.time() - 7200
    for name in (".part-00001.tmp-abc", ".part-00002.old-def", "part-00004", ".hidden"):
        os.utime(tmp_path / name, (old, old))
    removed = clean_temporaries(str(tmp_path), older_than=3600)
    assert removed == [str(tmp_path / ".part-00001.tmp-abc"), str(tmp_path / ".part-00002.old-def")]
    assert sorted(os.listdir(tmp_path)) == [".hidden", ".part-00003.tmp-new", "part-00004"]
    assert clean_temporaries(str(tmp_path / "missing")) == []


# --- with Spark -----------------------------------------------------------------------------------


def _frame(spark, rows):
    from decimal import Decimal

    data = [(i, i % 3, Decimal(i) / 4, f"n{i}") for i in rows]
    return spark.createDataFrame(data, pipeline.spark_schema(COLUMNS))


def test_one_session_per_process_on_loopback(spark):
    assert pipeline.spark_session() is spark
    assert pipeline.spark_session(app_name="another", config={"spark.x": "1"}) is spark
    conf = spark.sparkContext.getConf()
    if pspark.is_local(spark.sparkContext.master):
        assert spark.sparkContext.master == pspark.resolve_master()
        assert conf.get("spark.driver.host") == conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    with pytest.raises(ValueError, match="one session per process"):
        pipeline.spark_session("local[1]")


def test_partitions_written_with_spark_are_recorded_in_the_catalog(spark, tmp_path):
    import pyarrow.parquet as pq

    db = jobs.open("memory:")
    try:
        pipeline.create_database(db, "shop", location=str(tmp_path / "shop"))
        pipeline.publish_database(db, "shop")
        table = pipeline.stage_table(db, "shop", "orders", COLUMNS, partition_by="chunk", partitions=2)
        sizes = {0: range(0, 50), 1: range(0)}  # partition 1 has no rows: still a partition
        for pid, rows in sizes.items():
            written = write_partition(_frame(spark, rows), table.partition_location(pid, "w1"), columns=table, files=1)
            assert written.rows == len(rows) and written.files == 1 and written.bytes > 0
            pipeline.set_partition(db, table, pid, written.location, rows=written.rows, bytes=written.bytes)
        table = pipeline.commit_table(db, table)

        parts = pipeline.get_partitions(db, pipeline.get_table(db, "shop", "orders"))
        assert [p.rows for p in parts] == [50, 0]
        frames = [read_partition(spark, p.location, columns=table) for p in parts]
        assert frames[0].count() == 50 and frames[1].count() == 0
        # Parquet readers make every column nullable: names and types are what must match.
        assert [(f.name, f.dataType) for f in frames[0].schema] == [(f.name, f.dataType) for f in pipeline.spark_schema(table)]
        assert sorted(r.id for r in frames[0].select("id").collect()) == list(range(50))
        # Plain Parquet: other readers see the same rows.
        files = [f for f in os.listdir(parts[0].location) if f.endswith(".parquet")]
        assert pq.read_table(os.path.join(parts[0].location, files[0])).num_rows == 50
        # Only the partition directories: no temporaries left beside them.
        assert sorted(os.listdir(table.location)) == ["part-00000-w1", "part-00001-w1"]
    finally:
        db.close()


def test_a_failing_write_leaves_no_directory(spark, tmp_path):
    from pyspark.sql import functions as F

    @F.udf("bigint", useArrow=False)  # Arrow UDFs need pandas, not a dependency
    def poison(x):
        if x == 7:
            raise RuntimeError("bad row 7")
        return x

    target = tmp_path / "part-00000"
    df = _frame(spark, range(10)).withColumn("id", poison("id"))
    with pytest.raises(PartitionDataError, match="writing partition data to .*part-00000.* failed") as err:
        write_partition(df, str(target), columns=COLUMNS)
    assert err.value.__cause__ is not None
    assert os.listdir(tmp_path) == []  # neither the directory nor a temporary
    with pytest.raises(PartitionDataError, match="does not exist"):
        read_partition(spark, str(target))


def test_failed_tasks_are_retried(spark, tmp_path):
    from pyspark.sql import functions as F

    marker = str(tmp_path / "failed-once")

    @F.udf("bigint", useArrow=False)  # Arrow UDFs need pandas, not a dependency
    def flaky(x):
        try:  # the first task attempt to get here fails; its retry succeeds
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return x
        raise RuntimeError("transient failure")

    df = _frame(spark, range(20)).withColumn("id", flaky("id"))
    written = write_partition(df, str(tmp_path / "out" / "part-00000"), columns=COLUMNS)
    assert written.rows == 20 and os.path.exists(marker)


def test_directories_are_written_once_unless_overwritten(spark, tmp_path):
    target = str(tmp_path / "part-00000")
    write_partition(_frame(spark, range(3)), target, columns=COLUMNS)
    with pytest.raises(PartitionDataExists, match="already exists"):
        write_partition(_frame(spark, range(5)), target, columns=COLUMNS)
    replaced = write_partition(_frame(spark, range(5)), target, columns=COLUMNS, overwrite=True)
    assert replaced.rows == 5 and read_partition(spark, target).count() == 5
    assert os.listdir(tmp_path) == ["part-00000"]  # the old directory is gone, no temporaries


def test_data_must_match_the_table_schema(spark, tmp_path):
    from pyspark.sql import functions as F

    df = _frame(spark, range(2)).withColumnRenamed("name", "label").withColumn("chunk", F.col("chunk").cast("string"))
    with pytest.raises(ValueError, match=r"missing columns \['name'\]; extra columns \['label'\]; chunk is string, not int"):
        write_partition(df, str(tmp_path / "p"), columns=COLUMNS)
    assert not os.path.exists(tmp_path / "p")
