"""The trash: managed data locations nothing references any more, recorded in the
transaction that stopped referencing them, and the garbage collection that deletes them
(``pipeline.collector`` runs it as a recurring job).
"""

from __future__ import annotations

import os
import shutil
import time

from jobs import checks
from jobs.checks import ArgumentTypeError
from jobs.engine import is_database

from .. import layout, schema
from ..records import decode_trash, encode_trash
from .store import within_catalog

GARBAGE_BATCH = 100  # trash entries read per transaction by collect_garbage


def trash_locations(tr, locations, what: str) -> None:
    """Record locations to delete; entries inside one of them go (deleting it deletes them)."""
    now = time.time()
    for location in locations:
        tr.clear_range(*layout.trash_span_inside(location))
        tr.set(layout.trash_key(location), encode_trash(what, now))


def send_to_trash(tr, locations, what: str) -> None:
    """Record managed data ``locations`` that nothing references any more (``what``: why,
    for people), in the transaction that stopped referencing them: the collector deletes
    them once that committed and the grace period passed.  For a layer that keeps its own
    data under a table's location (ingest's transaction areas)."""
    locations = [schema.location(loc) for loc in locations]
    within_catalog(tr, lambda tr: trash_locations(tr, locations, what))


def get_trash(tr, *, limit: int | None = None) -> list[str]:
    """Locations waiting to be deleted by :func:`collect_garbage`, sorted."""
    limit = schema.count(limit, "limit", optional=True)
    if limit == 0:
        return []
    begin, end = layout.span(layout.TRASH)
    return within_catalog(tr, lambda tr: [layout.TRASH.unpack(k)[0] for k, _v in tr.get_range(begin, end, limit=limit or 0)])


def remove_directory(location: str) -> None:
    """Delete a directory tree; one that does not exist is fine (deleted earlier)."""
    location = schema.location(location)
    try:
        shutil.rmtree(location)
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        os.remove(location)


def collect_garbage(db, *, remove=remove_directory, limit: int | None = None, grace: float = 0.0) -> list[str]:
    """Delete the locations trashed more than ``grace`` seconds ago (0: all of them; a
    reader that looked up data before it was dropped may still read it for that long)
    with ``remove(location)``, default :func:`remove_directory`, and forget them, a batch
    at a time; at most ``limit`` (None: all).  Takes a database: it runs its own
    transactions, and deletes files only for entries whose change has committed.  Returns
    the locations deleted.  Safe to run concurrently and to repeat: an error from
    ``remove`` stops it after forgetting the locations already deleted, and leaves the
    rest for the next run.  ``pipeline.collector`` runs it as a recurring job."""
    if not is_database(db):
        raise ArgumentTypeError("collect_garbage deletes files between transactions: pass a database, not a transaction")
    limit = schema.count(limit, "limit", optional=True)
    cutoff = time.time() - checks.seconds(grace, "grace")
    deleted: list[str] = []
    for batch in _due_batches(db, cutoff):
        if limit is not None:
            batch = batch[: limit - len(deleted)]
        done = []
        try:
            for location in batch:
                remove(location)
                done.append(location)
        finally:
            if done:
                within_catalog(db, lambda tr: [tr.clear(layout.trash_key(loc)) for loc in done])
            deleted += done
        if limit is not None and len(deleted) >= limit:
            break
    return deleted


def _due_batches(db, cutoff: float):
    """The trash read a page of GARBAGE_BATCH entries per transaction, in key order (so
    entries too young to delete are passed over, not read again): for each page, the
    locations trashed at or before ``cutoff``."""
    begin, end = layout.span(layout.TRASH)
    while True:
        page = within_catalog(db, lambda tr: [(bytes(k), bytes(v)) for k, v in tr.get_range(begin, end, limit=GARBAGE_BATCH)])
        due = [layout.TRASH.unpack(k)[0] for k, v in page if decode_trash(v, f"trash entry {k!r}") <= cutoff]
        if due:
            yield due
        if len(page) < GARBAGE_BATCH:
            return
        begin = page[-1][0] + b"\x00"  # the first key after the page
