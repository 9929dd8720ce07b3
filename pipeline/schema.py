"""Checks of catalog arguments: names, table schemas, data locations.

Everything here is pure (no store, no Spark) and runs before a catalog call reads or writes
anything.  Each check raises ``ValueError`` (``jobs.checks.ArgumentTypeError`` for a value
of the wrong type) naming the argument and the problem, and returns the normalised value.

A table schema is a list of columns, each a JSON object::

    {"name": "id", "type": "bigint", "nullable": false, "check": "id >= 0"}

* ``name``: an identifier (letters, digits, ``_``; not starting with a digit), at most 128
  characters; unique in the table ignoring case (Spark SQL resolves columns ignoring case).
* ``type``: a Spark SQL type name (:data:`TYPES`, or ``decimal(p,s)``), any case, stored in
  lower case.
* ``nullable``: optional, default true.
* ``check``: optional SQL boolean expression every row must satisfy (evaluated by the
  validate operation, not here).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from jobs.checks import ArgumentTypeError

NAME_MAX = 64
COLUMN_NAME_MAX = 128
CHECK_MAX = 4096
COLUMNS_MAX = 4096
LOCATION_MAX = 4096  # bytes; a location is also a key of the trash (FDB keys: 10 kB)
PARTITIONS_MAX = 10_000  # a commit reads every partition record in one transaction

TYPES = (
    "boolean",
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
)
_ALIASES = {  # names Spark also accepts; refused so that one type has one spelling
    "bool": "boolean",
    "byte": "tinyint",
    "short": "smallint",
    "integer": "int",
    "long": "bigint",
    "real": "float",
    "str": "string",
    "text": "string",
    "varchar": "string",
    "dec": "decimal(p,s)",
    "numeric": "decimal(p,s)",
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COLUMN_KEYS = frozenset({"name", "type", "nullable", "check"})


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    nullable: bool = True
    check: str | None = None

    def to_json(self) -> dict:
        out = {"name": self.name, "type": self.type, "nullable": self.nullable}
        if self.check is not None:
            out["check"] = self.check
        return out


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def name(value, what: str) -> str:
    """A database or table name: lower-case letters, digits and ``_``, not starting with a
    digit, 1 to 64 characters (it is also a directory name and a Spark SQL identifier)."""
    _text(value, what)
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > NAME_MAX or not _NAME.fullmatch(value):
        raise ValueError(
            f"{what} {value!r:.80} is not a valid name: use 1 to {NAME_MAX} lower-case letters, "
            "digits and '_', not starting with a digit"
        )
    return value


def column_type(value, what: str) -> str:
    """A Spark SQL type name in canonical (lower-case) form."""
    _text(value, what)
    t = value.strip().lower()
    if t in TYPES:
        return t
    m = _DECIMAL.fullmatch(t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise ValueError(f"{what} {value!r}: decimal needs 1 <= precision <= 38 and 0 <= scale <= precision")
        return f"decimal({precision},{scale})"
    hint = _ALIASES.get(t.split("(")[0])
    hint = f" (did you mean {hint!r}?)" if hint else ""
    raise ValueError(
        f"{what} {value!r:.80} is not a supported type{hint}: use one of {', '.join(TYPES)} or decimal(p,s)"
    )


def column(value, index: int) -> Column:
    """One column of a schema, from a dict (or a :class:`Column`)."""
    if isinstance(value, Column):
        value = value.to_json()
    where = f"schema column {index}"
    if not isinstance(value, dict):
        raise ArgumentTypeError(f"{where} must be a dict with name and type, not {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in _COLUMN_KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}: a column has name, type, nullable and check")
    for key in ("name", "type"):
        if key not in value:
            raise ValueError(f"{where} has no {key!r}")
    col_name = _text(value["name"], f"{where} name")
    if not col_name or len(col_name) > COLUMN_NAME_MAX or not _COLUMN.fullmatch(col_name):
        raise ValueError(
            f"{where} name {col_name!r:.80} is not an identifier: use 1 to {COLUMN_NAME_MAX} letters, "
            "digits and '_', not starting with a digit"
        )
    where = f"column {col_name!r}"
    nullable = value.get("nullable", True)
    if not isinstance(nullable, bool):
        raise ArgumentTypeError(f"{where} nullable must be true or false, not {nullable!r:.40}")
    check = value.get("check")
    if check is not None:
        _text(check, f"{where} check")
        check = check.strip()
        if not check:
            raise ValueError(f"{where} check must be a SQL expression, not empty (omit it for no check)")
        if len(check) > CHECK_MAX or "\x00" in check:
            raise ValueError(f"{where} check is too long (over {CHECK_MAX} characters) or contains NUL")
    return Column(col_name, column_type(value["type"], f"{where} type"), nullable, check)


def columns(schema) -> tuple[Column, ...]:
    """A table schema: a non-empty list of columns with unique names (ignoring case)."""
    if isinstance(schema, (str, bytes, dict)) or not isinstance(schema, (list, tuple)):
        raise ArgumentTypeError(f"schema must be a list of columns, not {type(schema).__name__}")
    if not schema:
        raise ValueError("schema must have at least one column")
    if len(schema) > COLUMNS_MAX:
        raise ValueError(f"schema has {len(schema)} columns, more than the limit of {COLUMNS_MAX}")
    cols = tuple(column(c, i) for i, c in enumerate(schema))
    seen: dict[str, str] = {}
    for c in cols:
        other = seen.get(c.name.lower())
        seen[c.name.lower()] = c.name
        if other is not None:
            raise ValueError(f"schema has two columns named {other!r} and {c.name!r} (names ignore case)")
    return cols


def partitioning(cols: tuple[Column, ...], partition_by, partitions) -> tuple[str | None, int]:
    """``(partition_by, partitions)`` checked against the columns: a regular table (no
    partition column) has one partition; a partitioned table names a non-nullable column
    (a row whose key is null would belong to no partition)."""
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ArgumentTypeError(f"partitions must be an int, not {type(partitions).__name__}")
    if partition_by is None:
        if partitions != 1:
            raise ValueError(
                f"partitions={partitions} needs partition_by: a table without a partition column "
                "(a regular table) has exactly one partition"
            )
        return None, 1
    _text(partition_by, "partition_by")
    match = [c for c in cols if c.name == partition_by]
    if not match:
        names = ", ".join(c.name for c in cols)
        raise ValueError(f"partition_by {partition_by!r} is not a column of the schema ({names})")
    if match[0].nullable:
        raise ValueError(f"partition column {partition_by!r} must be declared nullable: false")
    if not 1 <= partitions <= PARTITIONS_MAX:
        raise ValueError(f"partitions must be between 1 and {PARTITIONS_MAX}, not {partitions}")
    return partition_by, partitions


def location(value, what: str = "location") -> str:
    """An absolute local (or shared-filesystem) path, normalised."""
    _text(value, what)
    if "\x00" in value or not os.path.isabs(value):
        raise ValueError(f"{what} {value!r:.200} must be an absolute path")
    path = os.path.normpath(value)
    if path.startswith("//"):  # normpath keeps a leading '//' (POSIX); one is enough
        path = "/" + path.lstrip("/")
    if path == "/":
        raise ValueError(f"{what} must not be the root directory")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} {value!r:.200} is not valid text: {exc.reason}") from exc
    if size > LOCATION_MAX:
        raise ValueError(f"{what} is {size} bytes long, over the limit of {LOCATION_MAX}")
    return path


def inside(path: str, root: str) -> bool:
    """Whether ``path`` lies strictly inside directory ``root`` (both normalised)."""
    return path != root and os.path.commonpath([path, root]) == root


def token(value, what: str) -> str | None:
    """An optional short tag (a partition token, a staging tag, an owner id): letters,
    digits, ``_``, ``-`` and ``.``, at most 128 characters."""
    if value is None:
        return None
    _text(value, what)
    if not value or len(value) > 128 or not re.fullmatch(r"[A-Za-z0-9_.-]+", value) or value in (".", ".."):
        raise ValueError(f"{what} {value!r:.80} must be 1 to 128 letters, digits, '_', '-' or '.'")
    return value


def count(value, what: str, *, optional: bool = False) -> int | None:
    """A non-negative int (or None when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must be zero or more, not {value}")
    return value
