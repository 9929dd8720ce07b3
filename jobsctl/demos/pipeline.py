"""The pipeline demo (``make demo``): a sky survey catalog ingested, checked, indexed and
filtered by processor processes on Spark, one of which is killed half-way.

1. generate CSV chunk files (``--rows`` per chunk; a few rows break the table's
   constraints on purpose);
2. start ``--workers`` processor processes (``jobsctl worker pipeline.worker:processor``)
   and a ``jobsctl monitor``; the operations' job timeout is short (``--job-timeout``) so
   that a dead worker's jobs come back quickly;
3. ingest the chunks in a super-transaction, end it, publish the database;
4. run ``validate`` and ``build_index`` together, and ``kill -9`` a worker while it runs a
   partition job;
5. create ``sky.bright`` as a query's result (atomic CTAS);
6. print what ran where, what was re-run, the violations found, and the time.

    python -m jobsctl.demos.pipeline                       # defaults: 4 chunks x 150,000 rows, 2 workers
    python -m jobsctl.demos.pipeline --rows 20000 --keep   # smaller; keep the store and data
    python -m jobsctl.demos.pipeline --spark cluster       # on a Spark standalone cluster started here
    python -m jobsctl.demos.pipeline --store fdb:          # the store on FoundationDB (or $JOBS_STORE)

Without ``--store`` (and ``$JOBS_STORE``) the store is a fresh embedded one in ``--dir``;
given a store, the demo runs under a key prefix of its own there, cleared at the end unless
``--keep`` (``jobsctl/scratch.py``).  Data and logs are in ``--dir`` either way.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import jobs

from pipeline import ctas as ctas_mod
from pipeline import index as index_mod
from pipeline import ingest, spark_cluster
from pipeline.runtime import operations
from pipeline.spark import stop_spark_session

from .. import scratch

DATABASE, TABLE, TARGET = "sky", "objects", "bright"
SCHEMA = [
    {"name": "id", "type": "bigint", "nullable": False},
    {"name": "chunk", "type": "int", "nullable": False},
    {"name": "ra", "type": "double", "nullable": False, "check": "ra >= 0 AND ra < 360"},
    {"name": "decl", "type": "double", "nullable": False, "check": "decl BETWEEN -90 AND 90"},
    {"name": "mag", "type": "double"},
    {"name": "name", "type": "string", "nullable": False},
]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="The pipeline demo: ingest, validate, index and CTAS on Spark, "
                                            "with a worker killed half-way.")
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--rows", type=int, default=150_000, help="rows per chunk")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--job-timeout", type=float, default=8.0, help="type timeout of the operations' jobs (s)")
    p.add_argument("--dir", default=os.path.join(".jobs", "demo"), help="store, data and logs (replaced)")
    p.add_argument("--store", metavar="URL",
                   help="store URL (default: $JOBS_STORE, else a fresh embedded store in --dir); the demo runs "
                        "under a key prefix of its own there, cleared at the end")
    p.add_argument("--keep", action="store_true", help="keep the directory (and the store's key prefix) afterwards")
    p.add_argument("--no-kill", dest="kill", action="store_false", help="don't kill a worker")
    p.add_argument("--spark", choices=spark_cluster.BACKENDS, default="local",
                   help="local: each process's own Spark; cluster: a standalone Spark cluster started here "
                        "(logs in DIR-spark); connect: that cluster behind a Spark Connect server")
    return p.parse_args(argv)


# --- output ---------------------------------------------------------------------------------


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def bar(done: int, total: int, width: int = 24) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def progress(label: str, poll, done) -> object:
    """Redraw ``label [###...] n/m`` until ``done(state)``; ``poll()`` -> (n, m, state)."""
    tty = sys.stdout.isatty()
    last = None
    while True:
        n, m, state = poll()
        line = f"  {label:<28} {bar(n, m)} {state}"
        if tty:
            sys.stdout.write("\r" + line + " " * 8)
            sys.stdout.flush()
        elif line != last:
            say(line)
        last = line
        if done(state):
            if tty:
                sys.stdout.write("\n")
            return state
        time.sleep(0.25)


# --- the steps ------------------------------------------------------------------------------


def generate(directory: str, chunks: int, rows: int, seed: int = 7) -> tuple[list[str], dict]:
    """One CSV file per chunk; returns the paths and the ids of the rows planted to break
    a constraint (which the validate operation must find)."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    planted = {}
    paths = []
    next_id = 0
    for chunk in range(chunks):
        path = os.path.join(directory, f"chunk-{chunk:03d}.csv")
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            for i in range(rows):
                ra, decl, mag = rng.uniform(0, 360), rng.uniform(-90, 90), round(rng.gauss(18, 2.5), 3)
                if i == rows // 2 and chunk % 2 == 0:
                    ra, planted[next_id] = 412.5, "ra out of range"
                if i == rows // 3 and chunk == chunks - 1:
                    decl, planted[next_id] = -97.0, "decl out of range"
                out.writerow([next_id, chunk, f"{ra:.6f}", f"{decl:.6f}", mag, f"obj-{next_id:08d}"])
                next_id += 1
        paths.append(os.path.abspath(path))
    return paths, planted


class Cluster:
    """The worker processes and the monitor."""

    def __init__(self, url: str, workdir: str, job_timeout: float):
        self.url, self.workdir = url, workdir
        self.env = {**os.environ, "JOBS_STORE": url, "PYTHONPATH": ROOT,
                    "JOBS_DATA_ROOT": os.path.join(workdir, "data"),
                    "JOBS_PIPELINE_JOB_TIMEOUT": str(job_timeout)}
        self.workers: list[subprocess.Popen] = []
        self.monitor = self._spawn(["monitor"], "monitor.log")

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", self.url, *args], cwd=ROOT,
                                env=self.env, stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(self.workdir, log), "a"))

    def start_worker(self) -> subprocess.Popen:
        n = len(self.workers)
        proc = self._spawn(["worker", "pipeline.worker:processor", "--concurrency", "1"], f"worker-{n}.log")
        self.workers.append(proc)
        return proc

    def stop(self) -> None:
        procs = [p for p in self.workers + [self.monitor] if p.poll() is None]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()


def wait_for(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def ingest_chunks(db, paths: list[str], chunks: int) -> dict:
    ingest.register_database(db, DATABASE, chunks=chunks)
    ingest.register_table(db, DATABASE, TABLE, SCHEMA, chunk_column="chunk")
    tr = ingest.begin_transaction(db, DATABASE)
    say(f"  super-transaction {tr.id} begun; hints: {tr.hints.workers} worker(s), {tr.hints.threads} thread(s)")
    futures = []
    for chunk, path in enumerate(paths):
        place = ingest.chunk_placement(db, tr.id, chunk)
        futures.append((chunk, place, ingest.load_chunk(db, tr.id, TABLE, chunk, path)))
    progress("ingest (load chunk files)", lambda: (sum(f.done() for _c, _p, f in futures), len(futures),
                                                    "loading" if not all(f.done() for _c, _p, f in futures) else "loaded"),
             lambda s: s == "loaded")
    loaded = {chunk: f.result() for chunk, _p, f in futures}
    ingest.end_transaction(db, tr.id, commit=True)
    ingest.publish_database(db, DATABASE)
    return {"transaction": tr.id, "rows": sum(r["rows"] for r in loaded.values()),
            "placement": {c: p.worker for c, p, _f in futures}}


def watch_operation(ops, qualified: str, type: str, instance: int, label: str) -> object:
    def poll():
        st = ops.operation_status(ops.db, qualified, type, instance)
        finished = sum(1 for s in st.partitions.values() if s in ("success", "failed", "cancelled"))
        return finished, len(st.partitions), st.state

    progress(label, poll, lambda s: s in ("success", "failed", "cancelled"))
    return ops.operation_status(ops.db, qualified, type, instance)


def kill_a_busy_worker(db, cluster: Cluster, types: list[str]) -> dict | None:
    """SIGKILL the worker process that runs a partition job of ``types`` (read from the
    job's data: the processors record who runs it), as soon as one runs."""
    pids = {str(p.pid): p for p in cluster.workers}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for type in types:
            for job_id in jobs.get_active_jobs_ids(db, type):
                try:
                    ran_on = jobs.get_job_data(db, type, job_id).get("ran_on") or []
                except jobs.NotFound:
                    continue
                pid = ran_on[-1].rsplit(":", 1)[-1] if ran_on else None
                if pid in pids and pids[pid].poll() is None:
                    pids[pid].send_signal(signal.SIGKILL)
                    pids[pid].wait()
                    return {"pid": int(pid), "job": f"{type}/{job_id}", "at": time.time()}
        time.sleep(0.05)
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    args.store = scratch.store_url(args.store)
    if args.store is not None and (code := scratch.rerun("jobsctl.demos.pipeline", argv, args.store,
                                                          label="demo", keep=args.keep)) is not None:
        return code
    logs = os.path.abspath(args.dir) + "-spark"
    with spark_cluster.spark_backend(args.spark, logs, processes=args.workers) as spark_env:
        os.environ.update(spark_env)  # this process (the CTAS analysis) and the workers
        if spark_env:
            say(f"0. Spark: a local {args.spark} at {spark_env['JOBS_SPARK_MASTER']} (logs in {logs})")
        try:
            return run_demo(args)
        finally:
            stop_spark_session()  # this process's Spark application ends before its cluster


def run_demo(args) -> int:
    began = time.monotonic()
    workdir = os.path.abspath(args.dir)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    url = args.store or "sqlite:" + os.path.join(workdir, "store.sqlite")
    os.environ["JOBS_DATA_ROOT"] = os.path.join(workdir, "data")
    db = jobs.open(url)
    ops = operations(db)

    say(f"1. generating {args.chunks} chunk files of {args.rows:,} rows in {workdir}/input")
    paths, planted = generate(os.path.join(workdir, "input"), args.chunks, args.rows)

    say(f"2. starting {args.workers} processor processes and a monitor")
    cluster = Cluster(url, workdir, args.job_timeout)
    try:
        for _ in range(args.workers):
            cluster.start_worker()
        ready = wait_for(lambda: len(ingest.list_workers(db)) >= args.workers
                         or any(w.poll() is not None for w in cluster.workers), 120)
        if not ready or any(w.poll() is not None for w in cluster.workers):
            raise SystemExit(f"the workers did not start: see the logs in {workdir}")
        say("3. ingest")
        ingested = ingest_chunks(db, paths, args.chunks)
        say(f"  {ingested['rows']:,} rows committed by super-transaction {ingested['transaction']}; "
            f"database {DATABASE!r} published")

        say("4. validate + build index, together" + (" (a worker will be killed)" if args.kill else ""))
        qualified = f"{DATABASE}.{TABLE}"
        v = ops.start_operation("validate", qualified)
        i = index_mod.build_index(db, ops, qualified, "name", "by_name")
        killed = kill_a_busy_worker(db, cluster, ["op.validate", "op.build_index"]) if args.kill else None
        if killed:
            say(f"  killed worker pid {killed['pid']} (kill -9) while it ran {killed['job']}")
        vs = watch_operation(ops, qualified, "validate", v, "validate")
        ix = watch_operation(ops, qualified, "build_index", i, "build_index by_name")

        say("5. CTAS sky.bright (objects brighter than magnitude 15)")
        c = ctas_mod.ctas(db, ops, f"{DATABASE}.{TARGET}",
                          f"SELECT id, chunk, ra, decl, mag FROM {qualified} WHERE mag < 15",
                          partition_by="chunk", partitions=args.chunks)
        cs = watch_operation(ops, f"{DATABASE}.{TARGET}", "ctas", c, "ctas sky.bright")
    finally:
        cluster.stop()

    elapsed = time.monotonic() - began
    summary(db, ingested, planted, killed, vs, ix, cs, elapsed)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    ok = vs.state == "failed" and ix.state == "success" and cs.state == "success"
    return 0 if ok else 1


def summary(db, ingested, planted, killed, vs, ix, cs, elapsed) -> None:
    say("\nsummary")
    say(f"  ingest: {ingested['rows']:,} rows; chunk placement {ingested['placement']}")
    for st in (vs, ix, cs):
        reruns = {p: w for p, w in st.ran_on.items() if len(w) > 1}
        where = ", ".join(f"{p}@{w[-1].rsplit(':', 1)[-1]}" for p, w in sorted(st.ran_on.items()))
        say(f"  {st.type} on {st.table}: {st.state}; partition@worker pid: {where}")
        if reruns:
            say(f"    re-run after the kill: partition(s) {', '.join(sorted(reruns))}")
    found = {}
    for report in vs.results.values():
        for name, n in (report or {}).get("violations", {}).items():
            found[name] = found.get(name, 0) + n
    say(f"  violations found by validate: {found or 'none'} (planted: {len(planted)} rows: "
        f"{sorted(set(planted.values()))})")
    bright = sum((r or {}).get("rows", 0) for r in cs.results.values())
    say(f"  index rows: {sum((r or {}).get('rows', 0) for r in ix.results.values()):,}; "
        f"sky.bright rows: {bright:,}")
    if killed:
        say(f"  worker {killed['pid']} was killed with kill -9; its jobs ran again elsewhere")
    say(f"  time: {elapsed:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
