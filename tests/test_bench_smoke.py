"""Smoke test of the peer-comparison harness (bench/compare.py, bench/peers/) on our own
queue only: no servers, no peers' venv.  Not a benchmark: nothing here is timed."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys

import pytest

import jobs

from bench import compare, report
from bench.peers import env, record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _drive(tmp_path, workload, params):
    workdir = tmp_path / workload
    workdir.mkdir()
    out = workdir / "result.json"
    subprocess.run([sys.executable, "-m", "bench.peers.harness", "ours", workload, "--workdir", str(workdir),
                    "--out", str(out), "--params", json.dumps(params)], cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": ROOT}, check=True, timeout=240)
    return json.loads(out.read_text()), workdir


def test_record_lines_are_fixed_width(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_LOGDIR", str(tmp_path))
    record.record(123.5)
    record.record(0.0)
    assert record.count(str(tmp_path)) == 2
    assert [r[1] for r in record.read(str(tmp_path))] == [123.5, 0.0]


def test_the_peers_venv_runs_on_the_projects_interpreter(tmp_path, monkeypatch):
    """A peers' venv made from another interpreter is made again from ours (a comparison
    runs every peer on one interpreter); one made from ours is kept, its packages installed
    again only when the requirements change."""
    venv, requirements = tmp_path / "peers", tmp_path / "requirements.txt"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "pyvenv.cfg").write_text("home = /elsewhere/bin\nexecutable = /elsewhere/bin/python3.11\n")
    requirements.write_text("huey==3.5.4\n")
    monkeypatch.setattr(env, "PEERS_VENV", str(venv))
    monkeypatch.setattr(env, "REQUIREMENTS", str(requirements))
    ran = []
    monkeypatch.setattr(env, "_run", lambda cmd, timeout, **kw: ran.append(cmd))
    ours = env.base_interpreter()
    assert env.venv_interpreter(str(venv)) == "/elsewhere/bin/python3.11"

    env.ensure_peers_venv()
    assert ran[0] == [ours, "-m", "venv", "--clear", str(venv)]
    assert ran[1][:3] == [env.peers_python(), "-m", "pip"] and len(ran) == 2

    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(ours)}\nexecutable = {ours}\n")  # (as venv makes it)
    ran.clear()
    env.ensure_peers_venv()
    assert ran == []  # made from ours, its packages in place

    requirements.write_text("huey==3.5.5\n")
    env.ensure_peers_venv()
    assert [cmd[:3] for cmd in ran] == [[env.peers_python(), "-m", "pip"]]


def test_ours_burndown_steady_and_sustained_through_the_harness(tmp_path):
    result, workdir = _drive(tmp_path, "burndown", {"jobs": 60, "workers": 2})
    assert result["ok"], result
    assert result["runs"] >= 60 and result["jobs_per_s"] > 0
    # (start-up included: from the workers' launch, so slower, and the start-up apart)
    assert 0 < result["jobs_per_s_from_launch"] < result["jobs_per_s"] and result["start_up_s"] > 0
    result, _ = _drive(tmp_path, "steady", {"rate": 20, "secs": 1, "workers": 1})
    assert result["ok"], result
    assert result["jobs"] == 20 and 0 < result["p50_ms"] <= result["p99_ms"]
    assert result["worker_cpu_ms_per_job"] > 0  # (the workers' CPU while the jobs ran)
    result, _ = _drive(tmp_path, "sustained", {"jobs": 50, "workers": 2})
    assert result["ok"], result
    assert result["runs"] == 50 and result["jobs_per_s"] > 0 and result["p99_ms"] >= result["p50_ms"]
    assert result["worker_cpu_ms_per_job"] > 0


def test_watch_bench_runs_both_modes():
    p = subprocess.run([sys.executable, "-m", "bench.bench_watch", "--n", "10", "--gaps", "0.01", "--idle", "0.2"],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    assert "| doorbell | 10 ms |" in p.stdout and "| polling | 10 ms |" in p.stdout


def test_a_run_measures_each_setting_for_every_peer_back_to_back():
    """Figures a ratio compares are made seconds apart, the peers in the opposite order
    every other repeat; a peer's skipped workloads and smaller job counts are kept."""
    args = compare.parse_args(["--peers", "ours,ours_p1,rq", "--workloads", "burndown,steady,recovery",
                               "--workers", "1", "4", "--rates", "50", "--repeat", "2", "--jobs", "20000"])
    plan = [(r, peer, workload, params.get("rate", params.get("workers"))) for r, peer, workload, params, _t
            in compare.schedule(args)]
    first = [("burndown", 1), ("burndown", 4), ("steady", 50.0), ("recovery", None)]
    expected = []
    for r, peers in ((0, ["ours", "ours_p1", "rq"]), (1, ["rq", "ours_p1", "ours"])):
        for workload, setting in first:
            expected += [(r, peer, workload, setting) for peer in peers
                         if not (peer == "ours_p1" and workload == "recovery")]
    assert plan == expected
    jobs = {(peer, params["workers"]): params["jobs"] for _r, peer, workload, params, _t in compare.schedule(args)
            if workload == "burndown"}
    assert jobs[("ours", 4)] == 20000 and jobs[("rq", 4)] < 20000  # (RQ forks per job: a smaller run)


def test_report_renders_failures_and_numbers():
    args = compare.parse_args(["--quick", "--peers", "ours,huey", "--workloads", "burndown,steady,recovery"])
    results = [
        {"peer": "ours", "workload": "burndown", "params": {"jobs": 2000, "workers": 1}, "ok": True,
         "jobs_per_s": 300.0, "runs": 2000, "jobs": 2000, "jobs_per_s_from_launch": 250.0, "start_up_s": 1.25},
        {"peer": "huey", "workload": "burndown", "params": {"jobs": 2000, "workers": 1}, "ok": False,
         "error": "hung: killed after 300 s"},
        {"peer": "huey", "workload": "recovery", "params": {"cap": 30}, "ok": True, "recovered": False,
         "recovery_s": None},
        {"peer": "ours", "workload": "steady", "params": {"rate": args.rates[0], "secs": args.secs, "workers": 4},
         "ok": True, "p50_ms": 1.5, "p99_ms": 3.5, "rate": args.rates[0], "worker_cpu_ms_per_job": 1.25},
    ]
    info = compare.machine(ROOT)
    md = report.report(args, info, {}, results, None, None, "now", 60, "python -m bench.compare --quick")
    assert "| ours (embedded engine) | 300 |" in md
    assert "| ours (embedded engine) | 250; 1.25 s |" in md and md.count("| Huey (SQLite) | failed 1/1: hung") == 2
    assert f"| ours (embedded engine) | {args.rates[0]:g} | 1.5 | 3.5 | {args.rates[0]:,.0f} | 1.25 |" in md
    assert "failed 1/1: hung" in md
    assert "none within 30 s" in md


def test_report_takes_each_targets_ratio_within_a_round_and_renders_a_stored_run_again(tmp_path, capsys):
    """The targets section pairs ours and the peer of the same round (the median of the
    rounds' ratios, not the ratio of medians), says in how many rounds a target held and
    whether the median ratio does; a latency holds at or under its bound; a round without
    the peer's figure gives no ratio.  ``python -m bench.report`` renders a results.json again."""
    args = compare.parse_args(["--peers", "ours,ours_p1,huey,celery", "--workloads", "burndown,steady",
                               "--workers", "4", "--rates", "200", "--repeat", "2"])

    def run(peer, workload, r, **figures):
        params = {"burndown": {"jobs": args.jobs, "workers": 4}, "sustained": {"jobs": 10000, "workers": 4},
                  "steady": {"rate": 200.0, "secs": args.secs, "workers": 4}}[workload]
        return {"peer": peer, "workload": workload, "params": params, "ok": True, "run": r, "runs": 1, "jobs": 1,
                **figures}

    results = [run("ours", "burndown", 0, jobs_per_s=3000.0, jobs_per_s_from_launch=2500.0),
               run("huey", "burndown", 0, jobs_per_s=1000.0, jobs_per_s_from_launch=800.0),
               run("ours", "burndown", 1, jobs_per_s=2000.0), run("huey", "burndown", 1, jobs_per_s=500.0),
               run("ours_p1", "burndown", 0, jobs_per_s=900.0), run("ours_p1", "burndown", 1, jobs_per_s=1200.0),
               run("ours", "steady", 0, p99_ms=1.5), run("celery", "steady", 0, p99_ms=1.5),
               run("ours", "steady", 1, p99_ms=2.0), run("celery", "steady", 1, p99_ms=1.0),
               run("ours", "sustained", 0, jobs_per_s=100.0), run("huey", "sustained", 0, jobs_per_s=0.0)]
    md = "\n".join(report._targets_section(results))
    # (the ratio of the medians would be 2,500 / 750 = 3.33x)
    assert "| burn-down, 4 workers: 3x Huey | 3,000 / 1,000 = 3.00x; 2,000 / 500 = 4.00x | 3.50x | 2 of 2 | yes |" in md
    assert "| 900 / 1,000 = 0.90x; 1,200 / 500 = 2.40x | 1.65x | 1 of 2 | yes |" in md
    # (start-up included: only the rounds that recorded it on both sides)
    assert "| burn-down, 4 workers, start-up included: 3x Huey | 2,500 / 800 = 3.12x | 3.12x | 1 of 1 | yes |" in md
    assert "prefetch=1` burn-down, 4 workers, start-up included" not in md
    assert "| 1.50 / 1.50 = 1.00x; 2.00 / 1.00 = 2.00x | 1.50x | 1 of 2 | no |" in md
    assert "sustained" not in md  # (the peer's figure is 0: no ratio, no row)
    assert report._targets_section([r for r in results if r["peer"] != "huey" and r["workload"] != "steady"]) == []

    data = {"command": "python -m bench.compare", "started": "now", "wall_s": 60, "machine": compare.machine(ROOT),
            "versions": {}, "args": vars(args), "results": results, "limit": None, "scale": None}
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert report.main([str(tmp_path / "results.json")]) == 0
    assert "## Targets, round by round" in capsys.readouterr().out
    assert report.main([str(tmp_path / "results.json"), "--write"]) == 0
    assert (tmp_path / "RESULTS.md").read_text() == report.report(args, data["machine"], {}, results, None, None,
                                                                  "now", 60, "python -m bench.compare")
    (tmp_path / "other.json").write_text(json.dumps({"results": []}))
    for bad in (tmp_path / "missing.json", tmp_path / "other.json"):
        with pytest.raises(SystemExit) as stopped:
            report.main([str(bad)])
        assert stopped.value.code == 2 and "not a results.json of bench.compare" in capsys.readouterr().err


def test_fairness_bench_starts_key_b():
    p = subprocess.run([sys.executable, "-m", "bench.fairness", "--flood", "300", "--workers", "2", "--repeat", "1"],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| keys A and B") or line.startswith("| no keys")]
    assert len(rows) == 2, p.stdout
    assert "not started" not in rows[0], p.stdout  # key B's job was taken
    assert "key B's first job started after" in p.stdout, p.stdout


def test_bulk_and_batch_costs_run_every_way(tmp_path, capsys):
    from bench import batch_costs, bulk

    assert bulk.main(["--jobs", "100", "--repeat", "1", "--dir", str(tmp_path)]) == 0
    rates = json.loads(capsys.readouterr().out)["jobs_per_s"]
    assert set(rates) == set(bulk.WAYS) and all(r[0] > 0 for r in rates.values())
    assert batch_costs.main(["--jobs", "128", "--repeat", "1", "--dir", str(tmp_path)]) == 0
    [costs] = json.loads(capsys.readouterr().out)["us_per_job"]
    assert set(costs) == {"add", "accept", "finish", "accept, nothing due", "add_many", "accept_many(32)",
                          "finish_many(64)"}
    assert all(us > 0 for us in costs.values())


def test_a_run_with_jobs_run_twice_keeps_what_the_workers_logged(tmp_path):
    """The work directory is removed after a run: the warnings of a run that ran jobs twice
    are kept in its result and shown under the table."""
    from bench.peers import harness

    (tmp_path / "worker-0.log").write_text("INFO ok\n2026 processors WARNING: job bench/e7: its outcome was "
                                           "not written\n")
    (tmp_path / "helper-1.log").write_text("2026 monitor WARNING: type bench: re-enqueued 1 running job(s)\n")
    (tmp_path / "records.log").write_text("WARNING is not a record line\n")
    said = harness.log_warnings(str(tmp_path))
    assert said == ["helper-1.log: 2026 monitor WARNING: type bench: re-enqueued 1 running job(s)",
                    "worker-0.log: 2026 processors WARNING: job bench/e7: its outcome was not written"]
    twice = {"peer": "ours", "workload": "sustained", "ok": True, "runs": 11, "jobs": 10,
             "params": {"jobs": 10, "workers": 4}, "log_warnings": said}
    shown = "\n".join(report._rerun_warnings([twice, {**twice, "runs": 10}], "sustained"))
    assert shown.count("Worker logs of") == 1 and said[1] in shown


def test_instruction_counts_of_one_operation(tmp_path, capsys):
    """bench.instructions counts what one operation costs under valgrind (skipped where
    valgrind is missing: it says so and exits 2, as tested below)."""
    from bench import instructions

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    assert instructions.main(["--jobs", "20", "--ops", "add", "--dir", str(tmp_path)]) == 0
    counted = json.loads(capsys.readouterr().out)["instructions"]
    assert set(counted) == {"add"} and counted["add"] > 10_000


def test_instruction_counts_refuse_what_they_cannot_count(tmp_path, capsys, monkeypatch):
    from bench import instructions

    with pytest.raises(SystemExit):
        instructions.main(["--ops", "add,remove"])
    assert "unknown operation(s) 'remove'" in capsys.readouterr().err
    monkeypatch.setattr(instructions.shutil, "which", lambda _name: None)
    assert instructions.main(["--ops", "add", "--dir", str(tmp_path)]) == 2
    assert "needs valgrind" in capsys.readouterr().err


def test_latency_bench_runs_both_ways(capsys, monkeypatch):
    """bench.latency: the burn-down (jobs/s) and the steady mode (add-to-start times of
    jobs added one at a time to waiting workers), on fresh embedded stores."""
    from bench import latency

    monkeypatch.delenv("JOBS_STORE", raising=False)
    assert latency.main(["--jobs", "40", "--workers", "1", "--latency", "0", "1:0.5", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("| `Processor`") == 0 and out.count("| Processor, 1 workers") == 2
    assert out.count("| bare accept+finish loop, 1 workers") == 2
    assert latency.main(["--jobs", "40", "--workers", "1", "--latency", "0", "--repeat", "1",
                         "--kinds", "processor"]) == 0
    out = capsys.readouterr().out
    assert out.count("| Processor, 1 workers") == 1 and "bare" not in out
    assert latency.main(["--steady", "20", "--secs", "0.5", "--workers", "1", "--latency", "0", "2:0.5",
                         "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for label, waited in (("| 0 ms per commit", lambda ms: ms == 0), ("| 2 ms per commit", lambda ms: ms >= 4)):
        [row] = [line for line in out.splitlines() if line.startswith(label)]
        cells = [float(cell.split()[0]) for cell in row.strip("|").split("|")[1:]]
        assert 0 < cells[0] <= cells[1] <= cells[2] and cells[3] >= 1  # p50 <= p99 <= max; accepts a job
        assert waited(cells[4]), row  # at least the take's and the outcome's commits, 2 ms each
    with pytest.raises(SystemExit):
        latency.main(["--steady", "0"])


@pytest.mark.parametrize("op", ["add_many-data", "accept_many", "accept_many+finish_many", "accept-carrying-finish"])
def test_the_batched_instruction_ops_do_what_they_count(tmp_path, op):
    """The batched operations, and the accepts carrying finishes, run as counted (here
    without valgrind): every job added, taken or finished."""
    from bench import instructions

    n = 2 * instructions.BATCH + 5  # (a last batch shorter than the others)
    url = instructions.prepare_store(str(tmp_path / "store.sqlite"), n if instructions.OPS[op][1] else 0)
    instructions.child(op, url, n)
    with jobs.open(url) as db:
        states = collections.Counter(j.state for j in jobs.get_jobs(db, instructions.TYPE))
    want = {"add_many-data": {"pending": n}, "accept_many": {"running": n},
            "accept_many+finish_many": {"finished": n}, "accept-carrying-finish": {"finished": n}}[op]
    assert dict(states) == want


def test_sharing_bench_runs_one_store_and_one_each(capsys, monkeypatch):
    """bench.sharing: the processes on one store, then each on its own, every job run (a
    job takes one write-lock acquisition at least: its accept, carrying the outcome before)."""
    from bench import sharing

    monkeypatch.delenv("JOBS_STORE", raising=False)
    assert sharing.main(["--procs", "2", "--jobs", "30", "--rounds", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("one")]
    assert [row[1] for row in rows] == ["shared", "each"]
    assert all(int(row[-1].replace(",", "")) >= 60 and float(row[-2]) > 0 for row in rows)
    with pytest.raises(SystemExit):
        sharing.main(["--procs", "0"])


def test_cold_bench_reports_every_operation_and_gap(tmp_path):
    p = subprocess.run([sys.executable, "-m", "bench.cold", "--n", "3", "--gaps", "0,1", "--wait", "spin",
                        "--dir", str(tmp_path)], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    for op in ("sqlite-add", "add", "accept+finish"):
        assert f"| {op} | spin | 0 ms |" in p.stdout and f"| {op} | spin | 1 ms |" in p.stdout
    measured = json.loads(p.stdout.strip().splitlines()[-1])["cpu_us_p50"]
    assert len(measured) == 6 and all(v > 0 for v in measured.values())


def test_cold_bench_refuses_bad_gaps():
    p = subprocess.run([sys.executable, "-m", "bench.cold", "--gaps", "0,-1"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "none negative" in p.stderr


def test_soak_samples_what_the_worker_process_holds(tmp_path):
    p = subprocess.run([sys.executable, "-m", "bench.soak", "--jobs", "300", "--every", "100", "--dir", str(tmp_path)],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    samples = json.loads(p.stdout)["samples"]
    assert [s["jobs"] for s in samples] == [100, 200, 300]
    assert all(s["rss_kb"] > 0 and s["threads"] >= 1 and s["fds"] > 0 and s["store_bytes"] > 0 for s in samples)
    assert 0 <= samples[-1]["jobs_left"] <= 300  # (counted once the workers stopped)
    assert all(s.get("heap_used_kb", 1) > 0 and s.get("heap_free_kb", 0) >= 0 for s in samples)  # (glibc only)


def test_report_names_the_store_each_row_of_ours_ran_on():
    """Rows of ours name the store the run gave it (an FDB cluster is not the embedded
    engine); without one, the fresh embedded store files; the peers' rows are as they were."""
    from bench import lineup

    assert lineup.titles() == lineup.TITLES and lineup.titles()["ours"] == "ours (embedded engine)"
    url = "fdb:/etc/foundationdb/fdb.cluster"
    args = compare.parse_args(["--quick", "--peers", "ours,ours_p1,huey", "--workloads", "burndown,steady",
                               "--store", url])
    results = [
        {"peer": "ours", "workload": "burndown", "params": {"jobs": 2000, "workers": 1}, "ok": True,
         "jobs_per_s": 300.0, "runs": 2000, "jobs": 2000},
        {"peer": "ours_p1", "workload": "steady", "params": {"rate": args.rates[0], "secs": args.secs, "workers": 4},
         "ok": True, "p50_ms": 1.5, "p99_ms": 3.5, "rate": args.rates[0], "worker_cpu_ms_per_job": 1.25},
        {"peer": "huey", "workload": "burndown", "params": {"jobs": 2000, "workers": 1}, "ok": True,
         "jobs_per_s": 100.0, "runs": 2000, "jobs": 2000},
    ]
    md = report.report(args, compare.machine(ROOT), {}, results, None, None, "now", 60, "python -m bench.compare")
    assert f"| ours (FoundationDB, {url}) | 300 |" in md
    assert f"| ours, prefetch 1 (FoundationDB, {url}) | {args.rates[0]:g} | 1.5 | 3.5 |" in md
    assert "embedded engine" not in md and "| Huey (SQLite) | 100 |" in md
    assert lineup.titles("sqlite:/tmp/x.sqlite")["ours"] == "ours (embedded engine, sqlite:/tmp/x.sqlite)"


def _fdb_section_data(burndown: float, burndown_p1: float, p50: float, p99: float) -> dict:
    """A run of bench.fdb_section as fdb.json keeps it, with these figures."""
    from bench import fdb_section

    args = fdb_section.parse_args(["--store", "fdb:/x/fdb.cluster", "--quick"])
    args.store = "fdb:/x/fdb.cluster"
    h = fdb_section.harness_args(args)

    def raw(writes, procs, commits_per_s):
        return {"writes": writes, "procs": procs, "commits": 100, "secs": 1.0, "commits_per_s": commits_per_s,
                "keys_per_s": commits_per_s * writes, "server_cpu": {"mean": 0.5, "busiest": 0.75}}

    rounds = [[raw(1, 1, 545.0), raw(1, 4, 1600.0), raw(64, 1, 300.0), raw(64, 4, 500.0)],
              [raw(1, 1, 545.0), raw(1, 4, 1690.0), raw(64, 1, 300.0), raw(64, 4, 546.0)]]
    per_job = {"transactions": 0.05, "retries": 0.0, "point_reads": 2.1, "range_reads": 0.06, "keys_read": 4.7,
               "bytes_read": 460.0, "read_conflicts": 3.1, "writes": 5.0, "bytes_written": 530.0,
               "write_conflicts": 5.0}
    counted = [{"prefetch": 64, "jobs": 640, "secs": 1.0, "per_job": per_job,
                "stats": {"accept_batches": 10, "accepted": 640}},
               {"prefetch": 1, "jobs": 640, "secs": 4.0, "per_job": {**per_job, "writes": 9.0},
                "stats": {"accept_batches": 640, "accepted": 640}}]

    def result(peer, workload, params, **figures):
        return {"peer": peer, "workload": workload, "params": params, "ok": True, "run": 0, "runs": 1, "jobs": 1,
                "server_cpu": {"mean": 0.5, "busiest": 0.9}, **figures}

    steady = {"rate": 200.0, "secs": args.secs, "workers": 4}
    results = [result("ours", "burndown", {"jobs": args.jobs, "workers": 4}, jobs_per_s=burndown,
                      counters={"accept_batches": 80, "accepted": 5000, "accept_retries": 30, "accept_conflicts": 30}),
               result("ours_p1", "burndown", {"jobs": args.jobs, "workers": 4}, jobs_per_s=burndown_p1),
               result("ours", "steady", steady, p50_ms=p50, p99_ms=p99, rate=200.0),
               {"peer": "ours_p1", "workload": "steady", "params": steady, "ok": False, "error": "hung: killed"}]
    return {"command": "python -m bench.fdb_section --quick", "started": "now", "wall_s": 60.0,
            "machine": compare.machine(ROOT), "cluster": "FoundationDB 7.3.79, 1 process", "server_pids": [1],
            "args": vars(args), "harness_args": vars(h), "raw": rounds, "counted": counted, "results": results,
            "floor": {"rounds": 200, "start_floor_ms": 7.5,
                      "steps": {name: {"p50_ms": 2.0, "p90_ms": 3.0, "cpu_ms": 0.5} for name in fdb_section.FLOOR_STEPS}},
            "errors": []}


def test_fdb_section_renders_its_figures_and_its_targets():
    """The section's write bound (64-write keys/s from 4 processes ÷ counted writes a job),
    jobs per raw one-write commit (÷ the mean of the two rounds' 4-process rate), and each
    target: held or not from the figures given (nothing here is timed)."""
    from bench import fdb_section

    data = _fdb_section_data(burndown=2357.0, burndown_p1=341.0, p50=11.6, p99=296.0)
    md = fdb_section.section(data)
    # (the mean of 500 and 546 commits of 64 writes: 33,472 keys/s; ÷ 5 writes a job)
    assert "| 64 | 4 | 500; 546 | 32,000; 34,944 | 0.75; 0.75 |" in md
    assert "= **6,694 jobs/s**" in md
    assert "| ours (FoundationDB, fdb:/x/fdb.cluster) | burn-down, 1,000 jobs | 2,357 | 1.43 | – | – | 0.90 |" in md
    assert "| ours, prefetch 1 (FoundationDB, fdb:/x/fdb.cluster) | steady at 200 jobs/s | failed: hung" in md
    assert "80 accept transactions took jobs (62.5 jobs each), 30 attempts retried (30 on conflicts)" in md
    assert "| 2,357 jobs/s = 35% of 6,694 (33,472 keys/s ÷ 5.00 writes a job) | no |" in md
    assert "| 341 ÷ 1,645 = 0.21 | no |" in md
    assert "p50 ≤ 5 ms | 11.6 ms; the floor on this cluster, idle: 7.5 ms (add + accept, serial) | no |" in md
    assert "p99 ≤ 30 ms | 296.0 ms | no |" in md
    assert "both committed: **7.5 ms**" in md and "| accept | 2.00 | 3.00 | 0.50 |" in md
    assert "embedded engine" not in md and "### Burn-down" in md

    held = fdb_section.section(_fdb_section_data(burndown=5100.0, burndown_p1=900.0, p50=4.0, p99=30.0))
    assert "| 5,100 jobs/s = 76% of 6,694" in held and "| 900 ÷ 1,645 = 0.55 | yes |" in held
    assert "p50 ≤ 5 ms | 4.0 ms; the floor" in held and "p99 ≤ 30 ms | 30.0 ms | yes |" in held
    assert held.count("| yes |") == 4

    behind = _fdb_section_data(burndown=2357.0, burndown_p1=341.0, p50=11.6, p99=296.0)
    behind["results"][2]["rate"] = 137.0  # (a producer that fell behind its 200 jobs/s)
    md = fdb_section.section(behind)
    assert "| steady at 200 jobs/s | 137 (producer behind) |" in md
    assert "| 11.6 ms (the producer reached 137 jobs/s only); the floor" in md

    data["results"] = [r for r in data["results"] if r["peer"] != "ours_p1"]
    rows = {target: held for target, _measured, held in fdb_section.targets(fdb_section.figures(data))}
    assert [held for target, held in rows.items() if "prefetch=1" in target] == [None]


def test_fdb_section_runs_through_on_an_embedded_store(tmp_path):
    """``python -m bench.fdb_section`` end to end, small, on a store file (it takes any
    store; the section is meant for a cluster): raw commit loops of 1 and 4 processes, the
    counted drains, a burn-down through the harness, the latency floor, FDB.md and fdb.json
    written."""
    from bench.fdb_section import FLOOR_STEPS

    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "JOBS_STORE"}
    p = subprocess.run([sys.executable, "-m", "bench.fdb_section", "--store", f"sqlite:{tmp_path / 'store.sqlite'}",
                        "--peers", "ours", "--workloads", "burndown", "--jobs", "40", "--commit-secs", "0.2",
                        "--count-jobs", "20", "--floor-rounds", "5", "--out", str(out)], cwd=ROOT, env={**env, "PYTHONPATH": ROOT},
                       capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads((out / "fdb.json").read_text())
    assert len(data["raw"]) == 2 and data["errors"] == []
    for rnd in data["raw"]:
        assert [(r["writes"], r["procs"]) for r in rnd] == [(1, 1), (1, 4), (64, 1), (64, 4)]
        assert all(r["commits"] > 0 and r["keys_per_s"] == pytest.approx(r["commits_per_s"] * r["writes"])
                   for r in rnd)
    assert [c["prefetch"] for c in data["counted"]] == [64, 1]
    assert all(c["per_job"]["writes"] > 0 and c["stats"]["accepted"] == 20 and c["cpu_ms_per_job"] > 0
               for c in data["counted"])
    floor = data["floor"]
    assert floor["rounds"] == 5 and tuple(floor["steps"]) == FLOOR_STEPS
    assert floor["start_floor_ms"] == pytest.approx(floor["steps"]["add"]["p50_ms"] + floor["steps"]["accept"]["p50_ms"])
    [burn] = data["results"]
    assert burn["ok"] and burn["peer"] == "ours" and burn["runs"] >= 40
    md = (out / "FDB.md").read_text()
    assert "## Raw commit rates" in md and "## Targets" in md and "write bound" in md
    assert "## The start latency's floor" in md
    assert "| ours (embedded engine, sqlite:" in md and "(jobs each)" in md
