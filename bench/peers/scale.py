"""Ours only: the cost of one ``add`` and of one ``accept`` + ``finish`` with many jobs
pending.  One store grows through the sizes (preloaded in 5,000-job transactions); at
each size, after an untimed warm-up of ``--ops`` adds (the first commits after a bulk load
pay for checkpointing its write-ahead log: ~5x slower at 1M for a few hundred commits),
``--ops`` adds (one per transaction) and then as many accept+finish pairs are timed, so
the pending count stays where it was; then one status gather (``jobs.observe.status.gather``: what
``jobsctl status``, ``/status`` and ``/metrics`` read, from the counters) is timed, and one
``exact`` gather (``jobsctl status --exact``: every key counted, as before the counters).
Prints JSON: ``{"sizes": [...], "add_us": [[run, ...], ...], "take_us": [[...], ...],
"status_s": [[...], ...], "status_exact_s": [[...], ...], "preload_s": [...]}``

    python -m bench.peers.scale --dir DIR --sizes 1000 100000 1000000 --ops 500 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jobs
import jobs.observe.status

TYPE = "bench"


def preload(db, start: int, stop: int) -> None:
    for lo in range(start, stop, 5000):
        @jobs.transactional
        def batch(tr, lo=lo):
            for i in range(lo, min(stop, lo + 5000)):
                jobs.add(tr, TYPE, f"p{i:08d}", {"enq": 0.0})

        batch(db)


def time_adds(db, ops: int, tag: str) -> float:
    t = time.perf_counter()
    for i in range(ops):
        jobs.add(db, TYPE, f"{tag}-{i}", {"enq": 0.0})
    return (time.perf_counter() - t) / ops * 1e6


def time_takes(db, ops: int) -> float:
    t = time.perf_counter()
    for _ in range(ops):
        job = jobs.accept(db, TYPE, timeout=0)
        if job is None:
            raise RuntimeError("no pending job to accept")
        jobs.finish(db, job)
    return (time.perf_counter() - t) / ops * 1e6


def time_status(db, exact: bool = False) -> float:
    t = time.perf_counter()
    jobs.observe.status.gather(db, exact=exact)
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers.scale")
    p.add_argument("--dir", required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000, 1_000_000])
    p.add_argument("--ops", type=int, default=500)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    db = jobs.open("sqlite:" + os.path.join(args.dir, "scale.sqlite"))
    jobs.set_type_timeout(db, TYPE, 3600)
    out = {"sizes": [], "add_us": [], "take_us": [], "status_s": [], "status_exact_s": [], "preload_s": [],
           "ops": args.ops}
    have = 0
    for size in sorted(args.sizes):
        t = time.monotonic()
        preload(db, have, size)
        out["preload_s"].append(time.monotonic() - t)
        have = size
        time_adds(db, args.ops, f"s{size}warm")
        time_takes(db, args.ops)
        adds, takes, gathers, exact = [], [], [], []
        for r in range(args.repeat):
            adds.append(time_adds(db, args.ops, f"s{size}r{r}"))
            takes.append(time_takes(db, args.ops))
            gathers.append(time_status(db))
            exact.append(time_status(db, exact=True))
            print(f"  scale {size:,} pending: run {r + 1}/{args.repeat}: add {adds[-1]:,.0f} µs, "
                  f"accept+finish {takes[-1]:,.0f} µs, status gather {gathers[-1]:,.3f} s "
                  f"(--exact {exact[-1]:,.2f} s)", file=sys.stderr, flush=True)
        out["sizes"].append(size)
        out["add_us"].append(adds)
        out["take_us"].append(takes)
        out["status_s"].append(gathers)
        out["status_exact_s"].append(exact)
    jobs.store.close(db)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
