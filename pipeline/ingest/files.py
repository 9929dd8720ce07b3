"""The file side of ingest: chunk files (CSV/TSV) parsed against a table schema and written
as Parquet pieces, and the partition directories that combine pieces when a transaction
ends.  No store access here (the rest of
``pipeline.ingest`` owns the keys and the transactions).

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
import os
import shutil
import uuid
from dataclasses import dataclass

from ..errors import LoadFileError, MalformedRows
from ..partition_files import fsync_path
from .values import INT_TYPES, Bad, arrow_schema, converter

__all__ = ["FORMATS", "INT_TYPES", "Piece", "assemble", "data_files", "file_format", "write_piece"]

FORMATS = ("csv", "tsv")
BATCH_ROWS = 50_000  # rows per Parquet row group (and between two ``check()`` calls)
KEPT_ERRORS = 1_000  # malformed rows kept in full; the rest are only counted


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


# --- reading and writing a chunk file ------------------------------------------------------


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
    columns = tuple(columns)
    out = _PieceWriter(target, columns)
    rows = _RowReader(columns, chunk_column, chunk)
    rejected = _Rejected()
    try:
        os.makedirs(out.directory, exist_ok=True)
        try:
            f = open(source, newline="", encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise LoadFileError(f"cannot read chunk file {source!r}: {exc.strerror or exc}") from exc
        with f:
            _copy_rows(f, fmt, header, check, rows, out, rejected)
        if rejected.count:
            raise MalformedRows(source, rejected.errors, rejected.count)
        return out.finish()
    except OSError as exc:
        raise LoadFileError(f"writing the rows of {source!r} to {target!r} failed: {exc}") from exc
    finally:
        out.discard()


def _copy_rows(f, fmt: str, header: bool, check, rows: "_RowReader", out: "_PieceWriter",
               rejected: "_Rejected") -> None:
    """Read every record of ``f``: a good row goes to ``out`` until a row is rejected
    (then the file fails: the rest is only read for more bad rows); ``check()`` every
    BATCH_ROWS records."""
    seen = 0
    for line, fields in _records(f, fmt):
        seen += 1
        if check is not None and seen % BATCH_ROWS == 0:
            check()
        if header and seen == 1:
            continue
        values, reason = rows.read(fields, fmt)
        if reason is not None:
            rejected.add(line, reason)
        elif not rejected.count:
            out.add(values)


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


class _RowReader:
    """One record's fields -> the row's values, or the reason the row is malformed."""

    def __init__(self, columns: tuple, chunk_column: str | None, chunk: int | None):
        self.names = [c.name for c in columns]
        self.convert = [converter(c) for c in columns]
        self.required = [not c.nullable for c in columns]
        self.chunk_index = self.names.index(chunk_column) if chunk_column is not None else None
        self.chunk = chunk
        self.width = len(columns)

    def read(self, fields, fmt: str) -> tuple[list | None, str | None]:
        """(values, None), or (None, reason)."""
        if isinstance(fields, csv.Error):
            return None, f"cannot be parsed as {fmt.upper()}: {fields}"
        if not fields:
            return None, f"blank line: expected {self.width} fields"
        if len(fields) != self.width:
            return None, f"has {len(fields)} fields, expected {self.width} ({', '.join(self.names)})"
        values = []
        for i, text in enumerate(fields):
            value, reason = self._value(i, text)
            if reason is not None:
                return None, reason
            values.append(value)
        return values, None

    def _value(self, i: int, text: str) -> tuple[object, str | None]:
        name = self.names[i]
        if any("\udc80" <= ch <= "\udcff" for ch in text):
            return None, f"column {name}: not valid UTF-8"
        try:
            value = self.convert[i](text)
        except Bad as exc:
            return None, f"column {name}: {exc}"
        if value is None and self.required[i]:
            return None, f"column {name} is NULL, but the column is NOT NULL"
        if i == self.chunk_index and value != self.chunk:
            return None, f"column {name} is {value}, but this file loads chunk {self.chunk}"
        return value, None


class _Rejected:
    """The malformed rows of a file: the first KEPT_ERRORS as (line, reason), all counted."""

    def __init__(self):
        self.errors: list[tuple[int, str]] = []
        self.count = 0

    def add(self, line: int, reason: str) -> None:
        self.count += 1
        if len(self.errors) < KEPT_ERRORS:
            self.errors.append((line, reason))


class _PieceWriter:
    """A Parquet file written in row groups of BATCH_ROWS rows under a temporary name in
    the target's directory, flushed to disk and renamed into place by :meth:`finish`;
    :meth:`discard` removes what is left of it (always call it)."""

    def __init__(self, target: str, columns: tuple):
        self.target = target
        self.columns = columns
        self.schema = arrow_schema(columns)
        self.directory = os.path.dirname(target)
        self.tmp = os.path.join(self.directory, f".{os.path.basename(target)}.tmp-{uuid.uuid4().hex}")
        self.writer = None  # a pyarrow ParquetWriter once the first row group is written
        self.batch: list[list] = [[] for _ in columns]  # the rows not written yet, by column
        self.rows = 0

    def add(self, values: list) -> None:
        for column, value in zip(self.batch, values):
            column.append(value)
        self.rows += 1
        if self.rows % BATCH_ROWS == 0:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.tmp, self.schema)
        arrays = [pa.array(values, type=field.type) for values, field in zip(self.batch, self.schema)]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))
        self.batch = [[] for _ in self.columns]

    def finish(self) -> Piece:
        """Write the last rows, flush the file to disk and rename it to the target."""
        if self.rows % BATCH_ROWS or self.writer is None:
            self._flush()
        self.writer.close()
        self.writer = None
        fsync_path(self.tmp)
        os.rename(self.tmp, self.target)
        fsync_path(self.directory)
        return Piece(self.target, self.rows, os.path.getsize(self.target))

    def discard(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 - the file is removed anyway
                pass
        if os.path.lexists(self.tmp):
            os.remove(self.tmp)


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

