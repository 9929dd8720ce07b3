"""Serializability of the embedded engine under real concurrency.

Threads and processes move amounts between accounts with read-modify-write transactions
(no atomic ops), retried by ``transactional``.  Lost updates or write skew would break the
total or the per-account ledger; each transfer also appends a versionstamped log entry, and
replaying the log in versionstamp order must reproduce the final balances exactly.
"""

from __future__ import annotations

import multiprocessing
import random
import threading

from jobs.engine import Subspace, Versionstamp, pack_with_versionstamp, transactional, value_of
from jobs.engine.embedded import EmbeddedDatabase

ACCOUNTS = Subspace(("acct",))
LOG = Subspace(("log",))
N_ACCOUNTS = 6
START = 1000


def _int(future) -> int:
    v = value_of(future)
    return int(v) if v is not None else 0


@transactional
def _seed(tr):
    for i in range(N_ACCOUNTS):
        tr.set(ACCOUNTS.pack((i,)), str(START).encode())


@transactional
def _transfer(tr, src: int, dst: int, amount: int) -> bool:
    a = _int(tr.get(ACCOUNTS.pack((src,))))
    if a < amount:  # the check that write skew would break
        return False
    b = _int(tr.get(ACCOUNTS.pack((dst,))))
    tr.set(ACCOUNTS.pack((src,)), str(a - amount).encode())
    tr.set(ACCOUNTS.pack((dst,)), str(b + amount).encode())
    tr.set_versionstamped_key(pack_with_versionstamp(LOG, (Versionstamp(),)), f"{src},{dst},{amount}".encode())
    return True


def _run_transfers(path: str, seed: int, count: int) -> None:
    db = EmbeddedDatabase(path)
    rng = random.Random(seed)
    for _ in range(count):
        src, dst = rng.sample(range(N_ACCOUNTS), 2)
        _transfer(db, src, dst, rng.randint(1, 400))
    db.close()


def _check(db) -> None:
    balances = [int(db.get(ACCOUNTS.pack((i,))) or 0) for i in range(N_ACCOUNTS)]
    assert sum(balances) == N_ACCOUNTS * START
    assert all(b >= 0 for b in balances)
    replay = [START] * N_ACCOUNTS
    for _key, value in db.get_range_startswith(LOG.key()):  # versionstamp order = commit order
        src, dst, amount = map(int, value.split(b","))
        assert replay[src] >= amount, "a transfer saw a balance that serial order never had"
        replay[src] -= amount
        replay[dst] += amount
    assert replay == balances


def test_threads_serializable(tmp_path):
    path = str(tmp_path / "s.sqlite")
    db = EmbeddedDatabase(path)
    _seed(db)
    threads = [threading.Thread(target=_run_transfers, args=(path, seed, 150)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    _check(db)
    db.close()


def test_processes_serializable(tmp_path):
    path = str(tmp_path / "s.sqlite")
    db = EmbeddedDatabase(path)
    _seed(db)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_run_transfers, args=(path, 100 + seed, 150)) for seed in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    _check(db)
    db.close()
