"""Pruning finished jobs kept longer than their type's retention (``retention.py``),
oldest first, from the index of finished jobs (``finished.py``): one bounded batch per
transaction (:func:`prune_batch`, what the activity monitor runs), or all of it by hand
(:func:`prune`, ``jobsctl prune``).  Removing a job clears every key of it (the creator's
``remove_row``), so a pruned job is gone as if ``remove`` had removed it.
"""

from __future__ import annotations

import time

from .. import checks, keys
from ..queue import finished as finished_index, rows
from ..calls import within_store
from ..queue.creator import remove_row
from ..engine import value_of
from ..engine import LastAttempt, run, run_noting
from ..errors import StoreError
from ..controls.retention import KEEP_FOREVER, retentions
from ..queue.reading import job_types

BATCH = 100  # jobs removed per transaction (each removal clears a handful of keys)
BACKFILL_PAGE = 500  # rows looked at per backfill transaction


def prune_batch(tr, type: str, kind: str, up_to: float, limit: int = BATCH, spread: float | None = None,
                unreadable: list | None = None) -> tuple[list[str], bool]:
    """Remove up to ``limit`` jobs of ``kind`` (``"finished"`` or ``"failed"``) that
    finished at or before ``up_to`` (seconds since the epoch), oldest first, with all their
    keys; ``spread`` (0 to 1): from that point between the oldest and the newest of them
    (several pruners catching up take different batches).
    Returns ``(removed ids, more)``, ``more`` when the batch was full.  Each job is re-read:
    one that changed since it was indexed is left alone (its stale entry dropped), so
    several pruners, and retries, only remove what is still finished and old.  A job whose
    row cannot be read is left as it is and named in ``unreadable``, if given
    (``rows.decode``); ``more`` is False when the batch held only such jobs."""
    since = None
    if spread is not None:
        span = finished_index.due_span(tr, type, kind, up_to)
        since = None if span is None else span[0] + spread * (span[1] - span[0])
    entries = finished_index.oldest(tr, type, kind, up_to, limit, since)
    # every job's row and pointer read at once (one round trip on FoundationDB, not 2 x 100)
    reads = [(tr.get(keys.data_key(type, job_id)), finished_index.entry_future(tr, type, job_id))
             for _key, _at, job_id in entries]
    removed, passed_over = [], []
    for (key, at, job_id), (raw_row, entry) in zip(entries, reads):
        row = rows.decode(value_of(raw_row), type, job_id, passed_over)
        if row is rows.UNREADABLE:
            continue
        if row is not None and row.state == "finished" and finished_index.entry_in(entry) == (kind, at):
            remove_row(tr, type, job_id, row)
            removed.append(job_id)
        else:
            tr.clear(key)
    if unreadable is not None:
        unreadable += passed_over
    return removed, len(entries) == limit and len(passed_over) < len(entries)


def prune_page(db, type: str, kind: str, up_to: float, limit: int = BATCH, spread: float | None = None,
               unreadable: list | None = None) -> tuple[list[str], bool]:
    """:func:`prune_batch` in a transaction of its own, retried.  After a commit whose
    result is unknown (1021), a retry that finds every job that attempt removed gone
    reports them as removed (by it, or by another pruner just then: gone either way);
    after a conflict (1020) it starts over, so concurrent pruners count each job once."""
    removed = LastAttempt()  # what an attempt removed: its commit may have happened (1021)

    def attempt(tr):
        if removed.committed(lambda out: not any(_indexed(tr, type, job_id) for job_id in out[0])):
            return removed.value
        return removed.record(prune_batch(tr, type, kind, up_to, limit, spread, unreadable))

    return run_noting(db, removed.failed, attempt)


def _indexed(tr, type: str, job_id: str) -> bool:
    return tr.snapshot.get(keys.finished_job_key(type, job_id)).wait().present()


def backfill_all(db, type: str, unreadable: list | None = None) -> None:
    """Index every job of ``type`` finished while it had no retention (``finished.backfill``),
    one page per transaction, until done.  Takes a database."""
    while not run(db, finished_index.backfill, type, BACKFILL_PAGE, unreadable):
        pass


def prune(db, type: str | None = None, *, older_than: float | None = None, failed: bool = False) -> list[tuple[str, str]]:
    """Remove, now, the finished jobs (``failed``: the failed ones) of ``type`` (None: every
    type with a retention, or every type with finished jobs when ``older_than`` is given)
    that finished more than ``older_than`` seconds ago (None: the type's retention; types
    that keep them forever are skipped).  Jobs finished while the type had no retention
    are indexed first, at now (``finished.backfill``: they go one period later).
    Returns ``(type, id)`` of the jobs removed.  Takes a database: :data:`BATCH` jobs per
    transaction.  ValueError for a bad period or type; StoreError, once every other job
    was removed, naming the jobs whose rows could not be read (left as they are)."""
    if type is not None:
        checks.name(type, "type")
    older_than = None if older_than is None else checks.seconds(older_than, "older_than")
    kind = "failed" if failed else "finished"
    now = time.time()
    periods = within_store(db, retentions)
    if type is not None:
        types = [type]
    elif older_than is None:
        types = sorted(periods)
    else:
        types = run(db, job_types)
    removed, unreadable = [], {}
    for t in types:
        period = older_than if older_than is not None else periods.get(t, KEEP_FOREVER).period(kind)
        if period is None:
            continue
        more, passed_over = True, []
        backfill_all(db, t, passed_over)
        while more:
            ids, more = prune_page(db, t, kind, now - period, unreadable=passed_over)
            removed.extend((t, job_id) for job_id in ids)
        unreadable.update(((t, job_id), error) for t, job_id, error in passed_over)
    if unreadable:
        raise StoreError(f"removed {len(removed)} jobs; left {len(unreadable)} whose rows cannot be read: "
                         + "; ".join(error for error in list(unreadable.values())[:5]))
    return removed
