"""What a worker process holds as it runs jobs for a long time: its resident memory,
threads and file descriptors, and the store's size on disk, every ``--every`` jobs, with
a producer adding as the queue drains, and the activity monitor and retention on (finished
jobs pruned after a second), as a long-running deployment has them.  A leak shows as
growth after the first samples (SQLite's page caches fill first, up to their bound), or
as Python objects that keep adding up.

    python -m bench.soak [--jobs 1000000] [--every 100000] [--prefetch 32] [--dir DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time

import jobs
import processors

TYPE = "soak"
CHUNK = 1000  # jobs a producer's add_many adds
BACKLOG = 5000  # pending jobs the producer keeps at most


def _held() -> dict:
    """This process's resident memory (KB; anonymous apart: the rest are pages of mapped
    files, such as the store's commit history), Python objects the collector tracks,
    threads and open descriptors now."""
    with open("/proc/self/status") as f:  # (resident: anonymous, and pages of mapped files)
        kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k.startswith("Rss")}
    return {"rss_kb": kb["RssAnon"] + kb["RssFile"] + kb["RssShmem"], "anon_kb": kb["RssAnon"],
            "objects": len(gc.get_objects()), "threads": threading.active_count(),
            "fds": len(os.listdir("/proc/self/fd"))}


def _store_bytes(path: str) -> int:
    return sum(os.path.getsize(path + suffix) for suffix in ("", "-wal") if os.path.exists(path + suffix))


def soak(path: str, n: int, every: int, prefetch: int, concurrency: int = 2) -> list[dict]:
    """Run ``n`` no-op jobs through one processor on the store file ``path``; a sample
    (:func:`_held`, the jobs run, the store's bytes, seconds) every ``every`` jobs."""
    db = jobs.open("sqlite:" + path)
    jobs.set_type_timeout(db, TYPE, 60)
    jobs.set_retention(db, TYPE, finished=1, failed=1)
    p = processors.Processor(db, grace=1, prefetch=prefetch)
    samples, ran, began, done = [], [0], time.monotonic(), threading.Event()

    @p.handler(TYPE)
    def noop(ctx):
        ran[0] += 1
        if ran[0] % every == 0 or ran[0] == n:
            samples.append({"jobs": ran[0], **_held(), "store_bytes": _store_bytes(path),
                            "seconds": round(time.monotonic() - began, 1)})
            print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
        if ran[0] == n:
            done.set()
            p.stop()

    def produce():
        for start in range(0, n, CHUNK):
            while jobs.pending_count(db, TYPE) > BACKLOG and not done.wait(0.05):
                pass
            jobs.add_many(db, TYPE, [f"j{i:09d}" for i in range(start, min(n, start + CHUNK))])

    producer = threading.Thread(target=produce, name="soak-producer", daemon=True)
    producer.start()
    p.run(concurrency, signals=False)
    producer.join(60)
    db.close()
    return samples


def main(argv=None) -> int:
    a = argparse.ArgumentParser(prog="python -m bench.soak")
    a.add_argument("--jobs", type=int, default=1_000_000)
    a.add_argument("--every", type=int, default=100_000)
    a.add_argument("--prefetch", type=int, default=32)
    a.add_argument("--dir", default=None)
    args = a.parse_args(argv)
    if args.jobs < 1 or args.every < 1:
        a.error("--jobs and --every must be at least 1")
    directory = args.dir or tempfile.mkdtemp(prefix="bench-soak-")
    samples = soak(os.path.join(directory, "soak.sqlite"), args.jobs, args.every, args.prefetch)
    first, last = samples[0], samples[-1]
    print(f"{last['jobs']:,} jobs in {last['seconds']} s: resident {first['rss_kb']:,} KB after "
          f"{first['jobs']:,} jobs ({first['anon_kb']:,} anonymous), {last['rss_kb']:,} KB at the end "
          f"({last['anon_kb']:,}); Python objects {first['objects']:,} -> "
          f"{last['objects']:,}; threads {first['threads']} -> "
          f"{last['threads']}, descriptors {first['fds']} -> {last['fds']}; store {first['store_bytes']:,} -> "
          f"{last['store_bytes']:,} bytes", file=sys.stderr)
    print(json.dumps({"jobs": args.jobs, "prefetch": args.prefetch, "samples": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
