"""One partition's data on disk: a directory of Parquet files, written with Spark.

A partition directory is visible complete or not at all.  :func:`write_partition` has
Spark write into a hidden sibling (``.<name>.tmp-<random>``: Spark and Hadoop skip names
starting with ``.`` or ``_``), flushes the files to disk, and renames it into place in one
``rename``; a crash at any point leaves at most a hidden temporary, which
:func:`clean_temporaries` removes later.  Directories are written once: a partition's new
data goes to a new directory (``Table.partition_location(pid, token)``) and the catalog
switches to it in a transaction (see ``pipeline.catalog``).  ``overwrite=True`` exists for
directories nothing references yet; while it swaps, readers of the path see the old data,
then briefly no directory, then the new data, never a mix.

Paths are local (or shared-filesystem) absolute paths; Spark gets them as ``file://`` URIs
so that a cluster whose default filesystem is HDFS still writes where ``rename`` looks.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass

from jobs import JobsError
from jobs.checks import ArgumentTypeError

from . import schema
from .errors import PartitionDataError, PartitionDataExists

__all__ = [
    "PartitionFiles",
    "clean_temporaries",
    "conform",
    "read_partition",
    "write_partition",
]

TMP_MARK = ".tmp-"
OLD_MARK = ".old-"


@dataclass(frozen=True, slots=True)
class PartitionFiles:
    """A partition directory as written: what ``catalog.set_partition`` records."""

    location: str
    rows: int
    bytes: int  # total size of the data files
    files: int  # number of data files


def _uri(path: str) -> str:
    return "file://" + path


def _data_files(directory: str) -> list[str]:
    """Data files of a written directory (Hadoop's convention: names starting with '.' or
    '_' are not data: checksums, _SUCCESS)."""
    return sorted(n for n in os.listdir(directory) if not n.startswith((".", "_")))


def _fsync_tree(directory: str) -> None:
    """Flush the files of ``directory`` and the directory itself to disk (Hadoop's local
    filesystem does not), so that the rename never publishes files still only in cache."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            fsync_path(path)
    fsync_path(directory)


def fsync_path(path: str) -> None:
    """Flush a file or directory to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _columns(value):
    from .records import Table

    return value.columns if isinstance(value, Table) else schema.columns(value)


def conform(df, columns):
    """``df`` with exactly the columns of ``columns`` (a Table or a schema), in their order.
    ValueError naming the missing, extra and mistyped columns (names match exactly; types
    must be equal; nullability is the validate operation's business, not checked here)."""
    from .spark import spark_type

    cols = _columns(columns)
    have = {f.name: f.dataType for f in df.schema.fields}
    missing = [c.name for c in cols if c.name not in have]
    extra = sorted(set(have) - {c.name for c in cols})
    mistyped = [
        f"{c.name} is {have[c.name].simpleString()}, not {c.type}"
        for c in cols
        if c.name in have and have[c.name] != spark_type(c.type)
    ]
    if missing or extra or mistyped:
        problems = []
        if missing:
            problems.append(f"missing columns {missing}")
        if extra:
            problems.append(f"extra columns {extra}")
        problems += mistyped
        raise ValueError(f"the data does not match the table schema: {'; '.join(problems)}")
    return df.select(*[c.name for c in cols])


def write_partition(df, location: str, *, columns=None, files: int | None = None, overwrite: bool = False) -> PartitionFiles:
    """Write ``df`` as the Parquet directory ``location``, atomically (see the module doc).

    ``columns``: a Table or schema the data must match (see :func:`conform`); ``files``:
    the number of files to write (default: one per Spark partition of ``df``);
    ``overwrite``: replace an existing directory instead of raising PartitionDataExists.
    Returns the rows, bytes and files written.  Raises PartitionDataError (chaining the
    Spark or OS error) when the write fails; the temporary directory is removed then."""
    location = schema.location(location)
    if files is not None and (isinstance(files, bool) or not isinstance(files, int) or files < 1):
        raise ValueError(f"files must be a positive int or None, not {files!r}")
    if not isinstance(overwrite, bool):
        raise ArgumentTypeError(f"overwrite must be a bool, not {type(overwrite).__name__}")
    if columns is not None:
        df = conform(df, columns)
    if os.path.lexists(location) and not overwrite:
        raise PartitionDataExists(f"partition directory {location!r} already exists: write to a new location, or pass overwrite=True")
    parent, leaf = os.path.split(location)
    tmp = os.path.join(parent, f".{leaf}{TMP_MARK}{uuid.uuid4().hex}")
    try:
        os.makedirs(parent, exist_ok=True)
        out = df if files is None else df.coalesce(files)
        out.write.mode("error").parquet(_uri(tmp))  # (errorifexists: Spark Connect knows only "error")
        names = _data_files(tmp)
        rows = _count(df, [os.path.join(tmp, n) for n in names])
        size = sum(os.path.getsize(os.path.join(tmp, n)) for n in names)
        _fsync_tree(tmp)
        _swap(tmp, location, overwrite)
    except JobsError:  # e.g. Halt/Interrupted in a worker: stop as asked
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:  # noqa: BLE001 - Spark, py4j and OS errors, translated here
        shutil.rmtree(tmp, ignore_errors=True)
        raise PartitionDataError(f"writing partition data to {location!r} failed: {_summary(exc)}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PartitionFiles(location, rows, size, len(names))


def _count(df, paths: list[str]) -> int:
    """Rows in the written files, read back from their footers: the count the catalog
    records is the count on disk.  The files are named one by one because Spark ignores a
    directory whose name starts with '.' (the temporary)."""
    if not paths:
        return 0
    return df.sparkSession.read.schema(df.schema).parquet(*map(_uri, paths)).count()


def _swap(tmp: str, location: str, overwrite: bool) -> None:
    parent, leaf = os.path.split(location)
    old = None
    if overwrite and os.path.lexists(location):
        old = os.path.join(parent, f".{leaf}{OLD_MARK}{uuid.uuid4().hex}")
        os.rename(location, old)
    try:
        os.rename(tmp, location)  # fails on a non-empty directory: never merges into one
    except OSError as exc:
        if old is not None:
            os.rename(old, location)
        if os.path.lexists(location):
            raise PartitionDataExists(f"partition directory {location!r} appeared while writing it") from exc
        raise
    fsync_path(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _summary(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def read_partition(spark, location: str, *, columns=None):
    """A DataFrame of the Parquet directory ``location`` (with the schema of ``columns``, a
    Table or schema, if given: needed for a directory of no rows).  Raises
    PartitionDataError if the directory does not exist."""
    location = schema.location(location)
    if not os.path.isdir(location):
        raise PartitionDataError(f"partition directory {location!r} does not exist")
    reader = spark.read
    if columns is not None:
        from .spark import spark_schema

        reader = reader.schema(spark_schema(columns))
    try:
        return reader.parquet(_uri(location))
    except Exception as exc:  # noqa: BLE001 - Spark analysis errors, translated here
        raise PartitionDataError(f"reading partition data from {location!r} failed: {_summary(exc)}") from exc


def clean_temporaries(directory: str, *, older_than: float = 3600.0) -> list[str]:
    """Remove what interrupted writes left in ``directory`` (hidden ``.tmp-``/``.old-``
    siblings of partition directories) not modified for ``older_than`` seconds (younger
    ones may belong to a write in progress).  Returns the paths removed."""
    directory = schema.location(directory, "directory")
    if isinstance(older_than, bool) or not isinstance(older_than, (int, float)) or older_than < 0:
        raise ValueError(f"older_than must be a number of seconds >= 0, not {older_than!r}")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    cutoff = time.time() - older_than
    removed = []
    for name in sorted(names):
        if not name.startswith(".") or (TMP_MARK not in name and OLD_MARK not in name):
            continue
        path = os.path.join(directory, name)
        try:
            if os.lstat(path).st_mtime > cutoff:
                continue
        except FileNotFoundError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
