"""What each step of a job costs in one process, in microseconds a job, one at a time and
in batches as the ``Processor`` runs them: ``add`` and ``add_many``, ``accept`` and
``accept_many(32)``, ``finish`` in its own transaction and ``finish_many`` of 64 (as the
``Processor``'s outcome commits); and an ``accept`` that finds nothing due (a worker
woken for a job another took: it reads the queue and arms its watches), a call.  Fresh
embedded stores; the rounds
alternate the ways, so the machine's noise hits all alike.  Run it from two checkouts
one after the other to compare a change.

    python -m bench.batch_costs [--jobs 6400] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import jobs

from .bulk import TYPE, arguments, new_store

ACCEPT_BATCH = 32
FINISH_BATCH = 64
EMPTY_SHARE = 8  # accepts that find nothing: one per this many jobs (timed a call each)


def _ids(n: int) -> list[tuple[str, dict]]:
    return [(f"j{i:08d}", {"i": i}) for i in range(n)]


def _timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def _accepted(db, n: int, batch: int) -> tuple[list[list[jobs.Job]], float]:
    """All ``n`` pending jobs accepted ``batch`` at a time; the batches and the seconds."""
    batches: list[list[jobs.Job]] = []

    def take() -> None:
        while taken := jobs.accept_many(db, TYPE, batch, timeout=0):
            batches.append(taken)

    seconds = _timed(take)
    if sum(map(len, batches)) != n:
        raise RuntimeError(f"accepted {sum(map(len, batches))} jobs, not {n}")
    return batches, seconds


def one_round(directory: str, n: int) -> dict[str, float]:
    """Microseconds a job of each way, on fresh stores of ``n`` jobs."""
    out = {}
    db = new_store(directory, "one")
    out["add"] = _timed(lambda: [jobs.add(db, TYPE, job_id, data) for job_id, data in _ids(n)])
    singles, out["accept"] = _accepted(db, n, 1)
    out["finish"] = _timed(lambda: [jobs.finish(db, job) for [job] in singles])
    calls = max(1, n // EMPTY_SHARE)
    out["accept, nothing due"] = _timed(lambda: [jobs.accept(db, TYPE, timeout=0) for _ in range(calls)]) * n / calls
    jobs.store.close(db)
    db = new_store(directory, "batched")
    out["add_many"] = _timed(lambda: jobs.add_many(db, TYPE, _ids(n)))
    batches, out[f"accept_many({ACCEPT_BATCH})"] = _accepted(db, n, ACCEPT_BATCH)
    taken = [job for batch in batches for job in batch]
    out[f"finish_many({FINISH_BATCH})"] = _timed(
        lambda: [jobs.finish_many(db, taken[i:i + FINISH_BATCH]) for i in range(0, n, FINISH_BATCH)])
    if jobs.pending_count(db, TYPE) != 0:
        raise RuntimeError("jobs left pending")
    jobs.store.close(db)
    return {way: seconds / n * 1e6 for way, seconds in out.items()}  # (a call for "nothing due")


def main(argv=None) -> int:
    args, directory = arguments("batch_costs", 6400, argv)
    rounds = [one_round(directory, args.jobs) for _ in range(args.repeat)]
    for way in rounds[0]:
        runs = [r[way] for r in rounds]
        unit = "a call" if way == "accept, nothing due" else "a job"
        print(f"{way:<28} {statistics.median(runs):>8.1f} us {unit} (median of {len(runs)}; "
              f"{min(runs):.1f} - {max(runs):.1f})", file=sys.stderr)
    print(json.dumps({"jobs": args.jobs, "us_per_job": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
