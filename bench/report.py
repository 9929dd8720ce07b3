"""The peer comparison's report: RESULTS.md assembled one section per workload from the
results ``bench.compare`` gathered.  Run by itself, it renders a run's ``results.json``
again (with the report of this checkout)::

    python -m bench.report bench/results/results.json            # prints RESULTS.md
    python -m bench.report /tmp/run/results.json --write         # rewrites the RESULTS.md beside it
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from bench.lineup import BARE_BATCH, TITLES, size, titles


def _titles(args) -> dict[str, str]:
    """The peers' row labels in the run of ``args``: ours' name the store it ran on."""
    return titles(getattr(args, "store", None))


def _med(values, fmt="{:,.0f}") -> str:
    if not values:
        return "–"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def _runs(results, peer: str, workload: str, match: dict | None = None) -> list[dict]:
    """The results of ``peer``'s runs of ``workload`` (at the setting ``match``, if given)."""
    return [r for r in results if r["peer"] == peer and r["workload"] == workload
            and all(r["params"].get(k) == v for k, v in (match or {}).items())]


def _cells(results, peer, workload, key, match=None, fmt="{:,.0f}") -> tuple[str, list[float]]:
    rows = _runs(results, peer, workload, match)
    if not rows:
        return "–", []
    vals = [r[key] for r in rows if r.get("ok") and r.get(key) is not None]
    fails = [r for r in rows if not r.get("ok")]
    text = _med(vals, fmt) if vals else ""
    if fails:
        text = (text + "; " if text else "") + f"failed {len(fails)}/{len(rows)}: {fails[0].get('error', '?')[:80]}"
    return text, vals


def _ran(results, peer: str, workload: str) -> bool:
    return bool(_runs(results, peer, workload))


def _reruns(results, workload: str) -> list[dict]:
    """The runs of ``workload`` whose handlers started more often than there were jobs."""
    return [r for r in results if r["workload"] == workload and r.get("ok") and r["runs"] > r["jobs"]]


def _intro(args, m: dict, versions: dict, started: str, wall: float, command: str) -> list[str]:
    runs = f"median of {args.repeat} runs (min–max)" if args.repeat > 1 else "1 run"
    return [
        "# Peer comparison: no-op jobs on one machine",
        "",
        f"Produced by `{command}` on {started} in {wall / 60:.0f} min. "
        f"{'Quick smoke run: small sizes, one run, so noisy. ' if args.quick else ''}Each cell: {runs}.",
        "",
        f"Machine: {m['cores']} CPUs ({m['cpu']}), {m['memory']}, {m['os']}, Python {m['python']} "
        f"({m.get('interpreter', 'interpreter not recorded')}, every peer's), "
        f"SQLite {m['sqlite']}; store files and server data on {m['fs']} (a temporary directory). "
        f"Load average before the run: {', '.join(map(str, m['load_before']))}. "
        "**Other work runs on this 2-core machine at the same time**, and every worker, server and "
        "producer shares the same 2 cores, so take the spread seriously and compare within a run.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".",
        "",
        "Every worker is an OS process doing one job at a time; every job is a no-op whose handler "
        "appends one line (its start time, the job's enqueue time) to a shared file "
        "(`bench/peers/record.py`): the same cost in every queue.",
        "",
    ]


def _burndown_section(args, results) -> list[str]:
    out = [f"## Burn-down: {args.jobs:,} jobs preloaded, then W worker processes start", "",
           "jobs/s from the first job's start to the last one's (worker start-up not counted).", ""]
    out += _by_workers(args, lambda peer, w, n: _cells(results, peer, "burndown", "jobs_per_s",
                                                       {"workers": w, "jobs": n})[0])
    out += _from_launch_table(args, results)
    names = _titles(args)
    extra = [f"{names[r['peer']]} W = {r['params']['workers']}: {r['runs'] - r['jobs']}"
             for r in _reruns(results, "burndown")]
    out += ["", "Jobs run more than once (handler starts beyond one per job): "
            + ("; ".join(extra) if extra else "none") + "."]
    out += _rerun_warnings(results, "burndown", names)
    out.append("")
    return out


def _by_workers(args, cell) -> list[str]:
    """A table of the burn-down's peers by worker count: ``cell(peer, workers, jobs)``."""
    out = ["| queue | " + " | ".join(f"W = {w}" for w in args.workers) + " |",
           "|---|" + "---:|" * len(args.workers)]
    for peer in args.peers:
        n = size(peer, args.jobs)
        title = _titles(args)[peer] + (f" ({n:,} jobs: slow)" if n != args.jobs else "")
        out.append(f"| {title} | " + " | ".join(cell(peer, w, n) for w in args.workers) + " |")
    return out


def _from_launch_table(args, results) -> list[str]:
    """The burn-down with its workers' start-up included (runs that recorded it): jobs/s
    from their launch to the last job's start, and the start-up, launch to first start."""
    if not any(r.get("jobs_per_s_from_launch") for r in results if r["workload"] == "burndown"):
        return []

    def cell(peer, w, n):
        rate, rates = _cells(results, peer, "burndown", "jobs_per_s_from_launch", {"workers": w, "jobs": n})
        start = _cells(results, peer, "burndown", "start_up_s", {"workers": w, "jobs": n}, "{:,.2f}")[0]
        return f"{rate}; {start} s" if rates else rate

    return ["", "The same runs with the workers' start-up included: jobs/s from their launch to the last "
            "job's start; then the start-up, s (launch to the first job's start).", "", *_by_workers(args, cell)]


def _rerun_warnings(results, workload: str, names: dict[str, str] = TITLES) -> list[str]:
    """What the workers of the runs that ran jobs twice logged as warnings (the harness's
    ``log_warnings``), one block per run (``names``: the peers' row labels)."""
    out = []
    for r in _reruns(results, workload):
        said = r.get("log_warnings") or ["(no warning in the logs)"]
        out += ["", f"Worker logs of {names[r['peer']]} ({r['params']}):", "", "```", *said, "```"]
    return out


def _steady_section(args, results) -> list[str]:
    out = [f"## Steady: a producer at a fixed rate for {args.secs:g} s, 4 idle workers", "",
           "Latency from enqueue (wall clock, producer side) to the handler's start, ms. "
           "*saturated*: the producer fell behind (enqueue too slow) or p50 > 1 s "
           "(workers slower than the rate): not a latency at that rate.", "",
           "Worker CPU: CPU ms the worker processes used per job during the phase (servers not counted).", "",
           "| queue | rate, jobs/s | p50 ms | p99 ms | achieved rate, jobs/s | worker CPU ms/job |",
           "|---|---:|---:|---:|---:|---:|"]
    for peer, target in ((p, t) for p in args.peers for t in args.rates):
        m = {"rate": target}
        if not _ran(results, peer, "steady"):
            continue
        p50 = _cells(results, peer, "steady", "p50_ms", m, fmt="{:,.1f}")[0]
        p99 = _cells(results, peer, "steady", "p99_ms", m, fmt="{:,.1f}")[0]
        rate, rates = _cells(results, peer, "steady", "rate", m, fmt="{:,.0f}")
        _t, p50s = _cells(results, peer, "steady", "p50_ms", m)
        if (rates and min(rates) < 0.95 * target) or (p50s and max(p50s) > 1000):
            rate += " *saturated*"
        cpu = _cells(results, peer, "steady", "worker_cpu_ms_per_job", m, fmt="{:,.2f}")[0]
        out.append(f"| {_titles(args)[peer]} | {target:g} | {p50} | {p99} | {rate} | {cpu} |")
    out.append("")
    return out


def _sustained_section(args, results) -> list[str]:
    out = [f"## Sustained: a producer adds {args.sustained_jobs:,} jobs as fast as it can, 4 workers run them", "",
           "One enqueue call per job (as an application adds work), while the workers drain. "
           "Throughput: jobs / (last handler start - first enqueue); latency: enqueue to handler start.", "",
           "| queue | jobs/s through | enqueue rate, jobs/s | p50 ms | p99 ms | worker CPU ms/job |",
           "|---|---:|---:|---:|---:|---:|"]
    for peer in args.peers:
        if not _ran(results, peer, "sustained"):
            continue
        n = size(peer, args.sustained_jobs)
        cells = [_cells(results, peer, "sustained", k, fmt=f)[0] for k, f in
                 (("jobs_per_s", "{:,.0f}"), ("enqueue_per_s", "{:,.0f}"), ("p50_ms", "{:,.1f}"),
                  ("p99_ms", "{:,.1f}"), ("worker_cpu_ms_per_job", "{:,.2f}"))]
        title = _titles(args)[peer] + (f" ({n:,} jobs: slow)" if n != args.sustained_jobs else "")
        out.append(f"| {title} | " + " | ".join(cells) + " |")
    names = _titles(args)
    extra = [f"{names[r['peer']]}: {r['runs'] - r['jobs']}" for r in _reruns(results, "sustained")]
    out += ["", "Jobs run more than once: " + ("; ".join(extra) if extra else "none") + "."]
    out += [*_rerun_warnings(results, "sustained", names), ""]
    return out


def _recovery_section(args, results) -> list[str]:
    out = [f"## Recovery: `kill -9` of a worker holding a job (2 workers; cap {args.cap:g} s)", "",
           "Seconds from the kill (of the worker's whole process tree) to the job's next start in the "
           "other worker.", "",
           "| queue | recovery, s | recovered | mechanism |", "|---|---:|---|---|"]
    for peer in args.peers:
        rows = _runs(results, peer, "recovery")
        if not rows:
            continue
        text, vals = _cells(results, peer, "recovery", "recovery_s", fmt="{:,.1f}")
        ok = [r for r in rows if r.get("ok")]
        rec = sum(1 for r in ok if r.get("recovered"))
        if ok and not vals:
            text = f"none within {args.cap:g} s" + (f"; {text}" if text else "")
        mech = next((r.get("mechanism") for r in rows if r.get("mechanism")), "") or "none"
        out.append(f"| {_titles(args)[peer]} | {text} | {rec}/{len(rows)} | {mech} |")
    out.append("")
    return out


def _secs(runs: list[float]) -> str:
    return "–" if not runs else f"{statistics.median(runs):,.3f}"


def _scale_section(scale: dict) -> list[str]:
    out = ["## Scale (ours): one operation with many jobs pending", ""]
    if scale.get("ok"):
        out += [f"{scale['ops']} `add` (one per transaction), then {scale['ops']} `accept` + `finish`, at each "
                "size, then one status gather (`jobsctl status`, `/status`: from the counters) and one exact "
                "gather (`jobsctl status --exact`: every key counted); the store is preloaded in 5,000-job "
                "transactions.", "",
                "| jobs pending | add, µs | accept + finish, µs | status gather, s | exact gather, s | preload, s |",
                "|---:|---:|---:|---:|---:|---:|"]
        none = [[]] * len(scale["sizes"])
        for pending, adds, takes, st, ex, pre in zip(scale["sizes"], scale["add_us"], scale["take_us"],
                                                     scale.get("status_s") or none,
                                                     scale.get("status_exact_s") or none, scale["preload_s"]):
            out.append(f"| {pending:,} | {_med(adds)} | {_med(takes)} | {_secs(st)} | {_secs(ex)} | {pre:,.0f} |")
    else:
        out.append(f"failed: {scale.get('error')}")
    out.append("")
    return out


def _limit_section(args, results, limit: dict) -> list[str]:
    eng = statistics.median(limit["engine"])
    elsewhere = (f" Measured on fresh embedded store files, not on `{args.store}` where the queue workloads ran "
                 "(`python -m bench.fdb_section` measures a cluster's)." if getattr(args, "store", None) else "")
    out = ["## Limit (ours): the engine's raw commit rate", "",
           f"{limit['commits']:,} transactions of one write each, WAL, synchronous=NORMAL "
           f"(`bench/bench_engine.py`'s functions), in the same run.{elsewhere}", "",
           "| measurement | value |", "|---|---:|",
           f"| plain SQLite, commits/s | {_med(limit['plain'])} |",
           f"| embedded engine, commits/s | {_med(limit['engine'])} |",
           f"| bare `accept` + `finish` loop, 1 process, no Processor ({limit['bare_jobs']:,} jobs), jobs/s | "
           f"{_med(limit['bare'])} ({statistics.median(limit['bare']) / eng * 100:.0f} % of the commit rate) |",
           f"| the same loop with `accept_many({BARE_BATCH})` and one finish transaction per batch, jobs/s | "
           f"{_med(limit['batched'])} ({statistics.median(limit['batched']) / eng * 100:.0f} % of the commit rate) |"]
    for w in args.workers if not getattr(args, "store", None) else ():  # (burn-downs on another store: no ratio)
        _t, vals = _cells(results, "ours", "burndown", "jobs_per_s", {"workers": w})
        if vals:
            jps = statistics.median(vals)
            out.append(f"| ours burn-down W = {w} (Processor): jobs/s as % of the engine's commit rate | "
                       f"{jps / eng * 100:.0f} % |")
    out += ["", "A job costs an accept and a finish in the burn-down (the add was preloaded). One job per "
            "transaction, that is 2 commits a job: 50 % of the commit rate is then the ceiling (more "
            "workers only queue on the one write lock). The Processor goes past it by taking up to 64 "
            "jobs in one accept transaction and committing finished jobs together (each still fenced "
            "on its own), so the ceiling becomes the work per job inside the transactions.", ""]
    return out


def _setup_section(args, results) -> list[str]:
    out = ["## How each queue is set up", "", "| queue | settings | recovery mechanism |", "|---|---|---|"]
    for peer in args.peers:
        s = next((r for r in results if r["peer"] == peer and r.get("settings")), {})
        out.append(f"| {_titles(args)[peer]} | {s.get('settings', '')} | {s.get('mechanism') or 'none'} |")
    out += ["", "Servers: Redis with no persistence (`--save ''`, no AOF: not durable); PostgreSQL with "
            "`synchronous_commit=off` (like SQLite's synchronous=NORMAL: durable against process crashes, "
            "not power loss). Both on 127.0.0.1, started and stopped by the run.", ""]
    if getattr(args, "store", None):
        out += [f"Ours ran on the store `{args.store}` (not a store file), under a key prefix of its own "
                "cleared before each run, instead of the settings' store file.", ""]
    out += ["Plots: `burndown.png`, `latency.png`, `scale.png`; raw numbers: `results.json`.", ""]
    return out


# The targets that compare two queues (docs/benchmarks.md, "Targets, round by round"): what is
# claimed, the workload and the setting its figures come from, the figure, ours and the
# peer, and the ratio ours / peer a round must reach (figures that are better higher) or
# stay within (latencies: lower is better).
TARGETS = (
    ("burn-down, 4 workers: 3x Huey", "burndown", {"workers": 4}, "jobs_per_s", "ours", "huey", 3.0),
    ("`prefetch=1` burn-down, 4 workers: level with Huey", "burndown", {"workers": 4}, "jobs_per_s",
     "ours_p1", "huey", 1.0),
    ("burn-down, 4 workers, start-up included: 3x Huey", "burndown", {"workers": 4}, "jobs_per_s_from_launch",
     "ours", "huey", 3.0),
    ("`prefetch=1` burn-down, 4 workers, start-up included: level with Huey", "burndown", {"workers": 4},
     "jobs_per_s_from_launch", "ours_p1", "huey", 1.0),
    ("sustained, 4 workers: 2x Huey", "sustained", {"workers": 4}, "jobs_per_s", "ours", "huey", 2.0),
    ("steady at 200 jobs/s: p99 at or below Celery's", "steady", {"rate": 200}, "p99_ms", "ours", "celery", 1.0),
)
_LOWER_IS_BETTER = {"p99_ms"}


def _by_round(results, peer: str, workload: str, match: dict, key: str) -> dict[int, float]:
    """round -> ``key`` of ``peer``'s successful run of ``workload`` at the setting ``match``
    (runs that do not say their round are left out)."""
    return {r["run"]: r[key] for r in _runs(results, peer, workload, match)
            if r.get("ok") and r.get(key) is not None and r.get("run") is not None}


def _targets_section(results) -> list[str]:
    """Each comparative target, round by round: in a round the two queues ran the same
    setting back to back (``compare.schedule``), so a ratio is taken within a round only,
    and the verdict says in how many rounds it held and whether the median ratio does."""
    rows = []
    for what, workload, match, key, ours, peer, bound in TARGETS:
        mine = _by_round(results, ours, workload, match, key)
        theirs = _by_round(results, peer, workload, match, key)
        rounds = sorted(r for r in set(mine) & set(theirs) if theirs[r])  # (a ratio needs the peer's figure)
        if not rounds:
            continue
        lower = key in _LOWER_IS_BETTER
        ratios = [mine[r] / theirs[r] for r in rounds]
        held = sum(1 for x in ratios if (x <= bound if lower else x >= bound))
        fmt = "{:,.2f}" if lower else "{:,.0f}"
        cells = "; ".join(f"{fmt.format(mine[r])} / {fmt.format(theirs[r])} = {x:.2f}x"
                          for r, x in zip(rounds, ratios))
        median = statistics.median(ratios)
        verdict = "yes" if (median <= bound if lower else median >= bound) else "no"
        rows.append(f"| {what} | {cells} | {median:.2f}x | {held} of {len(rounds)} | {verdict} |")
    if not rows:
        return []
    return ["## Targets, round by round", "",
            "The targets that compare two queues. Each cell: ours / the peer in one round "
            "(the same setting run back to back), then their ratio; a target holds in a round when the "
            "ratio reaches its bound (for a latency: stays at or under it).", "",
            "| target | each round: ours / peer = ratio | median ratio | rounds held | median holds |",
            "|---|---|---:|---:|---|", *rows, ""]


# The queue workloads' sections, in the report's order.
_SECTIONS = (("burndown", _burndown_section), ("steady", _steady_section), ("sustained", _sustained_section),
             ("recovery", _recovery_section))


def report(args, info: dict, versions: dict, results: list[dict], limit: dict | None, scale: dict | None,
           started: str, wall: float, command: str) -> str:
    """RESULTS.md: the machine, then a section per workload run, then each queue's setup."""
    out = _intro(args, info, versions, started, wall, command)
    for workload, section in _SECTIONS:
        if workload in args.workloads:
            out += section(args, results)
    out += _targets_section(results)
    if scale is not None:
        out += _scale_section(scale)
    if limit is not None:
        out += _limit_section(args, results, limit)
    out += _setup_section(args, results)
    return "\n".join(out)


def report_of(data: dict) -> str:
    """RESULTS.md of a run's data, as ``bench.compare`` writes it in ``results.json``."""
    return report(argparse.Namespace(**data["args"]), data["machine"], data["versions"], data["results"],
                  data.get("limit"), data.get("scale"), data["started"], data["wall_s"], data["command"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a results.json written by bench.compare")
    p.add_argument("--write", action="store_true", help="write RESULTS.md beside it instead of printing it")
    a = p.parse_args(argv)
    try:
        with open(a.results) as f:
            md = report_of(json.load(f))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        p.error(f"{a.results}: not a results.json of bench.compare ({type(exc).__name__}: {exc})")
    if a.write:
        with open(os.path.join(os.path.dirname(os.path.abspath(a.results)), "RESULTS.md"), "w") as f:
            f.write(md)
    else:
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
