"""The directories of ``memory:`` stores (``jobs/engine/memory_dirs.py``): removed at
close, and by a later process's sweep once every process that could use one has ended
without closing it, never while one lives."""

from __future__ import annotations

import os
import signal
import time

import pytest

from jobs.engine import memory_dirs
from jobs.engine.embedded import EmbeddedDatabase
from waiting import wait_until


@pytest.fixture
def where(tmp_path, monkeypatch) -> str:
    """Memory stores made in ``tmp_path``, swept only when a test sweeps."""
    monkeypatch.setattr(memory_dirs, "base", lambda: str(tmp_path))
    monkeypatch.setattr(memory_dirs, "_swept", [time.monotonic()])
    monkeypatch.setattr(memory_dirs, "YOUNG", 0.0)
    return str(tmp_path)


def _dirs(where: str) -> list[str]:
    return sorted(name for name in os.listdir(where) if name.startswith(memory_dirs.PREFIX))


def _memory_store_then_exit(write, fork_grandchild: bool = False) -> None:
    """(In a forked child.)  Open a memory store, write to it, report its directory (and
    the pid of a grandchild that outlives this process), and end without closing it."""
    try:
        db = EmbeddedDatabase(memory=True)
        tr = db.create_transaction()
        tr.set(b"k", b"v")
        tr.commit().wait()
        report = os.path.basename(db._tmpdir)
        if fork_grandchild:
            grandchild = os.fork()
            if grandchild == 0:
                time.sleep(600)  # (killed by the test)
                os._exit(0)
            report += f" {grandchild}"
        os.write(write, report.encode())
    finally:
        os._exit(0)


def _in_child(fork_grandchild: bool = False) -> list[str]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        _memory_store_then_exit(write, fork_grandchild)
    os.close(write)
    try:
        return os.read(read, 200).decode().split()
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def test_a_memory_store_lives_in_a_directory_of_its_own_removed_at_close(where):
    db = EmbeddedDatabase(memory=True)
    tr = db.create_transaction()
    tr.set(b"k", b"v")
    tr.commit().wait()
    assert _dirs(where) == [os.path.basename(db._tmpdir)]
    assert memory_dirs.sweep(where) == 0  # (its owner lives)
    db.close()
    assert _dirs(where) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_sweep_removes_the_directory_of_a_process_that_ended_without_closing(where):
    mine = EmbeddedDatabase(memory=True)
    try:
        [left] = _in_child()
        assert left in _dirs(where)
        assert memory_dirs.sweep(where) == 1
        assert _dirs(where) == [os.path.basename(mine._tmpdir)]
    finally:
        mine.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_memory_store_is_kept_while_a_child_its_process_forked_lives(where):
    """The child shares the owner lock (and may use the store): the directory goes only
    once both have ended."""
    left, grandchild = _in_child(fork_grandchild=True)
    try:
        assert memory_dirs.sweep(where) == 0 and _dirs(where) == [left]
    finally:
        os.kill(int(grandchild), signal.SIGKILL)  # (not ours to reap)
    assert wait_until(lambda: memory_dirs.sweep(where) == 1 or not _dirs(where))
    assert _dirs(where) == []


def test_a_directory_without_an_owner_file_is_left_alone(where):
    """Nothing tells whether a process uses it, however old it is."""
    unowned = os.path.join(where, memory_dirs.PREFIX + "unowned")
    os.mkdir(unowned)
    past = time.time() - 365 * 86400
    os.utime(unowned, (past, past))
    assert memory_dirs.sweep(where) == 0 and _dirs(where) == [os.path.basename(unowned)]


def test_a_new_directory_is_not_swept_before_its_owner_locks_it(where, monkeypatch):
    monkeypatch.setattr(memory_dirs, "YOUNG", 3600.0)
    os.mkdir(os.path.join(where, memory_dirs.PREFIX + "being-made"))  # (no owner lock yet)
    open(os.path.join(where, memory_dirs.PREFIX + "being-made", memory_dirs.OWNER), "w").close()
    assert memory_dirs.sweep(where) == 0 and len(_dirs(where)) == 1


def test_a_process_sweeps_as_it_makes_a_memory_store_now_and_then(where, monkeypatch):
    swept = []
    monkeypatch.setattr(memory_dirs, "sweep", swept.append)
    monkeypatch.setattr(memory_dirs, "_swept", [float("-inf")])
    stores = [EmbeddedDatabase(memory=True) for _ in range(2)]
    assert swept == [where]
    for db in stores:
        db.close()
