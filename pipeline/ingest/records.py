"""Ingest's records (frozen dataclasses handed to callers), their JSON encoding, and the
checks of the arguments that name them (transaction ids, chunk numbers)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from jobs.checks import ArgumentTypeError

from ..errors import IngestStoreError
from ..records import json_object

LOAD_TYPE = "ingest.load"
STARTED, FINISHED, ABORTED = "STARTED", "FINISHED", "ABORTED"


@dataclass(frozen=True, slots=True)
class Hints:
    """What a loading workflow may use at once: ``workers`` registered workers
    (``names``), ``threads`` loading threads at each (the fewest any of them has)."""

    workers: int
    threads: int
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Transaction:
    """A super-transaction.  ``hints``: as given when it began; ``rows``/``files``: what
    its end published (0 before)."""

    id: int
    database: str
    state: str  # STARTED, FINISHED or ABORTED
    started: float
    ended: float | None
    hints: Hints
    rows: int
    files: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where chunk ``chunk`` of ``database`` is placed (or will be)."""

    database: str
    chunk: int
    worker: str


@dataclass(frozen=True, slots=True)
class Worker:
    """A registered ingest worker: live until ``seen + ttl`` (its last heartbeat plus its
    registration's time to live), registered since ``since``."""

    name: str
    threads: int
    since: float
    seen: float = 0.0
    ttl: float = 0.0

    def live(self, now: float) -> bool:
        return now < self.seen + self.ttl


def encode(value) -> bytes:
    return orjson.dumps(value)


def decode(raw: bytes, where: str) -> dict:
    """The JSON object stored as ``raw``; IngestStoreError naming ``where`` if it is not one."""
    return json_object(raw, where, IngestStoreError)


def transaction(rec: dict) -> Transaction:
    """The Transaction of a stored transaction record."""
    try:
        h = rec["hints"]
        hints = Hints(int(h["workers"]), int(h["threads"]), tuple(h["names"]))
        return Transaction(int(rec["id"]), rec["database"], rec["state"], rec["started"], rec["ended"], hints,
                           int(rec["rows"]), int(rec["files"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise IngestStoreError(f"transaction record {rec!r:.200} is corrupt") from exc


def worker(name: str, rec: dict) -> Worker:
    """A worker from its record."""
    try:
        return Worker(name, int(rec["threads"]), rec["since"], rec["seen"], rec["ttl"])
    except (KeyError, TypeError, ValueError) as exc:
        raise IngestStoreError(f"ingest worker record {name!r} is corrupt: {rec!r:.200}") from exc


def tid_arg(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"transaction id must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"transaction id must be 1 or more, not {value}")
    return value


def chunk_arg(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"chunk must be an int, not {type(value).__name__}")
    return value
