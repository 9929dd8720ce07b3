"""What sharing one embedded store costs processes that each take one job a transaction:
``N`` ``Processor(prefetch=1)`` processes (one lane each, no-op jobs) on one store, then
the same processes each on a store of its own, side by side.

On one machine the processes of a store share its write lock, conflict on the jobs they
pick, and find SQLite's page cache emptied by each other's commits; on stores of their
own they do none of that, and the difference is what sharing costs (what a
``prefetch=1`` worker pays beyond the work of its transactions)::

    python -m bench.sharing                       # 4 processes, 4,500 jobs each, 3 rounds
    python -m bench.sharing --procs 2 --jobs 7000 --rounds 1

Each row: the processes' jobs/s together, their CPU a job (mean of the processes), and
the write lock's acquisitions for all their jobs (beyond one a job: conflicts retried,
outcomes committed on their own).  Jobs are added before the processes start, untimed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
import processors  # noqa: E402

TYPE = "sharing"


def _fill(url: str, n: int) -> None:
    with jobs.open(url) as db:
        jobs.set_type_timeout(db, TYPE, 3600)
        jobs.add_many(db, TYPE, [f"j{i:09d}" for i in range(n)])  # (in chunks of a transaction each)


def _serve(url: str, n: int, ready, go, out) -> None:
    """(A process.)  Once every process is ready, run ``n`` jobs with one lane, then report
    (jobs/s, CPU s, lock acquired)."""
    with jobs.open(url) as db:
        p = processors.Processor(db, monitor=False, grace=1, prefetch=1)
        ran = [0]

        @p.handler(TYPE)
        def noop(ctx):
            ran[0] += 1
            if ran[0] == n:
                p.stop()

        ready.put(None)
        go.wait()
        began, cpu = time.perf_counter(), time.process_time()
        p.run(1, signals=False)
        out.put((n / (time.perf_counter() - began), time.process_time() - cpu, db.write_lock_stats()["acquired"]))


def run(procs: int, per_proc: int, shared: bool, directory: str) -> dict:
    """One round: ``procs`` processes of ``per_proc`` jobs each, on one store or one each."""
    stores = [f"sqlite:{os.path.join(directory, f'{shared}-{i}.sqlite')}" for i in range(1 if shared else procs)]
    for url in stores:
        _fill(url, per_proc * (procs if shared else 1))
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_serve, args=(stores[0 if shared else i], per_proc, ready, go, out))
               for i in range(procs)]
    for w in workers:
        w.start()
    for _ in workers:  # (all imported, their stores open: none starts alone)
        ready.get(timeout=120)
    go.set()
    results = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    return {"jobs_per_s": sum(r[0] for r in results),
            "cpu_ms_per_job": 1000 * sum(r[1] for r in results) / (procs * per_proc),
            "lock_acquired": sum(r[2] for r in results)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sharing")
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--jobs", type=int, default=4500, help="jobs per process")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if args.procs < 1 or args.jobs < 1 or args.rounds < 1:
        p.error("--procs, --jobs and --rounds must be at least 1")
    print(f"{args.procs} processes x {args.jobs:,} jobs, prefetch=1, one lane each")
    print(f"{'stores':<14} {'jobs/s':>8} {'CPU ms/job':>11} {'lock taken':>11}")
    for _ in range(args.rounds):
        for shared in (True, False):
            with tempfile.TemporaryDirectory() as d:
                r = run(args.procs, args.jobs, shared, d)
            label = "one, shared" if shared else "one each"
            print(f"{label:<14} {r['jobs_per_s']:>8,.0f} {r['cpu_ms_per_job']:>11.3f} {r['lock_acquired']:>11,}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
