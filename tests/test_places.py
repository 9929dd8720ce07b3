"""Where a thread picks a lone job in a head (``jobs/indexes/places.py``): slots far apart per
machine and store, places that turn with the clock, a place moved after many conflicts."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import uuid

import pytest

import jobs
from jobs.indexes import pending, places

T = "placed"


@pytest.fixture(autouse=True)
def own_places(tmp_path, monkeypatch):
    """Slots of this test's own (lock files in ``tmp_path``), for a thread state of its own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(places, "_local", threading.local())


def _store() -> bytes:
    return uuid.uuid4().bytes


def _at(monkeypatch, step: int) -> None:
    """The wall clock in the middle of rotation step ``step``."""
    monkeypatch.setattr(places, "_now", lambda: (step + 0.5) * places.ROTATE)


def _placed(store: bytes) -> tuple[int, int | None]:
    """This thread's place in a head of ``store`` now, and the slot it holds for it."""
    return places.place(store), places.slot_of(store)


def _files(store: bytes) -> list[str]:
    """The slots of ``store`` whose lock files are on this machine."""
    directory = os.path.join(tempfile.gettempdir(), "jobs-places")
    prefix = store.hex() + "-"
    return sorted(name[len(prefix):] for name in os.listdir(directory) if name.startswith(prefix))


def _in_thread(fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(30)
    return out[0]


def test_threads_picking_from_one_store_hold_slots_far_apart(monkeypatch):
    """The first thread of a store takes slot 0, the next slot 1, half a head away; a
    thread holds its slot until it ends, and a thread of another store starts at 0."""
    store = _store()
    _at(monkeypatch, 0)
    ready, release = threading.Event(), threading.Event()
    taken = []

    def first():
        taken.append(_placed(store))
        ready.set()
        release.wait(30)

    holder = threading.Thread(target=first)
    holder.start()
    try:
        assert ready.wait(30)
        second = _in_thread(lambda: _placed(store))
        assert taken == [(0, 0)] and second == (8, 1)
        third = [_in_thread(lambda: _placed(store))[1] for _ in range(2)]
        assert third == [1, 1]  # (slot 1 freed by each thread's end)
        assert _in_thread(lambda: (places.place(_store()), places.slot_of(store))) == (0, None)
    finally:
        release.set()
        holder.join(30)
    assert _in_thread(lambda: _placed(store)) == (0, 0)


def test_a_thread_keeps_the_slots_of_its_last_few_stores_only(monkeypatch):
    """A process that opens store after store does not keep a descriptor for each: the
    slot of the store a thread picked from longest ago is given up."""
    _at(monkeypatch, 0)
    stores = [_store() for _ in range(places.STORES + 2)]
    for store in stores:
        places.place(store)
    held = [places.slot_of(store) for store in stores]
    assert held == [None, None] + [0] * places.STORES
    assert _files(stores[0]) == _files(stores[1]) == []  # (given up: no file left)
    assert _files(stores[-1]) == ["0"]
    assert _in_thread(lambda: _placed(stores[0]))[1] == 0  # (freed)
    assert _in_thread(lambda: _placed(stores[-1]))[1] == 1


def test_slots_are_spread_as_far_apart_as_their_number_allows():
    for n in (2, 4, 8, 16):
        held = sorted(places.SPREAD[:n])
        gaps = [(b - a) % places.SLOTS for a, b in zip(held, held[1:] + held[:1])]
        assert gaps == [places.SLOTS // n] * n


def test_places_turn_with_the_clock_through_every_place_keeping_their_distances(monkeypatch):
    store = _store()
    seen = []
    for step in range(places.SLOTS):
        _at(monkeypatch, step)
        seen.append(places.place(store))
    assert sorted(seen) == list(range(places.SLOTS)) and seen[:2] == [0, 1]
    _at(monkeypatch, 5)
    assert (_in_thread(lambda: places.place(store)) - places.place(store)) % places.SLOTS == 8


def test_no_job_of_a_head_waits_on_a_place_that_nobody_holds(db, monkeypatch):
    """One picker taking one job per rotation step (the cadence that would pass over a job
    for ever if places moved by one only: the job moves down one place as the picker's
    moves up one): every job of the first head is taken within four turns of the places,
    the ones below its place too."""
    jobs.set_type_timeout(db, T, 60)
    jobs.add_many(db, T, [f"j{i:03d}" for i in range(5 * places.SLOTS + pending.SAMPLE)])
    picked = []
    for step in range(4 * places.SLOTS):
        _at(monkeypatch, 5 + step)
        picked.append(jobs.accept(db, T, timeout=0).id)
    assert picked[0] == "j005"
    assert set(picked) >= {f"j{i:03d}" for i in range(pending.SAMPLE)}


def test_pickers_far_apart_take_different_jobs_of_a_short_head(db, monkeypatch):
    """Four threads holding slots 0-3, picking at once from a head of four due jobs (their
    places scaled to it), each take a job of their own."""
    jobs.set_type_timeout(db, T, 60)
    for job_id in "abcd":
        jobs.add(db, T, job_id, {})
    _at(monkeypatch, 0)
    turn = [threading.Event() for _ in range(5)]
    turn[0].set()
    done = threading.Barrier(4)
    picked = {}

    def pick(i):
        turn[i].wait(30)
        picked[i] = pending.dequeue(db.create_transaction(), T, max_stime=10**10)  # (not committed)
        turn[i + 1].set()
        done.wait(30)  # (slots held until all have picked)

    threads = [threading.Thread(target=pick, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [picked[i] for i in range(4)] == ["a", "c", "b", "d"]  # (places 0, 8, 4, 12 of 16)


def test_a_thread_that_meets_another_at_every_pick_moves_its_place_for_a_while(monkeypatch):
    store = _store()
    _at(monkeypatch, 0)
    assert places.place(store) == 0
    moved_at = None
    for attempt in range(1, 20):
        places.conflicted()
        if places.place(store) != 0:
            moved_at = attempt
            break
    assert moved_at is not None and moved_at <= 6
    step = int(places.MOVED_FOR / places.ROTATE) + 1
    _at(monkeypatch, step)
    assert places.place(store) == (step + step // places.SLOTS) % places.SLOTS  # back at its slot's


def test_the_few_conflicts_of_pickers_far_apart_do_not_move_a_place(monkeypatch):
    """One conflict in ten attempts (more than four workers far apart have) moves nothing."""
    store = _store()
    _at(monkeypatch, 0)
    for attempt in range(2_000):
        assert places.place(store) == 0
        if attempt % 10 == 9:
            places.conflicted()


def test_without_a_temporary_directory_to_write_a_thread_picks_at_a_place_of_its_own(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))  # (its jobs-places cannot be made)
    store = _store()
    _at(monkeypatch, 0)
    first = places.place(store)
    assert places.slot_of(store) is None and 0 <= first < places.SLOTS
    assert places.place(store) == first  # (drawn once)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    places.place(store)
    assert places.slot_of(store) is None  # tried again only after RETRY
    monkeypatch.setattr(places, "_now", lambda: places.RETRY + 1.0)
    places.place(store)
    assert places.slot_of(store) == 0


def test_an_accept_conflict_counts_for_its_threads_place(db, monkeypatch):
    from jobs.queue import accepting
    from jobs.engine import FDBError

    counted = []
    monkeypatch.setattr(places, "conflicted", lambda: counted.append(1))
    call = accepting.AcceptCall(db, T)
    call._failed(FDBError(1020))
    assert counted == [1] and call.conflicts == 1
    call._failed(FDBError(1007))  # (too old: no one took the job)
    assert counted == [1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_takes_a_slot_of_its_own_and_leaves_its_parents(monkeypatch):
    """The child does not keep the parent's slot (their places would meet), nor does it
    hold it once the parent is gone."""
    store = _store()
    _at(monkeypatch, 0)
    assert places.place(store) == 0 and places.slot_of(store) == 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, b"%d %d" % _placed(store))
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 20) == b"8 1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert places.slot_of(store) == 0 and "0" in _files(store)  # (the parent's file is kept)
    assert _in_thread(lambda: _placed(store))[1] == 1  # (the child's freed)


def test_a_slots_file_is_removed_when_its_thread_or_process_ends(tmp_path):
    """Freed slots leave no lock files behind: a machine does not gather one for every
    store its processes ever picked from."""
    store = _store()
    assert _in_thread(lambda: _placed(store))[1] == 0
    assert _files(store) == []
    script = ("import uuid, sys; from jobs.indexes import places; store = uuid.UUID(sys.argv[1]).bytes; "
              "places.place(store); assert places.slot_of(store) == 0")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    subprocess.run([sys.executable, "-c", script, str(uuid.UUID(bytes=store))], env=env, check=True, timeout=60)
    assert _files(store) == []
