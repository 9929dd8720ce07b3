"""Writer records: who writes into an unpublished database (an ingest super-transaction),
so that it is not published until they have ended.
"""

from __future__ import annotations

import time

from jobs.checks import ArgumentTypeError

from .. import layout, schema
from ..records import decode_writer, encode_writer
from .store import database_or_raise, within_catalog


def open_writer(tr, database: str, tag: str, what: str) -> None:
    """Record that ``tag`` (e.g. ``ingest-3``) writes into the unpublished ``database``,
    ``what`` naming it for people (``super-transaction 3``): the database cannot be
    published until :func:`close_writer`.  Call it in the transaction that checked the
    database is unpublished (publishing writes the record that check reads, so the two
    serialise).  Idempotent.  Raises DatabaseNotFound."""
    schema.name(database, "database name")
    tag = schema.token(tag, "tag")
    if not isinstance(what, str) or not what:
        raise ArgumentTypeError(f"what must be a non-empty str, not {what!r}")

    def body(tr):
        database_or_raise(tr, database)
        tr.set(layout.writer_key(database, tag), encode_writer(what, time.time()))

    within_catalog(tr, body)


def close_writer(tr, database: str, tag: str) -> None:
    """Forget writer ``tag`` of ``database`` (its work ended, or was aborted).  Idempotent."""
    schema.name(database, "database name")
    tag = schema.token(tag, "tag")
    within_catalog(tr, lambda tr: tr.clear(layout.writer_key(database, tag)))


def get_writers(tr, database: str) -> list[str]:
    """What the open writers of ``database`` are, as they named themselves, by tag."""
    schema.name(database, "database name")
    return within_catalog(tr, lambda tr: writer_names(tr, database))


def writer_names(tr, database: str) -> list[str]:
    return [decode_writer(v, f"writer record {k!r}") for k, v in tr.get_range(*layout.span(layout.WRITERS, database))]
