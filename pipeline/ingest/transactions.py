"""The lifecycle of a super-transaction: begin, read, end (build its chunks' directories,
then publish them all in one store transaction) or abort (remove its loads, trash its
data).  Every step is safe to retry after ``commit_unknown_result``: a nonce stored with
the record tells a call its own earlier commit."""

from __future__ import annotations

import time
import uuid

import jobs
from jobs.checks import ArgumentTypeError
from jobs.engine import LastAttempt, is_database

from .. import catalog, schema
from ..errors import IngestError, TableNotFound
from . import directories, layout, state
from .directories import Chunk
from .records import ABORTED, FINISHED, LOAD_TYPE, STARTED, Transaction, decode, encode, tid_arg, transaction
from .workers import hints as worker_hints

BUILD_ATTEMPTS = 5  # end_transaction rebuilds when a chunk changed under it (another end)


def begin_transaction(tr, database: str) -> Transaction:
    """Start a super-transaction of ``database``: its id (1, 2, ... per store) and hints
    (workers and their threads).  Raises DatabaseNotFound, DatabasePublished."""
    schema.name(database, "database name")
    nonce = uuid.uuid4().hex
    drawn = LastAttempt()  # the id an attempt took: its commit may have happened (1021)

    def ours(tr, tid: int) -> Transaction | None:
        raw = layout.read(tr, layout.transaction_key(tid))
        rec = None if raw is None else decode(raw, "transaction")
        return transaction(rec) if rec is not None and rec.get("nonce") == nonce else None

    def body(tr):
        earlier = drawn.committed(lambda tid: ours(tr, tid))
        if earlier:
            return earlier
        state.unpublished(tr, database)
        tid = layout.last_tid(tr) + 1
        hints = worker_hints(tr)
        rec = {"id": tid, "database": database, "state": STARTED, "started": time.time(), "ended": None,
               "hints": {"workers": hints.workers, "threads": hints.threads, "names": list(hints.names)},
               "rows": 0, "files": 0, "nonce": nonce}
        layout.set_last_tid(tr, tid)
        tr.set(layout.transaction_key(tid), encode(rec))
        tr.set(layout.open_key(database, tid), b"")
        catalog.open_writer(tr, database, state.tag(tid), f"super-transaction {tid}")  # holds off publishing
        drawn.record(tid)
        return transaction(rec)

    return layout.run(tr, body)


def get_transaction(tr, tid: int) -> Transaction:
    """The super-transaction.  Raises TransactionNotFound."""
    tid = tid_arg(tid)
    return layout.run(tr, lambda tr: transaction(state.record(tr, tid)))


def list_transactions(tr, database: str | None = None, *, state: str | None = None) -> list[Transaction]:
    """Super-transactions (of ``database``; in ``state``), by id."""
    if state not in (None, STARTED, FINISHED, ABORTED):
        raise ValueError(f"state must be STARTED, FINISHED, ABORTED or None, not {state!r}")

    def body(tr):
        out = [transaction(decode(v, f"transaction {k!r}")) for k, v in layout.transactions(tr)]
        return [t for t in out if (database is None or t.database == database) and (state is None or t.state == state)]

    return layout.run(tr, body)


def end_transaction(db, tid: int, *, commit: bool = True) -> Transaction:
    """End super-transaction ``tid``: normally (``commit=True``: every chunk it loaded
    becomes part of its table, all in one store transaction) or abnormally (``False``: its
    loads are removed, halting running ones, and its data goes to the trash).  Takes a
    database: committing builds partition directories between store transactions.

    Raises TransactionNotFound, TransactionStateError (not STARTED), DatabasePublished
    (commit into a published database), LoadsInProgress (commit while loads are pending or
    running), TableNotFound (a table it loaded was dropped meanwhile: abort it).  Safe to
    retry: a retry after an unknown commit result returns the ended transaction."""
    if not is_database(db):
        raise ArgumentTypeError("end_transaction builds files between transactions: pass a database, not a transaction")
    tid = tid_arg(tid)
    if not isinstance(commit, bool):
        raise ArgumentTypeError(f"commit must be a bool, not {type(commit).__name__}")
    nonce = uuid.uuid4().hex
    if not commit:
        return layout.run(db, lambda tr: _abort(tr, tid, nonce))
    for _attempt in range(BUILD_ATTEMPTS):
        plan = layout.run(db, lambda tr: _plan(tr, tid, nonce))
        if isinstance(plan, Transaction):
            return plan
        built = directories.build(db, tid, plan)
        try:
            done = layout.run(db, lambda tr: _finish(tr, tid, nonce, plan, built))
        except BaseException:
            layout.run(db, lambda tr: directories.drop_builds(tr, tid, built.values()))
            raise
        if done is not None:
            return done
        layout.run(db, lambda tr: directories.drop_builds(tr, tid, built.values()))  # a chunk changed: build again
    raise IngestError(f"super-transaction {tid}: its chunks kept changing while it ended "
                      f"({BUILD_ATTEMPTS} attempts); try again")


def _closed_by_me(rec: dict, nonce: str) -> Transaction | None:
    if rec.get("state") != STARTED and rec.get("closed_by") == nonce:
        return transaction(rec)  # this call's commit, behind commit_unknown_result
    return None


def _plan(tr, tid: int, nonce: str):
    rec = state.record(tr, tid)
    mine = _closed_by_me(rec, nonce)
    if mine is not None:
        return mine
    state.writable(tr, tid)
    state.refuse_active_loads(tr, tid, state.loads(tr, tid))
    return directories.loaded_chunks(tr, rec["database"], tid)


def _finish(tr, tid: int, nonce: str, plan: list[Chunk], built: dict) -> Transaction | None:
    """Publish the built chunks and mark the transaction FINISHED; None if a chunk changed
    since the plan (build again)."""
    rec = state.record(tr, tid)
    mine = _closed_by_me(rec, nonce)
    if mine is not None:
        return mine
    state.writable(tr, tid)
    loads = state.loads(tr, tid)
    state.refuse_active_loads(tr, tid, loads)
    now_plan = directories.loaded_chunks(tr, rec["database"], tid)
    if [c.signature() for c in now_plan] != [c.signature() for c in plan]:
        return None
    rows, files = directories.publish(tr, tid, plan, built)
    _close(tr, rec, tid, loads, FINISHED, nonce, rows, files, keep=set(built.values()))
    return transaction(state.record(tr, tid))


def _abort(tr, tid: int, nonce: str) -> Transaction:
    rec = state.record(tr, tid)
    mine = _closed_by_me(rec, nonce)
    if mine is not None:
        return mine
    state.started(tr, tid)
    _close(tr, rec, tid, state.loads(tr, tid), ABORTED, nonce, 0, 0, keep=set())
    return transaction(state.record(tr, tid))


def _close(tr, rec: dict, tid: int, loads: dict, outcome: str, nonce: str, rows: int, files: int, keep: set) -> None:
    """Remove the transaction's load jobs (a running one is halted: it registers nothing),
    trash its areas and the directories built but not used, and record ``outcome``."""
    database = rec["database"]
    areas = set()
    for job_id, load in loads.items():
        try:
            jobs.remove(tr, LOAD_TYPE, job_id)
        except jobs.NotFound:
            pass
        try:
            areas.add(state.area(catalog.get_table(tr, database, load["table"], published_only=False), tid))
        except TableNotFound:
            pass  # dropped: its location, the area inside, went to the trash with it
    unused = layout.builds(tr, tid)  # built by ends that did not finish
    catalog.send_to_trash(tr, sorted(areas) + [loc for loc in unused if loc not in keep],
                          f"ingest transaction {tid} {outcome.lower()}")
    layout.clear_transaction_data(tr, tid)
    tr.clear(layout.open_key(database, tid))
    catalog.close_writer(tr, database, state.tag(tid))
    rec = {**rec, "state": outcome, "ended": time.time(), "rows": rows, "files": files, "closed_by": nonce}
    tr.set(layout.transaction_key(tid), encode(rec))

