"""Stores of layout 2 (before priorities) keep working under layout 3: their pending
entries are read as band 0 wherever they are, moved into band 0 in bounded batches, and
every job is accepted exactly once while that happens."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import orjson
import pytest

import jobs
from jobs import keys, pending, status
from jobs.engine import strinc
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import run
from jobsctl import cli
from monitor import ActivityMonitor
from monitor import activity as monitor_activity

T = "legacy"
FUTURE = 4_000_000_000.0
REPO = Path(__file__).resolve().parent.parent
LAYOUT_2_COMMIT = "755296a"  # the last commit whose job layer wrote layout 2


@pytest.fixture
def db(db):
    jobs.set_type_timeout(db, T, 60)
    return db


def write_layout_2(db, ids, stime=0.0, batch=500) -> None:
    """Pending jobs as layout 2 wrote them: six-field rows, ``(Type, STime, JobId)`` keys,
    and the layout key saying 2; this process then opens the store anew."""
    for start in range(0, len(ids), batch):
        def body(tr, chunk=ids[start:start + batch]):
            for job_id in chunk:
                tr.set(keys.DATA.pack((T, job_id)), fdb_tuple.pack((None, None, stime, False, b"{}", None)))
                tr.set(keys.PENDING.pack((T, stime, job_id)), struct.pack(">d", time.time()))
        run(db, body)
    run(db, lambda tr: tr.set(keys.LAYOUT_KEY, fdb_tuple.pack((2,))))
    keys.LAYOUT.checked.clear()


def legacy_left(db) -> int:
    legacy = keys.band_prefix(T, keys.LEGACY)
    return len(list(db.get_range(legacy, strinc(legacy))))


def stored_layout(db) -> int:
    return fdb_tuple.unpack(db.get(keys.LAYOUT_KEY))[0]


def test_legacy_entries_read_as_band_0(db):
    write_layout_2(db, ["old-due"])
    write_layout_2(db, ["old-later"], stime=FUTURE)
    assert jobs.get_job(db, T, "old-due") == (T, "old-due", "pending", {}, 0.0, 0, None)
    assert stored_layout(db) == 2  # reading wrote nothing
    jobs.add(db, T, "worse", priority=1)
    jobs.add(db, T, "better", priority=-1)
    assert stored_layout(db) == keys.LAYOUT_VERSION  # a band key: the layout says so first
    assert jobs.pending_count(db, T) == 4 and jobs.pending_count(db, T, time.time()) == 3
    st = status.gather(db).types[0]
    assert [(b.priority, b.pending, b.due) for b in st.bands] == [(-1, 1, 1), (0, 2, 1), (1, 1, 1)]
    assert [jobs.accept(db, T, timeout=0).id for _ in range(3)] == ["better", "old-due", "worse"]
    assert jobs.accept(db, T, timeout=0) is None
    assert run(db, pending.next_due, T, time.time()) == FUTURE
    jobs.remove(db, T, "old-later")
    assert legacy_left(db) == 0 and jobs.pending_count(db, T) == 0


def test_accept_takes_every_job_once_while_the_entries_move(db):
    legacy = [f"old-{i:04d}" for i in range(700)]
    write_layout_2(db, legacy)
    new = [f"new-{i:03d}" for i in range(60)]
    for i, job_id in enumerate(new):
        jobs.add(db, T, job_id, priority=i % 3)
    taken: list[str] = []
    while True:
        moved = run(db, pending.migrate_legacy, T, 50)
        batch = jobs.accept_many(db, T, 23, timeout=0)
        taken += [job.id for job in batch]
        if not batch and not moved:
            break
    assert len(taken) == len(set(taken)) and sorted(taken) == sorted(legacy + new)
    assert legacy_left(db) == 0 and stored_layout(db) == keys.LAYOUT_VERSION


def test_concurrent_accepts_and_migration_take_each_job_once(db):
    legacy = [f"old-{i:04d}" for i in range(600)]
    write_layout_2(db, legacy)
    taken: list[str] = []
    errors: list[BaseException] = []

    def worker():
        try:
            while batch := jobs.accept_many(db, T, 7, timeout=0):
                taken.extend(job.id for job in batch)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def migrate():
        try:
            while run(db, pending.migrate_legacy, T, 40):
                pass
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=fn) for fn in (worker, worker, migrate)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    taken += [job.id for job in jobs.accept_many(db, T, 1000, timeout=0)]  # left after a worker stopped early
    assert not errors
    assert len(taken) == len(set(taken)) and sorted(taken) == legacy
    assert legacy_left(db) == 0


def test_the_activity_monitor_moves_the_legacy_entries_in_batches(db, monkeypatch):
    legacy = [f"old-{i:04d}" for i in range(250)]
    write_layout_2(db, legacy)
    monkeypatch.setattr(monitor_activity, "MIGRATION_BATCH", 100)
    batches = []
    real = pending.migrate_legacy
    monkeypatch.setattr(pending, "migrate_legacy", lambda tr, type, limit: batches.append(limit) or real(tr, type, limit))
    ActivityMonitor(db, [T]).check()
    assert legacy_left(db) == 0 and len(batches) >= 3 and set(batches) == {100}
    r = keys.PENDING[T][0].range()
    assert len(list(db.get_range(r.start, r.stop))) == 250
    assert sorted(job.id for job in jobs.accept_many(db, T, 1000, timeout=0)) == legacy


def test_jobs_migrate_moves_them_by_hand(tmp_path, capsys):
    url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    store = jobs.open(url)
    jobs.set_type_timeout(store, T, 60)
    write_layout_2(store, [f"old-{i:04d}" for i in range(30)])
    assert cli.main(["--store", url, "migrate"]) == 0
    assert capsys.readouterr().out.strip() == f"{T}: 30 pending jobs moved into priority 0"
    assert legacy_left(store) == 0 and stored_layout(store) == keys.LAYOUT_VERSION
    assert cli.main(["--store", url, "--json", "migrate"]) == 0
    assert orjson.loads(capsys.readouterr().out) == {"moved": {}}
    assert len(jobs.accept_many(store, T, 100, timeout=0)) == 30


# --- a store written by the previous release's own code ---------------------------------------

OLD_WRITER = """
import sys, time
import jobs
db = jobs.open(sys.argv[1])
jobs.set_type_timeout(db, "legacy", 60)

@jobs.transactional
def add_many(tr, start, n):
    for i in range(start, start + n):
        jobs.add(tr, "legacy", f"old-{i:05d}", {"i": i}, scheduled_time=4e9 if i % 10 == 0 else 0)

for start in range(0, 3000, 500):
    add_many(db, start, 500)
job = jobs.accept(db, "legacy", timeout=0)  # left running: the new release re-enqueues it
print(job.id)
"""


def _old_release(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", LAYOUT_2_COMMIT, "jobs"], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"commit {LAYOUT_2_COMMIT} is not in this checkout")
    old = tmp_path / "old"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(old, filter="data")
    return old


def test_a_store_written_by_the_layout_2_release(tmp_path):
    old = _old_release(tmp_path)
    url = "sqlite:" + str(tmp_path / "old.sqlite")
    done = subprocess.run([sys.executable, "-c", OLD_WRITER, url], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(old), "PATH": ""}, timeout=300)
    assert done.returncode == 0, done.stderr
    running = done.stdout.strip()
    db = jobs.open(url)
    try:
        assert stored_layout(db) == 2 and legacy_left(db) == 2999
        assert jobs.pending_count(db, T, time.time()) == 2699
        monitor = ActivityMonitor(db, [T])
        monitor._migrate(T)  # the monitor's migration, without waiting for the type timeout
        assert legacy_left(db) == 0 and stored_layout(db) == keys.LAYOUT_VERSION
        assert jobs.pending_count(db, T) == 2999 and jobs.get_job(db, T, "old-00010").priority == 0
        taken = []
        while batch := jobs.accept_many(db, T, 500, timeout=0):
            taken += [job.id for job in batch]
        assert len(taken) == 2699 and running not in taken
        assert jobs.get_job_data(db, T, "old-00001") == {"i": 1}
    finally:
        db.close()
