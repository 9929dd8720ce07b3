"""The file side of ingest: chunk files (CSV/TSV) parsed against a table schema and written
as Parquet pieces, and the partition directories that combine pieces when a transaction
ends.  No store access here (``pipeline.ingest`` owns the keys and the transactions).

Reading a chunk file (:func:`write_piece`):

* ``csv``: the stdlib ``csv`` module's default dialect (``,``, ``"`` quotes, doubled
  quotes inside), strict (a bad quote is a malformed row); ``tsv``: tab-separated, no
  quoting at all (a field cannot contain a tab or a line break).  The format comes from
  the file name (``.csv``; ``.tsv``/``.tab``/``.txt``) unless given.  Text is UTF-8.
* One record per row, the table's columns in order.  ``header=True`` skips the first
  record.  ``\\N`` is NULL (MySQL's and Qserv's convention); an empty field is NULL too,
  except in ``string`` and ``binary`` columns, where it is the empty value.
* Values: integers in decimal (range-checked for their type), ``boolean`` as
  true/false/t/f/1/0, floats as Python reads them (a number too large for the type is
  malformed, never infinity; ``inf`` and ``nan`` are read as such), ``decimal(p,s)`` with
  at most ``s`` fraction digits and ``p - s`` integer digits, ``binary`` in hexadecimal, ``date`` and
  ``timestamp``/``timestamp_ntz`` in ISO 8601 (a ``timestamp`` without an offset is UTC; a
  ``timestamp_ntz`` may not have one).
* A partitioned table's chunk column must hold the chunk number being loaded.

Every malformed row is reported (file, line, reason; the line where its record starts),
none is dropped: a file with any malformed row raises :class:`MalformedRows` and leaves no
file behind.  A good file is written as one Parquet file (pyarrow; readable by Spark with
the table's schema), flushed to disk before it is renamed into place.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import math
import os
import re
import shutil
import uuid
from dataclasses import dataclass

from .errors import LoadFileError, MalformedRows
from .partition_files import fsync_path
from .schema import Column

__all__ = ["FORMATS", "Piece", "assemble", "data_files", "file_format", "write_piece"]

FORMATS = ("csv", "tsv")
NULL = "\\N"
BATCH_ROWS = 50_000  # rows per Parquet row group (and between two ``check()`` calls)
KEPT_ERRORS = 1_000  # malformed rows kept in full; the rest are only counted
INT_TYPES = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
FLOAT_MAX = 3.4028234663852886e38
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I)
_BOOL = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk file as written: a Parquet file of ``rows`` rows, ``bytes`` long."""

    file: str
    rows: int
    bytes: int


def file_format(path: str, fmt: str | None) -> str:
    """``fmt`` checked, or the format the file name says; ValueError if neither tells."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)} (or None: from the file name), not {fmt!r}")
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext == ".csv":
        return "csv"
    if ext in (".tsv", ".tab", ".txt"):
        return "tsv"
    raise ValueError(f"cannot tell the format of {path!r} from its name: pass format='csv' or format='tsv'")


# --- values --------------------------------------------------------------------------------


class _Bad(Exception):
    """A field that does not fit its column (the message is the reason)."""


def _converter(col: Column):
    """text -> value for column ``col`` (None for NULL), raising _Bad."""
    t = col.type
    empty_is_value = t in ("string", "binary")

    def null_or(convert):
        def conv(text: str):
            if text == NULL or (not text and not empty_is_value):
                return None
            return convert(text)

        return conv

    if t in INT_TYPES:
        bits = INT_TYPES[t]
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

        def integer(text):
            if not _INT.fullmatch(text):
                raise _Bad(f"{text!r:.40} is not an integer")
            if len(text) > 24:  # far beyond 64 bits (and int() refuses over 4300 digits)
                raise _Bad(f"{text!r:.40} is out of range for {t}")
            value = int(text)
            if not lo <= value <= hi:
                raise _Bad(f"{text!r:.40} is out of range for {t}")
            return value

        return null_or(integer)
    if t in ("float", "double"):

        def real(text):
            if not _FLOAT.fullmatch(text.strip()):
                raise _Bad(f"{text!r:.40} is not a number")
            value = float(text)
            if math.isinf(value) and "inf" not in text.lower():  # a finite number too large: not infinity
                raise _Bad(f"{text!r:.40} is out of range for {t}")
            if t == "float" and math.isfinite(value) and abs(value) > FLOAT_MAX:
                raise _Bad(f"{text!r:.40} is out of range for float")
            return value

        return null_or(real)
    if t == "boolean":

        def boolean(text):
            try:
                return _BOOL[text.strip().lower()]
            except KeyError:
                raise _Bad(f"{text!r:.40} is not a boolean (true/false, t/f, 1/0)") from None

        return null_or(boolean)
    if t == "string":
        return null_or(lambda text: text)
    if t == "binary":

        def binary(text):
            try:
                return bytes.fromhex(text)
            except ValueError:
                raise _Bad(f"{text!r:.40} is not hexadecimal") from None

        return null_or(binary)
    if t == "date":

        def date(text):
            try:
                return dt.date.fromisoformat(text)
            except ValueError:
                raise _Bad(f"{text!r:.40} is not a date (YYYY-MM-DD)") from None

        return null_or(date)
    if t in ("timestamp", "timestamp_ntz"):

        def timestamp(text):
            try:
                value = dt.datetime.fromisoformat(text)
            except ValueError:
                raise _Bad(f"{text!r:.40} is not an ISO 8601 timestamp") from None
            if t == "timestamp_ntz":
                if value.tzinfo is not None:
                    raise _Bad(f"{text!r:.40} has a time zone: timestamp_ntz values have none")
                return value
            if value.tzinfo is None:
                return value.replace(tzinfo=dt.timezone.utc)
            return value.astimezone(dt.timezone.utc)

        return null_or(timestamp)
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))

        def dec(text):
            try:
                value = decimal.Decimal(text.strip())
            except decimal.InvalidOperation:
                raise _Bad(f"{text!r:.40} is not a decimal number") from None
            if not value.is_finite():
                raise _Bad(f"{text!r:.40} is not a finite decimal")
            if abs(value) >= decimal.Decimal(10) ** (precision - scale):
                raise _Bad(f"{text!r:.40} has more than {precision - scale} integer digits for {t}")
            # below 10**38 now: quantizing needs at most 38 + scale digits
            if value != value.quantize(decimal.Decimal(1).scaleb(-scale), context=decimal.Context(prec=100)):
                raise _Bad(f"{text!r:.40} has more than {scale} fraction digits for {t}")
            return value

        return null_or(dec)
    raise ValueError(f"column {col.name!r} has type {t!r}, which ingest cannot read")  # pragma: no cover


def arrow_type(t: str):
    """The Arrow type Spark reads back as the Spark SQL type ``t``."""
    import pyarrow as pa

    simple = {
        "boolean": pa.bool_(),
        "tinyint": pa.int8(),
        "smallint": pa.int16(),
        "int": pa.int32(),
        "bigint": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if t in simple:
        return simple[t]
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", t)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    raise ValueError(f"no Arrow type for {t!r}")  # pragma: no cover


def arrow_schema(columns):
    import pyarrow as pa

    return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in columns])


# --- reading and writing a chunk file ------------------------------------------------------


def _records(f, fmt: str):
    """(first line, fields or a csv.Error) of each record of the open file ``f``."""
    if fmt == "csv":
        reader = csv.reader(f, strict=True)
    else:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE, strict=True)
    last = 0
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            if reader.line_num == last:  # no progress: the reader is stuck
                yield start, exc
                return
            fields = exc
        last = reader.line_num
        yield start, fields


def write_piece(
    source: str,
    target: str,
    columns,
    *,
    fmt: str,
    header: bool = False,
    chunk_column: str | None = None,
    chunk: int | None = None,
    check=None,
) -> Piece:
    """Parse the chunk file ``source`` against ``columns`` (Column records) and write its
    rows as the Parquet file ``target`` (created; its directory too).

    ``chunk_column``/``chunk``: every row's value of that column must be ``chunk``.
    ``check()`` (e.g. a job context's) is called between batches of rows: it may raise to
    stop (Halt), and the partial file is removed then.  Raises LoadFileError when the file
    cannot be read, MalformedRows (with every bad row's line and reason) when rows do not
    fit; either way nothing is left at ``target``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = tuple(columns)
    schema = arrow_schema(columns)
    convert = [_converter(c) for c in columns]
    names = [c.name for c in columns]
    required = [not c.nullable for c in columns]
    chunk_index = names.index(chunk_column) if chunk_column is not None else None
    width = len(columns)
    errors: list[tuple[int, str]] = []
    bad = 0
    rows = 0
    batch: list[list] = [[] for _ in columns]
    directory = os.path.dirname(target)
    tmp = os.path.join(directory, f".{os.path.basename(target)}.tmp-{uuid.uuid4().hex}")
    writer = None

    def flush():
        nonlocal batch, writer
        if writer is None:
            writer = pq.ParquetWriter(tmp, schema)
        arrays = [pa.array(values, type=field.type) for values, field in zip(batch, schema)]
        writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
        batch = [[] for _ in columns]

    def reject(line: int, reason: str):
        nonlocal bad
        bad += 1
        if len(errors) < KEPT_ERRORS:
            errors.append((line, reason))

    try:
        os.makedirs(directory, exist_ok=True)
        try:
            f = open(source, newline="", encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise LoadFileError(f"cannot read chunk file {source!r}: {exc.strerror or exc}") from exc
        with f:
            seen = 0
            for line, fields in _records(f, fmt):
                seen += 1
                if check is not None and seen % BATCH_ROWS == 0:
                    check()
                if header and seen == 1:
                    continue
                if isinstance(fields, csv.Error):
                    reject(line, f"cannot be parsed as {fmt.upper()}: {fields}")
                    continue
                if not fields:
                    reject(line, f"blank line: expected {width} fields")
                    continue
                if len(fields) != width:
                    reject(line, f"has {len(fields)} fields, expected {width} ({', '.join(names)})")
                    continue
                values = []
                reason = None
                for i, text in enumerate(fields):
                    if any("\udc80" <= ch <= "\udcff" for ch in text):
                        reason = f"column {names[i]}: not valid UTF-8"
                        break
                    try:
                        value = convert[i](text)
                    except _Bad as exc:
                        reason = f"column {names[i]}: {exc}"
                        break
                    if value is None and required[i]:
                        reason = f"column {names[i]} is NULL, but the column is NOT NULL"
                        break
                    if i == chunk_index and value != chunk:
                        reason = f"column {names[i]} is {value}, but this file loads chunk {chunk}"
                        break
                    values.append(value)
                if reason is not None:
                    reject(line, reason)
                    continue
                if bad:
                    continue  # the file fails anyway: only look for more bad rows
                for column, value in zip(batch, values):
                    column.append(value)
                rows += 1
                if rows % BATCH_ROWS == 0:
                    flush()
        if bad:
            raise MalformedRows(source, errors, bad)
        if rows % BATCH_ROWS or writer is None:
            flush()
        writer.close()
        writer = None
        fsync_path(tmp)
        os.rename(tmp, target)
        fsync_path(directory)
        return Piece(target, rows, os.path.getsize(target))
    except OSError as exc:
        raise LoadFileError(f"writing the rows of {source!r} to {target!r} failed: {exc}") from exc
    finally:
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the file is removed anyway
                pass
        if os.path.lexists(tmp):
            os.remove(tmp)


# --- partition directories -----------------------------------------------------------------


def data_files(directory: str) -> list[str]:
    """Names of the data files of a partition directory (names starting with '.' or '_'
    are not data, as for Spark and Hadoop)."""
    return sorted(n for n in os.listdir(directory) if not n.startswith((".", "_")))


def assemble(location: str, base: str | None, pieces: dict[str, str]) -> tuple[int, int]:
    """Create the partition directory ``location`` holding the data files of directory
    ``base`` (the partition's current data, or None) and ``pieces`` (name in the new
    directory -> Parquet file), as hard links (copies where the filesystem has none), all
    flushed to disk.  Returns (files, bytes).  The directory must not exist yet."""
    os.makedirs(os.path.dirname(location), exist_ok=True)
    os.mkdir(location)
    sources = {}
    if base is not None:
        sources.update({name: os.path.join(base, name) for name in data_files(base)})
    for name, path in pieces.items():
        if name in sources:
            raise FileExistsError(f"{name!r} is both in {base!r} and a new piece")
        sources[name] = path
    size = 0
    for name, path in sources.items():
        dest = os.path.join(location, name)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copyfile(path, dest)
            fsync_path(dest)
        size += os.path.getsize(dest)
    fsync_path(location)
    fsync_path(os.path.dirname(location))
    return len(sources), size

