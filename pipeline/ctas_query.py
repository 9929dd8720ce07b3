"""CTAS's query side: the partition assignment rule as Spark SQL, the catalog tables a query
names and their rewrite to temp views, and Spark's analysis of the query (its result
schema, its determinism), with Spark's errors translated to QueryError.
"""

from __future__ import annotations

import re

from . import catalog, schema
from .errors import DatabaseNotFound, DatabaseNotPublished, QueryError, TableNotFound
from .frames import split_name
from .records import Table
from .spark import is_connect_session, new_session, release_session, spark_schema

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


def find_sources(tr, query: str) -> dict[str, Table]:
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


def summary(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:500]


def spark_error(exc: BaseException):
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


def analyse(query: str, sources: dict[str, Table], partition_by: str | None) -> tuple[str, list[dict]]:
    """(the rewritten query, the target schema), from Spark's analysis of the query over
    empty views of the sources (no data is read)."""
    session = new_session()
    sql = rewrite_query(query, sources)
    try:
        for qualified, table in sources.items():
            session.createDataFrame([], spark_schema(table)).createOrReplaceTempView(view_name(qualified))
        df = session.sql(sql)
        deterministic, struct = _deterministic(session, df, sql), df.schema
    except Exception as exc:  # noqa: BLE001 - Spark's analysis errors, translated here
        if spark_error(exc) is None:
            raise
        raise QueryError(f"the query does not analyse: {summary(exc)}" + _hint(exc)) from exc
    finally:
        release_session(session)
    if not deterministic:
        raise QueryError(
            "the query is not deterministic (rand(), uuid(), ...): each partition job evaluates it "
            "again, so its partitions would not come from one result"
        )
    return sql, _result_columns(struct, partition_by)


# Spark's nondeterministic SQL functions (expressions that are ``Nondeterministic``)
NONDETERMINISTIC = frozenset({
    "rand", "randn", "random", "uuid", "shuffle", "randstr", "uniform", "monotonically_increasing_id",
    "spark_partition_id", "input_file_name", "input_file_block_start", "input_file_block_length",
    "reflect", "java_method", "try_reflect",
})


def _calls(query: str) -> set[str]:
    """Names of the functions the query calls (outside strings and comments), lower case."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(query)]
    tokens = [t for t in tokens if t[0] not in ("ws", "comment")]
    return {_ident(a) for a, b in zip(tokens, tokens[1:]) if a[0] in ("ident", "quoted") and b[1] == "("}


def _deterministic(session, df, sql: str) -> bool:
    """Is the analysed query deterministic?  Classic Spark: the JVM plan's own verdict.  A
    Spark Connect client has no handle on the plan object, so: two analyses of the query
    must be the same plan (unseeded random functions get a new seed each time), and the
    query must call none of Spark's nondeterministic functions (the sources are files, not
    SQL views, so nothing else can hide one)."""
    if not is_connect_session(session):
        return bool(df._jdf.queryExecution().analyzed().deterministic())
    return df.sameSemantics(session.sql(sql)) and not (_calls(sql) & NONDETERMINISTIC)


def _hint(exc: BaseException) -> str:
    if "TABLE_OR_VIEW_NOT_FOUND" in str(exc):
        return " (source tables are committed catalog tables of published databases, written database.table)"
    return ""
