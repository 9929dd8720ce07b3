"""Many simulated workers on one store, to check the capacity model's per-key write rates
under concurrency (``python -m bench.capacity --simulate WORKERS``).

A producer adds jobs one per transaction while ``workers`` threads each loop ``accept``,
``update``, ``finish`` (one transaction each), all through one counting wrapper.  Every
shared key's measured writes/s over the run is set beside what the model predicts from the
sequential count: that key's writes per job times the jobs/s the simulation reached.
Conflicts between the workers (retries) and the order they commit in are what the
sequential count cannot see; a key whose measured rate strays from the prediction is one
the model misjudges.
"""

from __future__ import annotations

import threading
import time

import jobs
from jobs.engine.counting import CountingDatabase

from . import capacity_model as model

SIM_ID = "cap-s{:07d}"


def simulate(url: str, type: str, workers: int, n: int) -> dict:
    """Run ``n`` jobs of ``type`` through ``workers`` worker threads and a producer; the
    tallies by label, the wall time and the jobs finished."""
    with jobs.open(url) as plain:
        jobs.set_type_timeout(plain, type, 60)
        db = CountingDatabase(plain)
        db.take()
        finished = []  # one entry per job finished (list.append is atomic)
        began = time.monotonic()
        threads = [threading.Thread(target=_produce, args=(db, type, n), name="producer")]
        threads += [threading.Thread(target=_work, args=(db, type, n, finished), name=f"worker-{i}")
                    for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - began
        tallies = db.take()
    by_label: dict[str, list] = {}
    for tally in tallies:
        by_label.setdefault(tally.label, []).append(tally)
    return {"by_label": by_label, "seconds": seconds, "jobs": len(finished)}


def _produce(db, type: str, n: int) -> None:
    with db.label("add"):
        for i in range(n):
            jobs.add(db, type, SIM_ID.format(i))


def _work(db, type: str, n: int, finished: list) -> None:
    while len(finished) < n:
        with db.label("accept"):
            job = jobs.accept(db, type, timeout=0.05)
        if job is None:
            continue
        with db.label("update"):
            job = jobs.update(db, job)
        with db.label("finish"):
            jobs.finish(db, job)
        finished.append(1)


def compare(sim: dict, predicted: dict) -> dict:
    """Each shared key's measured writes/s beside the model's (writes per job, from the
    sequential count, times the simulation's jobs/s)."""
    tallies = [t for ts in sim["by_label"].values() for t in ts]
    jobs_per_s = sim["jobs"] / sim["seconds"]
    measured = model.hot_keys(tallies, sim["jobs"])["writes"]
    per_job = dict(predicted["hot keys"]["writes"])
    rows = [(key, rate * jobs_per_s, per_job.get(key, 0.0) * jobs_per_s) for key, rate in measured]
    retries = sum(t.attempts - 1 for t in tallies)
    return {"jobs_per_s": jobs_per_s, "seconds": sim["seconds"], "jobs": sim["jobs"],
            "transactions": len(tallies), "retries": retries, "keys": rows}


def report(result: dict, workers: int) -> str:
    out = [f"Simulation: {workers} worker threads and a producer, {result['jobs']:,} jobs in "
           f"{result['seconds']:.1f} s ({result['jobs_per_s']:,.0f} jobs/s; {result['transactions']:,} "
           f"transactions committed, {result['retries']:,} retries).", "",
           "| key shared by jobs | measured writes/s | model: writes per job x jobs/s |", "|---|---:|---:|"]
    for key, measured, predicted in result["keys"][:8]:
        out.append(f"| {key} | {measured:,.0f} | {predicted:,.0f} |")
    return "\n".join(out)
