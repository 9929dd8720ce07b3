"""Loads: queue jobs (type ``ingest.load``) that parse one chunk file into a Parquet
piece under the transaction's area, and register it with the job's finish (so exactly
once, and never by a worker that lost the job); the handler processors run, and
:func:`attach`, which makes a processor an ingest worker."""

from __future__ import annotations

import hashlib
import os
import socket

import orjson

import jobs
from jobs.checks import ArgumentTypeError
from jobs.engine import is_database
from processors import Retry, TaskFailed, TaskFuture

from .. import catalog, schema
from ..errors import LoadFailed, LoadFileError, TableNotFound
from . import layout, state
from .files import file_format, write_piece
from .records import LOAD_TYPE, chunk_arg, encode, tid_arg
from .workers import HEARTBEATS_PER_TTL, WORKER_TTL, register_worker, unregister_worker

LOAD_TIMEOUT = 60.0  # type timeout of load jobs (the processor heartbeats 3 times per timeout)


def load_job_id(tid: int, table: str, chunk: int, path: str) -> str:
    """The id of the load of ``path`` into chunk ``chunk`` of ``table`` in transaction
    ``tid``: the same load always has the same id."""
    digest = hashlib.sha256(orjson.dumps([tid, table, chunk, path])).hexdigest()[:24]
    return f"{tid}-{digest}"


def load_chunk(db, tid: int, table: str, chunk: int, path: str, *, format: str | None = None,
               header: bool = False, wait: bool = False, timeout: float | None = None) -> TaskFuture:
    """Load the CSV/TSV file ``path`` (absolute; see ``pipeline.ingest.files`` for the
    format) into chunk ``chunk`` of ``table`` of the transaction's database, as a queue job
    that an attached processor runs; returns its TaskFuture (result: rows, bytes).  A chunk
    takes any number of files; loading the same file into the same chunk again returns the
    same load (joined while it runs, not repeated once it succeeded; run again after it
    failed).  ``wait``: block until it is done (``timeout`` seconds at most), raising
    LoadFailed if it failed.

    Raises (before anything is written) TransactionNotFound, TransactionStateError,
    DatabasePublished, TableNotFound (not a table of the transaction's database),
    InvalidChunk, LoadFileError (no readable file at ``path``), ValueError."""
    if not is_database(db):
        raise ArgumentTypeError("load_chunk returns a future that follows the job: pass a database, not a transaction")
    tid = tid_arg(tid)
    schema.name(table, "table name")
    chunk = chunk_arg(chunk)
    path = schema.location(path, "path")
    fmt = file_format(path, format)
    if not isinstance(header, bool):
        raise ArgumentTypeError(f"header must be a bool, not {type(header).__name__}")
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise LoadFileError(f"chunk file {path!r} does not exist or is not a readable file")
    job_id = load_job_id(tid, table, chunk, path)
    params = {"tid": tid, "table": table, "chunk": chunk, "path": path, "format": fmt, "header": header}
    layout.run(db, lambda tr: _submit(tr, job_id, params))
    future = TaskFuture(db, LOAD_TYPE, job_id)
    if wait:
        try:
            future.result(timeout)
        except TaskFailed as exc:
            error = exc.error or {}
            raise LoadFailed(f"loading {path} into {table} chunk {chunk} (super-transaction {tid}) failed: "
                             f"{error.get('type')}: {error.get('message')}", error) from exc
    return future


def _submit(tr, job_id: str, p: dict) -> None:
    """Add load job ``job_id`` (``p``: its parameters but the database and table id),
    unless the same load is pending, running or succeeded."""
    tid, table, chunk = p["tid"], p["table"], p["chunk"]
    rec = state.writable(tr, tid)
    t = state.loadable(catalog.get_table(tr, rec["database"], table, published_only=False))
    state.table_chunk(t, chunk)
    try:
        info = jobs.get_job(tr, LOAD_TYPE, job_id)
    except jobs.NotFound:
        info = None
    if info is not None and info.state != "finished":
        return  # pending or running: join it
    if info is not None and not _failed(info.data):
        return  # loaded already: the same file again is the same load
    if jobs.get_type_timeout(tr, LOAD_TYPE) is None:
        jobs.set_type_timeout(tr, LOAD_TYPE, LOAD_TIMEOUT)
    params = {"tid": tid, "database": rec["database"], "table": table, "table_id": t.id, "chunk": chunk,
              "path": p["path"], "format": p["format"], "header": p["header"]}
    jobs.add(tr, LOAD_TYPE, job_id, params)
    tr.set(layout.load_key(tid, job_id), encode({"table": table, "chunk": chunk, "path": p["path"]}))


def _failed(data: dict) -> bool:
    from processors.behaviors import failed

    return failed(data or {}) is not None


def load_handler(db):
    """The handler of load jobs on store ``db`` (what :func:`attach` registers)."""

    def handle(ctx):
        p = ctx.data
        tid, chunk = p["tid"], p["chunk"]
        layout.run(db, lambda tr: state.writable(tr, tid))
        table = catalog.get_table(db, p["database"], p["table"], published_only=False)
        if table.id != p["table_id"]:
            raise TableNotFound(f"table {table.qualified_name} was dropped or replaced since the load was submitted")
        target = os.path.join(state.area(table, tid), f"c{chunk:05d}-{ctx.run_id}.parquet")
        piece = write_piece(p["path"], target, table.columns, fmt=p["format"], header=p["header"],
                            chunk_column=table.partition_by, chunk=chunk, check=ctx.check)
        value = encode({"file": piece.file, "rows": piece.rows, "bytes": piece.bytes, "table_id": table.id,
                        "source": p["path"], "run": ctx.run_id})
        key = layout.piece_key(tid, table.name, chunk, ctx.job_id)

        def register(tr):  # with the job's finish: exactly once, only while the job is ours
            state.writable(tr, tid)
            if catalog.get_table(tr, table.database, table.name, published_only=False).id != table.id:
                raise TableNotFound(f"table {table.qualified_name} was dropped or replaced while loading")
            tr.set(key, value)

        ctx.on_commit(register)
        return {"rows": piece.rows, "bytes": piece.bytes, "file": piece.file}

    return handle


def attach(processor, *, worker: str | None = None, threads: int = 1, timeout: float = LOAD_TIMEOUT,
           retry=None, ttl: float = WORKER_TTL) -> str:
    """Make ``processor`` run load jobs, and register it as ingest worker ``worker``
    (default: this host's name) with ``threads`` loading threads (pass the concurrency it
    will run with): registered now, renewed while the processor serves (every ``ttl``/3
    seconds), unregistered when it stops; a processor killed or stalled drops out of hints
    and placement ``ttl`` seconds after its last renewal.  ``retry``: the load jobs' retry
    policy (default: one attempt; a failed load is run again by loading the file again).
    Returns the worker name."""
    name = worker or socket.gethostname().split(".")[0] or "localhost"
    db = processor.db
    processor.handler(LOAD_TYPE, timeout=timeout, retry=retry if retry is not None else Retry())(load_handler(db))
    register_worker(db, name, threads=threads, ttl=ttl)
    processor.periodic(ttl / HEARTBEATS_PER_TTL, lambda: register_worker(db, name, threads=threads, ttl=ttl),
                       stop=lambda: unregister_worker(db, name))
    return name
