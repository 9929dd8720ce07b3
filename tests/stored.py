"""What tests need to look at or prepare a store directly: a snapshot of the job layer's
keys (to show that a refused call wrote nothing), and jobs written as another program
could write them, without the API's argument checks (a scheduled time no date can show,
names with control characters), to show that every view still displays them and that they
can be removed; the pipeline's trash entries and finished jobs made older, a clock the tests
control."""

from __future__ import annotations

import orjson

import jobs
from jobs import dbstate, keys, store_ids
from jobs.queue import rows
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import run


def opened_anew(db) -> None:
    """Forget the store layouts this process saw on ``db``, as a process opening the store
    for the first time (which reads their versions again)."""
    dbstate.of(db).layouts.clear()


def snapshot(db) -> list[tuple[bytes, bytes]]:
    """Every key and value of the job layer."""
    r = keys.ROOT.range()
    return [(bytes(k), bytes(v)) for k, v in db.get_range(r.start, r.stop)]


@jobs.transactional
def add_unchecked(tr, type: str, job_id: str, scheduled_time: float = 0.0, timeout: float | None = 60.0) -> None:
    """A new pending job with data ``{}``, written as ``jobs.add`` writes one but without its
    checks of names and times; ``timeout``: the type's timeout, written the same way (None:
    none)."""
    store_ids.ensure_store(tr)
    if timeout is not None:
        tr.set(keys.timeout_key(type), fdb_tuple.pack((float(timeout),)))
    rows.make_pending(tr, type, job_id, float(scheduled_time), b"{}")


def age_trash(db, location: str, seconds: float) -> None:
    """Make ``location``'s trash entry look trashed ``seconds`` earlier than it was (the
    entry keeps the time it was trashed: the collector's grace period counts from it)."""
    from pipeline import layout
    from pipeline.records import encode_trash

    key = layout.trash_key(location)
    raw = run(db, lambda tr: layout.read(tr, key))
    assert raw is not None, f"{location} is not in the trash"
    entry = orjson.loads(raw)
    run(db, lambda tr: tr.set(key, encode_trash(entry["what"], entry["since"] - seconds)))


def collector_runs(db) -> int:
    """How many times the pipeline's recurring collector job has run."""
    from pipeline import collector

    data = jobs.get_job_data(db, collector.JOB_TYPE, collector.JOB_ID)
    return data.get("_task", {}).get("runs", 0)


def indexed(db, type: str = "t") -> dict[str, str]:
    """Job id -> kind (``finished``/``failed``) of the type's entries in the index of finished
    jobs, checked against the entries' pointers."""
    from jobs.queue import finished

    r = keys.FINISHED[type].range()
    entries = {}
    for key, _value in db.get_range(r.start, r.stop):
        _type, kind, at, job_id = keys.unpack_finished(key)
        assert run(db, finished.entry_of, type, job_id) == (kind, at), f"{job_id}: entry without its pointer"
        entries[job_id] = kind
    return entries


def age_finished(db, type: str, job_ids, seconds: float) -> None:
    """Make the jobs look finished ``seconds`` earlier than they did (retention counts from
    the time in their index entry)."""
    from jobs.queue import finished

    @jobs.transactional
    def body(tr):
        for job_id in job_ids:
            kind, at = finished.entry_of(tr, type, job_id)
            tr.clear(keys.finished_key(type, kind, at, job_id))
            finished.mark(tr, type, job_id, kind == "failed", at - seconds)

    body(db)
