"""What a worker process holds as it runs jobs for a long time: its resident memory,
threads and file descriptors, and the store's size on disk, every ``--every`` jobs, with
a producer adding as the queue drains, and the activity monitor and retention on (finished
jobs pruned after a second), as a long-running deployment has them.  A leak shows as
growth after the first samples (SQLite's page caches fill first, up to their bound), or
as Python objects or allocated blocks that keep adding up.

    python -m bench.soak [--jobs 1000000] [--every 100000] [--prefetch 32] [--processes 1] [--dir DIR]

With ``--processes N``, N worker processes share the store (samples are of the first):
every processor's monitor prunes.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time

import jobs
import processors
from jobs.observe.status import gather

TYPE = "soak"
CHUNK = 1000  # jobs a producer's add_many adds
BACKLOG = 5000  # pending jobs the producer keeps at most


class _MallInfo2(ctypes.Structure):  # glibc's ``struct mallinfo2`` (glibc 2.33 and later)
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo():
    """glibc's ``mallinfo2`` (every arena), or None elsewhere."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO = _mallinfo()


def _held() -> dict:
    """This process's resident memory (KB; anonymous apart: the rest are pages of mapped
    files, such as the store's commit history), Python objects the collector tracks and
    memory blocks Python has allocated (objects of any kind, and their buffers), threads and
    open descriptors now; with glibc, the C heap's bytes in use and free (KB: free bytes
    that keep growing are fragmentation, in-use ones an allocation kept)."""
    with open("/proc/self/status") as f:  # (resident: anonymous, and pages of mapped files)
        kb = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k.startswith("Rss")}
    held = {"rss_kb": kb["RssAnon"] + kb["RssFile"] + kb["RssShmem"], "anon_kb": kb["RssAnon"],
            "objects": len(gc.get_objects()), "blocks": sys.getallocatedblocks(), "threads": threading.active_count(),
            "fds": len(os.listdir("/proc/self/fd"))}
    if _MALLINFO is not None:
        heap = _MALLINFO()
        held.update(heap_used_kb=(heap.uordblks + heap.hblkhd) // 1024, heap_free_kb=heap.fordblks // 1024)
    return held


def _store_bytes(path: str) -> int:
    return sum(os.path.getsize(path + suffix) for suffix in ("", "-wal") if os.path.exists(path + suffix))


def soak(path: str, n: int, every: int, prefetch: int, processes: int = 1, concurrency: int = 2) -> list[dict]:
    """Run ``n`` no-op jobs through ``processes`` worker processes (this one and forked
    children), each one processor with its monitor, on the store file ``path``; a sample
    of this process (:func:`_held`, the store's bytes, seconds) as the jobs run pass each
    multiple of ``every`` (looked at ten times a second)."""
    db = jobs.open("sqlite:" + path)
    jobs.set_type_timeout(db, TYPE, 60)
    jobs.set_retention(db, TYPE, finished=1, failed=1)
    forked = multiprocessing.get_context("fork")
    ran, done = forked.Value("q", 0), forked.Event()
    children = [forked.Process(target=_work, args=(path, prefetch, concurrency, ran, done), daemon=True)
                for _ in range(processes - 1)]
    for child in children:  # (before this process starts threads)
        child.start()
    samples, began = [], time.monotonic()

    def produce():
        for start in range(0, n, CHUNK):
            while jobs.pending_count(db, TYPE) > BACKLOG and not done.wait(0.05):
                pass
            jobs.add_many(db, TYPE, [f"j{i:09d}" for i in range(start, min(n, start + CHUNK))])

    def sample():
        for due in [*range(every, n, every), n]:
            while ran.value < due:
                time.sleep(0.1)
            samples.append({"jobs": due, **_held(), "store_bytes": _store_bytes(path),
                            "seconds": round(time.monotonic() - began, 1)})
            print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
        done.set()  # (the processors stop once the last sample is taken: it sees them running)

    threads = [threading.Thread(target=fn, name=f"soak-{fn.__name__}", daemon=True) for fn in (produce, sample)]
    for thread in threads:
        thread.start()
    _work(path, prefetch, concurrency, ran, done)
    for thread in threads:
        thread.join(60)
    for child in children:
        child.join(60)
    samples[-1]["jobs_left"] = _jobs_left(db)
    jobs.store.close(db)
    return samples


def _jobs_left(db) -> int:
    """Jobs of the soak's type still in the store (the counters' figures, in any state):
    those finished in the last second, and any retention has not caught up with."""
    t = next(t for t in gather(db, limit=0).types if t.type == TYPE)
    return t.pending + t.running + t.finished + t.failed


def _work(path: str, prefetch: int, concurrency: int, ran, done) -> None:
    """One worker process's processor, counting its jobs in ``ran`` (shared), until
    ``done`` is set."""
    with jobs.open("sqlite:" + path) as db:
        p = processors.Processor(db, grace=1, prefetch=prefetch)

        @p.handler(TYPE)
        def noop(ctx):
            with ran.get_lock():
                ran.value += 1

        threading.Thread(target=lambda: (done.wait(), p.stop()), name="soak-stop", daemon=True).start()
        p.run(concurrency, signals=False)


def main(argv=None) -> int:
    a = argparse.ArgumentParser(prog="python -m bench.soak")
    a.add_argument("--jobs", type=int, default=1_000_000)
    a.add_argument("--every", type=int, default=100_000)
    a.add_argument("--prefetch", type=int, default=32)
    a.add_argument("--processes", type=int, default=1)
    a.add_argument("--dir", default=None)
    args = a.parse_args(argv)
    if min(args.jobs, args.every, args.processes) < 1:
        a.error("--jobs, --every and --processes must be at least 1")
    directory = args.dir or tempfile.mkdtemp(prefix="bench-soak-")
    samples = soak(os.path.join(directory, "soak.sqlite"), args.jobs, args.every, args.prefetch, args.processes)
    first, last = samples[0], samples[-1]
    print(f"{last['jobs']:,} jobs in {last['seconds']} s: resident {first['rss_kb']:,} KB after "
          f"{first['jobs']:,} jobs ({first['anon_kb']:,} anonymous), {last['rss_kb']:,} KB at the end "
          f"({last['anon_kb']:,}); Python objects {first['objects']:,} -> "
          f"{last['objects']:,}, blocks {first['blocks']:,} -> {last['blocks']:,}; threads {first['threads']} -> "
          f"{last['threads']}, descriptors {first['fds']} -> {last['fds']}; store {first['store_bytes']:,} -> "
          f"{last['store_bytes']:,} bytes, {last['jobs_left']:,} jobs left in it"
          + (f"; C heap in use {first['heap_used_kb']:,} -> {last['heap_used_kb']:,} KB, free "
             f"{first['heap_free_kb']:,} -> {last['heap_free_kb']:,} KB" if "heap_used_kb" in last else ""),
          file=sys.stderr)
    print(json.dumps({"jobs": args.jobs, "prefetch": args.prefetch, "processes": args.processes, "samples": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
