"""Jobs/s when every commit takes a cluster's round trip: the ``Processor`` and the bare
accept/finish loop, with each worker process's store wrapped to delay its writing commits
(``FaultInjectingDatabase(commit_latency=...)``, ``jobs/engine/latency.py``).

On FoundationDB a worker is bound by commit latency, not by a write lock: one-write commits
took 2.26 ms on a one-process FoundationDB 7.3.  This measures what the
``Processor`` does about it, with no-op jobs and every latency in one run, side by side:

    python -m bench.latency                          # 10,000 jobs, 4 workers, 3 runs of each latency:
                                                     # none; 2 ms commits; 2 ms commits and 0.5 ms reads
    python -m bench.latency --jobs 2000 --latency 2 --repeat 1
    python -m bench.latency --kinds processor --prefetch 32   # the Processor only, smaller batches
    python -m bench.latency --store fdb: --latency 0 # a real cluster's own latencies

The clock starts when every worker is serving (the type paused until then) and stops when
the store counts every job finished; the jobs were added before, untimed.

``--steady RATE`` measures the other side: jobs added one at a time, RATE a second for
``--secs``, to ``Processor`` workers that wait for each (what a worker does between jobs:
write the outcome, find nothing, watch); it reports the time from each add's commit to
its job's start (p50 / p99 / max, ms), the accept transactions a job takes and how long
the workers waited on the latency wrapper's round trips a job (0 without latency):

    python -m bench.latency --steady 100 --workers 1 --latency 0 2:0.5
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
from bench import bench_engine  # noqa: E402
from jobs.indexes import counts
from jobs.engine.faults import FaultInjectingDatabase  # noqa: E402
from jobs.engine.transactional import run as run_transaction  # noqa: E402
from jobsctl import scratch  # noqa: E402
from processors.processor import PREFETCH  # noqa: E402

TYPE = "latency"
KINDS = ("processor", "bare")  # what a worker process runs


def _wrapped(url: str, latency: tuple[float, float]):
    """The store of ``url`` with (commit, read) latencies in seconds."""
    return FaultInjectingDatabase(jobs.open(url), commit_latency=latency[0], read_latency=latency[1])


def _serve(url: str, latency: tuple[float, float], prefetch: int, ready, stop, handler) -> dict:
    """Run a ``Processor`` (concurrency 1) of ``handler`` on the store until ``stop`` is
    set (``ready`` told once it serves); its stats."""
    from processors import Processor

    processor = Processor(_wrapped(url, latency), grace=1, prefetch=prefetch)
    processor.handler(TYPE, timeout=30)(handler)

    def signal_then_stop():
        processor.ready.wait()
        ready.put(os.getpid())
        stop.wait()
        processor.stop()

    threading.Thread(target=signal_then_stop, daemon=True).start()
    processor.run(concurrency=1, signals=False)
    return dict(processor.stats)


def processor_worker(url: str, latency: tuple[float, float], prefetch: int, ready, stop) -> None:
    """A ``Processor`` (concurrency 1) of no-op jobs, until ``stop`` is set."""
    def noop(ctx):
        return None

    _serve(url, latency, prefetch, ready, stop, noop)


def steady_worker(url: str, latency: tuple[float, float], prefetch: int, ready, stop, out) -> None:
    """:func:`processor_worker` that records, for each job, the seconds from its add (the
    time in its data, taken in the add's transaction) to its start; sends them, its stats
    and the seconds it waited on round trips (``jobs/engine/latency.py``) on ``out``."""
    from jobs.engine import latency as imitated

    waits = []

    def noop(ctx):
        waits.append(time.time() - ctx.data["added"])

    stats = _serve(url, latency, prefetch, ready, stop, noop)
    out.put((waits, stats, imitated.waited()))


def measure_steady(url: str, rate: float, secs: float, workers: int, latency: tuple[float, float],
                   prefetch: int) -> dict:
    """Jobs added one per transaction, ``rate`` a second for ``secs`` (the producer runs
    without latency: it stands for the application), to ``workers`` steady workers: the
    add-to-start times (ms), the accept transactions per job (retries not counted) and the
    ms the workers waited on imitated round trips, per job (the store's own time not counted)."""
    db = jobs.open(url)
    jobs.set_type_timeout(db, TYPE, 30)
    ctx = multiprocessing.get_context("spawn")
    ready, stop, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=steady_worker, args=(url, latency, prefetch, ready, stop, out))
             for _ in range(workers)]
    for p in procs:
        p.start()
    n = max(1, round(rate * secs))
    try:
        for _ in procs:
            ready.get(timeout=120)
        time.sleep(0.5)  # (the workers wait on their watches)
        start = time.monotonic()
        for i in range(n):
            pause = start + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            run_transaction(db, lambda tr, i=i: jobs.add(tr, TYPE, f"job-{i:09d}", {"added": time.time()}))
        deadline = time.monotonic() + 60
        while _finished(db) < n and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        results = []
        for _ in procs:
            try:
                results.append(out.get(timeout=60))
            except Exception:  # noqa: BLE001 - a worker that died: reported below
                break
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    waits = sorted(w * 1000 for found, _stats, _waited in results for w in found)
    if len(waits) != n:
        raise RuntimeError(f"{len(waits)} of {n} jobs started within 60 s of the last add")
    accepts = sum(stats.get("accept_batches", 0) + stats.get("accept_empty", 0) + stats.get("accept_rearms", 0)
                  for _w, stats, _waited in results)
    waited = sum(t for _w, _stats, t in results)
    return {"p50": waits[len(waits) // 2], "p99": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
            "max": waits[-1], "accepts_per_job": accepts / n, "store_wait_ms_per_job": waited * 1000 / n}


def bare_worker(url: str, latency: tuple[float, float], batch: int, ready, stop) -> None:
    """``accept_many(batch)`` then one finishing transaction, until the queue is empty."""
    db = _wrapped(url, latency)
    jobs.get_type_timeout(db, TYPE)
    ready.put(os.getpid())
    while jobs.is_paused(db, TYPE):  # (bench_engine's loop stops at an empty queue)
        time.sleep(0.001)
    bench_engine.drain_one(db, batch, type=TYPE)


def measure(url: str, kind: str, n: int, workers: int, latency: tuple[float, float], prefetch: int) -> float:
    """Jobs/s of ``workers`` processes of ``kind`` draining ``n`` no-op jobs."""
    db = jobs.open(url)
    jobs.set_type_timeout(db, TYPE, 30)
    jobs.pause(db, TYPE)
    jobs.add_many(db, TYPE, [f"job-{i:09d}" for i in range(n)])
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    target = processor_worker if kind == "processor" else bare_worker
    procs = [ctx.Process(target=target, args=(url, latency, prefetch, ready, stop)) for _ in range(workers)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=120)
        start = time.monotonic()
        jobs.resume(db, TYPE)
        while _finished(db) < n:
            time.sleep(0.002)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    return n / elapsed


def _finished(db) -> int:
    found = run_transaction(db, lambda tr: counts.read(tr, TYPE, time.time()))
    return found.finished if found is not None else 0


def run(args, directory: str) -> list[tuple[str, list[float]]]:
    rows = []
    for commit_ms, read_ms in args.latency:
        for kind in args.kinds:
            label = (f"{'Processor' if kind == 'processor' else 'bare accept+finish loop'}, "
                     f"{args.workers} workers, {commit_ms:g} ms per commit, {read_ms:g} ms per read")
            values = []
            for r in range(args.repeat):
                url = bench_engine.fresh_store(directory, "latency.sqlite", args.store)
                batch = args.prefetch if kind == "processor" else 1
                values.append(measure(url, kind, args.jobs, args.workers, (commit_ms / 1000, read_ms / 1000), batch))
                print(f"  {label}: run {r + 1}/{args.repeat}: {values[-1]:,.0f} jobs/s", file=sys.stderr)
            rows.append((label, values))
    return rows


def run_steady(args, directory: str) -> list[tuple[str, list[dict]]]:
    rows = []
    for commit_ms, read_ms in args.latency:
        label = f"{commit_ms:g} ms per commit, {read_ms:g} ms per read"
        values = []
        for r in range(args.repeat):
            url = bench_engine.fresh_store(directory, "latency.sqlite", args.store)
            values.append(measure_steady(url, args.steady, args.secs, args.workers,
                                         (commit_ms / 1000, read_ms / 1000), args.prefetch))
            print(f"  {label}: run {r + 1}/{args.repeat}: " + ", ".join(f"{k} {v:.2f}" for k, v in values[-1].items()),
                  file=sys.stderr)
        rows.append((label, values))
    return rows


def report_steady(rows, args) -> str:
    out = [f"{args.steady:g} jobs/s added one at a time for {args.secs:g} s to {args.workers} `Processor` "
           f"worker(s) (prefetch {args.prefetch}), median of {args.repeat} (min - max); store: "
           f"{args.store or 'a fresh SQLite file'}", "",
           "| latency | add to start p50, ms | p99, ms | max, ms | accept transactions a job "
           "| waits on round trips a job, ms |", "|---|---:|---:|---:|---:|---:|"]
    for label, values in rows:
        cells = []
        for key in ("p50", "p99", "max", "accepts_per_job", "store_wait_ms_per_job"):
            found = [v[key] for v in values]
            cells.append(f"{statistics.median(found):.2f} ({min(found):.2f} - {max(found):.2f})")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def report(rows, args) -> str:
    out = [f"{args.jobs:,} no-op jobs, median of {args.repeat} (min - max); store: {args.store or 'a fresh SQLite file'}",
           "", "| measurement | jobs/s | min - max |", "|---|---:|---:|"]
    for label, values in rows:
        out.append(f"| {label} | {statistics.median(values):,.0f} | {min(values):,.0f} - {max(values):,.0f} |")
    return "\n".join(out)


def _latency(text: str) -> tuple[float, float]:
    commit, _, read = text.partition(":")
    try:
        out = float(commit), float(read or 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected COMMIT_MS or COMMIT_MS:READ_MS") from None
    if min(out) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: latencies are at least 0")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=4, help="worker processes")
    p.add_argument("--latency", type=_latency, nargs="+", default=[(0.0, 0.0), (2.0, 0.0), (2.0, 0.5)],
                   metavar="COMMIT_MS[:READ_MS]", help="added to each writing commit (and read), in ms")
    p.add_argument("--prefetch", type=int, default=PREFETCH, help="the Processor's prefetch (default: its own)")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                   help="what the workers run (default: both)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--store", metavar="URL", help="default: $JOBS_STORE, else fresh embedded store files")
    p.add_argument("--steady", type=float, metavar="RATE",
                   help="add jobs one at a time, RATE a second, to waiting workers; report add-to-start times")
    p.add_argument("--secs", type=float, default=10.0, help="with --steady: how long jobs are added")
    args = p.parse_args(argv)
    if min(args.jobs, args.workers, args.repeat, args.prefetch) < 1:
        p.error("--jobs, --workers, --repeat and --prefetch must be at least 1")
    if args.steady is not None and not (args.steady > 0 and args.secs > 0):
        p.error("--steady and --secs must be more than 0")
    args.store = scratch.store_url(args.store)
    if args.store is not None and (code := scratch.rerun("bench.latency", argv, args.store,
                                                          label="bench-latency")) is not None:
        return code
    with tempfile.TemporaryDirectory(prefix="jobs-latency-") as directory:
        if args.steady is not None:
            print(report_steady(run_steady(args, directory), args))
        else:
            print(report(run(args, directory), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
