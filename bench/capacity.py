"""A capacity model from counted work: what each job costs the store, and what that allows
on a FoundationDB cluster of N processes.

The jobs of one type go through the store wrapped in ``jobs/engine/counting.py``, which
counts what every committed transaction read, wrote and conflicted on.  Two paths, each job
by itself and in batches as the ``Processor`` runs them:

* one per transaction: ``add``, ``accept``, ``update``, ``finish``;
* batched: ``add_many`` of ``--batch``, ``accept_many`` of ``--batch``, the batch finished
  in one transaction under ``read_ahead``;
* the two mixed as most deployments run them: an application adding jobs one per
  transaction, a ``Processor`` taking and finishing them in batches;

and ``jobsctl status`` gathers.  From the counts per job and FoundationDB's published limits
(``bench/capacity_model.py``) it writes the jobs/s one type reaches on clusters of
``--processes`` and which limit (and which key) binds first::

    python -m bench.capacity                       # 2,000 jobs, a fresh embedded store
    python -m bench.capacity --jobs 500 --processes 8 32 --json out.json
    python -m bench.capacity --store fdb:          # the same counts, on a cluster
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
from bench import bench_engine  # noqa: E402
from bench import capacity_model as model  # noqa: E402
from bench import capacity_sim  # noqa: E402
from jobs.observe import status as status_mod
from jobs.engine.counting import CountingDatabase  # noqa: E402
from jobs.engine.transactional import run as run_transaction  # noqa: E402
from jobsctl import scratch  # noqa: E402

TYPE = "capacity"
SIM_TYPE = "capacity-sim"  # the simulation's type: a type of its own, as fresh as TYPE was
ID = "cap-{:07d}"  # (bench/capacity_model.py tells a job's own keys by this prefix)
ID_BATCHED = "cap-b{:07d}"
PATHS = {  # path -> the labels a job of it goes through
    "one per transaction": ("add", "accept", "update", "finish"),
    "batched": ("add_many", "accept_many", "finish batch"),
    "added one by one, run batched": ("add", "accept_many", "finish batch"),  # an app adding, a Processor
}


def _one_by_one(db: CountingDatabase, n: int) -> None:
    for i in range(n):
        with db.label("add"):
            jobs.add(db, TYPE, ID.format(i), {"i": i})
    for _ in range(n):
        with db.label("accept"):
            job = jobs.accept(db, TYPE, timeout=0)
        with db.label("update"):
            job = jobs.update(db, job, {"progress": 1})
        with db.label("finish"):
            jobs.finish(db, job, {"ok": True})


def _batched(db: CountingDatabase, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        with db.label("add_many"):
            jobs.add_many(db, TYPE, [jobs.NewJob(ID_BATCHED.format(i), {"i": i})
                                     for i in range(start, min(n, start + batch))])
    left = n
    while left:
        with db.label("accept_many"):
            taken = jobs.accept_many(db, TYPE, min(batch, left), timeout=0)
        with db.label("finish batch"):
            run_transaction(db, lambda tr, taken=taken: _finish_all(tr, taken))
        left -= len(taken)


def _finish_all(tr, taken) -> None:
    with jobs.read_ahead(tr, taken):
        for job in taken:
            jobs.finish(tr, job, {"ok": True})


def count(url: str, n: int, batch: int, gathers: int) -> dict[str, list]:
    """Tallies by label, of ``n`` jobs on each path and of ``gathers`` status gathers."""
    with jobs.open(url) as plain:
        jobs.set_type_timeout(plain, TYPE, 60)
        db = CountingDatabase(plain)
        db.take()
        by_label: dict[str, list] = {}
        _one_by_one(db, n)
        _keep(by_label, db.take())
        _batched(db, n, batch)  # new jobs beside the finished ones, as in production
        _keep(by_label, db.take())
        with db.label("status gather"):
            for _ in range(gathers):
                status_mod.gather(db)
        _keep(by_label, db.take())
    return by_label


def _keep(by_label: dict, tallies) -> None:
    for tally in tallies:
        by_label.setdefault(tally.label, []).append(tally)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2000, help="jobs on each path")
    p.add_argument("--batch", type=int, default=32, help="jobs per add_many / accept_many")
    p.add_argument("--gathers", type=int, default=20, help="status gathers counted")
    model.add_arguments(p)
    p.add_argument("--store", metavar="URL", help="default: $JOBS_STORE, else a fresh embedded store file")
    p.add_argument("--json", metavar="FILE", help="also write the counts and the model as JSON")
    p.add_argument("--simulate", type=int, default=0, metavar="WORKERS",
                   help="also run the jobs through this many concurrent worker threads and compare "
                        "each shared key's measured writes/s with the model's")
    args = p.parse_args(argv)
    if min(args.jobs, args.batch, args.gathers) < 1 or args.simulate < 0:
        p.error("--jobs, --batch and --gathers must be at least 1, --simulate at least 0")
    model.check_arguments(p, args)
    args.store = scratch.store_url(args.store)
    if args.store is not None and (code := scratch.rerun("bench.capacity", argv, args.store,
                                                          label="bench-capacity")) is not None:
        return code
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jobs-capacity-") as directory:
        url = bench_engine.fresh_store(directory, "capacity.sqlite", args.store)
        by_label = count(url, args.jobs, args.batch, args.gathers)
        result = model.build(by_label, PATHS, args, jobs_per_path=args.jobs, type=TYPE)
        if args.simulate:
            sim = capacity_sim.simulate(url, SIM_TYPE, args.simulate, args.jobs)
            one = {"hot keys": {"writes": [(k.replace(repr(TYPE), repr(SIM_TYPE)), r) for k, r in
                                           result["paths"]["one per transaction"]["hot keys"]["writes"]]}}
            result["simulation"] = capacity_sim.compare(sim, one) | {"workers": args.simulate}
    result["settings"] = {"jobs": args.jobs, "batch": args.batch, "gathers": args.gathers,
                          "store": args.store or "a fresh embedded store", "seconds": round(time.monotonic() - began, 1)}
    print(model.report(result))
    if args.simulate:
        print("\n" + capacity_sim.report(result["simulation"], args.simulate))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
