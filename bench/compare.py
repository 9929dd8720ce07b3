"""Our job queue against Huey, RQ, Celery and Procrastinate, on this machine, in one run:

    python -m bench.compare            # full: 20,000-job burn-downs, 3 runs of everything (~1 h)
    python -m bench.compare --quick    # smoke run: 2,000 jobs, 1 run, short phases (a few minutes)
    python -m bench.compare --peers ours,rq --workloads burndown,steady --repeat 5

Run it with the project's venv (``.venv/bin/python -m bench.compare``), as root on a
Debian machine, or with redis-server and PostgreSQL installed.  It installs what is
missing (``apt-get install redis-server postgresql``; the peers, pinned in
``bench/peers/requirements.txt``, into ``bench/.peers-venv``), starts a Redis server and a
PostgreSQL cluster on 127.0.0.1 with their data in a temporary directory, runs every
workload (``bench/peers/harness.py`` says what each measures) for every queue (each
setting for every queue back to back, the queues in the opposite order every other repeat:
``schedule``), stops the servers, and writes ``bench/results/RESULTS.md``,
``results.json`` and PNG plots.

Every workload runs in a driver process under a timeout; a peer that fails or hangs is
killed (its workers too) and reported as failed in the table; the rest goes on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import bench_engine  # noqa: E402
from bench.lineup import (  # noqa: E402
    BARE_BATCH,
    CLASSES,
    PEERS,
    QUEUE_WORKLOADS,
    WORKLOADS,
    size,
    titles,
)
from bench.peers import env  # noqa: E402
from bench.report import report_of  # noqa: E402
from jobsctl import scratch  # noqa: E402

ROOT = env.ROOT
log = env.log


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2,000 jobs, 1 run, 5 s steady phase, 30 s recovery cap, scale 1k/10k")
    p.add_argument("--repeat", type=int, help="runs of each measurement (default 3; quick 1)")
    p.add_argument("--jobs", type=int, help="burn-down jobs (default 20,000; quick 2,000)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 4], help="burn-down worker processes (1 4)")
    p.add_argument("--rates", type=float, nargs="+", default=[50.0, 200.0],
                   help="steady producer rates, jobs/s (50 200)")
    p.add_argument("--sustained-jobs", type=int, help="jobs the sustained producer adds (default 10,000; quick 1,000)")
    p.add_argument("--secs", type=float, help="steady phase length, s (default 20; quick 5)")
    p.add_argument("--cap", type=float, help="recovery cap, s (default 60; quick 30)")
    p.add_argument("--scale-sizes", type=int, nargs="+", help="pending jobs for scale (1k 100k 1M; quick 1k 10k)")
    p.add_argument("--scale-ops", type=int, default=500, help="timed ops per scale point (500)")
    p.add_argument("--commits", type=int, help="commits per commit-rate run (default 5000; quick 2000)")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)}")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated subset of {','.join(WORKLOADS)}")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"), help="output directory (bench/results)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (stores, logs)")
    p.add_argument("--store", metavar="URL",
                   help="run ours on this store (default: $JOBS_STORE, else a fresh embedded store file per run), "
                        "under a key prefix of its own, cleared before each run and at the end")
    a = p.parse_args(argv)
    q = a.quick
    a.repeat = a.repeat or (1 if q else 3)
    a.jobs = a.jobs or (2000 if q else 20_000)
    a.secs = a.secs or (5.0 if q else 20.0)
    a.sustained_jobs = a.sustained_jobs or (1000 if q else 10_000)
    a.cap = a.cap or (30.0 if q else 60.0)
    a.scale_sizes = a.scale_sizes or ([1000, 10_000] if q else [1000, 100_000, 1_000_000])
    a.commits = a.commits or (2000 if q else 5000)
    a.peers = [x for x in a.peers.split(",") if x]
    a.workloads = [x for x in a.workloads.split(",") if x]
    for x in a.peers:
        if x not in PEERS:
            p.error(f"unknown peer {x!r}; peers: {', '.join(PEERS)}")
    for x in a.workloads:
        if x not in WORKLOADS:
            p.error(f"unknown workload {x!r}; workloads: {', '.join(WORKLOADS)}")
    if min(a.repeat, a.jobs - 1, a.scale_ops, a.sustained_jobs) < 1:
        p.error("--repeat, --scale-ops and --sustained-jobs must be at least 1, --jobs at least 2")
    return a


# --- machine --------------------------------------------------------------------------------


def machine(directory: str) -> dict:
    load = os.getloadavg()
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1024 ** 2:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": bench_engine._cpu_model(), "cores": os.cpu_count(), "memory": mem,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "interpreter": env.base_interpreter(),
            "sqlite": sqlite3.sqlite_version, "fs": bench_engine._filesystem(directory), "dir": directory,
            "load_before": [round(x, 2) for x in load]}


# --- running one workload -------------------------------------------------------------------


def _kill_groups(workdir: str) -> None:
    try:
        with open(os.path.join(workdir, "pgids")) as f:
            pgids = [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def drive(peer: str, workload: str, params: dict, base: str, servers, timeout: float, seq: list[int]) -> dict:
    """One workload for one peer in a fresh directory, in a driver process of the peer's
    venv; killed (with its workers) after ``timeout`` s."""
    seq[0] += 1
    workdir = os.path.join(base, f"{seq[0]:03d}-{peer}-{workload}")
    os.makedirs(workdir)
    out = os.path.join(workdir, "result.json")
    py = sys.executable if CLASSES[peer].venv == "ours" else env.peers_python()
    argv = [py, "-m", "bench.peers.harness", peer, workload, "--workdir", workdir, "--out", out,
            "--params", json.dumps(params)]
    if servers is not None:
        argv += ["--redis-url", servers.redis_url, "--pg-dsn", servers.pg_dsn]
    envv = {**os.environ, "PYTHONPATH": ROOT}
    t = time.monotonic()
    with open(os.path.join(workdir, "driver.log"), "ab") as logf:
        proc = subprocess.Popen(argv, cwd=ROOT, env=envv, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _kill_groups(workdir)  # workers left behind by a killed or crashed driver
    elapsed = time.monotonic() - t
    if os.path.exists(out):
        with open(out) as f:
            result = json.load(f)
    elif proc.returncode == -signal.SIGKILL:
        result = {"ok": False, "error": f"hung: killed after {timeout:.0f} s"}
    else:
        result = {"ok": False, "error": f"driver exited with code {proc.returncode}, no result"}
    result.update(peer=peer, workload=workload, params=params, wall_s=round(elapsed, 1), workdir=workdir)
    if result.get("ok"):
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()
                 if k in ("jobs_per_s", "p50_ms", "p99_ms", "rate", "recovery_s", "recovered", "runs",
                           "worker_cpu_ms_per_job")}
        log(f"{peer} {workload} {params}: {shown} ({elapsed:.0f} s)")
    else:
        log(f"{peer} {workload} {params}: FAILED: {result.get('error')} (see {workdir})")
    return result


def schedule(args) -> list[tuple[int, str, str, dict, float]]:
    """Every measurement of a run, in the order it is made: ``(repeat, peer, workload,
    params, timeout s)``.  Within a repeat each measurement (a workload at one setting) is
    made for every peer back to back, so that the figures a ratio compares are seconds
    apart, not the minutes a peer's whole set of workloads takes; and every other repeat
    takes the peers in the opposite order, so that the machine's drift through a repeat
    favours no peer (a faster or slower minute falls on each in turn)."""
    # (workload, params, timeout s, the job count asked of each peer (None: none), s a job)
    settings: list[tuple[str, dict, float, int | None, float]] = []
    for w in args.workloads:
        if w == "burndown":
            settings += [(w, {"workers": n}, 240, args.jobs, 1 / 25) for n in args.workers]
        elif w == "steady":
            settings += [(w, {"rate": rate, "secs": args.secs, "workers": 4}, 240 + args.secs, None, 0)
                         for rate in args.rates]
        elif w == "sustained":
            settings.append((w, {"workers": 4}, 240, args.sustained_jobs, 1 / 20))
        elif w == "recovery":
            settings.append((w, {"cap": args.cap}, 240 + args.cap, None, 0))
    out = []
    for r in range(args.repeat):
        peers = args.peers if r % 2 == 0 else args.peers[::-1]
        for workload, params, timeout, jobs, per_job in settings:
            for peer in peers:
                if workload in CLASSES[peer].skip:
                    continue
                n = None if jobs is None else size(peer, jobs)  # (a peer may run fewer: lineup.size)
                out.append((r, peer, workload, dict(params) if n is None else {"jobs": n, **params},
                            timeout + (n or 0) * per_job))
    return out


def run_all(args, base: str, servers) -> list[dict]:
    """Make the run's measurements (``schedule``), each in a driver process of its own."""
    results: list[dict] = []
    seq = [0]
    for r, peer, workload, params, timeout in schedule(args):
        if not results or results[-1]["run"] != r:  # (a repeat begins)
            log(f"--- run {r + 1}/{args.repeat}")
        res = drive(peer, workload, params, base, servers, timeout, seq)
        results.append({**res, "run": r})
    return results


def run_limit(args, base: str) -> dict:
    """Raw commit rates of plain SQLite and the engine (bench.bench_engine's functions)."""
    d = os.path.join(base, "limit")
    os.makedirs(d)
    bench_engine.commits_plain_sqlite(bench_engine._fresh(d, "warm.sqlite"), 200)
    bench_engine.commits_engine(bench_engine.fresh_store(d, "warm-e.sqlite"), 200)
    plain, engine, bare, batched = [], [], [], []
    n = min(args.jobs, 2000)
    for r in range(args.repeat):
        plain.append(bench_engine.commits_plain_sqlite(bench_engine._fresh(d, "plain.sqlite"), args.commits))
        engine.append(bench_engine.commits_engine(bench_engine.fresh_store(d, "engine.sqlite"), args.commits))
        # The bare accept+finish loop of one process (no Processor), as bench_engine measures it.
        path = bench_engine._fresh(d, "bare.sqlite")
        bench_engine.add_jobs("sqlite:" + path, n)
        bare.append(bench_engine.drain("sqlite:" + path, n, 1))
        path = bench_engine._fresh(d, "batched.sqlite")
        bench_engine.add_jobs("sqlite:" + path, n)
        batched.append(bench_engine.drain("sqlite:" + path, n, 1, batch=BARE_BATCH))
        log(f"limit run {r + 1}/{args.repeat}: plain SQLite {plain[-1]:,.0f} commits/s, engine {engine[-1]:,.0f}, "
            f"bare accept+finish loop {bare[-1]:,.0f} jobs/s, batches of {BARE_BATCH} {batched[-1]:,.0f} jobs/s")
    return {"plain": plain, "engine": engine, "commits": args.commits, "bare": bare, "batched": batched,
            "bare_jobs": n}


def run_scale(args, base: str) -> dict:
    d = os.path.join(base, "scale")
    os.makedirs(d)
    argv = [sys.executable, "-m", "bench.peers.scale", "--dir", d, "--ops", str(args.scale_ops), "--repeat",
            str(args.repeat), "--sizes", *map(str, args.scale_sizes)]
    timeout = 300 + max(args.scale_sizes) / 2000
    try:
        p = subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"scale: hung, killed after {timeout:.0f} s")
        return {"ok": False, "error": f"hung: killed after {timeout:.0f} s"}
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        return {"ok": False, "error": f"exit code {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"}
    return {"ok": True, **json.loads(p.stdout)}


def plots(args, data_path: str) -> None:
    py = env.peers_python()
    if not os.path.exists(py):
        log("no peers' venv (matplotlib): no plots")
        return
    p = subprocess.run([py, "-m", "bench.peers.plots", data_path, args.out], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        log(f"plots failed: {p.stderr.strip()[-500:]}")


def main(argv=None) -> int:
    args = parse_args(argv)
    args.store = scratch.store_url(args.store)
    if args.store is not None and (code := scratch.rerun("bench.compare", argv, args.store,
                                                          label="compare")) is not None:
        return code
    command = "python -m bench.compare" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.monotonic()
    base = tempfile.mkdtemp(prefix="jobs-compare-")
    info = machine(base)
    log(f"machine: {info['cores']} CPUs ({info['cpu']}), {info['fs']}; work in {base}")
    peers_needed = [p for p in args.peers if CLASSES[p].venv != "ours"] and any(w in args.workloads for w in QUEUE_WORKLOADS)
    servers_needed = {s for p in args.peers for s in CLASSES[p].needs} if peers_needed else set()
    if servers_needed:
        env.ensure_packages()
    env.ensure_peers_venv()  # the peers, and matplotlib for the plots
    servers = None
    versions: dict[str, str] = {}
    results: list[dict] = []
    limit = scale = None
    try:
        if servers_needed:
            servers = env.Servers(base).start()
            versions.update(servers.versions)
        if any(w in args.workloads for w in QUEUE_WORKLOADS):
            results = run_all(args, base, servers)
        if "scale" in args.workloads:
            scale = run_scale(args, base)
        if "limit" in args.workloads:
            limit = run_limit(args, base)
    finally:
        if servers is not None:
            servers.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log(f"kept {base}")
    for r in results:
        versions.update(r.get("versions") or {})
    wall = time.monotonic() - t0
    os.makedirs(args.out, exist_ok=True)
    data = {"command": command, "started": started, "wall_s": wall, "machine": info, "versions": versions,
            "args": {k: v for k, v in vars(args).items()}, "results": results, "limit": limit, "scale": scale,
            "titles": titles(args.store)}
    data_path = os.path.join(args.out, "results.json")
    with open(data_path, "w") as f:
        json.dump(data, f, indent=1)
    md = report_of(data)
    with open(os.path.join(args.out, "RESULTS.md"), "w") as f:
        f.write(md)
    plots(args, data_path)
    print(md)
    failed = [r for r in results if not r.get("ok")]
    return 1 if failed or (scale is not None and not scale.get("ok")) else 0


if __name__ == "__main__":
    sys.exit(main())
