"""A type's activity stamp spread over ``keys.ACTIVITY_SHARDS`` keys, so that no one key
takes a write from every change to a job of the type (``bench/capacity.py``).  Readers
take the newest stamp; watchers wake on a stamp of any shard."""

from __future__ import annotations

import jobs
from jobs.queue import activity, rows
from jobs import keys
from jobs.indexes import wakeups
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import run
from waiting import wait_until

T = "sharded"
_STAMP_AT_0 = bytes(10) + (0).to_bytes(4, "little")


def _stamps(db) -> dict[bytes, bytes]:
    begin, end = keys.watches_activity_range(T)
    return {bytes(k): bytes(v) for k, v in db.get_range(begin, end)}


def _layout(db) -> int:
    return fdb_tuple.unpack(db.get(keys.LAYOUT_KEY))[0]


def test_changes_stamp_the_shards_and_the_newest_stamp_is_the_last_change(db):
    jobs.set_type_timeout(db, T, 60)
    for i in range(40):
        jobs.add(db, T, f"j{i}")
    stamps = _stamps(db)
    assert 4 <= len(stamps) <= keys.ACTIVITY_SHARDS
    assert set(stamps) <= {keys.watches_activity_key(T, i) for i in range(keys.ACTIVITY_SHARDS)}
    job = jobs.accept(db, T, timeout=0)
    last = run(db, activity.last_activity, T)
    assert last == max(_stamps(db).values()) == run(db, rows.get, T, job.id).seq.tr_version  # the accept's
    assert _layout(db) == keys.LAYOUT_VERSION == 1


def _armed(db):
    return run(db, activity.watch, T)


def test_the_watch_fires_on_a_stamp_of_any_shard(db):
    jobs.set_type_timeout(db, T, 60)
    jobs.add(db, T, "a")
    watch = _armed(db)
    assert wakeups.waiting(db, keys.watches_activity_keys(T)) == (1, 1)  # one set: 16 keys
    assert len(keys.watches_activity_keys(T)) == keys.ACTIVITY_SHARDS and not watch.is_ready()
    jobs.add(db, T, "b")  # stamps one shard
    assert wait_until(watch.is_ready)
    watch = _armed(db)
    run(db, lambda tr: tr.set_versionstamped_value(keys.watches_activity_key(T, 3), _STAMP_AT_0))  # any shard
    assert wait_until(watch.is_ready)
    assert wakeups.waiting(db, keys.watches_activity_keys(T)) == (0, 0)


def test_watchers_of_one_process_share_one_set(db):
    jobs.set_type_timeout(db, T, 60)
    jobs.add(db, T, "a")
    first, second = _armed(db), _armed(db)
    assert wakeups.waiting(db, keys.watches_activity_keys(T)) == (1, 2)
    first.cancel()  # the set stays for the other
    assert wakeups.waiting(db, keys.watches_activity_keys(T)) == (1, 1) and not second.is_ready()
    jobs.add(db, T, "b")
    assert wait_until(second.is_ready)
