"""The catalog's records and their JSON encoding (orjson).

Records are frozen dataclasses handed to callers; the stored values are JSON objects with
the same field names (a Table's ``columns`` as a list of column objects).  Decoding checks
field types, so a corrupt or foreign value raises :class:`CatalogStoreError` naming the key
instead of surfacing later as an AttributeError.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields

import orjson

from .errors import CatalogError, CatalogStoreError
from .schema import Column

VALUE_LIMIT = 100_000  # FoundationDB's value size limit

STAGED = "staged"
COMMITTED = "committed"


@dataclass(frozen=True, slots=True)
class Database:
    """A database: a namespace of tables, with its data directory.  Readers (queries,
    operations) see it only once ``published``."""

    name: str
    id: str
    location: str  # directory under which its managed tables keep their data
    published: bool
    created: float


@dataclass(frozen=True, slots=True)
class Table:
    """One version of a table.  ``state`` is ``"committed"`` (what readers see under the
    name) or ``"staged"`` (invisible until :func:`pipeline.catalog.commit_table`).  The
    object is also a fence: partition calls given a Table whose version was since dropped,
    replaced or aborted raise TableNotFound."""

    database: str
    name: str
    id: str
    state: str
    columns: tuple[Column, ...]
    partition_by: str | None  # None: a regular table, one partition
    partitions: int
    location: str  # the version's data directory (partition directories inside if managed)
    managed: bool  # the catalog owns `location`: dropped data goes to the trash
    replace: bool  # staged: committing replaces a committed table of the same name
    owner: str | None  # who staged it (e.g. an operation id), to find it after a crash
    created: float

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def regular(self) -> bool:
        return self.partition_by is None

    @property
    def partition_ids(self) -> range:
        return range(self.partitions)

    @property
    def schema(self) -> list[dict]:
        """The schema as given to create_table (JSON-ready)."""
        return [c.to_json() for c in self.columns]

    def partition_location(self, pid: int, token: str | None = None) -> str:
        """The directory for partition ``pid``'s data: ``part-00007`` in the table's
        location, or ``part-00007-<token>`` so that concurrent or retried writers (each
        with its own token, e.g. a job lock) never share a directory."""
        leaf = f"part-{pid:05d}" if token is None else f"part-{pid:05d}-{token}"
        return os.path.join(self.location, leaf)


@dataclass(frozen=True, slots=True)
class Partition:
    """Where one partition's data is, and how much of it.  ``staged`` data is not seen by
    readers until published."""

    table_id: str
    pid: int
    location: str
    rows: int
    bytes: int | None
    staged: bool
    tag: str | None  # staged: who staged it (e.g. an ingest transaction id)
    updated: float


def _encode(record, what: str) -> bytes:
    data = asdict(record)
    raw = orjson.dumps(data)
    if len(raw) > VALUE_LIMIT:
        raise CatalogError(
            f"{what} is {len(raw)} bytes of JSON, over FoundationDB's value limit of {VALUE_LIMIT}: "
            "use fewer or shorter columns and checks"
        )
    return raw


def _decode(cls, raw: bytes, where: str, types: dict):
    try:
        data = orjson.loads(raw)
        ok = isinstance(data, dict) and set(data) == {f.name for f in fields(cls)}
        ok = ok and all(isinstance(data[k], t) and not (t is int and isinstance(data[k], bool)) for k, t in types.items())
    except orjson.JSONDecodeError as exc:
        raise CatalogStoreError(f"{where} is corrupt: {exc}") from exc
    if not ok:
        raise CatalogStoreError(f"{where} is corrupt: unexpected fields {raw[:200]!r}")
    return data


_NUM = (int, float)
_OPT_STR = (str, type(None))


def encode_database(db: Database) -> bytes:
    return _encode(db, f"database {db.name!r}")


def decode_database(raw: bytes, where: str) -> Database:
    d = _decode(Database, raw, where, {"name": str, "id": str, "location": str, "published": bool, "created": _NUM})
    return Database(**d)


def encode_table(table: Table) -> bytes:
    return _encode(table, f"table {table.qualified_name!r}")


def decode_table(raw: bytes, where: str) -> Table:
    types = {
        "database": str, "name": str, "id": str, "state": str, "columns": list,
        "partition_by": _OPT_STR, "partitions": int, "location": str, "managed": bool,
        "replace": bool, "owner": _OPT_STR, "created": _NUM,
    }  # fmt: skip
    d = _decode(Table, raw, where, types)
    try:
        d["columns"] = tuple(Column(**c) for c in d["columns"])
    except TypeError as exc:
        raise CatalogStoreError(f"{where} is corrupt: bad column ({exc})") from exc
    if d["state"] not in (STAGED, COMMITTED):
        raise CatalogStoreError(f"{where} is corrupt: unknown state {d['state']!r}")
    return Table(**d)


def encode_partition(part: Partition) -> bytes:
    return _encode(part, f"partition {part.pid}")


def decode_partition(raw: bytes, where: str) -> Partition:
    types = {
        "table_id": str, "pid": int, "location": str, "rows": int, "bytes": (int, type(None)),
        "staged": bool, "tag": _OPT_STR, "updated": _NUM,
    }  # fmt: skip
    return Partition(**_decode(Partition, raw, where, types))


def encode_trash(what: str, since: float) -> bytes:
    return orjson.dumps({"what": what, "since": since})


def decode_trash(raw: bytes, where: str) -> float:
    """When the trash entry's location was trashed (seconds since the epoch)."""
    since = json_object(raw, where).get("since")
    if not isinstance(since, _NUM) or isinstance(since, bool):
        raise CatalogStoreError(f"{where} is corrupt: no time it was trashed in {raw[:200]!r}")
    return since


def encode_writer(what: str, since: float) -> bytes:
    return orjson.dumps({"what": what, "since": since})


def decode_writer(raw: bytes, where: str) -> str:
    """What the writer is, as it named itself."""
    what = json_object(raw, where).get("what")
    if not isinstance(what, str):
        raise CatalogStoreError(f"{where} is corrupt: {raw[:200]!r}")
    return what


def json_object(raw: bytes, where: str, error: type[Exception] = CatalogStoreError) -> dict:
    """The JSON object stored as ``raw``; ``error`` (naming ``where``) when it is not one."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise error(f"{where} is corrupt: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{where} is corrupt: {raw[:200]!r}")
    return data
