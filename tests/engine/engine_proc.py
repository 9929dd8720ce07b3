"""Child process for the engine tests: ``python engine_proc.py COMMAND URL ARGS...``.

Keys and prefixes are passed as hex.  Commands:

* ``set URL KEY VALUE``: one transaction setting KEY.
* ``add URL KEY N``: N transactions, each atomically adding 1 (8 bytes, little-endian).
* ``rmw URL KEY N``: N transactions, each reading KEY, adding 1 and writing it back.
* ``commit-loop URL PREFIX``: forever: one transaction writes counter=i and log/i (plus some
  padding, so that the process spends its time committing); after each acknowledged commit,
  prints i on stdout.  Continues from the stored counter; meant to be killed with SIGKILL.

Two more for the embedded engine only:

* ``hold URL``: takes the store's write lock (its ``flock`` and SQLite's own, by ``BEGIN
  IMMEDIATE``), prints ``held``, and keeps it until its stdin closes.
* ``die-in-commit URL KEY WHEN``: one transaction setting KEY to a versionstamped value,
  whose process SIGKILLs itself in the middle of the commit, ``before`` or ``after`` the
  SQLite commit (its commit history record written, not yet settled).
"""

from __future__ import annotations

import os
import signal
import sys

from jobs.engine import Subspace, close, transactional
from jobs.engine.urls import open_database


def _plain(v):
    v = v.wait()
    return None if v is None or v == None else bytes(v)  # noqa: E711


@transactional
def _rmw(tr, key: bytes) -> None:
    n = int(_plain(tr.get(key)) or b"0")
    tr.set(key, str(n + 1).encode())


@transactional
def _add(tr, key: bytes) -> None:
    tr.add(key, (1).to_bytes(8, "little"))


@transactional
def _set(tr, key: bytes, value: bytes) -> None:
    tr.set(key, value)


@transactional
def _step(tr, space: Subspace) -> int:
    i = int(_plain(tr.get(space.pack(("counter",)))) or b"0") + 1
    tr.set(space.pack(("counter",)), str(i).encode())
    tr.set(space.pack(("log", i)), b"x" * 64)
    for j in range(16):  # padding rewritten every commit
        tr.set(space.pack(("pad", j)), bytes([i % 256]) * 2048)
    return i


@transactional
def _stamped(tr, key: bytes) -> None:
    tr.set_versionstamped_value(key, b"\x00" * 10 + (0).to_bytes(4, "little"))


def _hold(db) -> None:
    with db._write_lock():
        conn = db._connect()
        conn.execute("BEGIN IMMEDIATE")
        print("held", flush=True)
        sys.stdin.read()
        conn.execute("ROLLBACK")


def _die_in_commit(db, key: bytes, when: str) -> None:
    from jobs.engine import commit

    write = commit._write

    def dying(*args):
        if when == "after":
            write(*args)
        os.kill(os.getpid(), signal.SIGKILL)

    commit._write = dying
    _stamped(db, key)


def main(argv: list[str]) -> int:
    command, url, *args = argv
    db = open_database(url)
    if command == "set":
        _set(db, bytes.fromhex(args[0]), bytes.fromhex(args[1]))
    elif command in ("add", "rmw"):
        fn = _add if command == "add" else _rmw
        key = bytes.fromhex(args[0])
        for _ in range(int(args[1])):
            fn(db, key)
    elif command == "hold":
        _hold(db)
    elif command == "die-in-commit":
        _die_in_commit(db, bytes.fromhex(args[0]), args[1])
    elif command == "commit-loop":
        space = Subspace(rawPrefix=bytes.fromhex(args[0]))
        print("ready", flush=True)
        while True:
            print(_step(db, space), flush=True)
    else:
        raise SystemExit(f"unknown command {command!r}")
    close(db)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
