"""The ``jobs`` commands on a store: each takes the parsed arguments and returns its JSON
document (``views.HUMAN`` renders it for people)."""

from __future__ import annotations

import contextlib

import jobs
from jobs.indexes import failed as failed_index
from jobs import layouts, store, store_ids
from jobs.upkeep import schedules
from jobs.observe import status as status_mod
from jobs.engine import describe_store, run as run_transaction

from .arguments import data_object
from .views import warn
from monitor.documents import job_doc, job_document

@contextlib.contextmanager
def open_store(args, create: bool = True):
    """The store of ``--store``; commands that only read pass ``create=False``, so that a
    mistyped path is an error rather than a new empty store."""
    with store.opened(args.store, create=create) as db:
        yield db


@jobs.transactional
def add_and_get(tr, type, job_id, data, at, priority=0, key=None, type_timeout=None):
    """Add the job (``type_timeout``: the type's timeout to set if it has none)."""
    jobs.add(tr, type, job_id, data, at, priority=priority, key=key, type_timeout=type_timeout)
    return job_doc(jobs.get_job(tr, type, job_id))


def cmd_add(args):
    data = data_object(args.data)
    with open_store(args) as db:
        try:
            return add_and_get(db, args.type, args.id, data, args.at, args.priority, args.key,
                               getattr(args, "type_timeout", None))
        except jobs.NoTypeTimeout as exc:
            raise jobs.NoTypeTimeout(
                f"job type {args.type!r} has no timeout in {describe_store(db)}: "
                f"run 'jobsctl set-timeout {args.type} SECONDS' first"
            ) from exc


def cmd_remove(args):
    with open_store(args, create=False) as db:
        if args.unreadable:
            found = jobs.remove_unreadable(db, args.type, args.id)
            return {"removed": {"type": args.type, "id": args.id}, "found": found}
        jobs.remove(db, args.type, args.id)
    return {"removed": {"type": args.type, "id": args.id}}


def cmd_show(args):
    with open_store(args, create=False) as db:
        return job_document(db, args.type, args.id)


class Incomplete:
    """A command's document, printed, then ``errors`` (each a ``jobsctl: error:`` line on
    stderr) and exit status 1: what could be done was, and what could not is said."""

    def __init__(self, doc, errors: list[str]):
        self.doc, self.errors = doc, errors


def cmd_list(args):
    with open_store(args, create=False) as db:
        if args.failed:
            return failed_list(db, args.type)
        infos, failed, unreadable = _jobs_listed(db, args.type)
    docs = [{**job_doc(i), "state": "failed"} if (i.type, i.id) in failed else job_doc(i) for i in infos]
    docs = [d for d in docs if args.state is None or d["state"] == args.state]
    return Incomplete(docs, [error for _t, _i, error in unreadable]) if unreadable else docs


@jobs.transactional
def _jobs_listed(tr, type: str | None):
    """Every job (of ``type``), the ``(type, id)`` of the failed ones (listed as state
    ``failed``, as ``jobsctl show`` and ``status`` count them), and the unreadable ones."""
    unreadable: list = []  # (this attempt's)
    infos = jobs.get_jobs(tr, type, unreadable=unreadable)
    types = sorted({i.type for i in infos if i.state == "finished"})
    failed = {(t, job_id) for t in types for job_id, _at, _reason in failed_index.listed(tr, t)}
    return infos, failed, unreadable


def failed_list(db, type: str | None) -> list[dict]:
    """``jobsctl list --failed``: from the failed index, not by decoding every job."""
    import processors  # (loaded by the commands that use it: every `jobs` call starts fast)
    types = [type] if type is not None else run_transaction(db, status_mod.job_types)
    return [{"failed": True, **vars(f)} for t in types for f in processors.failed_jobs(db, t)]


def cmd_retry(args):
    import processors

    with open_store(args, create=False) as db:
        if args.all_failed:
            return {"retried": processors.retry_all_failed(db, args.type), "type": args.type}
        processors.retry_failed(db, args.type, args.id)
    return {"retried": 1, "type": args.type, "id": args.id}


def cmd_discard(args):
    import processors

    with open_store(args, create=False) as db:
        processors.discard_failed(db, args.type, args.id)
    return {"discarded": {"type": args.type, "id": args.id}}


@jobs.transactional
def timeouts(tr):
    return [{"type": t, "timeout": jobs.get_type_timeout(tr, t)} for t in jobs.get_types(tr)]


def cmd_types(args):
    with open_store(args, create=False) as db:
        return timeouts(db)


def cmd_set_timeout(args):
    with open_store(args) as db:
        jobs.set_type_timeout(db, args.type, args.seconds)
    return {"type": args.type, "timeout": args.seconds}


@jobs.transactional
def _pause(tr, type: str) -> bool:
    """Pause ``type``; whether the store knew it (a timeout, jobs, limits, a pause)."""
    known = type in status_mod.job_types(tr)
    jobs.pause(tr, type)
    return known


@jobs.transactional
def _resume(tr, type: str) -> bool:
    """Resume ``type``; whether it was paused."""
    was_paused = jobs.is_paused(tr, type)
    jobs.resume(tr, type)
    return was_paused


def cmd_pause(args):
    """Pause TYPE; a type the store has never seen is paused all the same (ahead of its
    workers' deployment), with a warning on stderr: its name may be mistyped."""
    with open_store(args) as db:
        if not _pause(db, args.type):
            warn(f"type {args.type!r} is unknown in {describe_store(db)} (no timeout, no jobs, no limits): "
                 "paused all the same, for workers still to come; check the name")
    return {"type": args.type, "paused": True}


def cmd_resume(args):
    with open_store(args, create=False) as db:
        was_paused = _resume(db, args.type)
    return {"type": args.type, "paused": False, "was_paused": was_paused}


def store_layouts() -> list[layouts.Layout]:
    """Every layout the project writes: one per prefix of ``jobs.prefixes.ALL``."""
    from pipeline import ctas_store, index
    from pipeline import layout as catalog_layout
    from pipeline.ingest import layout as ingest_layout
    from processors.operations import LAYOUT as OPERATIONS
    from processors.submit import LAYOUT as SUBMISSIONS

    return [store_ids.LAYOUT, catalog_layout.LAYOUT, ingest_layout.LAYOUT, OPERATIONS, SUBMISSIONS, ctas_store.LAYOUT,
            index.LAYOUT]


def cmd_migrate(args):
    """The one place a store is migrated (no call of the API does it): each layout from the
    version the store holds to this release's, a bounded step per transaction."""
    with open_store(args, create=False) as db:
        versions = {layout.name: layouts.migrate(db, layout) for layout in store_layouts()}
    return {"layouts": {name: {"from": before, "to": after} for name, (before, after) in versions.items()}}


def cmd_status(args):
    with open_store(args, create=False) as db:
        return status_mod.gather(db, limit=args.limit, exact=args.exact)


def cmd_schedules(args):
    """``jobsctl schedules``: the cron schedules; ``--clear TYPE`` drops one (a processor with
    a cron handler for TYPE writes it again as it starts)."""
    with open_store(args, create=False) as db:
        if args.clear is not None:
            if not schedules.clear_schedule(db, args.clear):
                raise jobs.NotFound(f"type {args.clear!r} has no cron schedule in {describe_store(db)}")
            return {"cleared": args.clear}
        return [vars(s) for s in schedules.get_schedules(db)]


def cmd_gc(args):
    """The pipeline's garbage collector, by hand (pipeline, with Spark behind it, is loaded
    by this command only)."""
    from pipeline import collect_garbage, get_trash

    with open_store(args, create=False) as db:
        deleted = collect_garbage(db, grace=args.grace)
        return {"deleted": deleted, "grace": args.grace, "left": len(get_trash(db))}


