"""The partition directories a transaction's end builds: for every chunk it loaded, a new
directory holding the chunk's current data and its new pieces (hard links: no data is
copied), recorded before it is built (so a crash leaves nothing an end or abort would
not trash), then staged and published with the transaction's tag."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from .. import catalog
from ..errors import TableNotFound
from ..records import Partition, Table
from . import layout, state
from .files import assemble, data_files


@dataclass(frozen=True)
class Chunk:
    """One chunk a transaction loaded: its table version, pieces and current data."""

    table: Table
    chunk: int
    pieces: tuple[tuple[str, str, int], ...]  # (job id, file, rows)
    base: Partition | None  # the published data it adds to

    def signature(self) -> tuple:
        """What an end compares to tell that the chunk changed since it was planned."""
        return self.table.id, self.chunk, self.pieces, self.base and self.base.location


def loaded_chunks(tr, database: str, tid: int) -> list[Chunk]:
    """The chunks transaction ``tid`` loaded pieces into.  Raises TableNotFound if a table
    it loaded was dropped or replaced meanwhile."""
    grouped: dict[tuple[str, int], list] = {}
    ids: dict[str, str] = {}
    for (table, chunk, job_id), piece in sorted(state.pieces(tr, tid).items()):
        grouped.setdefault((table, chunk), []).append((job_id, piece["file"], int(piece["rows"])))
        ids[table] = piece["table_id"]
    tables, published = {}, {}
    for name, table_id in ids.items():
        table = catalog.get_table(tr, database, name, published_only=False)
        if table.id != table_id:
            raise TableNotFound(f"table {database}.{name} was dropped or replaced during super-transaction {tid}: "
                                "abort the transaction")
        tables[name] = table
        published[name] = {p.pid: p for p in catalog.get_partitions(tr, table)}
    return [Chunk(tables[t], c, tuple(pieces), published[t].get(c)) for (t, c), pieces in grouped.items()]


def build(db, tid: int, plan: list[Chunk]) -> dict[tuple[str, int], str]:
    """Build the new directory of every chunk (recorded first, so that a crash leaves
    nothing the next end or abort would not trash); (table, chunk) -> location."""
    locations = {(c.table.name, c.chunk): _new_location(c, tid) for c in plan}

    def intend(tr):
        for location in locations.values():
            tr.set(layout.build_key(tid, location), b"")

    if locations:
        layout.run(db, intend)
    for c in plan:
        pieces = {f"ingest-{tid}-{job_id}.parquet": path for job_id, path, _rows in c.pieces}
        assemble(locations[(c.table.name, c.chunk)], c.base.location if c.base else None, pieces)
    return locations


def _new_location(c: Chunk, tid: int) -> str:
    """A fresh directory name for chunk ``c``'s new data (one per build attempt)."""
    return c.table.partition_location(c.chunk, f"{state.tag(tid)}-{uuid.uuid4().hex[:12]}")


def drop_builds(tr, tid: int, locations) -> None:
    """Forget the directories built at ``locations`` and send them to the trash."""
    locations = list(locations)
    for location in locations:
        tr.clear(layout.build_key(tid, location))
    catalog.send_to_trash(tr, locations, f"unused partition directory of ingest transaction {tid}")


def publish(tr, tid: int, plan: list[Chunk], built: dict) -> tuple[int, int]:
    """Stage the built directory of every chunk and publish them all, with the
    transaction's tag; (rows, files) the transaction added."""
    tag = state.tag(tid)
    rows = files = 0
    by_table: dict[str, tuple[Table, list[int]]] = {}
    for c in plan:
        location = built[(c.table.name, c.chunk)]
        names = data_files(location)
        size = sum(os.path.getsize(os.path.join(location, n)) for n in names)
        total = (c.base.rows if c.base else 0) + sum(r for _j, _f, r in c.pieces)
        catalog.set_partition(tr, c.table, c.chunk, location, rows=total, bytes=size, staged=True, tag=tag)
        by_table.setdefault(c.table.name, (c.table, []))[1].append(c.chunk)
        rows += sum(r for _j, _f, r in c.pieces)
        files += len(c.pieces)
    for table, chunks in by_table.values():
        catalog.publish_partitions(tr, table, chunks, tag=tag)
    return rows, files
