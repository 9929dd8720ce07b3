"""First numbers for the embedded engine: raw commit rate against plain SQLite, and
end-to-end jobs/s (add, accept, finish of no-op jobs) with 1 and 4 worker processes.

    python -m bench.bench_engine              # defaults: 5000 commits, 2000 jobs, 3 runs
    python -m bench.bench_engine --quick      # a smoke run of a few seconds
    python bench/bench_engine.py --commits 20000 --jobs 5000 --repeat 5 --dir /some/disk

Both sides of the commit comparison use the same file setup: WAL, ``synchronous=NORMAL``
(durable against process crashes, not power loss), the pages of the engine's stores
(``PAGE_BYTES``: smaller pages make plain SQLite faster too), a fresh file per run, one
key-value write per transaction.  Plain SQLite does ``BEGIN; INSERT OR REPLACE; COMMIT``; the engine
does ``tr.set`` in a ``transactional`` function, i.e. everything FoundationDB semantics
cost on top (conflict check against recent commits, commit log row, version counter,
cross-process write lock).  Each figure is the median of ``--repeat`` runs, with the
smallest and largest run beside it.  Store files go to ``--dir`` (default: a temporary
directory); its file system is printed, since it decides the numbers.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
from jobs import prefixes, store  # noqa: E402
from jobs.engine import tuple as fdb_tuple  # noqa: E402
from jobs.engine.store import PAGE_BYTES  # noqa: E402
from jobsctl import scratch  # noqa: E402

TYPE = "bench"
VALUE = b"v" * 100
KEY = "bench/{:09d}"


# --- (a) raw commit rate ------------------------------------------------------------------


def commits_plain_sqlite(path: str, n: int) -> float:
    """Commits/s of plain sqlite3: WAL, synchronous=NORMAL, the engine's page size, one
    INSERT OR REPLACE + COMMIT each."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
    put = "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)"
    keys = [KEY.format(i).encode() for i in range(n)]
    start = time.perf_counter()
    for key in keys:
        conn.execute("BEGIN")
        conn.execute(put, (key, VALUE))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


@jobs.transactional
def _put(tr, keys) -> None:
    """One transaction setting each of ``keys`` to ``VALUE`` (100 bytes)."""
    for key in keys:
        tr.set(key, VALUE)


def commits_engine(url: str, n: int) -> float:
    """Commits/s of the store of ``url`` (a ``sqlite:`` one: the embedded engine, WAL,
    synchronous=NORMAL, its default): one ``tr.set`` per transaction via ``transactional``."""
    root = fdb_tuple.pack(prefixes.ROOT)  # b"" unless a scratch run's
    keys = [root + KEY.format(i).encode() for i in range(n)]
    with store.opened(url) as db:
        start = time.perf_counter()
        for key in keys:
            _put(db, [key])
        elapsed = time.perf_counter() - start
    return n / elapsed


def commit_loop(url: str, writes: int, secs: float, tag: str, barrier, results) -> None:
    """One process of :func:`commit_rate`: transactions of ``writes`` new keys each, one
    after another, for ``secs`` s from the barrier; reports (commits, start, end)."""
    root = fdb_tuple.pack(prefixes.ROOT)
    with store.opened(url) as db:
        _put(db, [root + f"bench/{tag}/warm".encode()])  # connected before the clock starts
        barrier.wait()
        start = time.monotonic()
        deadline, done = start + secs, 0
        while time.monotonic() < deadline:
            _put(db, [root + f"bench/{tag}/{done:09d}/{j:02d}".encode() for j in range(writes)])
            done += 1
        results.put((done, start, time.monotonic()))


def commit_rate(url: str, writes: int = 1, procs: int = 1, secs: float = 5.0) -> dict:
    """Raw commit rate of the store of ``url`` from ``procs`` OS processes, each a serial
    loop of transactions (one at a time) writing ``writes`` new 100-byte values, for
    ``secs`` s: commits/s and keys/s over all of them, from the first start to the last end
    (process start-up and connecting excluded).  The keys stay: a fresh store (or a
    scratch root, cleared after) for each call."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(procs + 1), ctx.Queue()
    tag = f"w{writes}-p{procs}-{os.getpid()}-{time.monotonic_ns()}"
    ps = [ctx.Process(target=commit_loop, args=(url, writes, secs, f"{tag}-{i}", barrier, results))
          for i in range(procs)]
    for p in ps:
        p.start()
    barrier.wait(timeout=120)
    reports = [results.get(timeout=secs + 120) for _ in ps]
    for p in ps:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a commit loop failed with exit code {p.exitcode}")
    commits = sum(n for n, _s, _e in reports)
    span = max(e for _n, _s, e in reports) - min(s for _n, s, _e in reports)
    return {"writes": writes, "procs": procs, "commits": commits, "secs": span,
            "commits_per_s": commits / span, "keys_per_s": commits * writes / span}


# --- (b) end-to-end jobs/s ----------------------------------------------------------------


def add_jobs(url: str, n: int) -> float:
    """Adds/s: one job per transaction, as producers usually add them."""
    with store.opened(url) as db:
        jobs.set_type_timeout(db, TYPE, 3600)
        start = time.perf_counter()
        for i in range(n):
            jobs.add(db, TYPE, f"job-{i:09d}")
        elapsed = time.perf_counter() - start
    return n / elapsed


def worker(url: str, barrier, results, batch: int = 1) -> None:
    """Accept and finish no-op jobs until none is left; report (count, end time).  With
    ``batch`` > 1: ``accept_many(batch)``, then one transaction finishing them all."""
    with store.opened(url) as db:
        jobs.get_type_timeout(db, TYPE)  # open the store before the clock starts
        barrier.wait()
        results.put((drain_one(db, batch), time.monotonic()))


def drain_one(db, batch: int, type: str = TYPE) -> int:
    """Accept and finish jobs of ``type`` until it has none pending; how many."""
    done = 0

    @jobs.transactional
    def finish_all(tr, taken):
        for job in taken:
            jobs.finish(tr, job)

    while True:
        taken = jobs.accept_many(db, type, batch, timeout=0)
        if not taken:
            if jobs.pending_count(db, type) == 0:
                break
            continue
        finish_all(db, taken)
        done += len(taken)
    return done


def drain(url: str, n: int, workers: int, batch: int = 1) -> float:
    """Jobs/s (accept + finish) of ``workers`` processes emptying a store of ``n`` jobs
    (``batch`` jobs per accept and per finish transaction).
    The clock starts when every worker has opened the store (process start-up excluded)
    and stops when the last one finds the queue empty."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, barrier, results, batch)) for _ in range(workers)]
    for p in procs:
        p.start()
    barrier.wait(timeout=120)
    start = time.monotonic()
    reports = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a worker failed with exit code {p.exitcode}")
    done = sum(count for count, _end in reports)
    if done != n:
        raise RuntimeError(f"workers finished {done} jobs, expected {n}")
    return n / (max(end for _count, end in reports) - start)


# --- running and reporting ----------------------------------------------------------------


def _fresh(directory: str, name: str) -> str:
    path = os.path.join(directory, name)
    for suffix in ("", "-wal", "-shm", "-lock", "-hist", "-journal"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def fresh_store(directory: str, name: str, url: str | None = None) -> str:
    """The URL of a store holding nothing of a run: a new file ``name`` in ``directory``,
    or ``url`` with this scratch run's root cleared (``jobsctl/scratch.py``)."""
    if url is None:
        return "sqlite:" + _fresh(directory, name)
    if not scratch.in_scratch():  # never clear a store's own keys
        raise RuntimeError(f"a benchmark on {url} runs under a scratch key prefix (jobsctl/scratch.py)")
    with store.opened(url) as db:
        prefixes.clear_root(db, prefixes.ROOT)
    return url


def _filesystem(path: str) -> str:
    """File system type of ``path`` (from /proc/mounts), or '?'."""
    path, best, fstype = os.path.realpath(path), "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mount = parts[1]
                if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                    best, fstype = mount, parts[2]
    except OSError:
        pass
    return fstype


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _summary(values: list[float]) -> tuple[str, str]:
    return f"{statistics.median(values):,.0f}", f"{min(values):,.0f} – {max(values):,.0f}"


def run(commits: int, n_jobs: int, repeat: int, directory: str, worker_counts=(1, 4),
        url: str | None = None) -> list[tuple]:
    rows: list[tuple[str, list[float], str]] = []

    def measure(label: str, unit: str, fn) -> None:
        values = []
        for r in range(repeat):
            values.append(fn(r))
            print(f"  {label}: run {r + 1}/{repeat}: {values[-1]:,.0f} {unit}", file=sys.stderr)
        rows.append((label, values, unit))

    # Warm up the file system and the interpreter once, untimed.
    commits_plain_sqlite(_fresh(directory, "warmup.sqlite"), 200)
    commits_engine(fresh_store(directory, "warmup-engine.sqlite", url), 200)

    # Alternate the two sides run by run, so that drift affects both alike.
    plain, engine = [], []
    for r in range(repeat):
        plain.append(commits_plain_sqlite(_fresh(directory, "plain.sqlite"), commits))
        engine.append(commits_engine(fresh_store(directory, "engine.sqlite", url), commits))
        print(f"  commits: run {r + 1}/{repeat}: plain {plain[-1]:,.0f}/s, engine {engine[-1]:,.0f}/s", file=sys.stderr)
    engine_name = "embedded engine" if url is None else f"store {url}"
    rows.append((f"plain SQLite: {commits} commits, 1 write each", plain, "commits/s"))
    rows.append((f"{engine_name}: {commits} transactions, 1 `set` each", engine, "commits/s"))
    rows.append((f"{engine_name} / plain SQLite", [e / p * 100 for e, p in zip(engine, plain)], "%"))

    def add_run(_r):
        return add_jobs(fresh_store(directory, "jobs.sqlite", url), n_jobs)

    measure(f"jobs.add: {n_jobs} jobs, 1 per transaction", "jobs/s", add_run)
    for workers in worker_counts:

        def drain_run(_r, workers=workers):
            target = fresh_store(directory, "jobs.sqlite", url)
            add_jobs(target, n_jobs)
            return drain(target, n_jobs, workers)

        label = f"accept + finish: {n_jobs} jobs, {workers} worker process{'es' if workers > 1 else ''}"
        measure(label, "jobs/s", drain_run)
    return rows


def report(rows, args, directory: str) -> str:
    out = [
        f"Machine: {os.cpu_count()} CPUs ({_cpu_model()}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; store files on "
        f"{_filesystem(directory)} ({directory}).",
        f"Durability, both sides: WAL, synchronous=NORMAL, {PAGE_BYTES}-byte pages, one write per "
        "transaction, a fresh file per run.",
        f"Median of {args.repeat} run{'s' if args.repeat > 1 else ''} (min – max beside it).",
        "",
        "| measurement | median | min – max | unit |",
        "|---|---:|---:|---|",
    ]
    for label, values, unit in rows:
        med, spread = _summary(values)
        out.append(f"| {label} | {med} | {spread} | {unit} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_engine", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--commits", type=int, default=5000, help="commits per commit-rate run (default 5000)")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per end-to-end run (default 2000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3)")
    parser.add_argument("--store", metavar="URL",
                        help="measure this store (default: $JOBS_STORE, else fresh embedded store files in --dir), "
                             "under a key prefix of its own, cleared at the end")
    parser.add_argument("--dir", help="directory for the store files (default: a temporary one)")
    parser.add_argument("--quick", action="store_true", help="small and once: 1000 commits, 300 jobs, 1 run")
    args = parser.parse_args(argv)
    if args.quick:
        args.commits, args.jobs, args.repeat = 1000, 300, 1
    if min(args.commits, args.jobs, args.repeat) < 1:
        parser.error("--commits, --jobs and --repeat must be at least 1")
    args.store = scratch.store_url(args.store)
    if args.store is not None and (code := scratch.rerun("bench.bench_engine", argv, args.store,
                                                          label="bench-engine")) is not None:
        return code

    own_dir = args.dir is None
    directory = tempfile.mkdtemp(prefix="jobs-bench-") if own_dir else os.path.abspath(args.dir)
    os.makedirs(directory, exist_ok=True)
    try:
        rows = run(args.commits, args.jobs, args.repeat, directory, url=args.store)
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)
    print(report(rows, args, directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
