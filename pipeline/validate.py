"""The ``validate`` operation: check that every row of a table satisfies its constraints.

Constraints (each a SQL condition that a row violates when it is TRUE):

* NOT NULL of each non-nullable column;
* each column's CHECK expression (SQL semantics: a CHECK that is NULL passes);
* type ranges, for a narrowing type change given in the argument:
  ``{"types": {"qty": "smallint"}}`` checks that every ``qty`` fits a smallint (integer
  ranges, decimal precision, float range; other targets must cast without loss).

One job per partition, volatile (a re-run starts over), which can fail: a partition with
violations fails with a report (rows checked, violations per constraint, up to
``sample`` violating rows per constraint), and the operation fails once every partition
was checked (not fail-fast: the report covers the whole table).  Reports are
in the operation's status (``results``).
"""

from __future__ import annotations

from processors.operations import JobFailed, Operation

from .frames import partition_frame
from .schema import TYPES
from .spark import spark_session

SAMPLE = 5  # violating rows reported per constraint and partition

_INT_RANGES = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
FLOAT_MAX = 3.4028234663852886e38


def _quote(name: str) -> str:
    return f"`{name}`"


def range_violation(column: str, target: str) -> str:
    """SQL condition TRUE when ``column``'s value does not fit type ``target``."""
    col = _quote(column)
    if target in _INT_RANGES:
        lo, hi = _INT_RANGES[target]
        return f"({col} IS NOT NULL AND ({col} < {lo} OR {col} > {hi} OR {col} != CAST({col} AS DECIMAL(38,0))))"
    if target.startswith("decimal("):
        p, s = (int(x) for x in target[len("decimal("):-1].split(","))
        return f"({col} IS NOT NULL AND (ABS({col}) >= 1e{p - s} OR ROUND({col}, {s}) != {col}))"
    if target == "float":
        return f"({col} IS NOT NULL AND ABS({col}) > {FLOAT_MAX!r})"
    if target in TYPES:
        return f"({col} IS NOT NULL AND TRY_CAST({col} AS {target}) IS NULL)"
    raise ValueError(f"cannot check a narrowing to {target!r}")


def constraints(table, arg: dict | None) -> dict[str, str]:
    """name -> SQL condition that is TRUE for a violating row."""
    arg = arg or {}
    names = {c.name for c in table.columns}
    out = {}
    for c in table.columns:
        if not c.nullable:
            out[f"{c.name} NOT NULL"] = f"({_quote(c.name)} IS NULL)"
        if c.check:
            out[f"{c.name} CHECK ({c.check})"] = f"(NOT ({c.check}))"
    for column, target in (arg.get("types") or {}).items():
        if column not in names:
            raise ValueError(f"validate: column {column!r} is not in table {table.qualified_name}")
        out[f"{column} fits {target}"] = range_violation(column, str(target).lower())
    return out


class Validate(Operation):
    """Check a table's rows against its constraints (argument: ``{"types": {...},
    "sample": n}``, both optional)."""

    type = "validate"
    concurrent = True
    compatible_with = frozenset({"build_index"})
    can_fail = True
    fail_fast = False  # every partition is checked: the report is complete
    resumable = False
    job_timeout = 120.0

    def __init__(self, db):
        self.db = db

    def start_or_resume_job(self, ctx):
        from pyspark.sql import functions as F

        spark = spark_session()
        table, _part, df = partition_frame(self.db, spark, ctx.table, ctx.partition)
        checks = constraints(table, ctx.arg)
        sample = int((ctx.arg or {}).get("sample", SAMPLE))
        if not checks:
            return {"rows": df.count(), "violations": {}}
        counts = df.agg(
            F.count(F.lit(1)).alias("__rows"),
            *[F.sum(F.when(F.expr(cond), 1).otherwise(0)).alias(f"c{i}") for i, cond in enumerate(checks.values())],
        ).first()
        ctx.job.check()
        violations = {name: int(counts[f"c{i}"] or 0) for i, name in enumerate(checks)}
        report = {"rows": int(counts["__rows"]), "violations": {k: v for k, v in violations.items() if v}}
        if not report["violations"]:
            return {"rows": report["rows"], "violations": {}}
        report["samples"] = {
            name: [row.asDict() for row in df.filter(F.expr(checks[name])).limit(sample).collect()]
            for name in report["violations"]
        }
        report = _jsonable(report)
        total = sum(report["violations"].values())
        raise JobFailed(f"{total} violation(s) in partition {ctx.partition} of {ctx.table}", report)


def _jsonable(value):
    """Sample rows hold dates, decimals, bytes: make them JSON."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return str(value)
