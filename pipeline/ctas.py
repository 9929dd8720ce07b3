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
3. **Commit or abort** (the coordinator, :meth:`CreateTableAs.complete_operation`, one
   transaction): all partitions succeeded: ``commit_table`` (an atomic swap; with
   ``replace=True`` the old version goes to the trash in that transaction); a failure, a
   cancel, or a commit that cannot happen (the name was taken since, without
   ``replace``): ``abort_table`` (the staging goes to the trash).  The outcome is recorded
   in the same transaction, and completion may run twice: the second run sees the outcome
   and does nothing.

Readers only ever see committed versions, so they see the old state until the commit and
the new one after; a crash anywhere leaves the operation running, and the queue finishes
it (a lost partition job runs again elsewhere and writes a new attempt directory; a lost
coordinator is replaced).  Directories of attempts that never registered stay inside the
staged version's directory: they go to the trash with it on abort, and are removed after
a commit (:func:`sweep_attempts`).

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

Store keys (beside the catalog's, under ``("ctas",)``; ``id`` is the CTAS's id, drawn once
per :func:`ctas` call, also the staged table's owner ``ctas.<id>``)::

    ("ctas", id, "start")                  -> JSON {target, instance}   # a retried start finds it
    ("ctas", id, "source", qualified)      -> JSON {view, table_id, columns}   # pinned; cleared at the end
    ("ctas", id, "pin", qualified, pid)    -> JSON location                     # pinned; cleared at the end
    ("ctas", id, "outcome")                -> JSON {state: committed|aborted, table_id, reason, at}
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from functools import reduce

import orjson

import jobs
from jobs.checks import ArgumentTypeError
from jobs import prefixes
from jobs.engine import Subspace, value_of
from jobs.engine.transactional import is_database, run
from processors.operations import JobFailed, Operation, Operations, OperationStatus

from . import catalog, schema
from .errors import (
    CatalogError,
    CtasFailed,
    DatabaseNotFound,
    DatabaseNotPublished,
    PartitionBusy,
    PartitionDataError,
    PipelineError,
    QueryError,
    TableExists,
    TableIncomplete,
    TableNotFound,
)
from .frames import split_name
from .partition_files import read_partition, write_partition
from .records import Table
from .spark import spark_schema, spark_session

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
    "sweep_attempts",
    "table_partition_expr",
    "view_name",
    "wait",
]

TYPE = "ctas"  # the operation type (jobs "op.ctas" and "op.ctas.complete")
CTAS = Subspace(prefixes.CTAS)
QUERY_MAX = 50_000  # characters; the query is kept in the operation's record (FDB values: 100 kB)
START_ATTEMPTS = 3  # analyse + start again when a source changed in between
HALT_POLL = 0.1  # seconds between checks that a partition job still holds its lock
INTEGRAL = ("tinyint", "smallint", "int", "bigint")


# --- the partition assignment rule ---------------------------------------------------------


def partition_expr(column: str, type: str, partitions: int) -> str:
    """The Spark SQL expression giving the partition (0 .. ``partitions``-1) of a row whose
    partition column ``column`` has catalog type ``type``: ``pmod(key, N)`` for integer
    types (so integer keys such as chunk ids map to partitions by their value), else
    ``pmod(xxhash64(key), N)``.  The one definition of the rule: CTAS writes rows by it,
    and readers (validate, build index, lookups) may rely on it."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions must be an int >= 1, not {partitions!r}")
    key = "`" + column.replace("`", "``") + "`"
    return f"pmod({key}, {partitions})" if type in INTEGRAL else f"pmod(xxhash64({key}), {partitions})"


def table_partition_expr(table: Table) -> str | None:
    """:func:`partition_expr` of a table's partition column; None for a regular table."""
    if table.partition_by is None:
        return None
    col = next(c for c in table.columns if c.name == table.partition_by)
    return partition_expr(col.name, col.type, table.partitions)


# --- source tables in the query ------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<comment>--[^\n]*|/\*.*?\*/)
      | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<quoted>`(?:[^`]|``)*`)
      | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[A-Za-z]*)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<dot>\.)
      | (?P<other>.)""",
    re.S | re.X,
)


def _references(query: str) -> list[tuple[str, str, int, int]]:
    """``(database, table, start, end)`` of every ``a.b`` in the query (outside strings and
    comments) that is not the tail of a longer dotted name: the candidates for catalog
    tables.  Lower case; backquotes removed."""
    tokens = [(m.lastgroup, m.group(), m.start(), m.end()) for m in _TOKEN.finditer(query)]
    tokens = [t for t in tokens if t[0] not in ("ws", "comment")]
    found = []
    for i in range(len(tokens) - 2):
        a, dot, b = tokens[i : i + 3]
        if a[0] in ("ident", "quoted") and dot[0] == "dot" and b[0] in ("ident", "quoted"):
            if i > 0 and tokens[i - 1][0] == "dot":
                continue
            found.append((_ident(a), _ident(b), a[2], b[3]))
    return found


def _ident(token) -> str:
    kind, text = token[0], token[1]
    return (text[1:-1].replace("``", "`") if kind == "quoted" else text).lower()


def view_name(qualified: str) -> str:
    """The temp view a source table ``db.table`` is read through: ``db__table``."""
    db, name = split_name(qualified)
    return f"{db}__{name}"


def rewrite_query(query: str, sources) -> str:
    """``query`` with each reference to a table of ``sources`` (``"db.table"`` names)
    replaced by its view name (:func:`view_name`)."""
    sources = set(sources)
    out, last = [], 0
    for db, name, start, end in _references(query):
        if f"{db}.{name}" in sources:
            out += [query[last:start], view_name(f"{db}.{name}")]
            last = end
    return "".join(out) + query[last:]


def _find_sources(tr, query: str) -> dict[str, Table]:
    """The committed tables (of published databases) the query names."""
    found: dict[str, Table] = {}
    for db, name, _start, _end in _references(query):
        qualified = f"{db}.{name}"
        if qualified in found:
            continue
        try:
            found[qualified] = catalog.get_table(tr, db, name)
        except (ValueError, DatabaseNotFound, DatabaseNotPublished, TableNotFound):
            continue  # an alias.column, a struct field, or no such table (analysis says so)
    views: dict[str, str] = {}
    for qualified in found:
        other = views.setdefault(view_name(qualified), qualified)
        if other != qualified:
            raise QueryError(f"tables {other} and {qualified} would both be read as view {view_name(qualified)!r}")
    return found


# --- analysing the query -------------------------------------------------------------------


def _summary(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:500]


def _spark_error(exc: BaseException):
    """The PySpark error (the JVM's verdict on the query) in ``exc``'s chain, or None."""
    try:
        from pyspark.errors import PySparkException
    except ImportError:
        return None
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, PySparkException):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _result_columns(struct, partition_by: str | None) -> list[dict]:
    """The target schema from the query's result schema (Spark types -> catalog types); the
    partition column is declared non-nullable (rows with a NULL key fail their job)."""
    cols = []
    for f in struct.fields:
        t = f.dataType.simpleString()
        if re.fullmatch(r"(var)?char\(\d+\)", t):
            t = "string"
        cols.append({"name": f.name, "type": t, "nullable": bool(f.nullable) and f.name != partition_by})
    try:
        schema.columns(cols)
    except ValueError as exc:
        raise QueryError(
            f"the query's result cannot be a table: {exc} (name every result column with AS, "
            f"and CAST values to one of {', '.join(schema.TYPES)}, decimal(p,s))"
        ) from exc
    if partition_by is not None and partition_by not in [c["name"] for c in cols]:
        names = ", ".join(c["name"] for c in cols)
        raise ValueError(f"partition_by {partition_by!r} is not a column of the query's result ({names})")
    return cols


def _analyse(query: str, sources: dict[str, Table], partition_by: str | None) -> tuple[str, list[dict]]:
    """(the rewritten query, the target schema), from Spark's analysis of the query over
    empty views of the sources (no data is read)."""
    session = spark_session().newSession()
    for qualified, table in sources.items():
        session.createDataFrame([], spark_schema(table)).createOrReplaceTempView(view_name(qualified))
    sql = rewrite_query(query, sources)
    try:
        df = session.sql(sql)
        deterministic = bool(df._jdf.queryExecution().analyzed().deterministic())
    except Exception as exc:  # noqa: BLE001 - Spark's analysis errors, translated here
        if _spark_error(exc) is None:
            raise
        raise QueryError(f"the query does not analyse: {_summary(exc)}" + _hint(exc)) from exc
    if not deterministic:
        raise QueryError(
            "the query is not deterministic (rand(), uuid(), ...): each partition job evaluates it "
            "again, so its partitions would not come from one result"
        )
    return sql, _result_columns(df.schema, partition_by)


def _hint(exc: BaseException) -> str:
    if "TABLE_OR_VIEW_NOT_FOUND" in str(exc):
        return " (source tables are committed catalog tables of published databases, written database.table)"
    return ""


# --- starting ------------------------------------------------------------------------------


def _key(ctas_id: str, *rest) -> bytes:
    return CTAS.pack((ctas_id, *rest))


def _read(tr, key: bytes, default=None):
    raw = value_of(tr.get(key))
    return default if raw is None else orjson.loads(raw)


def owner(ctas_id: str) -> str:
    """The ``owner`` of a CTAS's staged table (``catalog.list_staged_tables(owner=...)``)."""
    return f"ctas.{ctas_id}"


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
        sources = run(db, lambda tr: _find_sources(tr, query))
        sql, columns = _analyse(query, sources, partition_by)
        started = run(db, lambda tr: _start(tr, ops, ctas_id, target, query, sql, sources, columns,
                                            partition_by, partitions, replace))
        if started is not None:
            return started
    raise PipelineError(f"the source tables of the CTAS of {target} kept changing while it started: try again")


def _start(tr, ops, ctas_id, target, query, sql, sources, columns, partition_by, partitions, replace) -> int | None:
    """The start transaction; None when the sources' schemas changed since the analysis."""
    done = _read(tr, _key(ctas_id, "start"))
    if done is not None:
        return done["instance"]  # this call's own commit, behind commit_unknown_result
    now = _find_sources(tr, query)
    if {q: t.columns for q, t in now.items()} != {q: t.columns for q, t in sources.items()}:
        return None
    dbname, name = split_name(target)
    staged = catalog.stage_table(tr, dbname, name, columns, partition_by=partition_by, partitions=partitions,
                                 replace=replace, owner=owner(ctas_id))
    arg = {"id": ctas_id, "table_id": staged.id, "query": query, "sql": sql, "sources": sorted(now),
           "partition_by": partition_by, "partitions": staged.partitions, "replace": replace}
    instance = ops.start_operation(TYPE, target, arg, partitions=[str(p) for p in staged.partition_ids], tr=tr)
    tr.set(_key(ctas_id, "start"), orjson.dumps({"target": target, "instance": instance}))
    for qualified, table in now.items():
        tr.set(_key(ctas_id, "source", qualified),
               orjson.dumps({"view": view_name(qualified), "table_id": table.id, "columns": table.schema}))
        for part in catalog.get_partitions(tr, table):
            tr.set(_key(ctas_id, "pin", qualified, part.pid), orjson.dumps(part.location))
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
        record = _read(tr, _key(status.arg["id"], "outcome"))
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


def _staged_version(tr, target: str, arg: dict) -> Table | None:
    """The CTAS's staged table version, None once committed or aborted."""
    dbname, _name = split_name(target)
    try:
        staged = catalog.list_staged_tables(tr, dbname, owner=owner(arg["id"]))
    except (ValueError, CatalogError):
        return None
    return next((t for t in staged if t.id == arg["table_id"]), None)


def _pins(tr, ctas_id: str) -> dict[str, dict]:
    """qualified -> {view, table_id, columns, locations: [location by pid]}."""
    space = CTAS[ctas_id]
    out: dict[str, dict] = {}
    r = space["source"].range()
    for kv in tr.get_range(r.start, r.stop):
        out[space["source"].unpack(kv.key)[0]] = {**orjson.loads(bytes(kv.value)), "locations": []}
    r = space["pin"].range()
    for kv in tr.get_range(r.start, r.stop):
        qualified, _pid = space["pin"].unpack(kv.key)
        out[qualified]["locations"].append(orjson.loads(bytes(kv.value)))
    return out


def _source_frame(session, qualified: str, pinned: dict):
    """A DataFrame of a pinned source version: the union of its pinned partitions."""
    cols = pinned["columns"]
    try:
        frames = [read_partition(session, loc, columns=cols) for loc in pinned["locations"]]
    except PartitionDataError as exc:
        raise JobFailed(
            f"data of source {qualified} pinned when the CTAS started is gone (replaced and collected "
            f"since?): {_summary(exc)}; run the CTAS again"
        ) from exc
    if not frames:
        return session.createDataFrame([], spark_schema(cols))
    return reduce(lambda a, b: a.unionByName(b), frames)


@contextlib.contextmanager
def _cancelled_when_halted(session, job, group: str):
    """Run the block's Spark jobs in job group ``group``, cancelled as soon as the partition
    job is halted (lost, cancelled, handed back) instead of running on unseen."""
    sc = session.sparkContext
    sc.setJobGroup(group, "ctas partition", interruptOnCancel=False)
    done = threading.Event()

    def watch():
        while not done.wait(HALT_POLL):
            if job.halted:
                sc.cancelJobGroup(group)
                return

    watcher = threading.Thread(target=watch, name=f"halt-{group}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        sc.setLocalProperty("spark.jobGroup.id", None)


def attempt_token(ctas_id: str, attempt_id: str) -> str:
    """The partition-directory token of one attempt: ``<ctas id>.<attempt id>``."""
    return f"{ctas_id}.{attempt_id}"


def _attempt_dirs(table: Table, ctas_id: str, pid: int | None = None) -> list[str]:
    """Directories in ``table``'s location written by attempts of this CTAS (of ``pid``)."""
    try:
        names = os.listdir(table.location)
    except FileNotFoundError:
        return []
    stem = "part-" if pid is None else f"part-{pid:05d}-"
    mark = f"-{ctas_id}."
    return sorted(os.path.join(table.location, n) for n in names if n.startswith(stem) and mark in n)


def sweep_attempts(db, table: Table, ctas_id: str, pid: int | None = None) -> list[str]:
    """Delete the directories of this CTAS's attempts (of partition ``pid``) that no
    partition record references: runs that lost their job, failed, or were cancelled.
    Only this CTAS's directories (named after its id), so other writers' are safe.
    Returns the paths removed."""
    if not table.managed:
        return []
    try:
        referenced = {p.location for p in catalog.get_partitions(db, table)}
    except TableNotFound:
        return []  # dropped or aborted: its whole location is in the trash
    removed = []
    for path in _attempt_dirs(table, ctas_id, pid):
        if path not in referenced:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


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
        staged, pins = run(self.db, lambda tr: (_staged_version(tr, ctx.table, arg), _pins(tr, arg["id"])))
        if staged is None:
            raise JobFailed(f"the staged table of CTAS {ctx.table} #{ctx.instance} is gone (aborted or dropped)")
        session = spark_session().newSession()  # temp views of its own
        location = staged.partition_location(pid, attempt_token(arg["id"], ctx.attempt_id))
        try:
            with _cancelled_when_halted(session, ctx.job, f"ctas-{ctx.attempt_id}"):
                for qualified, pinned in pins.items():
                    _source_frame(session, qualified, pinned).createOrReplaceTempView(pinned["view"])
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
            cause = _spark_error(exc)
            if cause is None and not isinstance(exc, ValueError):  # ValueError: conform's schema check
                raise
            raise JobFailed(f"the query failed on partition {pid}: {_summary(cause or exc)}") from exc
        ctx.job.check()
        ctx.job.on_commit(lambda tr: catalog.set_partition(tr, staged, pid, out.location, rows=out.rows,
                                                           bytes=out.bytes))
        return {"rows": out.rows, "bytes": out.bytes, "files": out.files, "location": out.location}

    def cancel_job_and_cleanup(self, arg, table, partition):
        staged = run(self.db, lambda tr: _staged_version(tr, table, arg))
        if staged is not None:
            sweep_attempts(self.db, staged, arg["id"], int(partition))

    # --- commit or abort -------------------------------------------------------------------

    def complete_operation(self, arg, table, success, results):
        def body(tr):
            done = _read(tr, _key(arg["id"], "outcome"))
            if done is not None:
                return done  # completed before: completion may run twice
            staged = _staged_version(tr, table, arg)
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
            tr.clear_range(*_span(CTAS[arg["id"]]["source"]))
            tr.clear_range(*_span(CTAS[arg["id"]]["pin"]))
            tr.set(_key(arg["id"], "outcome"), orjson.dumps(record))
            return record

        record = run(self.db, body)
        if record["state"] != "committed":
            return False  # the operation ends failed: no table was committed
        dbname, name = split_name(table)
        try:
            current = catalog.get_table(self.db, dbname, name, published_only=False)
        except CatalogError:
            return True
        if current.id == arg["table_id"]:
            sweep_attempts(self.db, current, arg["id"])
        return True


def _span(space: Subspace) -> tuple[bytes, bytes]:
    r = space.range()
    return r.start, r.stop


def _failure_reason(results: dict) -> str:
    for part in sorted(results, key=lambda p: int(p) if str(p).isdigit() else 0):
        outcome = results[part]
        if outcome.get("state") == "failed":
            reason = (outcome.get("result") or {}).get("reason", "failed")
            return f"partition {part} failed: {reason}"
    return "cancelled"
