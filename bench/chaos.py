"""The chaos run: worker processes started through the real CLI, killed with SIGKILL and
stalled with SIGSTOP/SIGCONT at random while they run jobs; then every invariant is
checked.  Exit status 0 only if all hold:

* every job ends finished (none pending or running: nothing stuck);
* every job's output committed exactly once (``on_commit`` counter == 1), and the run
  that committed it is the one whose result is the job's data: no worker that lost its
  lock (killed, or stalled past its type timeout and then resumed) committed anything.

    python -m bench.chaos                       # 3000 jobs, 4 workers, 20 kills, 4 stalls
    python -m bench.chaos --jobs 150 --workers 3 --kills 3 --stalls 1 --timeout 1 --json
    python -m bench.chaos --store fdb:         # on FoundationDB (or $JOBS_STORE), in a key prefix of its own

Reported: jobs/s over the whole run, re-runs (starts beyond one per job), lock losers
halted, and recovery time: from a kill to the restart elsewhere of each job the killed
worker held (median and max), which the type timeout bounds (T to 1.5 T, by design).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
from bench.chaos_app import BY, OUT, TYPE  # noqa: E402
from jobsctl import scratch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--workers", type=int, default=4, help="worker processes alive at any time")
    p.add_argument("--concurrency", type=int, default=2, help="jobs at once per worker")
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs of a worker holding jobs")
    p.add_argument("--stalls", type=int, default=4, help="SIGSTOPs of a worker for 2.5 type timeouts")
    p.add_argument("--timeout", type=float, default=2.0, help="type timeout T, seconds")
    p.add_argument("--work-ms", type=int, nargs=2, default=(5, 60), metavar=("MIN", "MAX"))
    p.add_argument("--deadline", type=float, default=900.0, help="give up after this many seconds")
    p.add_argument("--store", metavar="URL",
                   help="store URL (default: $JOBS_STORE, else a fresh embedded store in --dir); the run uses a key "
                        "prefix of its own there, cleared at the end")
    p.add_argument("--dir", help="where the logs (and the default store) go (default: a temporary directory)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-monitor", dest="monitor", action="store_false",
                   help="no dedicated `jobsctl monitor` process: only the workers' own monitors, which "
                        "restart with every killed worker and need one type timeout of uptime to act")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p.parse_args(argv)


class Workers:
    """The worker processes, each ``jobs --store URL worker bench.chaos_app:processor``."""

    def __init__(self, url: str, logdir: str, concurrency: int):
        self.url, self.logdir, self.concurrency = url, logdir, concurrency
        self.procs: list[subprocess.Popen] = []

    def start(self) -> subprocess.Popen:
        env = {**os.environ, "CHAOS_LOGDIR": self.logdir, "PYTHONPATH": ROOT}
        cmd = [sys.executable, "-m", "jobsctl", "--store", self.url, "worker", "bench.chaos_app:processor",
               "--concurrency", str(self.concurrency)]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(self.logdir, "stderr.log"), "a"))
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def stop_all(self, timeout: float = 60) -> list[int]:
        """SIGTERM the workers still alive (graceful stop); their exit codes."""
        alive = self.alive()
        for p in alive:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
        return [p.wait(timeout) for p in alive]


def read_starts(logdir: str) -> list[tuple[str, float, str]]:
    """(job id, wall time, token) of every start logged by every worker."""
    starts = []
    for path in glob.glob(os.path.join(logdir, "worker-*.log")):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4 and parts[0] == "start":
                    starts.append((parts[1], float(parts[2]), parts[3]))
    return starts


def halts_logged(logdir: str) -> int:
    n = 0
    for path in glob.glob(os.path.join(logdir, "worker-*.events")):
        with open(path) as f:
            n += sum("was taken away" in line for line in f)
    return n


def add_jobs(db, n: int, work_ms: tuple[int, int], rng: random.Random) -> None:
    for lo in range(0, n, 500):
        @jobs.transactional
        def batch(tr, lo=lo):
            for i in range(lo, min(n, lo + 500)):
                jobs.add(tr, TYPE, f"job-{i:06d}", {"n": i, "work_ms": rng.randint(*work_ms)})

        batch(db)


def counts(db) -> dict:
    out = {"pending": 0, "running": 0, "finished": 0}
    for info in jobs.get_jobs(db, TYPE):
        out[info.state] += 1
    return out


def outputs(db, space) -> dict:
    r = space.range()
    return {space.unpack(kv.key)[0]: kv.value for kv in db.get_range(r.start, r.stop)}


def chaos(args) -> dict:
    rng = random.Random(args.seed)
    workdir = args.dir or tempfile.mkdtemp(prefix="jobs-chaos-")
    os.makedirs(workdir, exist_ok=True)
    logdir = os.path.join(workdir, "logs")
    os.makedirs(logdir, exist_ok=True)
    url = args.store or "sqlite:" + os.path.join(workdir, "chaos.sqlite")
    db = jobs.open(url)
    jobs.set_type_timeout(db, TYPE, args.timeout)
    add_jobs(db, args.jobs, tuple(args.work_ms), rng)

    workers = Workers(url, logdir, args.concurrency)
    monitor = None
    if args.monitor:  # a monitor that is never killed, as a deployment would run it
        monitor = subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", url, "monitor"], cwd=ROOT,
                                   env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.DEVNULL,
                                   stderr=open(os.path.join(logdir, "monitor.log"), "a"))
    began = time.monotonic()
    for _ in range(args.workers):
        workers.start()
    kills: list[tuple[int, float]] = []  # (pid, wall time of the kill)
    stalled: list[tuple[subprocess.Popen, float]] = []  # (process, monotonic time to resume)
    stalls = 0
    deadline = began + args.deadline
    while time.monotonic() < deadline:
        now = time.monotonic()
        for proc, until in list(stalled):
            if now >= until:
                proc.send_signal(signal.SIGCONT)
                stalled.remove((proc, until))
        left = counts(db)
        if left["finished"] == args.jobs:
            break
        busy = [p for p in workers.alive() if p not in {s for s, _u in stalled}]
        want_kill = len(kills) < args.kills
        want_stall = stalls < args.stalls
        if busy and (want_kill or want_stall) and left["running"]:
            victim = rng.choice(busy)
            if want_kill and (not want_stall or rng.random() < args.kills / (args.kills + args.stalls)):
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills.append((victim.pid, time.time()))
                workers.start()  # a replacement keeps the pool at its size
            else:
                victim.send_signal(signal.SIGSTOP)
                stalled.append((victim, now + 2.5 * args.timeout))
                stalls += 1
        time.sleep(rng.uniform(0.2, 0.6))
    for proc, _until in stalled:
        proc.send_signal(signal.SIGCONT)
    elapsed = time.monotonic() - began
    # Give resumed lock losers time to try (and fail) to commit before the checks.
    time.sleep(min(5.0, args.timeout))
    codes = workers.stop_all()
    if monitor is not None:
        monitor.send_signal(signal.SIGTERM)
        monitor.wait(60)
    return report(db, args, workdir, logdir, kills, stalls, elapsed, codes)


def report(db, args, workdir, logdir, kills, stalls, elapsed, codes) -> dict:
    final = counts(db)
    outs = outputs(db, OUT)
    by = outputs(db, BY)
    starts = read_starts(logdir)
    ids = [f"job-{i:06d}" for i in range(args.jobs)]
    problems = []
    if final["finished"] != args.jobs:
        problems.append(f"not all finished: {final}")
    twice = [i for i in ids if outs.get(i) != (1).to_bytes(8, "little")]
    if twice:
        problems.append(f"{len(twice)} jobs without exactly one committed output, e.g. {twice[:5]}")
    for i in ids:
        data = jobs.get_job_data(db, TYPE, i)
        if by.get(i, b"").decode() != data.get("token"):
            problems.append(f"{i}: the committed output is not from the run whose result is the job's data")
            break
    started = {token for _j, _t, token in starts}
    if any(tok.decode() not in started for tok in by.values()):
        problems.append("an output was committed by a run that never started")
    # recovery: each job the killed worker had started and did not commit, to its next start
    recoveries = []
    for pid, t_kill in kills:
        held = {j for j, t, tok in starts if tok.startswith(f"{pid}:") and t <= t_kill}
        for j in held:
            if by.get(j, b"").decode().startswith(f"{pid}:"):
                continue
            later = [t for jj, t, _tok in starts if jj == j and t > t_kill]
            if later:
                recoveries.append(min(later) - t_kill)
    reruns = len(starts) - args.jobs
    return {
        "ok": not problems,
        "problems": problems,
        "jobs": args.jobs,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "type_timeout": args.timeout,
        "dedicated_monitor": args.monitor,
        "kills": len(kills),
        "stalls": stalls,
        "starts": len(starts),
        "reruns": reruns,
        "halted_lock_losers": halts_logged(logdir),
        "recovery_s": {
            "count": len(recoveries),
            "median": round(statistics.median(recoveries), 3) if recoveries else None,
            "max": round(max(recoveries), 3) if recoveries else None,
        },
        "elapsed_s": round(elapsed, 2),
        "jobs_per_s": round(args.jobs / elapsed, 1),
        "worker_exit_codes": sorted(set(codes)),
        "dir": workdir,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    args.store = scratch.store_url(args.store)
    if args.store is not None and (code := scratch.rerun("bench.chaos", argv, args.store, label="chaos")) is not None:
        return code
    result = chaos(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        r = result
        print(f"{r['jobs']} jobs, {r['workers']} workers x {r['concurrency']}, type timeout {r['type_timeout']} s, "
              f"{'a' if r['dedicated_monitor'] else 'no'} dedicated monitor: {r['kills']} kill -9, {r['stalls']} stalls")
        print(f"  {'OK' if r['ok'] else 'FAILED'}: every job finished, output committed exactly once"
              if r["ok"] else "  FAILED: " + "; ".join(r["problems"]))
        print(f"  {r['elapsed_s']} s, {r['jobs_per_s']} jobs/s; {r['reruns']} re-runs; "
              f"{r['halted_lock_losers']} lock losers halted")
        rec = r["recovery_s"]
        if rec["count"]:
            print(f"  recovery after kill -9: median {rec['median']} s, max {rec['max']} s over {rec['count']} jobs")
        print(f"  store and logs: {r['dir']}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
