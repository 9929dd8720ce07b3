"""The workloads, the same for every peer, and the driver command that runs one of them
for one peer in a fresh directory and writes its result as JSON:

    python -m bench.peers.harness PEER WORKLOAD --workdir DIR --out FILE [--params JSON]
        [--redis-url URL] [--pg-dsn DSN]

``bench.compare`` runs it with the peer's venv's python, under a timeout.  Worker
processes are started in their own process groups, whose ids go to ``DIR/pgids`` (one
a line) so the orchestrator can kill them whatever happens to this process.

Workloads (worker processes do one no-op job at a time; see ``record`` for what a
handler records):

* ``burndown``: preload N jobs, start W workers; jobs/s = (N - 1) / (last handler start -
  first handler start), so worker start-up does not count; and, start-up included,
  ``jobs_per_s_from_launch`` = N / (last handler start - the workers' launch), as a user
  who starts workers on a backlog sees it.  Completion: the record count (one stat of
  records.log) polled every 50 ms.
* ``steady``: W workers, warmed up and idle; a producer enqueues at RATE jobs/s for SECS
  seconds, each job carrying its enqueue wall time; latency = handler start - enqueue.
* ``sustained``: W workers, warmed up and idle; a producer enqueues N jobs as fast as it
  can (one enqueue call each, as an application does) while the workers run them;
  jobs/s = N / (last handler start - first enqueue): how fast the queue carries work
  through when adding and running compete, with the latency of each job on the way.
* ``burndown``, ``steady`` and ``sustained`` also give the CPU time the worker processes
  used per job while the jobs ran (``Procs.cpu_seconds``; servers not counted; for the
  burn-down, from the first job's start, polled).
* A peer that counts what its workers did (``Peer.counters``: ours counts its accept
  retries and conflicts) adds those counts to the result, warm-up included.
* ``recovery``: 2 workers (and the peer's helpers, e.g. a monitor); one job that blocks
  until killed; when a worker has started it, ``kill -9`` that worker's process group;
  recovery = the job's next start (in the other worker) - the kill, capped at CAP s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback

from . import record
from .base import Ctx

POLL = 0.05


class Failed(Exception):
    """The workload could not complete; the message goes into the results table."""


def _process_cpu(pid: str, fields: list[str]) -> float:
    """One process's CPU seconds, with the children it reaped.  ``stat`` counts in clock
    ticks (10 ms), and a few dozen jobs' worth of CPU can fall between two ticks; the live
    threads' ``schedstat`` counts nanoseconds.  ``stat`` also counts threads that have
    ended, so the larger of the two is the closer figure.  Reaped children are in ticks
    only."""
    tick = os.sysconf("SC_CLK_TCK")
    own, reaped = (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick
    live = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                live += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):  # (a thread gone meanwhile, or no schedstat)
        live = 0
    return max(own, live / 1e9) + reaped


class Procs:
    """Worker and helper processes, each in its own process group."""

    def __init__(self, peer, workdir: str, logdir: str):
        self.peer, self.workdir, self.logdir = peer, workdir, logdir
        self.procs: list[subprocess.Popen] = []
        self.n_workers = 0
        self.env = {**os.environ, **peer.env(), "BENCH_WORKER": "1"}
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))

    def start(self, argv: list[str], tag: str) -> subprocess.Popen:
        log = open(os.path.join(self.logdir, f"{tag}-{len(self.procs)}.log"), "ab")
        p = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        with open(os.path.join(self.workdir, "pgids"), "a") as f:
            f.write(f"{p.pid}\n")
        self.procs.append(p)
        return p

    def workers(self, w: int) -> None:
        for _ in range(w):
            self.start(self.peer.worker_cmd(), "worker")
            self.n_workers += 1

    def cpu_seconds(self) -> float:
        """CPU time the worker and helper processes have used so far: every live process of
        their process groups, with the children they reaped (a peer's pool or forked
        work horses).  Servers (Redis, PostgreSQL) are not counted."""
        groups, total = {p.pid for p in self.procs}, 0.0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # (gone meanwhile)
                continue
            if int(fields[2]) in groups:  # its process group; then utime, stime, cutime, cstime
                total += _process_cpu(name, fields)
        return total

    def check_alive(self) -> None:
        dead = [p for p in self.procs if p.poll() is not None and not getattr(p, "killed", False)]
        if dead:
            raise Failed(f"a worker/helper process exited with code {dead[0].returncode} (logs in {self.logdir})")

    def kill_worker_of(self, pid: int) -> None:
        """SIGKILL, as a machine dying would, the worker whose process ``pid`` is (or
        descends from): its process group and ``pid``'s own group (RQ's work horse sets
        up a session of its own)."""
        groups, p = {os.getpgid(pid)}, pid
        mine = {q.pid: q for q in self.procs}
        while p > 1 and p not in mine:
            with open(f"/proc/{p}/stat") as f:
                p = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent's pid
        if p in mine:
            mine[p].killed = True
            groups.add(p)  # started with start_new_session: its pgid is its pid
        for g in groups:
            os.killpg(g, signal.SIGKILL)

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wait_for(cond, timeout: float, what: str, procs: Procs | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if procs is not None:
            procs.check_alive()
        if time.monotonic() > deadline:
            raise Failed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(POLL)


def warm_up(peer, procs: Procs, w: int, logdir: str) -> None:
    """Until every worker process has started (imported its app) and 2*W warm-up jobs ran;
    then 1 s more, so the workers are back to waiting."""
    expect = procs.n_workers
    wait_for(lambda: len(record.started_pids(logdir)) >= expect, 90, f"{expect} processes to start", procs)
    for _ in range(2 * w):
        peer.enqueue(0.0)
    wait_for(lambda: record.count(logdir) >= 2 * w, 60, "the warm-up jobs", procs)
    time.sleep(1.0)


def burndown(peer, procs: Procs, logdir: str, n: int, workers: int) -> dict:
    t = time.monotonic()
    peer.preload(n)
    preload_s = time.monotonic() - t
    launched = time.time()  # (wall time, as the handlers record their starts)
    procs.workers(workers)
    wait_for(lambda: record.count(logdir) >= 1, 90, "the first job to run", procs)
    cpu = procs.cpu_seconds()  # (start-up before it not counted)
    wait_for(lambda: record.count(logdir) >= n, max(120.0, n / 50), f"{n} jobs to run", procs)
    cpu = procs.cpu_seconds() - cpu
    time.sleep(0.2)  # late duplicates, if any
    recs = record.read(logdir)
    starts = sorted(r[0] for r in recs)
    span = starts[n - 1] - starts[0]
    return {"jobs_per_s": (n - 1) / span, "span_s": span, "jobs_per_s_from_launch": n / (starts[n - 1] - launched),
            "start_up_s": starts[0] - launched, "runs": len(recs), "jobs": n,
            "preload_s": preload_s, "pids": len({r[3] for r in recs}), "worker_cpu_ms_per_job": cpu * 1000 / n}


def steady(peer, procs: Procs, logdir: str, rate: float, secs: float, workers: int) -> dict:
    procs.workers(workers)
    warm_up(peer, procs, workers, logdir)
    total = int(rate * secs)
    cpu = procs.cpu_seconds()
    t0 = time.monotonic()
    for i in range(total):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        peer.enqueue(time.time())
    produced_s = time.monotonic() - t0
    base = 2 * workers
    wait_for(lambda: record.count(logdir) >= base + total, 60, f"{total} steady jobs to run", procs)
    cpu = procs.cpu_seconds() - cpu
    lat = sorted((start - enq) * 1000 for start, enq, _b, _p in record.read(logdir) if enq > 0)
    return {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "max_ms": lat[-1], "jobs": len(lat),
            "rate": total / produced_s, "target_rate": rate, "worker_cpu_ms_per_job": cpu * 1000 / total}


def sustained(peer, procs: Procs, logdir: str, n: int, workers: int) -> dict:
    procs.workers(workers)
    warm_up(peer, procs, workers, logdir)
    cpu = procs.cpu_seconds()
    t0 = time.monotonic()
    for _ in range(n):
        peer.enqueue(time.time())
    produced_s = time.monotonic() - t0
    base = 2 * workers
    wait_for(lambda: record.count(logdir) >= base + n, max(120.0, n / 20), f"{n} jobs to run", procs)
    cpu = procs.cpu_seconds() - cpu
    time.sleep(0.2)  # late duplicates, if any
    recs = [r for r in record.read(logdir) if r[1] > 0]
    span = max(r[0] for r in recs) - min(r[1] for r in recs)
    lat = sorted((start - enq) * 1000 for start, enq, _b, _p in recs)
    return {"jobs_per_s": n / span, "span_s": span, "enqueue_per_s": n / produced_s, "runs": len(recs),
            "jobs": n, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "worker_cpu_ms_per_job": cpu * 1000 / n}


def percentile(sorted_values: list[float], p: int) -> float:
    """The ``p``-th percentile (1-100) of ``sorted_values`` (inclusive method)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    return statistics.quantiles(sorted_values, n=100, method="inclusive")[p - 1] if p < 100 else sorted_values[-1]


def recovery(peer, procs: Procs, logdir: str, cap: float) -> dict:
    procs.workers(2)
    for argv in peer.helper_cmds("recovery"):
        procs.start(argv, "helper")
    warm_up(peer, procs, 2, logdir)
    time.sleep(1.0)
    before = record.count(logdir)
    peer.enqueue(time.time(), block=True)

    def first_start():
        return [r for r in record.read(logdir)[before:] if r[2] == 1]

    holder = wait_for(first_start, 30, "the blocking job to start", procs)[0]
    time.sleep(0.5)  # let it settle in (a heartbeat, an ack) as a real job would
    killed_at = time.time()
    procs.kill_worker_of(holder[3])
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        again = [r for r in first_start() if r[0] > killed_at]
        if again:
            return {"recovered": True, "recovery_s": again[0][0] - killed_at, "cap_s": cap}
        procs.check_alive()
        time.sleep(POLL)
    return {"recovered": False, "recovery_s": None, "cap_s": cap}


WARNINGS_KEPT = 20


def log_warnings(logdir: str) -> list[str]:
    """The first WARNING and ERROR lines of the worker and helper logs in ``logdir`` (their
    file name first): why jobs ran twice, when a peer says it (ours logs a lost outcome and
    every re-enqueue), kept in the result since the work directory is removed."""
    found = []
    for name in sorted(os.listdir(logdir)):
        if not name.endswith(".log") or name in ("records.log", "started.log"):
            continue
        with open(os.path.join(logdir, name), errors="replace") as f:
            found += [f"{name}: {line.strip()}" for line in f if "WARNING" in line or "ERROR" in line]
        if len(found) >= WARNINGS_KEPT:
            break
    return found[:WARNINGS_KEPT]


def run(peer_name: str, workload: str, params: dict, ctx: Ctx) -> dict:
    module = importlib.import_module(f"bench.peers.{peer_name}_peer")
    peer = module.PEER(ctx)
    os.makedirs(ctx.logdir, exist_ok=True)
    procs = Procs(peer, ctx.workdir, ctx.logdir)
    result: dict = {"peer": peer_name, "workload": workload, "params": params, "versions": peer.versions(),
                    "settings": peer.settings, "mechanism": peer.recovery}
    try:
        peer.setup()
        if workload == "burndown":
            result.update(burndown(peer, procs, ctx.logdir, params["jobs"], params["workers"]))
        elif workload == "steady":
            result.update(steady(peer, procs, ctx.logdir, params["rate"], params["secs"], params["workers"]))
        elif workload == "sustained":
            result.update(sustained(peer, procs, ctx.logdir, params["jobs"], params["workers"]))
        elif workload == "recovery":
            result.update(recovery(peer, procs, ctx.logdir, params["cap"]))
        else:
            raise ValueError(f"unknown workload {workload!r}")
        result["ok"] = True
        counters = peer.counters()
        if counters:
            result["counters"] = counters
        if result.get("runs", 0) > result.get("jobs", 0):  # jobs ran twice: keep what the workers said
            result["log_warnings"] = log_warnings(ctx.logdir)
    except Failed as exc:
        result.update(ok=False, error=str(exc))
    finally:
        procs.stop()
        try:
            peer.teardown()
        except Exception:  # noqa: BLE001 - a client that fails to close does not spoil the numbers
            traceback.print_exc()
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers.harness")
    p.add_argument("peer")
    p.add_argument("workload")
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--params", default="{}")
    p.add_argument("--redis-url", default="")
    p.add_argument("--pg-dsn", default="")
    args = p.parse_args(argv)
    ctx = Ctx(workdir=args.workdir, logdir=os.path.join(args.workdir, "logs"), redis_url=args.redis_url,
              pg_dsn=args.pg_dsn)
    os.makedirs(ctx.logdir, exist_ok=True)
    try:
        result = run(args.peer, args.workload, json.loads(args.params), ctx)
    except Exception as exc:  # noqa: BLE001 - reported in the table, with the traceback in the log
        traceback.print_exc()
        result = {"peer": args.peer, "workload": args.workload, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
