"""Ingest super-transactions (the Qserv seed): register, begin, place, load chunk files as
queue jobs, end (atomically) or abort, publish; every prerequisite refused with its own
error and nothing written; malformed rows reported by file and line; loads fenced by the
job lock.  Processors run on threads; tests wait on conditions, never on durations."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

import jobs
import pipeline
from jobs.engine import error_code
from pipeline import collector, ingest
from pipeline.errors import (
    DatabaseBusy,
    DatabaseExists,
    DatabaseNotFound,
    DatabaseNotPublished,
    DatabasePublished,
    IngestError,
    IngestStoreError,
    InvalidChunk,
    LoadFailed,
    LoadFileError,
    LoadsInProgress,
    MalformedRows,
    NoIngestWorkers,
    PipelineError,
    TableExists,
    TableNotFound,
    TransactionNotFound,
    TransactionsOpen,
    TransactionStateError,
)
from pipeline.ingest_files import write_piece
from pipeline.runtime import table_partitions
from processors import Processor, TaskFailed
from stored import age_trash, collector_runs
from waiting import DEADLINE, running, wait_until

OBJ = [
    {"name": "id", "type": "bigint", "nullable": False},
    {"name": "chunk", "type": "int", "nullable": False},
    {"name": "ra", "type": "double"},
    {"name": "name", "type": "string"},
]
FILTERS = [{"name": "band", "type": "string", "nullable": False}, {"name": "nm", "type": "int"}]


@pytest.fixture
def sky(db, tmp_path):
    """Database sky (4 chunks, unpublished) with partitioned table obj and regular table
    filters; its data under tmp_path/data."""
    ingest.register_database(db, "sky", chunks=4, location=str(tmp_path / "data"))
    ingest.register_table(db, "sky", "obj", OBJ, chunk_column="chunk")
    ingest.register_table(db, "sky", "filters", FILTERS)
    return db


def worker(db, name="w1", threads=2) -> Processor:
    p = Processor(db)
    ingest.attach(p, worker=name, threads=threads)
    return p


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


def obj_rows(ids, chunk) -> str:
    return "".join(f"{i},{chunk},{i / 10},n{i}\n" for i in ids)


def table_rows(db, name="obj") -> dict[int, list[dict]]:
    table = pipeline.get_table(db, "sky", name, published_only=False)
    return {p.pid: sorted(pq.read_table(p.location).to_pylist(), key=str) for p in pipeline.get_partitions(db, table)}


def ids_of(rows) -> dict[int, list[int]]:
    return {pid: sorted(r["id"] for r in rs) for pid, rs in rows.items()}


def nothing_written(commit_version):
    before = commit_version()
    return lambda: commit_version() == before


# --- the happy path ------------------------------------------------------------------------


def test_ingest_two_transactions_then_publish(sky, tmp_path, commit_version):
    db = sky
    p = worker(db)
    assert pipeline.list_databases(db) == []  # being ingested: invisible
    txn = ingest.begin_transaction(db, "sky")
    assert (txn.state, txn.database) == ("STARTED", "sky")
    assert (txn.hints.workers, txn.hints.threads, txn.hints.names) == (1, 2, ("w1",))
    assert ingest.chunk_placement(db, txn.id, 1) == ingest.Placement("sky", 1, "w1")
    a = write(tmp_path, "obj_1a.csv", obj_rows([1, 2, 3], 1))
    b = write(tmp_path, "obj_1b.tsv", obj_rows([4, 5], 1).replace(",", "\t"))
    c = write(tmp_path, "obj_3.csv", "6,3,\\N,\n7,3,0.5,\"a, quoted\"\"name\"\n")
    f = write(tmp_path, "filters.csv", "u,355\ng,\\N\n")
    with running(p):
        futures = [ingest.load_chunk(db, txn.id, "obj", 1, a), ingest.load_chunk(db, txn.id, "obj", 1, b),
                   ingest.load_chunk(db, txn.id, "obj", 3, c), ingest.load_chunk(db, txn.id, "filters", 0, f)]
        assert [fu.result(DEADLINE)["rows"] for fu in futures] == [3, 2, 2, 2]
        # not visible before the end
        assert table_rows(db) == {}
        ended = ingest.end_transaction(db, txn.id)
        assert (ended.state, ended.rows, ended.files) == ("FINISHED", 9, 4)
        assert ids_of(table_rows(db)) == {1: [1, 2, 3, 4, 5], 3: [6, 7]}
        assert table_rows(db)[3] == [{"id": 6, "chunk": 3, "ra": None, "name": ""},
                                     {"id": 7, "chunk": 3, "ra": 0.5, "name": 'a, quoted"name'}]
        assert table_rows(db, "filters") == {0: [{"band": "g", "nm": None}, {"band": "u", "nm": 355}]}
        # a second transaction appends to chunk 1 and adds chunk 0
        second = ingest.begin_transaction(db, "sky")
        assert second.id == txn.id + 1
        assert ingest.chunk_placement(db, second.id, 1).worker == "w1"
        ingest.load_chunk(db, second.id, "obj", 1, write(tmp_path, "obj_1c.csv", obj_rows([8], 1)), wait=True)
        ingest.load_chunk(db, second.id, "obj", 0, write(tmp_path, "obj_0.csv", obj_rows([9], 0)), wait=True)
        old = {pt.pid: pt.location for pt in pipeline.get_partitions(
            db, pipeline.get_table(db, "sky", "obj", published_only=False))}
        assert ingest.end_transaction(db, second.id).rows == 2
    assert ids_of(table_rows(db)) == {0: [9], 1: [1, 2, 3, 4, 5, 8], 3: [6, 7]}
    # the replaced directory of chunk 1 and the areas go; the data stays (hard links)
    trash = pipeline.get_trash(db)
    assert old[1] in trash and old[3] not in trash
    assert all(os.path.basename(t).startswith(("part-", ".ingest-")) for t in trash)
    pipeline.collect_garbage(db)
    assert not os.path.exists(old[1])
    assert ids_of(table_rows(db)) == {0: [9], 1: [1, 2, 3, 4, 5, 8], 3: [6, 7]}
    # publish: now readers and operations see it
    with pytest.raises(DatabaseNotPublished):
        pipeline.get_table(db, "sky", "obj")
    assert ingest.publish_database(db, "sky").published
    assert table_partitions(db, "sky.obj") == ["0", "1", "3"]
    assert [d.name for d in pipeline.list_databases(db)] == ["sky"]
    assert [t.state for t in ingest.list_transactions(db, "sky")] == ["FINISHED", "FINISHED"]
    assert jobs.get_jobs(db, ingest.LOAD_TYPE) == []  # load jobs are dropped at the end


def test_same_chunk_in_two_open_transactions_keeps_both(sky, tmp_path):
    db = sky
    first, second = ingest.begin_transaction(db, "sky"), ingest.begin_transaction(db, "sky")
    with running(worker(db)):
        ingest.load_chunk(db, first.id, "obj", 2, write(tmp_path, "a.csv", obj_rows([1, 2], 2)), wait=True)
        ingest.load_chunk(db, second.id, "obj", 2, write(tmp_path, "b.csv", obj_rows([3], 2)), wait=True)
    ingest.end_transaction(db, second.id)
    ingest.end_transaction(db, first.id)
    assert ids_of(table_rows(db)) == {2: [1, 2, 3]}


def test_placement_is_stable_under_concurrent_requests(sky):
    db = sky
    for name in ("w1", "w2", "w3"):
        ingest.register_worker(db, name, threads=4)
    txn = ingest.begin_transaction(db, "sky")
    assert txn.hints == ingest.Hints(3, 4, ("w1", "w2", "w3"))
    answers, errors = [], []
    start = threading.Barrier(8)

    def ask(chunk):
        try:
            start.wait()
            answers.append((chunk, ingest.chunk_placement(db, txn.id, chunk).worker))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(c,)) for c in (2, 2, 2, 2, 2, 0, 1, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert not errors, errors
    placed = dict(answers)
    assert {w for c, w in answers if c == 2} == {placed[2]}  # one answer for chunk 2
    assert len(set(placed.values())) == 3  # 4 chunks spread over 3 workers
    assert all(ingest.chunk_placement(db, txn.id, c).worker == w for c, w in placed.items())
    # a new database puts the same chunk numbers on the same workers (collocation)
    ingest.register_database(db, "sky2", chunks=4, location=str(pipeline.get_database(db, "sky").location) + "2")
    other = ingest.begin_transaction(db, "sky2")
    assert {c: ingest.chunk_placement(db, other.id, c).worker for c in placed} == placed


def test_hints_and_new_placements_count_live_workers_only(sky, monkeypatch):
    """Three workers that stopped heartbeating stayed in the hints and got chunks; now
    their registrations expire, while a chunk placed earlier keeps its worker."""
    db = sky
    now = [1_000_000.0]
    monkeypatch.setattr(ingest.workers, "clock", lambda: now[0])  # the registrations' clock
    for name in ("w1", "w2", "w3"):
        ingest.register_worker(db, name, threads=4, ttl=30)
    txn = ingest.begin_transaction(db, "sky")
    assert txn.hints == ingest.Hints(3, 4, ("w1", "w2", "w3"))
    placed = ingest.chunk_placement(db, txn.id, 0).worker
    now[0] += 29
    assert [w.name for w in ingest.list_workers(db)] == ["w1", "w2", "w3"]
    now[0] += 2  # 31 s after their last heartbeat
    assert ingest.list_workers(db) == [] and ingest.begin_transaction(db, "sky").hints == ingest.Hints(0, 0, ())
    with pytest.raises(NoIngestWorkers, match="no live ingest worker"):
        ingest.chunk_placement(db, txn.id, 1)
    assert ingest.chunk_placement(db, txn.id, 0).worker == placed  # placed earlier: where it is
    ingest.register_worker(db, "w4", threads=2, ttl=30)
    revived = ingest.register_worker(db, "w2", threads=4, ttl=30)  # w2 heartbeats again
    assert revived.since == revived.seen == now[0]  # a new registration
    assert ingest.begin_transaction(db, "sky").hints == ingest.Hints(2, 2, ("w2", "w4"))
    assert {ingest.chunk_placement(db, txn.id, c).worker for c in (1, 2, 3)} <= {"w2", "w4"}
    assert ingest.chunk_placement(db, txn.id, 0).worker == placed
    # collocation with another database skips a worker that is gone
    ingest.register_database(db, "sky2", chunks=4, location=str(pipeline.get_database(db, "sky").location) + "2")
    other = ingest.begin_transaction(db, "sky2")
    moved = ingest.chunk_placement(db, other.id, 0).worker
    assert moved == placed if placed == "w2" else moved in {"w2", "w4"}
    now[0] += 20
    assert ingest.register_worker(db, "w4", threads=2, ttl=30).since == now[0] - 20  # a renewal keeps since
    now[0] += 15  # w2 expired, w4 renewed 15 s ago
    assert ingest.forget_expired_workers(db) == ["w1", "w2", "w3"]  # expired records do not pile up
    assert [w.name for w in ingest.list_workers(db)] == ["w4"] and ingest.forget_expired_workers(db) == []


def test_a_worker_record_without_its_heartbeat_is_corrupt(sky):
    from pipeline.ingest import layout
    from pipeline.ingest.records import encode

    sky[layout.worker_key("w1")] = encode({"threads": 4, "since": 1.0})
    with pytest.raises(IngestStoreError, match="ingest worker record 'w1' is corrupt"):
        ingest.list_workers(sky)


def test_a_serving_processor_renews_its_registration_and_drops_it_when_it_stops(sky):
    db = sky
    p = Processor(db)
    ingest.attach(p, worker="w1", ttl=1.0)
    [first] = ingest.list_workers(db)  # registered at attach
    with running(p):
        # renewed by the processor's heartbeat well past its time to live
        assert wait_until(lambda: any(w.seen > first.seen + 3.0 for w in ingest.list_workers(db)))
        assert [w.since for w in ingest.list_workers(db)] == [first.since]
    assert ingest.list_workers(db) == []  # a stopped processor unregisters at once


WORKER_MODULE = """
import os
import jobs
from pipeline import collector, ingest
from processors import Processor

processor = Processor(jobs.open())
ingest.attach(processor, worker=f"w{os.getpid()}", ttl=1.0)
"""


def test_killed_ingest_workers_drop_out_of_hints_and_placement(tmp_path):
    """Three `jobsctl worker` processes killed with SIGKILL (nothing unregisters them): once
    their registrations expire no hint counts them and no new chunk goes to them."""
    store = "sqlite:" + str(tmp_path / "jobs.sqlite")
    (tmp_path / "ingest_worker_mod.py").write_text(WORKER_MODULE)
    db = jobs.open(store)
    procs = []
    try:
        ingest.register_database(db, "sky", chunks=4, location=str(tmp_path / "data"))
        procs = [subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", store, "worker",
                                   "ingest_worker_mod:processor"], cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(3)]
        names = {f"w{proc.pid}" for proc in procs}
        assert wait_until(lambda: {w.name for w in ingest.list_workers(db)} == names)
        txn = ingest.begin_transaction(db, "sky")
        assert set(txn.hints.names) == names
        placed = ingest.chunk_placement(db, txn.id, 2).worker
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(DEADLINE)
        assert wait_until(lambda: ingest.list_workers(db) == [])
        assert ingest.begin_transaction(db, "sky").hints.workers == 0
        with pytest.raises(NoIngestWorkers):
            ingest.chunk_placement(db, txn.id, 1)
        assert ingest.chunk_placement(db, txn.id, 2).worker == placed
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        db.close()


def interleaved(db, *calls):
    """Run each call (a function of a transaction) in its own transaction, every call's
    reads done before any transaction commits; then commit them in order, each retried as
    the retry loop would (a new attempt on a conflict).  ``[(result, attempts)]``."""
    trs = [db.create_transaction() for _ in calls]
    results = [call(tr) for call, tr in zip(calls, trs)]
    out = []
    for call, tr, result in zip(calls, trs, results):
        attempts = 1
        while True:
            try:
                tr.commit().wait()
                break
            except Exception as exc:  # noqa: BLE001 - either engine's error class, told by its code
                if error_code(exc) is None:
                    raise
                tr.on_error(exc).wait()
                attempts += 1
                result = call(tr)
        out.append((result, attempts))
    return out


def test_placements_forced_to_interleave_serialise(sky):
    """Two placements that both read before either commits: the second must conflict and
    be retried (placement reads are conflicting reads), so that it sees the first."""
    db = sky
    for name in ("w1", "w2"):
        ingest.register_worker(db, name, threads=4)
    txn = ingest.begin_transaction(db, "sky")

    def place(chunk):
        return lambda tr: ingest.chunk_placement(tr, txn.id, chunk).worker

    alone = {}  # where each chunk goes when placed alone (asked in a transaction never committed)
    for chunk in range(4):
        tr = db.create_transaction()
        alone[chunk] = place(chunk)(tr)
        tr.cancel()
    a, b = next((a, b) for a in range(4) for b in range(a + 1, 4) if alone[a] == alone[b])  # 4 chunks, 2 workers
    # new chunks that alone would go to one worker: the second, retried, sees the first's count
    (first, n1), (second, n2) = interleaved(db, place(a), place(b))
    assert (first, n1) == (alone[a], 1)
    assert n2 == 2 and second != first  # spread over both workers
    # the same new chunk twice: the second, retried, finds it placed
    c = next(c for c in range(4) if c not in (a, b))
    (first, n1), (second, n2) = interleaved(db, place(c), place(c))
    assert (n1, n2) == (1, 2) and first == second == ingest.chunk_placement(db, txn.id, c).worker


# --- prerequisites -------------------------------------------------------------------------


def test_register_prerequisites(sky, tmp_path, commit_version):
    db = sky
    same = nothing_written(commit_version)
    with pytest.raises(DatabaseExists):
        ingest.register_database(db, "sky", chunks=2)
    with pytest.raises(DatabaseNotFound):
        ingest.register_table(db, "nope", "t", FILTERS)
    with pytest.raises(TableExists):
        ingest.register_table(db, "sky", "obj", OBJ, chunk_column="chunk")
    with pytest.raises(ValueError, match="integer"):
        ingest.register_table(db, "sky", "t", FILTERS, chunk_column="band")
    assert same()
    pipeline.create_database(db, "plain", location=str(tmp_path / "plain"))
    same = nothing_written(commit_version)
    with pytest.raises(DatabaseNotFound, match="not registered for ingest"):
        ingest.register_table(db, "plain", "t", FILTERS)
    with pytest.raises(DatabaseNotFound, match="not registered for ingest"):
        ingest.begin_transaction(db, "plain")
    with pytest.raises(DatabaseNotFound):
        ingest.begin_transaction(db, "nope")
    assert same()
    txn = ingest.begin_transaction(db, "sky")
    same = nothing_written(commit_version)
    with pytest.raises(TransactionsOpen, match=str(txn.id)):
        ingest.register_table(db, "sky", "t", FILTERS)
    with pytest.raises(TransactionsOpen):
        ingest.publish_database(db, "sky")
    assert same()
    ingest.end_transaction(db, txn.id, commit=False)
    ingest.publish_database(db, "sky")
    same = nothing_written(commit_version)
    with pytest.raises(DatabasePublished):
        ingest.publish_database(db, "sky")
    with pytest.raises(DatabasePublished):
        ingest.begin_transaction(db, "sky")
    with pytest.raises(DatabasePublished):
        ingest.register_table(db, "sky", "t", FILTERS)
    assert same()
    assert issubclass(DatabasePublished, IngestError) and issubclass(IngestError, PipelineError)


def test_publishing_refuses_open_super_transactions_on_every_path(sky, tmp_path, commit_version):
    """pipeline.publish_database published with a transaction open, and its loads and end
    then went into the published database: one publish path now refuses, naming them."""
    db = sky
    txn, other = ingest.begin_transaction(db, "sky"), ingest.begin_transaction(db, "sky")
    with running(worker(db)):
        ingest.load_chunk(db, txn.id, "obj", 1, write(tmp_path, "a.csv", obj_rows([1, 2], 1)), wait=True)
    assert pipeline.get_writers(db, "sky") == [f"super-transaction {txn.id}", f"super-transaction {other.id}"]
    same = nothing_written(commit_version)
    with pytest.raises(DatabaseBusy, match=rf"super-transaction {txn.id}, super-transaction {other.id} open"):
        pipeline.publish_database(db, "sky")
    with pytest.raises(TransactionsOpen, match=rf"\({txn.id}, {other.id}\)") as caught:
        ingest.publish_database(db, "sky")
    assert isinstance(caught.value, DatabaseBusy)
    assert same() and not pipeline.get_database(db, "sky").published
    ingest.end_transaction(db, txn.id)
    with pytest.raises(DatabaseBusy, match=rf"super-transaction {other.id} open"):
        pipeline.publish_database(db, "sky")
    ingest.end_transaction(db, other.id, commit=False)
    assert pipeline.get_writers(db, "sky") == []
    assert pipeline.publish_database(db, "sky").published
    assert ids_of(table_rows(db)) == {1: [1, 2]} and table_partitions(db, "sky.obj") == ["1"]
    with pytest.raises(DatabasePublished):
        ingest.begin_transaction(db, "sky")


def test_publish_and_begin_forced_to_interleave_serialise(sky):
    """Both read before either commits: the second to commit is retried and refused."""
    db = sky

    def publish(tr):
        return pipeline.publish_database(tr, "sky")

    def begin(tr):
        return ingest.begin_transaction(tr, "sky")

    with pytest.raises(DatabasePublished):
        interleaved(db, publish, begin)
    assert pipeline.get_database(db, "sky").published and ingest.list_transactions(db) == []
    ingest.register_database(db, "sky2", chunks=2, location=str(pipeline.get_database(db, "sky").location) + "2")
    with pytest.raises(DatabaseBusy, match="super-transaction 1 open"):
        interleaved(db, lambda tr: ingest.begin_transaction(tr, "sky2"),
                    lambda tr: pipeline.publish_database(tr, "sky2"))
    assert not pipeline.get_database(db, "sky2").published
    assert [t.state for t in ingest.list_transactions(db, "sky2")] == ["STARTED"]


def test_a_published_database_takes_no_more_data(sky, tmp_path, commit_version):
    """A STARTED transaction of a published database (its writer record closed by hand):
    no load, placement or normal end; an abort only."""
    db = sky
    txn = ingest.begin_transaction(db, "sky")
    queued = ingest.load_chunk(db, txn.id, "obj", 1, write(tmp_path, "a.csv", obj_rows([1], 1)))
    pipeline.close_writer(db, "sky", f"ingest-{txn.id}")  # (by hand: the database may then be published)
    pipeline.publish_database(db, "sky")
    ingest.register_worker(db, "w1")
    late = write(tmp_path, "b.csv", obj_rows([2], 1))
    same = nothing_written(commit_version)
    for call in (lambda: ingest.load_chunk(db, txn.id, "obj", 1, late), lambda: ingest.end_transaction(db, txn.id),
                 lambda: ingest.chunk_placement(db, txn.id, 1)):
        with pytest.raises(DatabasePublished, match="'sky'.* published"):
            call()
    assert same()
    with running(worker(db)):  # the load queued before the publish fails when it runs
        with pytest.raises(TaskFailed) as caught:
            queued.result(DEADLINE)
    assert caught.value.error["type"] == "DatabasePublished"
    assert ingest.end_transaction(db, txn.id, commit=False).state == "ABORTED"
    assert table_rows(db) == {} and pipeline.get_partitions(db, pipeline.get_table(db, "sky", "obj")) == []


def test_placement_and_load_prerequisites(sky, tmp_path, commit_version):
    db = sky
    good = write(tmp_path, "good.csv", obj_rows([1], 1))
    pipeline.create_database(db, "other", location=str(tmp_path / "other"))
    pipeline.create_table(db, "other", "t", FILTERS)
    txn = ingest.begin_transaction(db, "sky")
    same = nothing_written(commit_version)
    with pytest.raises(NoIngestWorkers):
        ingest.chunk_placement(db, txn.id, 0)
    ingest.register_worker(db, "w1")
    same = nothing_written(commit_version)
    with pytest.raises(TransactionNotFound):
        ingest.chunk_placement(db, 99, 0)
    with pytest.raises(InvalidChunk, match="0..3"):
        ingest.chunk_placement(db, txn.id, 4)
    with pytest.raises(InvalidChunk):
        ingest.chunk_placement(db, txn.id, -1)
    with pytest.raises(TransactionNotFound):
        ingest.load_chunk(db, 99, "obj", 1, good)
    with pytest.raises(TableNotFound):
        ingest.load_chunk(db, txn.id, "nope", 1, good)
    with pytest.raises(TableNotFound):
        ingest.load_chunk(db, txn.id, "t", 0, good)  # a table of another database
    with pytest.raises(InvalidChunk, match="partitioned"):
        ingest.load_chunk(db, txn.id, "obj", 4, good)
    with pytest.raises(InvalidChunk, match="regular"):
        ingest.load_chunk(db, txn.id, "filters", 1, good)
    with pytest.raises(LoadFileError):
        ingest.load_chunk(db, txn.id, "obj", 1, str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="absolute"):
        ingest.load_chunk(db, txn.id, "obj", 1, "relative.csv")
    with pytest.raises(ValueError, match="format"):
        ingest.load_chunk(db, txn.id, "obj", 1, good.replace(".csv", ".dat"))
    with pytest.raises(TransactionNotFound):
        ingest.end_transaction(db, 99)
    assert same()
    # a pending load: the end is refused, nothing is written
    ingest.load_chunk(db, txn.id, "obj", 1, good)
    same = nothing_written(commit_version)
    with pytest.raises(LoadsInProgress, match="pending"):
        ingest.end_transaction(db, txn.id)
    assert same()
    # an ended transaction takes nothing more
    ingest.end_transaction(db, txn.id, commit=False)
    same = nothing_written(commit_version)
    for call in (lambda: ingest.chunk_placement(db, txn.id, 0), lambda: ingest.load_chunk(db, txn.id, "obj", 1, good),
                 lambda: ingest.end_transaction(db, txn.id), lambda: ingest.end_transaction(db, txn.id, commit=False)):
        with pytest.raises(TransactionStateError, match="ABORTED"):
            call()
    assert same()


# --- abort ---------------------------------------------------------------------------------


def test_abort_leaves_nothing_behind(sky, tmp_path):
    db = sky
    txn = ingest.begin_transaction(db, "sky")
    with running(worker(db)):
        ingest.load_chunk(db, txn.id, "obj", 1, write(tmp_path, "a.csv", obj_rows([1, 2], 1)), wait=True)
        ingest.load_chunk(db, txn.id, "filters", 0, write(tmp_path, "f.csv", "u,1\n"), wait=True)
    pending = ingest.load_chunk(db, txn.id, "obj", 2, write(tmp_path, "b.csv", obj_rows([3], 2)))
    obj = pipeline.get_table(db, "sky", "obj", published_only=False)
    area = os.path.join(obj.location, f".ingest-{txn.id}")
    assert len(os.listdir(area)) == 1
    aborted = ingest.end_transaction(db, txn.id, commit=False)
    assert aborted.state == "ABORTED" and aborted.ended is not None
    with pytest.raises(jobs.NotFound):
        pending.result(DEADLINE)  # its pending load was removed
    assert jobs.get_jobs(db, ingest.LOAD_TYPE) == []
    assert table_rows(db) == {} and table_rows(db, "filters") == {}
    assert pipeline.get_partitions(db, obj, staged=True) == []
    assert area in pipeline.get_trash(db)
    pipeline.collect_garbage(db)
    assert pipeline.get_trash(db) == []
    for table in ("obj", "filters"):
        location = pipeline.get_table(db, "sky", table, published_only=False).location
        assert not os.path.exists(location) or os.listdir(location) == []
    ingest.publish_database(db, "sky")  # no transaction open any more


def test_an_aborted_transactions_data_is_collected_by_the_processors_after_the_grace(sky, tmp_path):
    """Aborted ingest data stayed on disk until someone called collect_garbage."""
    db = sky
    p = worker(db)
    collector.attach(p, grace=600, every=0.05)
    txn = ingest.begin_transaction(db, "sky")
    with running(p):
        ingest.load_chunk(db, txn.id, "obj", 1, write(tmp_path, "a.csv", obj_rows([1, 2], 1)), wait=True)
        ingest.end_transaction(db, txn.id, commit=False)
        area = os.path.join(pipeline.get_table(db, "sky", "obj", published_only=False).location, f".ingest-{txn.id}")
        assert pipeline.get_trash(db) == [area]
        seen = collector_runs(db)
        assert wait_until(lambda: collector_runs(db) >= seen + 2)  # younger than the grace period: kept
        assert os.listdir(area) and pipeline.get_trash(db) == [area]
        age_trash(db, area, 3600)
        assert wait_until(lambda: not os.path.exists(area))
    assert pipeline.get_trash(db) == []


# --- malformed rows ------------------------------------------------------------------------


def test_malformed_rows_are_reported_with_file_and_line(sky, tmp_path):
    db = sky
    txn = ingest.begin_transaction(db, "sky")
    text = ("1,1,0.5,a\n"
            "2,1,zero,b\n"          # line 2: ra is not a number
            "3,1,0.5\n"             # line 3: 3 fields
            "\\N,1,0.5,c\n"         # line 4: id NULL
            "5,2,0.5,d\n"           # line 5: another chunk
            "6,1,0.5,\"multi\nline\"\n"  # lines 6-7: fine
            "9999999999999999999999,1,1,e\n")  # line 8: out of range
    bad = write(tmp_path, "bad.csv", text)
    with running(worker(db)):
        with pytest.raises(LoadFailed) as caught:
            ingest.load_chunk(db, txn.id, "obj", 1, bad, wait=True)
        message = str(caught.value)
        assert "5 malformed row(s)" in message and caught.value.error["type"] == "MalformedRows"
        for line, reason in [(2, "column ra: 'zero' is not a number"), (3, "has 3 fields, expected 4"),
                             (4, "column id is NULL"), (5, "column chunk is 2, but this file loads chunk 1"),
                             (8, "column id: '9999999999999999999999' is out of range for bigint")]:
            assert f"{bad}:{line}: {reason}" in message, message
        assert ":6:" not in message and ":7:" not in message
        obj = pipeline.get_table(db, "sky", "obj", published_only=False)
        assert not os.path.exists(os.path.join(obj.location, f".ingest-{txn.id}")) or \
            os.listdir(os.path.join(obj.location, f".ingest-{txn.id}")) == []
        # fixed, the same file loads: a failed load runs again
        with open(bad, "w") as out:
            out.write("1,1,0.5,a\n6,1,0.5,\"multi\nline\"\n")
        assert ingest.load_chunk(db, txn.id, "obj", 1, bad, wait=True).result(0)["rows"] == 2
    assert ingest.end_transaction(db, txn.id).rows == 2
    assert table_rows(db)[1][1]["name"] == "multi\nline"


def test_a_number_too_large_for_a_double_is_malformed_and_nothing_is_loaded(sky, tmp_path):
    """It was loaded as infinity."""
    db = sky
    txn = ingest.begin_transaction(db, "sky")
    bad = write(tmp_path, "huge.csv", "1,1,0.5,a\n2,1,1e400,b\n3,1,-1E999,c\n4,1,1.7976931348623157e308,d\n")
    with running(worker(db)):
        with pytest.raises(LoadFailed) as caught:
            ingest.load_chunk(db, txn.id, "obj", 1, bad, wait=True)
    message = str(caught.value)
    assert "2 malformed row(s)" in message, message
    assert f"{bad}:2: column ra: '1e400' is out of range for double" in message
    assert f"{bad}:3: column ra: '-1E999' is out of range for double" in message
    assert ingest.end_transaction(db, txn.id).rows == 0  # nothing of the file was loaded
    assert table_rows(db) == {}


def test_write_piece_reads_infinity_only_when_written_so(tmp_path):
    from pipeline.schema import columns

    cols = columns([{"name": "d", "type": "double"}, {"name": "f", "type": "float"}])
    src = tmp_path / "t.tsv"
    src.write_text("inf\t-Infinity\n-inf\tnan\n1.7976931348623157e308\t3.4e38\n")
    rows = pq.read_table(write_piece(str(src), str(tmp_path / "out" / "ok.parquet"), cols, fmt="tsv").file).to_pylist()
    assert [r["d"] for r in rows] == [math.inf, -math.inf, 1.7976931348623157e308]
    assert rows[0]["f"] == -math.inf and math.isnan(rows[1]["f"])
    src.write_text("1e309\t1\n1\t1e309\n1\t1e39\n")
    with pytest.raises(MalformedRows) as caught:
        write_piece(str(src), str(tmp_path / "out" / "bad.parquet"), cols, fmt="tsv")
    assert caught.value.rows == [(1, "column d: '1e309' is out of range for double"),
                                 (2, "column f: '1e309' is out of range for float"),
                                 (3, "column f: '1e39' is out of range for float")]
    assert not os.path.exists(tmp_path / "out" / "bad.parquet")


def test_write_piece_types_and_reasons(tmp_path):
    from pipeline.schema import columns

    cols = columns([
        {"name": "b", "type": "boolean"}, {"name": "d", "type": "decimal(5,2)", "nullable": False},
        {"name": "day", "type": "date"}, {"name": "ts", "type": "timestamp"},
        {"name": "nt", "type": "timestamp_ntz"}, {"name": "raw", "type": "binary"},
        {"name": "f", "type": "float"}, {"name": "s", "type": "tinyint"},
    ])
    src = tmp_path / "t.tsv"
    src.write_bytes(
        b"b\td\tday\tts\tnt\traw\tf\ts\n"
        b"true\t123.45\t2024-02-29\t2024-01-01T10:00:00+02:00\t2024-01-01 10:00:00\tcafe\t1.5\t-128\n"
        b"\\N\t-1\t\t\t\t\t\t\\N\n"
        b"maybe\t1\t2024-01-01\t\t\t\t\t1\n"
        b"t\t1234.5\t\t\t\t\t\t1\n"
        b"t\t1.234\t\t\t\t\t\t1\n"
        b"t\t1\t2023-02-29\t\t\t\t\t1\n"
        b"t\t1\t\t\t2024-01-01T00:00:00Z\t\t\t1\n"
        b"t\t1\t\t\t\tzz\t\t1\n"
        b"t\t1\t\t\t\t\t1e39\t1\n"
        b"t\t1\t\t\t\t\t\t128\n"
        b"t\t\\N\t\t\t\t\t\t1\n"
        b"t\t1\t\t\t\t\t\t\xff\n"
        b"\n"
    )
    with pytest.raises(MalformedRows) as caught:
        write_piece(str(src), str(tmp_path / "out" / "p.parquet"), cols, fmt="tsv", header=True)
    reasons = dict(caught.value.rows)
    assert sorted(reasons) == list(range(4, 15)) and caught.value.count == 11
    assert "not a boolean" in reasons[4] and "integer digits" in reasons[5] and "fraction digits" in reasons[6]
    assert "not a date" in reasons[7] and "time zone" in reasons[8] and "hexadecimal" in reasons[9]
    assert "out of range for float" in reasons[10] and "out of range for tinyint" in reasons[11]
    assert "NOT NULL" in reasons[12] and "UTF-8" in reasons[13] and "blank line" in reasons[14]
    assert not os.path.exists(tmp_path / "out" / "p.parquet") and os.listdir(tmp_path / "out") == []
    # the good rows alone
    lines = src.read_bytes().split(b"\n")
    src.write_bytes(b"\n".join(lines[1:3]) + b"\n")
    piece = write_piece(str(src), str(tmp_path / "out" / "p.parquet"), cols, fmt="tsv")
    rows = pq.read_table(piece.file).to_pylist()
    assert piece.rows == 2 and rows[0]["ts"].isoformat() == "2024-01-01T08:00:00+00:00"
    assert rows[0]["raw"] == b"\xca\xfe" and str(rows[0]["d"]) == "123.45" and rows[0]["s"] == -128
    assert rows[1] == {"b": None, "d": rows[1]["d"], "day": None, "ts": None, "nt": None, "raw": b"", "f": None,
                       "s": None}
    bad_quote = tmp_path / "q.csv"
    bad_quote.write_text('1,"abc"x\n')
    with pytest.raises(MalformedRows, match=r"q.csv:1: cannot be parsed as CSV"):
        write_piece(str(bad_quote), str(tmp_path / "out" / "q.parquet"), columns([{"name": "a", "type": "string"},
                                                                                  {"name": "b", "type": "string"}]),
                    fmt="csv")


# --- idempotency and fencing ---------------------------------------------------------------


def test_loading_the_same_file_again_is_the_same_load(sky, tmp_path, commit_version):
    db = sky
    txn = ingest.begin_transaction(db, "sky")
    path = write(tmp_path, "a.csv", obj_rows([1, 2, 3], 1))
    with running(worker(db)):
        first = ingest.load_chunk(db, txn.id, "obj", 1, path, wait=True)
        same = nothing_written(commit_version)
        again = ingest.load_chunk(db, txn.id, "obj", 1, path, wait=True)
        assert same()  # finished already: nothing enqueued
        assert again.job_id == first.job_id and again.result(0) == first.result(0)
        assert jobs.get_job_state(db, ingest.LOAD_TYPE, first.job_id) == "finished"
    assert ingest.end_transaction(db, txn.id).rows == 3
    assert ids_of(table_rows(db)) == {1: [1, 2, 3]}


def test_a_load_that_lost_its_job_registers_nothing(sky, tmp_path):
    db = sky
    txn = ingest.begin_transaction(db, "sky")
    inner = ingest.load_handler(db)
    written, release = threading.Event(), threading.Event()
    seen = []

    def stalled(ctx):
        result = inner(ctx)  # the piece is written and its registration queued (on_commit)
        seen.append(result["file"])
        written.set()
        while not release.is_set():
            time.sleep(0.01)
        return result

    p = Processor(db)
    p.handler(ingest.LOAD_TYPE, timeout=5)(stalled)
    ingest.register_worker(db, "w1")
    with running(p):
        future = ingest.load_chunk(db, txn.id, "obj", 1, write(tmp_path, "a.csv", obj_rows([1, 2], 1)))
        assert written.wait(DEADLINE)
        jobs.remove(db, ingest.LOAD_TYPE, future.job_id)  # the job is taken away while it runs
        assert wait_until(lambda: p.stats["halted"] >= 1)
        release.set()
        with pytest.raises(jobs.NotFound):
            future.result(DEADLINE)
    assert os.path.exists(seen[0])  # its file exists, unregistered
    ended = ingest.end_transaction(db, txn.id)
    assert (ended.rows, ended.files) == (0, 0) and table_rows(db) == {}
    assert os.path.dirname(seen[0]) in pipeline.get_trash(db)
    pipeline.collect_garbage(db)
    assert not os.path.exists(seen[0])


def test_public_names():
    for name in ingest.__all__:
        assert hasattr(ingest, name), name


# --- Spark reads what ingest wrote (one test) ----------------------------------------------


def test_spark_reads_ingested_chunks(tmp_path, spark):
    db = jobs.open("sqlite:" + str(tmp_path / "jobs.sqlite"))
    try:
        cols = OBJ + [{"name": "seen", "type": "timestamp"}, {"name": "day", "type": "date"},
                      {"name": "mag", "type": "decimal(6,3)"}, {"name": "flag", "type": "boolean"},
                      {"name": "local", "type": "timestamp_ntz"}, {"name": "small", "type": "smallint"}]
        ingest.register_database(db, "sky", chunks=2, location=str(tmp_path / "data"))
        ingest.register_table(db, "sky", "obj", cols, chunk_column="chunk")
        txn = ingest.begin_transaction(db, "sky")
        rows = "".join(f"{i},1,{i / 4},n{i},2024-05-0{i}T12:00:00,2024-05-0{i},{i}.125,{i % 2},"
                       f"2024-05-0{i} 01:02:03,{i}\n" for i in range(1, 4))
        with running(worker(db)):
            ingest.load_chunk(db, txn.id, "obj", 1, write(tmp_path, "a.csv", rows), wait=True)
            ingest.load_chunk(db, txn.id, "obj", 1, write(tmp_path, "b.csv", "4,1,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N\n"),
                              wait=True)
        ingest.end_transaction(db, txn.id)
        ingest.publish_database(db, "sky")
        table = pipeline.get_table(db, "sky", "obj")
        [part] = pipeline.get_partitions(db, table)
        frame = pipeline.read_partition(spark, part.location, columns=table)
        got = sorted(frame.collect(), key=lambda r: r["id"])
        assert part.rows == 4 and [r["id"] for r in got] == [1, 2, 3, 4]
        assert got[0]["mag"] is not None and str(got[0]["mag"]) == "1.125" and got[1]["flag"] is False
        assert str(got[2]["day"]) == "2024-05-03" and got[3]["seen"] is None and got[0]["small"] == 1
        assert str(got[0]["local"]) == "2024-05-01 01:02:03"
    finally:
        db.close()


def test_client_calls_are_idempotent_under_injected_faults(db, tmp_path):
    """Every client call retried after commit_unknown_result (committed or not) and
    conflicts: one database, one table, two transactions, each row published once."""
    from jobs.engine.faults import FaultInjectingDatabase

    faulty = FaultInjectingDatabase(db, conflict=0.15, unknown_committed=0.3, unknown_not_committed=0.15, seed=11)
    ingest.register_database(faulty, "sky", chunks=4, location=str(tmp_path / "data"))
    ingest.register_table(faulty, "sky", "obj", OBJ, chunk_column="chunk")
    ingest.register_worker(faulty, "w1")
    with running(worker(db)):
        for n in range(2):
            txn = ingest.begin_transaction(faulty, "sky")
            assert ingest.chunk_placement(faulty, txn.id, 1).worker == "w1"
            for part in range(3):
                path = write(tmp_path, f"t{n}-{part}.csv", obj_rows([n * 10 + part], 1))
                ingest.load_chunk(faulty, txn.id, "obj", 1, path).result(DEADLINE)
            assert ingest.end_transaction(faulty, txn.id).rows == 3
        aborted = ingest.begin_transaction(faulty, "sky")
        ingest.load_chunk(faulty, aborted.id, "obj", 2, write(tmp_path, "x.csv", obj_rows([99], 2))).result(DEADLINE)
        assert ingest.end_transaction(faulty, aborted.id, commit=False).state == "ABORTED"
    assert [t.id for t in ingest.list_transactions(db)] == [1, 2, 3]
    assert ingest.publish_database(faulty, "sky").published
    assert ids_of(table_rows(db)) == {1: [0, 1, 2, 10, 11, 12]}
    assert faulty.injected  # faults did happen
