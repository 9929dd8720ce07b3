"""Adding jobs in bulk, side by side on fresh embedded stores in one run: ``add`` in its own
transaction, ``add`` many times in one transaction, and ``add_many`` (one read per job,
one write per counter for all), in jobs/s.

    python -m bench.bulk [--jobs 50000] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import jobs

from .bench_engine import fresh_store

TYPE = "bulk"


def new_store(directory: str, name: str):
    db = jobs.open(fresh_store(directory, f"{name}.sqlite"))
    jobs.set_type_timeout(db, TYPE, 60)
    return db


def one_per_transaction(db, n: int) -> None:
    for i in range(n):
        jobs.add(db, TYPE, f"j{i:08d}", {"i": i})


def many_in_one(db, n: int, chunk: int = 1000) -> None:
    for start in range(0, n, chunk):
        @jobs.transactional
        def body(tr, start=start):
            for i in range(start, min(n, start + chunk)):
                jobs.add(tr, TYPE, f"j{i:08d}", {"i": i})

        body(db)


def bulk(db, n: int) -> None:
    jobs.add_many(db, TYPE, [(f"j{i:08d}", {"i": i}) for i in range(n)])


WAYS = {"add, one per transaction": (one_per_transaction, 10), "add, 1,000 per transaction": (many_in_one, 1),
        "add_many": (bulk, 1)}


def arguments(module: str, jobs: int, argv) -> tuple[argparse.Namespace, str]:
    """``--jobs``, ``--repeat`` and ``--dir`` of ``python -m bench.<module>``; the args and
    the directory for the stores (a new temporary one unless given)."""
    p = argparse.ArgumentParser(prog=f"python -m bench.{module}")
    p.add_argument("--jobs", type=int, default=jobs)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None)
    args = p.parse_args(argv)
    return args, args.dir or tempfile.mkdtemp(prefix=f"bench-{module}-")


def main(argv=None) -> int:
    args, directory = arguments("bulk", 50_000, argv)
    rates: dict[str, list[float]] = {name: [] for name in WAYS}
    for _ in range(args.repeat):
        for name, (fn, divisor) in WAYS.items():  # interleaved: the machine's noise hits all alike
            n = max(1, args.jobs // divisor)
            db = new_store(directory, "bulk")
            t = time.perf_counter()
            fn(db, n)
            rates[name].append(n / (time.perf_counter() - t))
            if jobs.pending_count(db, TYPE) != n:
                raise RuntimeError(f"{name}: {jobs.pending_count(db, TYPE)} jobs pending, not {n}")
            jobs.store.close(db)
    for name, runs in rates.items():
        print(f"{name:<28} {statistics.median(runs):>10,.0f} jobs/s (median of {len(runs)})", file=sys.stderr)
    print(json.dumps({"jobs": args.jobs, "jobs_per_s": rates}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
