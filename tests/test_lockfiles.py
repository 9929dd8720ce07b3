"""Machine-local lock files (``jobs/lockfiles.py``): a lock on a removed file is never
taken for the path's, removed files are made again, old free files are swept."""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time

import pytest

from jobs import lockfiles


@pytest.fixture
def lockdir(tmp_path, monkeypatch) -> str:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(lockfiles, "_swept", {})
    path = lockfiles.directory("locks")
    _join_sweeps()  # (its first sweep, of nothing yet)
    return path


def _age(path: str, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_lock_excludes_others_until_its_holder_removes_the_file(lockdir):
    path = os.path.join(lockdir, "a")
    held = lockfiles.try_lock(path)
    assert held is not None and lockfiles.current(held, path)
    assert lockfiles.try_lock(path) is None
    lockfiles.remove(held, path)
    assert not os.path.exists(path)
    again = lockfiles.try_lock(path)  # (the file made again)
    assert again is not None and os.path.exists(path)
    lockfiles.remove(again, path)


def test_a_lock_taken_on_a_removed_file_is_not_the_paths(lockdir):
    """A taker that opened the file before its holder removed it gets that file's lock
    once the holder lets go; that lock is worth nothing: it takes the path's new file,
    and excludes whoever else takes it."""
    path = os.path.join(lockdir, "a")
    holder = lockfiles.try_lock(path)
    stale = lockfiles.open_file(path)  # (opened, not locked yet)
    lockfiles.remove(holder, path)
    fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (the removed file's lock: free)
    assert not lockfiles.current(stale, path)
    taken = lockfiles.try_lock(path)
    assert taken is not None and lockfiles.current(taken, path)
    assert lockfiles.try_lock(path) is None
    os.close(stale)
    lockfiles.remove(taken, path)


def test_a_sweep_removes_old_free_files_only(lockdir):
    names = ["old-free", "old-held", "young-free"]
    for name in names:
        os.close(lockfiles.open_file(os.path.join(lockdir, name)))
    held = lockfiles.try_lock(os.path.join(lockdir, "old-held"))
    _age(os.path.join(lockdir, "old-free"), lockfiles.STALE + 60)
    _age(os.path.join(lockdir, "old-held"), lockfiles.STALE + 60)
    assert lockfiles.sweep(lockdir) == 1
    assert sorted(os.listdir(lockdir)) == ["old-held", "young-free"]
    lockfiles.remove(held, os.path.join(lockdir, "old-held"))


def test_a_sweep_removes_a_bounded_number_of_files(lockdir):
    for n in range(5):
        path = os.path.join(lockdir, f"f{n}")
        os.close(lockfiles.open_file(path))
        _age(path, lockfiles.STALE + 60)
    assert lockfiles.sweep(lockdir, limit=3) == 3
    assert len(os.listdir(lockdir)) == 2
    assert lockfiles.sweep(lockdir) == 2


def test_a_process_sweeps_a_directory_in_the_background_now_and_then(lockdir, monkeypatch):
    """The first use of a lock directory in a process sweeps it (files left by processes
    that died); the next uses within SWEEP_EVERY do not."""
    swept = []
    monkeypatch.setattr(lockfiles, "sweep", swept.append)
    monkeypatch.setattr(lockfiles, "_swept", {})
    for _ in range(2):
        assert lockfiles.directory("locks") == lockdir
    _join_sweeps()
    assert swept == [lockdir]
    monkeypatch.setattr(lockfiles, "SWEEP_EVERY", 0.0)
    lockfiles.directory("locks")
    _join_sweeps()
    assert swept == [lockdir, lockdir]


def test_no_lock_directory_where_none_can_be_made(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))
    assert lockfiles.directory("locks") is None


def _join_sweeps() -> None:
    for thread in threading.enumerate():
        if thread.name == "jobs-lockfiles-sweep":
            thread.join(30)
