"""The FoundationDB section of the benchmarks: one cluster's raw commit rates and the
``Processor``'s burn-down, sustained and steady workloads on it, measured in one run, with
and the targets the section is held to.

    python -m bench.fdb_section --store fdb:$FDB_CLUSTER_FILE    # ~5 min: bench/results/FDB.md, fdb.json
    python -m bench.fdb_section --store fdb: --quick             # smaller and shorter: ~1.5 min

A run measures, in this order:

1. raw commit rates (``bench_engine.commit_rate``): transactions of 1 and of 64 new
   100-byte values, from 1 and from 4 OS processes, each a serial loop of transactions
   (one in flight per process), ``--commit-secs`` each;
2. what a job costs the store, counted (``jobs/engine/counting.py``): a ``Processor``
   (concurrency 1, no monitor) drains ``--count-jobs`` no-op jobs through a
   ``CountingDatabase`` over the store, at prefetch 64 (the default) and at prefetch 1;
   the mutations its committed transactions made, per job, are the layer's writes per
   job of the burn-down's accept + finish path;
3. the queue workloads through the peer harness, as ``bench.compare`` runs them
   (``compare.schedule`` and ``compare.drive``; ``bench/peers/harness.py`` says what each
   measures): peers ``ours`` and ``ours_p1`` (prefetch 1), 4 worker processes, one round;
4. the raw commit rates again: the machine drifts; ratios use the mean of the two rounds;
5. the start latency's floor (``latency_floor``): on the now idle cluster, one process runs
   ``--floor-rounds`` serial rounds of a raw read version, a raw one-write transaction,
   ``jobs.add``, ``jobs.accept`` of the job just added and ``jobs.finish``.  A job cannot
   start before the transaction that added it and the one that accepted it both committed,
   one after the other: the p50 of ``add`` plus that of ``accept`` is the least a start
   latency measured from the enqueue call can be on this cluster, with no load at all.

The store's write bound is the 64-write keys/s from 4 processes divided by the counted
writes per job (prefetch 64).  When the cluster's ``fdbserver`` runs on this machine, its
CPU use is sampled through every step (``ServerCPU``): a FoundationDB process is one
thread, so a busiest second near 1.00 core says the server was the bound.  Everything runs
under a scratch key prefix of the store, cleared at the end (``jobsctl/scratch.py``).  Any
store URL works (a ``sqlite:`` one measures the embedded engine the same way), but the
section is about a cluster.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
from bench import bench_engine, compare, report  # noqa: E402
from bench.capacity_model import per_unit  # noqa: E402
from bench.lineup import titles  # noqa: E402
from bench.peers import env  # noqa: E402
from jobs import prefixes, store  # noqa: E402
from jobs.engine.counting import CountingDatabase  # noqa: E402
from jobsctl import scratch  # noqa: E402

PROCS = (1, 4)  # processes of the raw commit loops
WORKERS = 4  # worker processes of the queue workloads (bench.compare runs steady and sustained with 4)
WRITES = (1, 64)  # 100-byte values per raw commit
COUNT_TYPE = "fdb-count-p{}"  # the counted drains' types
PREFETCHES = (64, 1)  # the counted drains' Processor(prefetch=...): ours, ours_p1
QUEUE_WORKLOADS = ("burndown", "sustained", "steady")

# The targets the section is held to, on a cluster.
BURNDOWN_SHARE = 0.75  # burn-down (ours, 4 workers) >= this share of the write bound
P1_PER_COMMIT = 0.5  # prefetch=1 burn-down jobs/s >= this x raw one-write commits/s (4 processes)
STEADY_RATE = 200.0
STEADY_P50_MS = 5.0
STEADY_P99_MS = 30.0
FLOOR_TYPE = "fdb-floor"
FLOOR_STEPS = ("read version", "raw one-write transaction", "add", "accept", "finish")
BEHIND = 0.95  # a steady producer below this share of its rate fell behind (as bench.report says)

log = env.log


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.fdb_section", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", metavar="URL", help="the cluster: fdb:CLUSTER_FILE (default: $JOBS_STORE)")
    p.add_argument("--quick", action="store_true",
                   help="smaller: 2 s commit loops, 1,000-job burn-downs and sustained runs, 5 s steady phase")
    p.add_argument("--commit-secs", type=float, help="seconds of each raw commit loop (default 5; quick 2)")
    p.add_argument("--count-jobs", type=int, help="jobs of each counted drain (default 640; quick 256)")
    p.add_argument("--jobs", type=int, help="burn-down jobs (default 5,000; quick 1,000)")
    p.add_argument("--sustained-jobs", type=int, help="jobs the sustained producer adds (default 10,000; quick 1,000)")
    p.add_argument("--rates", type=float, nargs="+", default=[STEADY_RATE], help="steady producer rates (200)")
    p.add_argument("--secs", type=float, help="steady phase length, s (default 10; quick 5)")
    p.add_argument("--floor-rounds", type=int, default=200, help="serial rounds of the latency floor (200)")
    p.add_argument("--peers", default="ours,ours_p1", help="comma-separated subset of ours,ours_p1")
    p.add_argument("--workloads", default=",".join(QUEUE_WORKLOADS),
                   help="comma-separated subset of " + ",".join(QUEUE_WORKLOADS))
    p.add_argument("--out", default=os.path.join(env.ROOT, "bench", "results"),
                   help="output directory: FDB.md and fdb.json (bench/results)")
    a = p.parse_args(argv)
    q = a.quick
    a.commit_secs = a.commit_secs or (2.0 if q else 5.0)
    a.count_jobs = a.count_jobs or (256 if q else 640)
    a.jobs = a.jobs or (1000 if q else 5000)
    a.sustained_jobs = a.sustained_jobs or (1000 if q else 10_000)
    a.secs = a.secs or (5.0 if q else 10.0)
    a.peers = [x for x in a.peers.split(",") if x]
    a.workloads = [x for x in a.workloads.split(",") if x]
    if not set(a.peers) <= {"ours", "ours_p1"} or not a.peers:
        p.error("--peers: ours and/or ours_p1")
    if not set(a.workloads) <= set(QUEUE_WORKLOADS):
        p.error("--workloads: a subset of " + ",".join(QUEUE_WORKLOADS))
    if a.commit_secs <= 0 or min(a.count_jobs, a.jobs - 1, a.sustained_jobs, a.floor_rounds) < 1:
        p.error("--commit-secs must be above 0, --count-jobs, --sustained-jobs and --floor-rounds at least 1, "
                "--jobs at least 2")
    return a


def harness_args(a) -> argparse.Namespace:
    """``bench.compare``'s arguments for the queue workloads of this run (one round)."""
    argv = ["--peers", ",".join(a.peers), "--workloads", ",".join(a.workloads), "--workers", str(WORKERS),
            "--jobs", str(a.jobs), "--sustained-jobs", str(a.sustained_jobs), "--rates", *map(str, a.rates),
            "--secs", str(a.secs), "--repeat", "1"]
    h = compare.parse_args(argv)
    h.store = a.store
    return h


# --- measuring ------------------------------------------------------------------------------


class ServerCPU:
    """CPU use of the cluster's server processes that run on this machine (``fdbserver``
    processes whose command line names one of the cluster file's coordinator addresses),
    sampled every ``every`` s by a daemon thread: how busy the server was during a step.
    Finds none (and says nothing) for a remote cluster or a store that is no cluster."""

    def __init__(self, url: str, every: float = 0.5):
        self.pids = _server_pids(url)
        self.every = every
        self.samples: list[tuple[float, float]] = []  # (monotonic time, CPU seconds of them all)
        if self.pids:
            self.samples.append((time.monotonic(), self._cpu()))
            threading.Thread(target=self._loop, name="server-cpu", daemon=True).start()

    def _cpu(self) -> float:
        total, tick = 0.0, os.sysconf("SC_CLK_TCK")
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
            except (OSError, ValueError, IndexError):  # (gone)
                pass
        return total

    def _loop(self) -> None:
        while True:
            time.sleep(self.every)
            self.samples.append((time.monotonic(), self._cpu()))

    def mark(self) -> int:
        return len(self.samples)

    def since(self, mark: int) -> dict | None:
        """Since ``mark``: the servers' mean CPU use (cores) and the busiest second's."""
        got = self.samples[max(0, mark - 1):]
        if len(got) < 3:
            return None
        span = int(round(1.0 / self.every))
        busiest = max((got[i + span][1] - got[i][1]) / (got[i + span][0] - got[i][0])
                      for i in range(len(got) - span))
        return {"mean": (got[-1][1] - got[0][1]) / (got[-1][0] - got[0][0]), "busiest": busiest}


def _server_pids(url: str) -> list[int]:
    if not url.startswith("fdb:"):
        return []
    from jobs.engine.cluster import resolve_cluster_file

    try:
        path = resolve_cluster_file(url[len("fdb:"):] or None)
        with open(path) as f:
            addresses = [a.strip().split("(")[0] for a in f.read().split("@", 1)[1].split(",")]
    except (OSError, IndexError, ValueError):  # (no cluster file: StoreOpenError is a ValueError)
        return []
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv and argv[0].endswith("fdbserver") and any(a in arg for a in addresses for arg in argv[1:]):
            pids.append(int(name))
    return pids


def run_workloads(h, base: str, cpu: ServerCPU) -> list[dict]:
    """``bench.compare.run_all``'s measurements, each with the server's CPU use during it."""
    results, seq = [], [0]
    for r, peer, workload, params, timeout in compare.schedule(h):
        mark = cpu.mark()
        res = compare.drive(peer, workload, params, base, None, timeout, seq)
        results.append({**res, "run": r, "server_cpu": cpu.since(mark)})
    return results


def raw_round(url: str, secs: float, cpu: ServerCPU) -> list[dict]:
    """Each raw commit rate once (``WRITES`` x ``PROCS``), the keys cleared after each."""
    out = []
    for writes in WRITES:
        for procs in PROCS:
            mark = cpu.mark()
            r = bench_engine.commit_rate(url, writes, procs, secs)
            r["server_cpu"] = cpu.since(mark)
            log(f"raw: {writes} write(s) a commit, {procs} process(es): {r['commits_per_s']:,.0f} commits/s, "
                f"{r['keys_per_s']:,.0f} keys/s")
            out.append(r)
            with store.opened(url) as db:
                prefixes.clear_root(db, prefixes.ROOT)
    return out


def count_processor(url: str, n: int, prefetch: int, type: str, timeout: float = 300.0) -> dict:
    """What a ``Processor(prefetch=prefetch)`` (concurrency 1, no monitor) commits per job
    draining ``n`` preloaded no-op jobs of ``type`` through a ``CountingDatabase``: the
    committed transactions that wrote, counted as ``bench/capacity_model.per_unit`` counts
    them (start-up and shutdown included: a few transactions in all)."""
    import processors

    with store.opened(url) as plain:
        jobs.set_type_timeout(plain, type, 30)
        for lo in range(0, n, 1000):
            jobs.add_many(plain, type, [f"c{i:07d}" for i in range(lo, min(n, lo + 1000))])
        db = CountingDatabase(plain)
        proc = processors.Processor(db, grace=5, prefetch=prefetch, monitor=False)
        ran, all_ran = [0], threading.Event()

        @proc.handler(type, timeout=30)
        def noop(_ctx):
            ran[0] += 1
            if ran[0] >= n:
                all_ran.set()

        db.take()
        began, cpu = time.monotonic(), time.process_time()
        thread = threading.Thread(target=proc.run, kwargs={"signals": False}, name="counted-processor")
        thread.start()
        try:
            if not all_ran.wait(timeout):
                raise RuntimeError(f"counted drain: {ran[0]} of {n} jobs ran in {timeout:.0f} s")
        finally:
            proc.stop()  # (its outcomes are written before it stops)
            thread.join(60)
        secs, cpu = time.monotonic() - began, time.process_time() - cpu
        tallies = [t for t in db.take() if not t.read_only]
        unfinished = jobs.pending_count(plain, type) + len(jobs.get_active_jobs_ids(plain, type))
        if unfinished:
            raise RuntimeError(f"counted drain: {unfinished} jobs of {n} not finished")
    return {"prefetch": prefetch, "jobs": n, "secs": secs, "cpu_ms_per_job": cpu * 1000 / n, "stats": dict(proc.stats),
            "per_job": per_unit(tallies, n)}


def latency_floor(url: str, rounds: int) -> dict:
    """Serial rounds, in this one process on an otherwise idle store, of each of
    ``FLOOR_STEPS``: per step the p50 and p90 wall ms and the mean CPU ms of this process
    (its client library's network thread included)."""
    wall: dict[str, list[float]] = {s: [] for s in FLOOR_STEPS}
    cpu = dict.fromkeys(FLOOR_STEPS, 0.0)
    with store.opened(url) as db:
        jobs.set_type_timeout(db, FLOOR_TYPE, 30)
        raw = prefixes.ROOT + (FLOOR_TYPE,)
        from jobs.engine import tuple as fdb_tuple

        def raw_read_version():
            tr = db.create_transaction()  # (held: a transaction collected before its future is cancelled)
            tr.get_read_version().wait()

        def raw_write(i):
            tr = db.create_transaction()
            tr[fdb_tuple.pack(raw + (i,))] = b"x" * 100
            tr.commit().wait()

        held = []
        steps = {"read version": lambda i: raw_read_version(), "raw one-write transaction": raw_write,
                 "add": lambda i: jobs.add(db, FLOOR_TYPE, f"f{i:06d}"),
                 "accept": lambda i: held.append(jobs.accept(db, FLOOR_TYPE, timeout=30)),
                 "finish": lambda i: jobs.finish(db, held.pop())}
        for i in range(rounds):
            for name in FLOOR_STEPS:
                c, t = time.process_time(), time.perf_counter()
                steps[name](i)
                wall[name].append((time.perf_counter() - t) * 1000)
                cpu[name] += time.process_time() - c
    out = {}
    for name in FLOOR_STEPS:
        w = sorted(wall[name])
        out[name] = {"p50_ms": w[len(w) // 2], "p90_ms": w[int(len(w) * 0.9)], "cpu_ms": cpu[name] * 1000 / rounds}
    return {"rounds": rounds, "steps": out, "start_floor_ms": out["add"]["p50_ms"] + out["accept"]["p50_ms"]}


# --- figures --------------------------------------------------------------------------------


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def raw_rate(data: dict, writes: int, procs: int, key: str = "commits_per_s") -> float | None:
    """The mean over the run's rounds of one raw rate."""
    return _mean([r[key] for rnd in data["raw"] for r in rnd if r["writes"] == writes and r["procs"] == procs])


def _result(data: dict, peer: str, workload: str) -> dict | None:
    found = [r for r in data["results"] if r["peer"] == peer and r["workload"] == workload and r.get("ok")]
    return found[0] if found else None


def figures(data: dict) -> dict:
    """The section's derived figures: commit rates, the write bound, and each target's
    measured value (None where its run is missing or failed)."""
    one = raw_rate(data, 1, max(PROCS))
    keys64 = raw_rate(data, 64, max(PROCS), "keys_per_s")
    per_job = {c["prefetch"]: c["per_job"]["writes"] for c in data["counted"]}
    writes = per_job.get(64)
    bound = keys64 / writes if keys64 and writes else None
    burn = _result(data, "ours", "burndown")
    burn_p1 = _result(data, "ours_p1", "burndown")
    steady = next((r for r in data["results"] if r["peer"] == "ours" and r["workload"] == "steady" and r.get("ok")
                   and r["params"].get("rate") == STEADY_RATE), None)
    return {"one_write_commits": one, "keys64": keys64, "writes_per_job": writes, "write_bound": bound,
            "burndown": burn and burn["jobs_per_s"], "burndown_p1": burn_p1 and burn_p1["jobs_per_s"],
            "steady_p50": steady and steady["p50_ms"], "steady_p99": steady and steady["p99_ms"],
            "steady_rate": steady and steady.get("rate"),
            "start_floor": (data.get("floor") or {}).get("start_floor_ms")}


def targets(f: dict) -> list[tuple[str, str, bool | None]]:
    """The section's targets: (target, measured, held); held None: not measured."""
    rows: list[tuple[str, str, bool | None]] = []

    def row(target: str, measured, text: str = "", held: bool = False) -> None:
        rows.append((target, text, held) if measured else (target, "not measured", None))

    share = f["burndown"] / f["write_bound"] if f["burndown"] is not None and f["write_bound"] else None
    row(f"burn-down (ours, 4 workers) ≥ {BURNDOWN_SHARE:.0%} of the cluster's write bound", share is not None,
        share is not None and f"{f['burndown']:,.0f} jobs/s = {share:.0%} of {f['write_bound']:,.0f} "
        f"({f['keys64']:,.0f} keys/s ÷ {f['writes_per_job']:.2f} writes a job)",
        share is not None and share >= BURNDOWN_SHARE)
    ratio = (f["burndown_p1"] / f["one_write_commits"] if f["burndown_p1"] is not None and f["one_write_commits"]
             else None)
    row(f"prefetch=1 burn-down (4 workers) ≥ {P1_PER_COMMIT:g} jobs per raw one-write commit (4 processes)",
        ratio is not None, ratio is not None and f"{f['burndown_p1']:,.0f} ÷ {f['one_write_commits']:,.0f} = {ratio:.2f}",
        ratio is not None and ratio >= P1_PER_COMMIT)
    behind = f["steady_rate"] is not None and f["steady_rate"] < BEHIND * STEADY_RATE
    for what, key, bound in (("p50", "steady_p50", STEADY_P50_MS), ("p99", "steady_p99", STEADY_P99_MS)):
        row(f"steady at {STEADY_RATE:g} jobs/s (ours): {what} ≤ {bound:g} ms", f[key] is not None,
            f[key] is not None and f"{f[key]:,.1f} ms"
            + (f" (the producer reached {f['steady_rate']:,.0f} jobs/s only)" if behind else "")
            + (f"; the floor on this cluster, idle: {f['start_floor']:,.1f} ms (add + accept, serial)"
               if what == "p50" and f.get("start_floor") else ""),
            f[key] is not None and f[key] <= bound)
    return rows


# --- the section ----------------------------------------------------------------------------


def _num(x, fmt="{:,.0f}") -> str:
    return "–" if x is None else fmt.format(x)


def _busiest(r: dict) -> str:
    cpu = r.get("server_cpu")
    return "–" if not cpu else f"{cpu['busiest']:.2f}"


_WORKLOAD_LABELS = {"burndown": "burn-down, {jobs:,} jobs", "sustained": "sustained, {jobs:,} jobs",
                    "steady": "steady at {rate:g} jobs/s"}


def section(data: dict) -> str:
    """FDB.md: the section, from the run's data (``fdb.json``)."""
    a, h = argparse.Namespace(**data["args"]), argparse.Namespace(**data["harness_args"])
    m, f = data["machine"], figures(data)
    names = titles(a.store)
    rounds = len(data["raw"])
    cpu = bool(data.get("server_pids"))
    cpu_head, cpu_rule = (" | server CPU, busiest second (cores) |", "---:|") if cpu else (" |", "")
    out = [
        "# FoundationDB: raw commit rates and the Processor, on one cluster in one run", "",
        f"Produced by `{data['command']}` on {data['started']} in {data['wall_s'] / 60:.0f} min, on the store "
        f"`{a.store}`{' (' + data['cluster'] + ')' if data.get('cluster') else ''}. "
        f"Machine: {m['cores']} CPUs ({m['cpu']}), {m['memory']}, {m['os']}, Python {m['python']}; load average "
        f"before the run {', '.join(map(str, m['load_before']))}. The cluster's processes, the client processes "
        "and **other work on the machine share its cores**: one run, noisy; compare within it.", ""]
    if cpu:
        out += [f"Server CPU: the CPU time of the cluster's `fdbserver` process{'es' if len(data['server_pids']) > 1 else ''} "
                "on this machine (its coordinators), sampled every 0.5 s: the busiest second of each step, in cores "
                "(a FoundationDB process runs on one thread: 1.00 is all it can do).", ""]
    out += [
        "## Raw commit rates", "",
        "Each process a serial loop of transactions (one in flight at a time), each writing new keys with "
        f"100-byte values, for {a.commit_secs:g} s (`bench_engine.commit_rate`); rates over all processes, from "
        "the first start to the last end. "
        + ("Measured before the queue workloads and again after them (each cell: before; after); the figures "
           "below use the mean of the two." if rounds > 1 else "Measured once."), "",
        "| writes a commit | processes | commits/s | keys/s" + cpu_head, "|---:|---:|---:|---:|" + cpu_rule]
    for writes in WRITES:
        for procs in PROCS:
            each = [r for rnd in data["raw"] for r in rnd if r["writes"] == writes and r["procs"] == procs]
            cells = ["; ".join(fmt.format(r[k]) for r in each) or "–" for k, fmt in
                     (("commits_per_s", "{:,.0f}"), ("keys_per_s", "{:,.0f}"))]
            if cpu:
                cells.append("; ".join(_busiest(r) for r in each) or "–")
            out.append(f"| {writes} | {procs} | " + " | ".join(cells) + " |")
    counted = data["counted"]
    out += ["", "## Writes a job, counted", "",
            f"A `Processor` (concurrency 1, no monitor) drains {counted[0]['jobs'] if counted else 0:,} preloaded "
            "no-op jobs through `jobs/engine/counting.py`'s `CountingDatabase` on the same store; per job, what "
            "its committed transactions did (a mutation: a set, a clear, an atomic op; a key set twice in one "
            "transaction counts once), and the CPU ms a job of this one client process (its threads and its client "
            "library's network thread: the counting wrapper's own work included).", "",
            "| prefetch | transactions a job | point reads | range reads | writes (mutations) | bytes written "
            "| accept transactions (jobs each) | jobs/s | client CPU ms a job |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in counted:
        w, st = c["per_job"], c["stats"]
        batches = st.get("accept_batches", 0)
        each = f"{batches:,} ({st.get('accepted', 0) / batches:.1f})" if batches else "–"
        out.append(f"| {c['prefetch']} | {w['transactions']:.3f} | {w['point_reads']:.2f} | {w['range_reads']:.2f} | "
                   f"{w['writes']:.2f} | {w['bytes_written']:.0f} | {each} | {c['jobs'] / c['secs']:,.0f} | "
                   f"{_num(c.get('cpu_ms_per_job'), '{:.2f}')} |")
    if f["write_bound"]:
        out += ["", f"The cluster's write bound for the burn-down: {f['keys64']:,.0f} keys/s (64 writes a commit, "
                f"{max(PROCS)} processes) ÷ {f['writes_per_job']:.2f} writes a job (prefetch 64) = "
                f"**{f['write_bound']:,.0f} jobs/s**."]
    out += ["", f"## The Processor: {WORKERS} worker processes", "",
            "Through the peer harness (`bench/peers/harness.py`): jobs/s, and the start latency (enqueue to the "
            "handler's start). Jobs per raw commit: jobs/s ÷ the one-write commits/s from "
            f"{max(PROCS)} processes ({_num(f['one_write_commits'])}). The burn-down's jobs are preloaded (no "
            "start latency); a steady run's jobs/s is its producer's rate.", "",
            "| queue | workload | jobs/s | jobs per raw one-write commit | p50 ms | p99 ms" + cpu_head,
            "|---|---|---:|---:|---:|---:|" + cpu_rule]
    for peer in a.peers:
        for r in (r for r in data["results"] if r["peer"] == peer):
            label = _WORKLOAD_LABELS[r["workload"]].format(**{"jobs": 0, "rate": 0, **r["params"]})
            if not r.get("ok"):
                out.append(f"| {names[peer]} | {label} | failed: {r.get('error', '?')[:80]} | | | |" + (" |" if cpu else ""))
                continue
            jps = r.get("jobs_per_s", r.get("rate"))
            per = f"{jps / f['one_write_commits']:.2f}" if r["workload"] != "steady" and f["one_write_commits"] else "–"
            behind = " (producer behind)" if r["workload"] == "steady" and jps < BEHIND * r["params"]["rate"] else ""
            out.append(f"| {names[peer]} | {label} | {_num(jps)}{behind} | {per} | {_num(r.get('p50_ms'), '{:,.1f}')} | "
                       f"{_num(r.get('p99_ms'), '{:,.1f}')} |" + (f" {_busiest(r)} |" if cpu else ""))
    enqueued = [f"{r['enqueue_per_s']:,.0f} ({r['peer']})" for r in data["results"]
                if r.get("ok") and r.get("enqueue_per_s")]
    if enqueued:
        out += ["", "The sustained and steady producers are one process adding one job per transaction "
                f"(`jobs.add`): in the sustained runs it added {' and '.join(enqueued)} jobs/s, which bounds "
                "what those two workloads carry through (a steady rate above it is not reached: *producer "
                "behind*)."]
    lines = [f"- {names[r['peer']]}: {c['accept_batches']:,} accept transactions took jobs "
             f"({c.get('accepted', 0) / c['accept_batches']:.1f} jobs each), "
             f"{c.get('accept_retries', 0):,} attempts retried ({c.get('accept_conflicts', 0):,} on conflicts), "
             f"{c.get('accept_empty', 0):,} took none"
             for r in data["results"] if r.get("ok") and r["workload"] == "burndown"
             for c in [r.get("counters") or {}] if c.get("accept_batches")]
    if lines:
        out += ["", "What the burn-downs' workers counted (`Processor.stats`, summed):", "", *lines]
    floor = data.get("floor")
    if floor:
        out += ["", "## The start latency's floor", "",
                f"One process, {floor['rounds']} serial rounds on the otherwise idle cluster, after the workloads: "
                "wall ms of each call and the CPU ms it cost this process (its client library's network thread "
                "included). A job starts at the earliest when its `add` and then the `accept` that takes it have "
                f"both committed: **{floor['start_floor_ms']:,.1f} ms** (the two p50s), with no load and no wake-up.",
                "", "| call | p50 ms | p90 ms | CPU ms |", "|---|---:|---:|---:|"]
        for name, st in floor["steps"].items():
            out.append(f"| {name} | {st['p50_ms']:,.2f} | {st['p90_ms']:,.2f} | {st['cpu_ms']:,.2f} |")
    out += ["", "## Targets", "", "| target | measured | held |", "|---|---|---|"]
    for target, measured, held in targets(f):
        out.append(f"| {target} | {measured} | {'–' if held is None else 'yes' if held else 'no'} |")
    if data.get("errors"):
        out += ["", "Steps that failed (their figures are missing above):", "", *[f"- {e}" for e in data["errors"]]]
    out += ["", "## Details", ""]
    for workload, render in (("burndown", report._burndown_section), ("steady", report._steady_section),
                             ("sustained", report._sustained_section)):
        if workload in h.workloads:
            out += ["#" + line if line.startswith("## ") else line for line in render(h, data["results"])]
    return "\n".join(out).rstrip() + "\n"


def _cluster(url: str) -> str:
    """The cluster's version and process count, as ``status json`` says (empty if not
    a cluster, or it does not say)."""
    if not url.startswith("fdb:"):
        return ""
    try:
        with store.opened(url) as db:
            raw = db[b"\xff\xff/status/json"]
        cluster = json.loads(raw)["cluster"]
        procs = cluster.get("processes", {})
        versions = sorted({p.get("version", "?") for p in procs.values()})
        engine = cluster.get("configuration", {}).get("storage_engine", "?")
        redundancy = cluster.get("configuration", {}).get("redundancy_mode", "?")
        return (f"FoundationDB {', '.join(versions)}, {len(procs)} process{'es' if len(procs) != 1 else ''}, "
                f"{engine} storage engine, {redundancy} redundancy")
    except Exception as exc:  # noqa: BLE001 - a description only
        return f"status not read: {type(exc).__name__}"


def main(argv=None) -> int:
    args = parse_args(argv)
    args.store = scratch.store_url(args.store)
    if args.store is None:
        raise SystemExit("fdb_section: give the cluster: --store fdb:CLUSTER_FILE (or set $JOBS_STORE)")
    if (code := scratch.rerun("bench.fdb_section", argv, args.store, label="fdb-section")) is not None:
        return code
    command = "python -m bench.fdb_section " + " ".join(argv if argv is not None else sys.argv[1:])
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.monotonic()
    base = tempfile.mkdtemp(prefix="jobs-fdb-section-")
    url = bench_engine.fresh_store(base, "store", args.store)  # (this run's scratch root, cleared)
    h = harness_args(args)
    cpu = ServerCPU(url)
    data = {"command": command.strip(), "started": started, "machine": compare.machine(base),
            "cluster": _cluster(url), "server_pids": cpu.pids, "args": vars(args), "harness_args": vars(h), "raw": [], "counted": [],
            "results": [], "errors": []}

    def step(what: str, fn):
        """``fn()``; a step that fails is said in the section, and the run goes on."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - reported
            log(f"{what}: failed: {type(exc).__name__}: {exc}")
            data["errors"].append(f"{what}: {type(exc).__name__}: {exc}")
            return None

    try:
        for when in ("before", "after"):
            if when == "after":
                data["results"] = step("queue workloads", lambda: run_workloads(h, base, cpu)) or []
            found = step(f"raw commit rates ({when})", lambda: raw_round(url, args.commit_secs, cpu))
            if found:
                data["raw"].append(found)
            if when == "before":
                for prefetch in PREFETCHES:
                    c = step(f"counted drain, prefetch {prefetch}",
                             lambda p=prefetch: count_processor(url, args.count_jobs, p, COUNT_TYPE.format(p)))
                    if c:
                        log(f"counted, prefetch {prefetch}: {c['per_job']['writes']:.2f} writes, "
                            f"{c['per_job']['transactions']:.3f} transactions a job")
                        data["counted"].append(c)
        data["floor"] = step("latency floor", lambda: latency_floor(url, args.floor_rounds))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    data["wall_s"] = time.monotonic() - t0
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fdb.json"), "w") as fh:
        json.dump(data, fh, indent=1)
    md = section(data)
    with open(os.path.join(args.out, "FDB.md"), "w") as fh:
        fh.write(md)
    print(md)
    return 1 if data["errors"] or any(not r.get("ok") for r in data["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
