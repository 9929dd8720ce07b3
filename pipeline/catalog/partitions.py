"""Partitions: where a table version's data is, published or staged, and how many rows."""

from __future__ import annotations

import os
import time
from dataclasses import replace as _replace

from jobs.checks import ArgumentTypeError
from jobs.engine import LastAttempt

from .. import layout, schema
from ..errors import LocationInUse, PartitionBusy, PartitionNotFound, TableNotFound
from ..records import Partition, Table, encode_partition
from .store import live_version, partition_record, partition_records, table_arg, within_catalog
from .trash import trash_locations


def _pid(table: Table, pid) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise ArgumentTypeError(f"partition id must be an int, not {type(pid).__name__}")
    if not 0 <= pid < table.partitions:
        raise ValueError(f"partition id {pid} is out of range: table {table.qualified_name} has partitions 0..{table.partitions - 1}")
    return pid


def _pids(table: Table, pids) -> set[int] | None:
    if pids is None:
        return None
    if isinstance(pids, (str, bytes)) or not hasattr(pids, "__iter__"):
        raise ArgumentTypeError(f"pids must be an iterable of partition ids or None, not {type(pids).__name__}")
    return {_pid(table, p) for p in pids}


def _partition_dir(table: Table, pid: int, location: str) -> None:
    """A managed table's partition data must be in one of the partition's own directories
    (so that two partitions, or a partition and the table, never share one)."""
    if not table.managed:
        return
    leaf = os.path.basename(location)
    stem = f"part-{pid:05d}"
    ok = os.path.dirname(location) == table.location and (
        leaf == stem or (leaf.startswith(stem + "-") and schema.token(leaf[len(stem) + 1 :], "token") is not None)
    )
    if not ok:
        raise ValueError(
            f"location {location!r} is not a directory of partition {pid} of managed table "
            f"{table.qualified_name}: use table.partition_location({pid}, token)"
        )


def set_partition(
    tr,
    table: Table,
    pid: int,
    location: str,
    *,
    rows: int,
    bytes: int | None = None,
    staged: bool = False,
    tag: str | None = None,
) -> Partition:
    """Record that partition ``pid`` of ``table`` has its data in directory ``location``
    (``rows`` rows, ``bytes`` bytes of files).  ``staged``: as data waiting for
    :func:`publish_partitions` (readers keep seeing the published data until then), staged
    by ``tag`` (e.g. an ingest transaction id).  Data a managed table no longer references
    (the location this one replaces) goes to the trash.

    A managed table's partition data must be in ``table.partition_location(pid, token)``.
    Raises TableNotFound when the table version is gone (the fence for slow writers),
    PartitionBusy when another tag has staged data for the partition, LocationInUse when
    the location is the partition's other (staged or published) data or in the trash."""
    table = table_arg(table)
    pid = _pid(table, pid)
    location = schema.location(location)
    _partition_dir(table, pid, location)
    rows = schema.count(rows, "rows")
    size = schema.count(bytes, "bytes", optional=True)
    tag = schema.token(tag, "tag")
    if not isinstance(staged, bool):
        raise ArgumentTypeError(f"staged must be a bool, not {type(staged).__name__}")
    if tag is not None and not staged:
        raise ValueError("tag names who staged data: it needs staged=True")
    part = Partition(table.id, pid, location, rows, size, staged, tag, time.time())
    space = layout.partition_space(table.database, table.name, table.id, staged=staged)

    def body(tr):
        version = live_version(tr, table)
        old = partition_record(tr, table, pid, staged)
        _refuse_conflicts(tr, table, part, old)
        if old == part:
            return part  # this call's own commit, behind commit_unknown_result
        tr.set(space.pack((pid,)), encode_partition(part))
        if version.managed and old is not None and old.location != location:
            trash_locations(tr, [old.location], f"partition {pid} of {table.qualified_name} replaced")
        return part

    return within_catalog(tr, body)


def _refuse_conflicts(tr, table: Table, part: Partition, old: Partition | None) -> None:
    """Check that ``part`` may replace ``old`` (the partition's record of the same kind):
    PartitionBusy when another tag staged the data there, LocationInUse when its location
    is the partition's other (published or staged) data or in the trash."""
    pid, location, staged = part.pid, part.location, part.staged
    other = partition_record(tr, table, pid, not staged)
    if staged and old is not None and old.tag != part.tag:
        raise PartitionBusy(
            f"partition {pid} of {table.qualified_name} holds data staged by {old.tag!r}: "
            "publish or discard it first"
        )
    if other is not None and other.location == location:
        raise LocationInUse(
            f"{location!r} is already the {'published' if staged else 'staged'} data of partition "
            f"{pid} of {table.qualified_name}: write the new data to a new location"
        )
    if (old is None or old.location != location) and layout.read(tr, layout.trash_key(location)) is not None:
        raise LocationInUse(f"{location!r} is in the trash (its data is being deleted): write to a new location")


def get_partitions(tr, table: Table, *, staged: bool = False) -> list[Partition]:
    """The partitions of ``table`` that have data, sorted by id: the published data, or
    with ``staged=True`` the staged data.  Raises TableNotFound when the table version is
    gone."""
    table = table_arg(table)

    def body(tr):
        live_version(tr, table)
        return partition_records(tr, table, staged)

    return within_catalog(tr, body)


def _select(parts: list[Partition], pids: set[int] | None, tag: str | None) -> list[Partition]:
    return [p for p in parts if (pids is None or p.pid in pids) and (tag is None or p.tag == tag)]


def publish_partitions(tr, table: Table, pids=None, *, tag: str | None = None) -> list[Partition]:
    """Make staged data the published data of its partitions, in one transaction: of the
    partitions ``pids`` (None: all), staged by ``tag`` (None: by anyone).  The replaced
    data of a managed table goes to the trash.  Returns the published partitions.  Raises
    TableNotFound when the table version is gone, PartitionNotFound when one of ``pids``
    has no staged data (of ``tag``)."""
    table = table_arg(table)
    wanted = _pids(table, pids)
    tag = schema.token(tag, "tag")
    done = LastAttempt()  # what an attempt published: its commit may have happened (1021)

    def body(tr):
        version = live_version(tr, table)
        chosen = _select(partition_records(tr, table, staged=True), wanted, tag)
        missing = sorted(wanted - {p.pid for p in chosen}) if wanted is not None else []
        if (missing or not chosen) and done.committed():
            return done.value  # this call's own commit, behind commit_unknown_result
        if missing:
            by = "" if tag is None else f" by {tag!r}"
            raise PartitionNotFound(f"partitions {missing} of {table.qualified_name} have no data staged{by}")
        now = time.time()
        published = []
        staged_space = layout.partition_space(table.database, table.name, table.id, staged=True)
        space = layout.partition_space(table.database, table.name, table.id)
        old = {p.pid: p for p in partition_records(tr, table, staged=False)} if chosen else {}
        for part in chosen:
            new = _replace(part, staged=False, tag=None, updated=now)
            tr.set(space.pack((part.pid,)), encode_partition(new))
            tr.clear(staged_space.pack((part.pid,)))
            prev = old.get(part.pid)
            if version.managed and prev is not None and prev.location != part.location:
                trash_locations(tr, [prev.location], f"partition {part.pid} of {table.qualified_name} replaced")
            published.append(new)
        done.record(published)
        return published

    return within_catalog(tr, body)


def discard_partitions(tr, table: Table, pids=None, *, tag: str | None = None) -> list[Partition]:
    """Drop staged data (of partitions ``pids``, None: all; staged by ``tag``, None: by
    anyone); a managed table's discarded data goes to the trash.  Returns the discarded
    partitions.  Discarding what is not there (or on a table version that is gone) does
    nothing, so a discard may be repeated."""
    table = table_arg(table)
    wanted = _pids(table, pids)
    tag = schema.token(tag, "tag")
    done = LastAttempt()  # what an attempt discarded: its commit may have happened (1021)

    def body(tr):
        try:
            version = live_version(tr, table)
        except TableNotFound:
            return done.value if done.committed() else []  # dropped or aborted: its staged data went with it
        chosen = _select(partition_records(tr, table, staged=True), wanted, tag)
        if not chosen and done.committed():
            return done.value
        space = layout.partition_space(table.database, table.name, table.id, staged=True)
        for part in chosen:
            tr.clear(space.pack((part.pid,)))
        if version.managed:
            trash_locations(tr, [p.location for p in chosen], f"staged data of {table.qualified_name} discarded")
        done.record(chosen)
        return chosen

    return within_catalog(tr, body)
