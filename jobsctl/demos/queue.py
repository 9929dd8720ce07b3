"""``make demo``: add jobs to an embedded store and run them with several worker processes.

Each worker process loops ``accept`` / ``update`` / ``finish``; some jobs are scheduled a
few seconds ahead and are only taken once due.  At the end every job's final data is read
back to check that each ran exactly once, and a short summary is printed.

    python -m jobsctl.demos.queue [--jobs N] [--workers K] [--store URL] [--keep]

Without ``--store`` (and ``$JOBS_STORE``) it runs on a fresh embedded store,
``.jobs/demo.sqlite``; given a store, under a key prefix of its own there, cleared at the end
unless ``--keep`` (``jobsctl/scratch.py``).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

import jobs

from .. import scratch

TYPE = "demo"
DEFAULT_STORE = os.path.join(".jobs", "demo.sqlite")


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


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobsctl.demos.queue", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="jobs to add (default 3000)")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    parser.add_argument("--store", metavar="URL",
                        help="store URL (default: $JOBS_STORE, else a fresh .jobs/demo.sqlite); the demo runs "
                             "under a key prefix of its own there, cleared at the end")
    parser.add_argument("--keep", action="store_true", help="keep that key prefix (with --store)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.workers < 1:
        parser.error("--jobs and --workers must be at least 1")
    return args


def _fresh_store(path: str) -> tuple[str, str]:
    """Delete the store file at ``path`` and its workers' logs: (the store's URL, an empty
    log directory)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    log_dir = path + ".logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    for suffix in ("", "-wal", "-shm", "-lock", "-hist"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return f"sqlite:{path}", log_dir


def _add_jobs(db, count: int, later: float) -> None:
    """Add ``count`` jobs, a batch per transaction; every 50th is due at ``later``."""
    batch = 200
    for first in range(0, count, batch):

        @jobs.transactional
        def add_batch(tr, first=first):
            for n in range(first, min(first + batch, count)):
                # every 50th job is scheduled 3 s ahead: workers must not take it early
                jobs.add(tr, TYPE, f"job-{n:06d}", {"n": n}, scheduled_time=later if n % 50 == 0 else 0)

        add_batch(db)


def _run_workers(db, url: str, log_dir: str, count: int, workers: int, deadline: float) -> None:
    """Run ``workers`` worker processes until they stop, drawing a progress bar meanwhile."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(url, log_dir, deadline)) for _ in range(workers)]
    for p in procs:
        p.start()
    print(f"started {workers} worker processes: {', '.join(str(p.pid) for p in procs)}")
    while any(p.is_alive() for p in procs):
        busy = jobs.pending_count(db, TYPE) + len(jobs.get_active_jobs_ids(db, TYPE))
        sys.stdout.write("\r" + _bar(count - busy, count))
        sys.stdout.flush()
        time.sleep(0.2)
    for p in procs:
        p.join()


def _check(infos, log_dir: str, later: float) -> tuple[list[str], list[str]]:
    """Ids of the jobs not finished exactly once with the right result (by the workers'
    logs), and of those scheduled at ``later`` that ran before it."""
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
    return wrong, early


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    url = scratch.store_url(args.store)
    if url is None:
        url, log_dir = _fresh_store(DEFAULT_STORE)
    elif (code := scratch.rerun("jobsctl.demos.queue", argv, url, label="demo-queue", keep=args.keep)) is not None:
        return code
    else:
        log_dir = tempfile.mkdtemp(prefix="jobs-demo-queue-")
    db = jobs.open(url)

    started = time.time()
    jobs.set_type_timeout(db, TYPE, 30)
    later = started + 3
    _add_jobs(db, args.jobs, later)
    added = time.time()
    print(f"added {args.jobs} jobs in {added - started:.2f}s ({args.jobs // 50} scheduled 3 s ahead)")

    _run_workers(db, url, log_dir, args.jobs, args.workers, added + 300)
    elapsed = time.time() - added

    infos = jobs.get_jobs(db, TYPE)
    wrong, early = _check(infos, log_dir, later)
    finished = sum(1 for j in infos if j.state == "finished")
    sys.stdout.write("\r" + _bar(finished, args.jobs) + "\n")
    print(f"ran {finished} jobs in {elapsed:.2f}s ({finished / elapsed:.0f} jobs/s) on {args.workers} workers")
    by_worker = collections.Counter(j.data.get("worker") for j in infos)
    for pid, count in sorted(by_worker.items(), key=str):
        print(f"  worker {pid}: {count} jobs")
    print(f"jobs not finished exactly once with the right result: {len(wrong)}")
    if early:
        print(f"jobs with a wrong schedule: {len(early)}")
    jobs.store.close(db)
    if scratch.in_scratch():
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0 if not wrong and not early and finished == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
