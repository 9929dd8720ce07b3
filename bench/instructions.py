"""CPU instructions a job operation costs, counted by valgrind (cachegrind), not timed:
the count moves by well under 1% from run to run where wall-clock figures on a shared
machine move by 30%, so a change of a few percent shows, and two checkouts compare
without alternating runs.  Needs ``valgrind`` (Debian: ``apt-get install valgrind``).

    python -m bench.instructions [--jobs 1000] [--ops add,accept+finish] [--dir DIR]

Each operation runs ``n`` times in a Python process under cachegrind, and again
``n + jobs`` times; the difference, divided by ``jobs``, is what one costs: the start-up
(the interpreter, imports, opening the store) cancels out.  Stores that an operation
needs filled (jobs to accept) are made before, outside valgrind, one per run.  Counts
include SQLite's own work (and the interpreter's), everything the process executes; not
the kernel's (system calls count as one instruction), nor waiting.  The ``processor``
operations run threads (lanes, feeder, watch thread) whose idle loops count too: they
move by a few percent from run to run, the single-threaded ones by far less.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import jobs
from jobs.engine.atomic import sql_atomic
from jobs.engine.commit import _PUT, _UPSERT_ADD
from jobs.engine.keyvalues import _POINT
from jobs.engine.reads import _PIN
from jobs.engine.store import PAGE_BYTES

from .bench_engine import VALUE, fresh_store

TYPE = "instr"
BASE = 200  # operations in the shorter run


def _commit(db, n: int) -> None:
    @jobs.transactional
    def put(tr, key):
        tr.set(key, VALUE)

    for i in range(n):
        put(db, b"instr/%09d" % i)


def _add(db, n: int) -> None:
    for i in range(n):
        jobs.add(db, TYPE, f"a{i:09d}")


def _add_many(db, n: int) -> None:
    jobs.add_many(db, TYPE, [f"m{i:09d}" for i in range(n)])


def _accept_finish(db, n: int) -> None:
    for _ in range(n):
        jobs.finish(db, jobs.accept(db, TYPE, timeout=0))


BATCH = 32  # jobs per accept_many and finish_many call (the Processor's usual batch)


def _accept_batches(db, n: int) -> list:
    """``n`` due jobs taken by ``accept_many`` calls of BATCH."""
    taken = []
    while len(taken) < n:
        batch = jobs.accept_many(db, TYPE, min(BATCH, n - len(taken)), timeout=0)
        if not batch:
            raise RuntimeError(f"{len(taken)} jobs accepted of {n}: none due")
        taken += batch
    return taken


def _accept_many(db, n: int) -> None:
    _accept_batches(db, n)


def _accept_many_finish_many(db, n: int) -> None:
    taken = _accept_batches(db, n)
    for start in range(0, n, BATCH):
        jobs.finish_many(db, taken[start:start + BATCH])


def _add_many_with_data(db, n: int) -> None:
    jobs.add_many(db, TYPE, [(f"d{i:09d}", {"i": i}) for i in range(n)])


def _nothing_due(db, n: int) -> None:
    for _ in range(n):
        if jobs.accept(db, TYPE, timeout=0) is not None:
            raise RuntimeError("a job was due")


def _idle_after_outcome(db, n: int) -> None:
    """What a worker does once its last outcome is ready and nothing is due: an accept
    that writes (here one key) and finds nothing, then whatever sets its watch (a second
    transaction), the watch cancelled.  (Written so that it counts releases whose first
    attempt returned None for a read-only accept to follow.)"""
    from jobs.queue.accepting import AcceptCall, Wait

    def also(tr):
        tr.set(b"instr/outcome", VALUE)

    for _ in range(n):
        call = AcceptCall(db, TYPE)
        out = call.attempt(also)
        if out is None:
            out = call.attempt()
        if not isinstance(out, Wait):
            raise RuntimeError(f"expected a wait, not {out!r}")
        out.watch.cancel()


class BareAdd:
    """The SQLite statements of a ``jobs.add`` (as the engine runs them: its read snapshot,
    the two point reads in one statement, three puts and two counter adds, one commit),
    bare from Python on a file of their own in ``directory``: what an add would cost with
    no Python around (on pages of the engine's size).  Each call adds job ``i``."""

    def __init__(self, directory: str):
        self.conn = conn = sqlite3.connect(os.path.join(directory, "kv.sqlite"), isolation_level=None)
        conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        conn.create_function("fdb_atomic", 3, sql_atomic, deterministic=True)
        self._read_two = f"{_POINT} UNION ALL {_POINT}"  # (as keyvalues.stored_values reads two keys)
        conn.execute(_PUT, (b"\x02jobs\x00\x02activity_timeout\x00", b"\x15\x3c"))

    def __call__(self, i: int) -> None:
        conn, one = self.conn, (1).to_bytes(8, "little")
        data, queued = b"\x02jobs\x00\x02data\x00j%09d" % i, b"\x02jobs\x00\x02pending\x00j%09d" % i
        conn.execute("BEGIN")
        conn.execute(_PIN).fetchone()
        conn.execute(self._read_two, (b"\x02jobs\x00\x02activity_timeout\x00", data)).fetchall()
        conn.executemany(_PUT, [(data, b"\x00" * 17), (queued, b"\x00" * 8),
                                (b"\x02jobs\x00\x02watches_activity\x00%d" % (i % 16), b"\x00" * 10)])
        conn.executemany(_UPSERT_ADD, [(b"\x02jobs\x00\x02counts\x00%d" % (i % 8), one),
                                       (b"\x02jobs\x00\x02watches_pending\x00%d" % (i % 16), one)])
        conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def _accept_carrying_finish(db, n: int) -> None:
    """What a ``prefetch=1`` processor's transactions do, without the processor: each
    accept takes one job and writes the previous one's finish (``finish_many`` in its
    ``also``), as the processor's outcomes ride its accepts; the last job is finished on
    its own.  ``processor-p1`` less this is what the Processor costs a job."""
    from jobs.queue.accepting import AcceptCall

    held = None
    for _ in range(n):
        call = AcceptCall(db, TYPE)
        out = call.attempt(None if held is None else (lambda tr, job=held: jobs.finish_many(tr, [job])))
        if not isinstance(out, list):
            raise RuntimeError(f"expected a job, not {out!r}")
        held = out[0]
    jobs.finish(db, held)


def _sqlite_add(_db, n: int) -> None:
    """:class:`BareAdd` ``n`` times."""
    add = BareAdd(tempfile.mkdtemp(prefix="instr-sqlite-"))
    for i in range(n):
        add(i)
    add.close()


def _processor(prefetch: int):
    """Jobs run to their end by a ``processors.Processor`` (one lane, no monitor, a no-op
    handler), taking ``prefetch`` jobs per accept; stopped once all are done."""
    def run(db, n: int) -> None:
        import processors

        p = processors.Processor(db, monitor=False, grace=1, prefetch=prefetch)
        ran = []

        @p.handler(TYPE)
        def noop(ctx):
            ran.append(ctx.job_id)
            if len(ran) == n:
                p.stop()  # (the outcomes held are written before run() returns)

        p.run(1, signals=False)
        if p.stats["succeeded"] != n:
            raise RuntimeError(f"the processor ran {p.stats['succeeded']} jobs, not {n}")
    return run


# name -> (what one operation does, whether its store holds a due job per operation, what it is)
OPS = {
    "commit": (_commit, False, "an engine transaction setting one key"),
    "add": (_add, False, "jobs.add, one per transaction"),
    "sqlite-add": (_sqlite_add, False, "the SQLite statements of an add, bare (no engine, no layer)"),
    "add_many": (_add_many, False, "jobs.add_many, per job (1,000 per transaction)"),
    "add_many-data": (_add_many_with_data, False, "the same, each job with data {\"i\": i}"),
    "accept+finish": (_accept_finish, True, "jobs.accept then jobs.finish, a transaction each"),
    "accept_many": (_accept_many, True, f"jobs.accept_many of {BATCH}, per job"),
    "accept_many+finish_many": (_accept_many_finish_many, True, f"the same, then jobs.finish_many of {BATCH}, per job"),
    "accept-empty": (_nothing_due, False, "jobs.accept finding nothing due (reads, arms its watches)"),
    "idle-after-outcome": (_idle_after_outcome, False,
                           "an accept writing an outcome finds nothing, then its watch is set"),
    "processor": (_processor(32), True, "a job run by a Processor (1 lane, 32 jobs an accept), per job"),
    "processor-p1": (_processor(1), True, "the same with prefetch=1 (a job an accept), per job"),
    "accept-carrying-finish": (_accept_carrying_finish, True,
                               "processor-p1's transactions without the processor: an accept of one "
                               "job writing the previous one's finish"),
}


def prepare_store(path: str, jobs_due: int) -> str:
    """A new store at ``path`` with the type's timeout and ``jobs_due`` pending jobs."""
    url = fresh_store(os.path.dirname(path), os.path.basename(path))
    with jobs.open(url) as db:
        jobs.set_type_timeout(db, TYPE, 3600)
        if jobs_due:
            jobs.add_many(db, TYPE, [f"d{i:09d}" for i in range(jobs_due)])
    return url


def child(op: str, url: str, n: int) -> None:
    """(Under valgrind.)  Open the store and run ``op`` ``n`` times."""
    with jobs.open(url) as db:
        OPS[op][0](db, n)


def _instructions(op: str, url: str, n: int) -> int:
    """Instructions of a child process running ``op`` ``n`` times on ``url``."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, "-m", "bench.instructions", "--child", op, url, str(n)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    found = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    if p.returncode != 0 or found is None:
        raise RuntimeError(f"{op}: valgrind run failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def measure(op: str, directory: str, n: int) -> float:
    """Instructions one ``op`` costs: runs of BASE and BASE + ``n`` operations."""
    due = OPS[op][1]
    counts = []
    for runs in (BASE, BASE + n):
        url = prepare_store(os.path.join(directory, "store.sqlite"), runs if due else 0)
        counts.append(_instructions(op, url, runs))
    return (counts[1] - counts[0]) / n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.instructions")
    p.add_argument("--jobs", type=int, default=1000, help="operations counted (beyond the shorter run's)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of: {', '.join(OPS)} (default: all)")
    p.add_argument("--dir", default=None)
    p.add_argument("--child", nargs=3, metavar=("OP", "URL", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        op, url, n = args.child
        child(op, url, int(n))
        return 0
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        p.error(f"unknown operation(s) {', '.join(map(repr, unknown))}; known: {', '.join(OPS)}")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if shutil.which("valgrind") is None:
        print("bench.instructions needs valgrind on the PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    directory = args.dir or tempfile.mkdtemp(prefix="bench-instructions-")
    result = {}
    for op in ops:
        result[op] = round(measure(op, directory, args.jobs))
        print(f"{op:<14} {result[op]:>10,} instructions  {OPS[op][2]}", file=sys.stderr)
    print(json.dumps({"jobs": args.jobs, "instructions": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
