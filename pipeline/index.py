"""The ``build_index`` operation: a per-partition sorted index on one column, persisted.

For each partition, the index is a Parquet directory of ``(key, file, row)`` rows sorted
by ``key``: ``file`` is the data file (name within the partition directory) and ``row``
the row's position in it (Spark's ``_metadata.row_index``), so a lookup reads only the
rows it needs.  Built in steps that are saved as progress, so a job whose processor dies
resumes where it stopped: one sorted run per data file, then one merge of the runs.  It
cannot fail (bad arguments are refused when it starts); several indexes build at once.

Index records, next to the catalog (``("indexes", db, table, name)`` -> JSON
``{column, table_id, location, state: building|ready|failed}``; the layout's version at
``("indexes", None, "layout")``); the data lives in the table version's directory, one
directory per build (``_index-<name>.<build>/part-NNNNN``), so it goes with the table
version; a build that failed or was cancelled goes to the trash.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid

import orjson

from jobs import prefixes
from jobs.codec import read_json
from jobs.engine import run, within
from jobs.layouts import Layout
from processors.operations import Operation

from . import catalog
from .errors import CatalogError, CatalogLayoutError, CatalogStoreError, PipelineError
from .frames import partition_frame, split_name
from .partition_files import read_partition, write_partition
from .spark import spark_schema, spark_session

LAYOUT = Layout("index", prefixes.INDEXES, 1, error=CatalogStoreError, newer=CatalogLayoutError)
INDEXES = LAYOUT.space


class IndexExists(PipelineError):
    """An index of that name already exists on the table (ready or being built)."""


def _key(qualified: str, name: str) -> bytes:
    db, table = split_name(qualified)
    return INDEXES.pack((db, table, name))


def get_index(tr, qualified: str, name: str) -> dict | None:
    """The index record, or None."""

    def body(tr):
        LAYOUT.check(tr)
        return read_json(tr, _key(qualified, name))

    return within(tr, body)


def _put(tr, qualified: str, name: str, record: dict) -> None:
    LAYOUT.ensure(tr)
    tr.set(_key(qualified, name), orjson.dumps(record))


def build_directory(table, arg: dict) -> str:
    """The directory of one build of an index (``arg``: the operation's): each build
    writes its own, so a build that failed or was cancelled goes to the trash whole and a
    later build of the same name never shares its files (builds started before builds had
    ids used ``_index-<name>``)."""
    build = arg.get("build")
    return os.path.join(table.location, f"_index-{arg['name']}" + (f".{build}" if build else ""))


def index_location(directory: str, pid) -> str:
    """Where partition ``pid`` of an index lives, in its build's ``directory`` (a ready
    index's record holds it as ``location``)."""
    return os.path.join(directory, f"part-{int(pid):05d}")


def build_index(db, ops, qualified: str, column: str, name: str) -> int:
    """Start building index ``name`` on ``column`` of table ``"db.table"``; returns the
    operation's instance id.  Raises IndexExists, ValueError for an unknown column, and
    OperationRefused (an incompatible operation runs on the table)."""

    nonce = uuid.uuid4().hex  # recognises this call's own commit behind commit_unknown_result

    def body(tr):
        dbname, tname = split_name(qualified)
        table = catalog.get_table(tr, dbname, tname)
        if column not in {c.name for c in table.columns}:
            raise ValueError(f"table {qualified} has no column {column!r}")
        old = get_index(tr, qualified, name)
        if old is not None and old.get("nonce") == nonce:
            return old["instance"]
        if old is not None and old["state"] != "failed":
            raise IndexExists(f"index {name!r} on {qualified} already exists ({old['state']})")
        instance = ops.start_operation("build_index", qualified, {"column": column, "name": name, "build": nonce},
                                       tr=tr)
        record = {"column": column, "table_id": table.id, "state": "building", "since": time.time(),
                  "instance": instance, "nonce": nonce}
        _put(tr, qualified, name, record)
        return instance

    return run(db, body)


class BuildIndex(Operation):
    """Build a sorted index; argument ``{"column": ..., "name": ...}``."""

    type = "build_index"
    concurrent = True
    compatible_with = frozenset({"validate"})
    can_fail = False
    resumable = True
    job_timeout = 120.0

    def __init__(self, db):
        self.db = db

    def start_or_resume_job(self, ctx):
        from pyspark.sql import functions as F

        spark = spark_session()
        column = ctx.arg["column"]
        table, part, df = partition_frame(self.db, spark, ctx.table, ctx.partition)
        where = index_location(build_directory(table, ctx.arg), ctx.partition)
        progress = dict(ctx.progress or {"runs": [], "merged": False})
        files = sorted(f for f in os.listdir(part.location) if f.endswith(".parquet"))
        runs_dir = os.path.join(where, "runs")
        for data_file in files:  # one sorted run per data file, each saved as progress
            run_dir = os.path.join(runs_dir, data_file)
            if data_file in progress["runs"] and os.path.isdir(run_dir):
                continue
            rows = (spark.read.schema(df.schema).parquet("file://" + os.path.join(part.location, data_file))
                    .select(F.col(f"`{column}`").alias("key"), F.lit(data_file).alias("file"),
                            F.col("_metadata.row_index").alias("row")))
            write_partition(rows.sortWithinPartitions("key", "row"), run_dir, files=1, overwrite=True)
            progress["runs"] = sorted(set(progress["runs"]) | {data_file})
            ctx.save_progress(progress)  # fenced: raises Halt if the job was lost
        sorted_dir = os.path.join(where, "sorted")
        if not (progress["merged"] and os.path.isdir(sorted_dir)):
            runs = [read_partition(spark, os.path.join(runs_dir, f)) for f in files]
            merged = runs[0] if runs else spark.createDataFrame([], "key string, file string, row long")
            for r in runs[1:]:
                merged = merged.unionByName(r)
            out = write_partition(merged.orderBy("key", "file", "row"), sorted_dir, files=1, overwrite=True)
            progress.update(merged=True, rows=out.rows)
            ctx.save_progress(progress)
            shutil.rmtree(runs_dir, ignore_errors=True)
        return {"rows": progress.get("rows", 0), "runs": len(files), "location": sorted_dir}

    def cancel_job_and_cleanup(self, tr, arg, table, partition):
        t = _table_or_none(tr, table)
        if t is not None:  # (a dropped table took its index data with it)
            catalog.send_to_trash(tr, [index_location(build_directory(t, arg), partition)],
                                  f"index {arg['name']} of {table}: a partition that did not complete")

    def complete_operation(self, tr, arg, table, success, results):
        record = get_index(tr, table, arg["name"])
        if record is None or record["state"] != "building":
            return  # completed before (completion may run twice)
        t = _table_or_none(tr, table)
        current = t is not None and t.id == record["table_id"]
        ready = success and current
        record.update(state="ready" if ready else "failed", since=time.time())
        if ready:
            record["location"] = build_directory(t, arg)
        elif current:  # (a replaced or dropped table version took the build's directory with it)
            catalog.send_to_trash(tr, [build_directory(t, arg)], f"index {arg['name']} of {table}: a failed build")
        _put(tr, table, arg["name"], record)


def _table_or_none(tr, qualified: str):
    """The committed table, or None if it (or its database) is gone."""
    dbname, tname = split_name(qualified)
    try:
        return catalog.get_table(tr, dbname, tname, published_only=False)
    except CatalogError:
        return None


def lookup(db, spark, qualified: str, name: str, key):
    """Rows of ``"db.table"`` whose indexed column equals ``key``, read through the index
    (only the matching rows of the matching files)."""
    from pyspark.sql import functions as F

    record = get_index(db, qualified, name)
    if record is None or record["state"] != "ready":
        raise PipelineError(f"index {name!r} on {qualified} is not ready")
    dbname, tname = split_name(qualified)
    table = catalog.get_table(db, dbname, tname)
    found = []
    for part in catalog.get_partitions(db, table):
        index = read_partition(spark, os.path.join(index_location(record["location"], part.pid), "sorted"))
        hits = index.filter(F.col("key") == F.lit(key)).collect()
        for file in sorted({h["file"] for h in hits}):
            wanted = {h["row"] for h in hits if h["file"] == file}
            rows = (spark.read.schema(spark_schema(table)).parquet("file://" + os.path.join(part.location, file))
                    .select("*", F.col("_metadata.row_index").alias("__row"))
                    .filter(F.col("__row").isin(list(wanted))).drop("__row"))
            found += [r.asDict() for r in rows.collect()]
    return found
