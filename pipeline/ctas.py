"""Atomic ``CREATE TABLE ... AS SELECT`` (the Flink seed): a table made from a Spark SQL
query over catalog tables, visible complete or not at all.

    instance = ctas.ctas(db, ops, "shop.summary",
                         "SELECT c.name AS customer, sum(o.qty) AS qty "
                         "FROM shop.orders o JOIN shop.customers c ON o.customer = c.id "
                         "GROUP BY c.name",
                         partition_by="customer", partitions=4)
    outcome = ctas.wait(ops, "shop.summary", instance)    # CtasFailed if it was aborted

Two-phase, as Flink's ``TwoPhaseCatalogTable`` with its job status hook:

1. **Begin** (:func:`ctas`, one transaction): the target is staged (``catalog.stage_table``,
   owned by the CTAS) together with the start of a ``ctas`` operation, one job per target
   partition, so there is never an operation without its staged table or the reverse.  The
   query was analysed before (Spark, in the caller): its result schema is the target's, a
   query that does not analyse, is not deterministic or yields columns a table cannot hold
   is refused (:class:`QueryError`) with nothing written.  The same transaction **pins**
   the sources: the versions and partition locations of the catalog tables the query
   reads, so every partition job reads the same snapshot (a source that changes meanwhile
   never makes a target mixing two of its states).
2. **Partition jobs** (any processor): each runs the whole query over the pinned sources in
   its own Spark session (its temp views), keeps the rows of its partition
   (:func:`partition_expr`), writes them with ``write_partition`` into
   ``partition_location(pid, "<ctas id>.<attempt id>")`` of the staged table, and registers
   that directory in the transaction that finishes the job (``ctx.job.on_commit``): only
   the holder of the job's lock registers, exactly once.  A query error (analysis, a
   ``raise_error``, a failing task after Spark's retries, pinned source data gone) fails the
   partition at once; other errors are retried by the operation's policy.
3. **Commit or abort** (the coordinator, :meth:`CreateTableAs.complete_operation`, in
   the transaction that finishes its job, fenced by its lock): all partitions succeeded: ``commit_table`` (an atomic swap; with
   ``replace=True`` the old version goes to the trash in that transaction); a failure, a
   cancel, or a commit that cannot happen (the name was taken since, without
   ``replace``): ``abort_table`` (the staging goes to the trash).  The outcome is recorded
   in the same transaction, with the operation's final state: a coordinator that lost its
   job commits none of it, and the one that replaces it completes the CTAS.

Readers only ever see committed versions, so they see the old state until the commit and
the new one after; a crash anywhere leaves the operation running, and the queue finishes
it (a lost partition job runs again elsewhere and writes a new attempt directory; a lost
coordinator is replaced).  Directories of attempts that never registered stay inside the
staged version's directory: they go to the trash with it on abort, and by themselves in
the commit's transaction (:func:`trash_attempts`).

**Source tables** are written ``database.table`` in the query (backquotes allowed; names
compare in lower case).  Each is rewritten to a temp view ``database__table``, so columns
are qualified by an alias or by the full ``database.table.column``, not by the bare table
name.  Only committed tables of published databases are sources.

**Partition assignment** (:func:`partition_expr`, the one place that defines it): a row
belongs to partition ``pmod(key, N)`` when the ``partition_by`` column is an integer type,
else ``pmod(xxhash64(key), N)``.

**Determinism.**  Every partition job evaluates the query again; a query Spark marks
non-deterministic (``rand()``, ``uuid()``, ...) is refused.  ``LIMIT`` without ``ORDER BY``
or ``first()`` over unordered data are deterministic to Spark but not in their result:
order them.

This module holds the start, the outcome and the operation; ``ctas_query`` the partition
rule, the source tables and the analysis; ``ctas_partition`` a partition job's pieces
(pinned sources, the halt watcher, attempt directories); ``ctas_store`` the store keys.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import orjson

import jobs
from jobs.checks import ArgumentTypeError
from jobs.engine import is_database, run
from processors.operations import JobFailed, Operation, Operations, OperationStatus

from . import catalog, schema
from .ctas_partition import attempt_token, cancelled_when_halted, source_frame, trash_attempts
from .ctas_query import (
    analyse,
    find_sources,
    partition_expr,
    rewrite_query,
    spark_error,
    summary,
    table_partition_expr,
    view_name,
)
from .ctas_store import clear_pins, owner, pin_sources, pinned_sources, read_record, record_key, staged_version
from .errors import (
    CtasFailed,
    PartitionBusy,
    PipelineError,
    TableExists,
    TableIncomplete,
    TableNotFound,
)
from .frames import split_name
from .partition_files import write_partition
from .spark import new_session, release_session

__all__ = [
    "TYPE",
    "CreateTableAs",
    "Outcome",
    "cancel",
    "ctas",
    "outcome",
    "owner",
    "partition_expr",
    "rewrite_query",
    "table_partition_expr",
    "trash_attempts",
    "view_name",
    "wait",
]

TYPE = "ctas"  # the operation type (jobs "op.ctas" and "op.ctas.complete")
QUERY_MAX = 50_000  # characters; the query is kept in the operation's record (FDB values: 100 kB)
START_ATTEMPTS = 3  # analyse + start again when a source changed in between


# --- starting ------------------------------------------------------------------------------


def ctas(
    db,
    ops: Operations,
    target: str,
    query: str,
    *,
    partition_by: str | None = None,
    partitions: int = 1,
    replace: bool = False,
) -> int:
    """Start creating table ``target`` (``"db.table"``) as the result of Spark SQL
    ``query``; returns the operation's instance id (see :func:`wait`, :func:`cancel`).

    ``partition_by``: a result column whose value assigns rows to ``partitions`` partitions
    (:func:`partition_expr`), None for a regular table (one partition); ``replace``: the
    commit replaces a committed table of that name (else its existence is an error now,
    and an abort at commit if it was created meanwhile).

    Takes a database (it analyses the query with Spark between transactions; the start is
    one transaction, safe to retry: a start whose commit reported an unknown result is
    recognised).  Raises QueryError (the query does not analyse, is not deterministic, or
    yields columns a table cannot hold), TableExists, DatabaseNotFound, OperationRefused
    (another CTAS, or an incompatible operation, runs on ``target``), ValueError for bad
    arguments; nothing is written then."""
    if not is_database(db):
        raise ArgumentTypeError(
            "ctas analyses the query with Spark between transactions: pass a database, not a transaction")
    dbname, name = split_name(target)
    schema.name(dbname, "database name")
    schema.name(name, "table name")
    if not isinstance(query, str):
        raise ArgumentTypeError(f"query must be a str, not {type(query).__name__}")
    if not query.strip():
        raise ValueError("query must not be empty")
    if len(query) > QUERY_MAX:
        raise ValueError(f"query is {len(query)} characters long, over the limit of {QUERY_MAX}")
    if partition_by is not None and not isinstance(partition_by, str):
        raise ArgumentTypeError(f"partition_by must be a str or None, not {type(partition_by).__name__}")
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ArgumentTypeError(f"partitions must be an int, not {type(partitions).__name__}")
    if not isinstance(replace, bool):
        raise ArgumentTypeError(f"replace must be a bool, not {type(replace).__name__}")
    if not isinstance(ops.kinds.get(TYPE), CreateTableAs):
        raise ValueError("register CreateTableAs with the Operations first (ops.register(CreateTableAs(db)))")
    ctas_id = uuid.uuid4().hex  # drawn once: a retried start recognises its own commit

    for _ in range(START_ATTEMPTS):
        sources = run(db, lambda tr: find_sources(tr, query))
        sql, columns = analyse(query, sources, partition_by)
        started = run(db, lambda tr: _start(tr, ops, ctas_id, target, query, sql, sources, columns,
                                            partition_by, partitions, replace))
        if started is not None:
            return started
    raise PipelineError(f"the source tables of the CTAS of {target} kept changing while it started: try again")


def _start(tr, ops, ctas_id, target, query, sql, sources, columns, partition_by, partitions, replace) -> int | None:
    """The start transaction; None when the sources' schemas changed since the analysis."""
    done = read_record(tr, ctas_id, "start")
    if done is not None:
        return done["instance"]  # this call's own commit, behind commit_unknown_result
    now = find_sources(tr, query)
    if {q: t.columns for q, t in now.items()} != {q: t.columns for q, t in sources.items()}:
        return None
    dbname, name = split_name(target)
    staged = catalog.stage_table(tr, dbname, name, columns, partition_by=partition_by, partitions=partitions,
                                 replace=replace, owner=owner(ctas_id))
    arg = {"id": ctas_id, "table_id": staged.id, "query": query, "sql": sql, "sources": sorted(now),
           "partition_by": partition_by, "partitions": staged.partitions, "replace": replace}
    instance = ops.start_operation(TYPE, target, arg, partitions=[str(p) for p in staged.partition_ids], tr=tr)
    tr.set(record_key(ctas_id, "start"), orjson.dumps({"target": target, "instance": instance}))
    pin_sources(tr, ctas_id, now)
    return instance


# --- outcome -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How a CTAS ended: ``state`` "committed" (``table_id``: the committed version) or
    "aborted" (``reason``); ``operation``: the operation's status."""

    state: str
    target: str
    table_id: str | None
    reason: str | None
    operation: OperationStatus | None = None

    @property
    def committed(self) -> bool:
        return self.state == "committed"


def outcome(tr, ops: Operations, target: str, instance: int) -> Outcome | None:
    """The outcome of CTAS ``instance`` on ``target``, None while it runs.  Raises
    OperationNotFound."""

    def body(tr):
        status = ops.operation_status(tr, target, TYPE, instance)
        record = read_record(tr, status.arg["id"], "outcome")
        if record is None:
            return None
        return Outcome(record["state"], target, record.get("table_id"), record.get("reason"), status)

    return run(tr, body)


def wait(ops: Operations, target: str, instance: int, timeout: float | None = None) -> Outcome:
    """Block until CTAS ``instance`` on ``target`` ended (``timeout`` seconds at most:
    TimeoutError); its committed Outcome, or CtasFailed (``.outcome``) if it was aborted
    (a failed query, a cancel, a commit that could not happen)."""
    ops.wait_operation(target, TYPE, instance, timeout=timeout)
    result = outcome(ops.db, ops, target, instance)
    if result is None:  # completed without an outcome record: not written by this module
        raise PipelineError(f"CTAS #{instance} of {target} completed without an outcome")
    if not result.committed:
        raise CtasFailed(f"CTAS #{instance} of {target} was aborted: {result.reason}", result)
    return result


def cancel(ops: Operations, target: str, instance: int) -> bool:
    """Cancel CTAS ``instance`` on ``target``: its jobs stop, its staging is aborted.
    False if it had already ended."""
    return ops.cancel_operation(target, TYPE, instance)



# --- the operation -------------------------------------------------------------------------


class CreateTableAs(Operation):
    """The ``ctas`` operation (see the module doc); its argument is written by :func:`ctas`."""

    type = TYPE
    concurrent = False  # one CTAS per target name at a time
    compatible_with = frozenset()  # nothing else runs on a table being replaced
    can_fail = True
    resumable = False  # a run starts over, into a new attempt directory
    job_timeout = 120.0

    def __init__(self, db):
        self.db = db

    # --- partition jobs ---------------------------------------------------------------------

    def start_or_resume_job(self, ctx):
        from pyspark.sql import functions as F

        arg, pid = ctx.arg, int(ctx.partition)
        staged, pins = run(self.db, lambda tr: (staged_version(tr, ctx.table, arg), pinned_sources(tr, arg["id"])))
        if staged is None:
            raise JobFailed(f"the staged table of CTAS {ctx.table} #{ctx.instance} is gone (aborted or dropped)")
        session = new_session()  # temp views of its own
        location = staged.partition_location(pid, attempt_token(arg["id"], ctx.attempt_id))
        try:
            with cancelled_when_halted(session, ctx.job, f"ctas-{ctx.attempt_id}"):
                for qualified, pinned in pins.items():
                    source_frame(session, qualified, pinned).createOrReplaceTempView(pinned["view"])
                df = session.sql(arg["sql"])
                expr = table_partition_expr(staged)
                if expr is not None:
                    key = staged.partition_by
                    df = df.where(F.expr(expr) == F.lit(pid)).withColumn(
                        key,
                        F.coalesce(F.col(f"`{key}`"), F.raise_error(F.lit(
                            f"CTAS {ctx.table}: partition column {key} is NULL in a result row; "
                            "filter NULL keys out in the query"))),
                    )
                out = write_partition(df, location, columns=staged)
        except (jobs.Halt, JobFailed):
            raise
        except Exception as exc:  # noqa: BLE001 - query errors fail the partition, others are retried
            if ctx.job.halted:
                raise jobs.Halt(f"CTAS partition {pid} of {ctx.table} was halted") from exc
            cause = spark_error(exc)
            if cause is None and not isinstance(exc, ValueError):  # ValueError: conform's schema check
                raise
            raise JobFailed(f"the query failed on partition {pid}: {summary(cause or exc)}") from exc
        finally:
            release_session(session)
        ctx.job.check()
        ctx.job.on_commit(lambda tr: catalog.set_partition(tr, staged, pid, out.location, rows=out.rows,
                                                           bytes=out.bytes))
        return {"rows": out.rows, "bytes": out.bytes, "files": out.files, "location": out.location}

    def cancel_job_and_cleanup(self, tr, arg, table, partition):
        staged = staged_version(tr, table, arg)
        if staged is not None:
            trash_attempts(tr, staged, arg["id"], int(partition))

    # --- commit or abort -------------------------------------------------------------------

    def complete_operation(self, tr, arg, table, success, results):
        done = read_record(tr, arg["id"], "outcome")
        if done is not None:
            return done["state"] == "committed"  # completed before: completion may run twice
        staged = staged_version(tr, table, arg)
        record = {"state": "aborted", "table_id": arg["table_id"], "reason": None, "at": time.time()}
        if staged is None:
            record["reason"] = "the staged table was dropped (with its database?) before the CTAS ended"
        elif success:
            try:
                catalog.commit_table(tr, staged)
                record["state"] = "committed"
            except (TableExists, TableIncomplete, PartitionBusy, TableNotFound) as exc:
                record["reason"] = f"the commit failed: {exc}"
                catalog.abort_table(tr, staged)
        else:
            record["reason"] = _failure_reason(results)
            catalog.abort_table(tr, staged)
        clear_pins(tr, arg["id"])
        tr.set(record_key(arg["id"], "outcome"), orjson.dumps(record))
        if record["state"] != "committed":
            return False  # the operation ends failed: no table was committed
        dbname, name = split_name(table)
        trash_attempts(tr, catalog.get_table(tr, dbname, name, published_only=False), arg["id"])
        return True


def _failure_reason(results: dict) -> str:
    for part in sorted(results, key=lambda p: int(p) if str(p).isdigit() else 0):
        outcome = results[part]
        if outcome.get("state") == "failed":
            reason = (outcome.get("result") or {}).get("reason", "failed")
            return f"partition {part} failed: {reason}"
    return "cancelled"
