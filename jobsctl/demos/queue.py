"""``make demo``: add jobs to an embedded store and run them with several worker processes.

Each worker process loops ``accept`` / ``update`` / ``finish``; some jobs are scheduled a
few seconds ahead and are only taken once due.  At the end every job's final data is read
back to check that each ran exactly once, and a short summary is printed.

    python -m jobsctl.demos.queue [--jobs N] [--workers K] [--store PATH]
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import shutil
import sys
import time

import jobs

TYPE = "demo"


def _work(n: int) -> int:
    """A small, checkable computation standing in for real work."""
    return sum(i * i for i in range(n % 500))


def worker(url: str, log_dir: str, deadline: float) -> None:
    """One worker process: take due jobs until none is pending; log each finished id."""
    db = jobs.open(url)
    pid = os.getpid()
    log = open(os.path.join(log_dir, f"worker-{pid}.log"), "a", buffering=1)
    while time.time() < deadline:
        job = jobs.accept(db, TYPE, timeout=0.5)
        if job is None:
            if jobs.pending_count(db, TYPE, max_sched_time=float("inf")) == 0:
                return
            continue
        n, ran_at = job.data["n"], time.time()
        job = jobs.update(db, job, {**job.data, "progress": 0.5})
        jobs.finish(db, job, {"n": n, "result": _work(n), "worker": pid, "ran_at": ran_at})
        log.write(job.id + "\n")  # after the commit: what this worker really finished


def _bar(done: int, total: int, width: int = 40) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobsctl.demos.queue", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="jobs to add (default 3000)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--store", default=".jobs/demo.sqlite", help="store file (recreated)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.workers < 1:
        parser.error("--jobs and --workers must be at least 1")

    os.makedirs(os.path.dirname(os.path.abspath(args.store)), exist_ok=True)
    log_dir = args.store + ".logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    for suffix in ("", "-wal", "-shm", "-lock"):
        if os.path.exists(args.store + suffix):
            os.remove(args.store + suffix)
    url = f"sqlite:{args.store}"
    db = jobs.open(url)

    started = time.time()
    jobs.set_type_timeout(db, TYPE, 30)
    later = started + 3
    batch = 200
    for first in range(0, args.jobs, batch):

        @jobs.transactional
        def add_batch(tr, first=first):
            for n in range(first, min(first + batch, args.jobs)):
                # every 50th job is scheduled 3 s ahead: workers must not take it early
                jobs.add(tr, TYPE, f"job-{n:06d}", {"n": n}, scheduled_time=later if n % 50 == 0 else 0)

        add_batch(db)
    added = time.time()
    print(f"added {args.jobs} jobs in {added - started:.2f}s ({args.jobs // 50} scheduled 3 s ahead)")

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(url, log_dir, added + 300)) for _ in range(args.workers)]
    for p in procs:
        p.start()
    print(f"started {args.workers} worker processes: {', '.join(str(p.pid) for p in procs)}")
    finished = 0
    while any(p.is_alive() for p in procs):
        busy = jobs.pending_count(db, TYPE) + len(jobs.get_active_jobs_ids(db, TYPE))
        finished = args.jobs - busy
        sys.stdout.write("\r" + _bar(finished, args.jobs))
        sys.stdout.flush()
        time.sleep(0.2)
    for p in procs:
        p.join()
    elapsed = time.time() - added

    infos = jobs.get_jobs(db, TYPE)
    by_worker = collections.Counter(j.data.get("worker") for j in infos)
    runs = collections.Counter()
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            runs.update(line.strip() for line in f)
    wrong = [
        j.id
        for j in infos
        if j.state != "finished" or runs[j.id] != 1 or j.data.get("result") != _work(j.data["n"])
    ]
    early = [j.id for j in infos if j.data["n"] % 50 == 0 and j.data.get("ran_at", later) < later]
    finished = sum(1 for j in infos if j.state == "finished")
    sys.stdout.write("\r" + _bar(finished, args.jobs) + "\n")
    print(f"ran {finished} jobs in {elapsed:.2f}s ({finished / elapsed:.0f} jobs/s) on {args.workers} workers")
    for pid, count in sorted(by_worker.items(), key=str):
        print(f"  worker {pid}: {count} jobs")
    print(f"jobs not finished exactly once with the right result: {len(wrong)}")
    if early:
        print(f"jobs with a wrong schedule: {len(early)}")
    db.close()
    return 0 if not wrong and not early and finished == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
