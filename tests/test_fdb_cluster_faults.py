"""Faults of the cluster itself: a FoundationDB server process killed with
SIGKILL in the middle of a chaos run (``bench/chaos.py``: workers started through the real
CLI, some of them killed too) and started again some seconds later with the same arguments.
The workers must ride it out: every job ends finished, its output committed exactly once and
only by the run that held its lock (``bench.chaos`` checks each invariant; its report says
which failed).

Each test runs a cluster of its own (``tests/fdbcluster.py``: free loopback ports, a
directory of the test's), never the shared server on 127.0.0.1:4500, and kills every process
it started at the end.  A probe writes to the cluster about five times a second and counts
the committed outputs, for the recovery times printed (``pytest -s``) and recorded as the
test's properties: how long writes failed after the kill, and until jobs committed again.
These are reported, never asserted (the machine is shared): only generous deadlines bound
the waits.  Without the FoundationDB binaries the tests skip (fail with
``$JOBS_REQUIRE_FDB``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fdbcluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_DEADLINE = 90.0  # a new cluster available (3 to 20 s seen on these machines)
RUN_DEADLINE = 300.0  # the chaos run (bench.chaos --deadline): it needs well under a minute


def read_lines(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


class ChaosRun:
    """``python -m bench.chaos --store URL ... --json`` in the background (its workers and
    monitor in its own process group), and the probe watching the same cluster."""

    def __init__(self, cluster: fdbcluster.Cluster, workdir, *, jobs: int, kills: int, seed: int):
        self.cluster, self.jobs = cluster, jobs
        self.dir = os.fspath(workdir)
        os.makedirs(self.dir, exist_ok=True)
        self.out, self.err = (os.path.join(self.dir, n) for n in ("chaos.json", "chaos.err"))
        self.probe_out = os.path.join(self.dir, "probe.out")
        cmd = [sys.executable, "-m", "bench.chaos", "--store", cluster.url, "--jobs", str(jobs),
               "--workers", "3", "--concurrency", "2", "--kills", str(kills), "--stalls", "0",
               "--timeout", "1", "--work-ms", "100", "250", "--deadline", str(RUN_DEADLINE),
               "--dir", os.path.join(self.dir, "chaos"), "--seed", str(seed), "--json"]
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=cluster.binaries.env(PYTHONPATH=ROOT),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        self.probe = None

    def start_probe(self) -> None:
        """The probe, once the run has said its key prefix (``jobsctl/scratch.py``)."""
        prefix = None
        end = time.monotonic() + 120
        while prefix is None and time.monotonic() < end and self.proc.poll() is None:
            for line in read_lines(self.err):
                if "under the key prefix '" in line:
                    prefix = line.split("under the key prefix '", 1)[1].rstrip("'")
            time.sleep(0.1)
        assert prefix, f"the chaos run said no key prefix: {self.said()}"
        env = self.cluster.binaries.env(PYTHONPATH=ROOT, JOBS_KEY_PREFIX=prefix, JOBS_STORE=self.cluster.url)
        with open(self.probe_out, "w") as out, open(os.path.join(self.dir, "probe.err"), "w") as err:
            self.probe = subprocess.Popen([sys.executable, fdbcluster.__file__, "probe", self.cluster.cluster_file],
                                          cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def readings(self) -> list[tuple[str, float, float, int]]:
        """The probe's lines: (``ok``/``err``, start, end, outputs counted or error code)."""
        rows = []
        with open(self.probe_out) as f:
            text = f.read()
        for line in text[:text.rfind("\n") + 1].splitlines():  # whole lines only: the probe is writing
            parts = line.split()
            if len(parts) == 4:
                rows.append((parts[0], float(parts[1]), float(parts[2]), int(parts[3])))
        return rows

    def wait_outputs(self, n: int, deadline: float = 180.0) -> None:
        """Until the probe has counted ``n`` committed outputs."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            assert self.proc.poll() is None, f"the chaos run ended early: {self.said()}"
            assert self.probe.poll() is None, f"the probe ended: {read_lines(self.probe_out)[-5:]}"
            if any(kind == "ok" and count >= n for kind, _s, _e, count in self.readings()[-5:]):
                return
            time.sleep(0.1)
        raise AssertionError(f"fewer than {n} outputs committed in {deadline} s: {self.readings()[-5:]}")

    def report(self) -> dict:
        """Wait for the run to end (bounded); its JSON report."""
        try:
            code = self.proc.wait(RUN_DEADLINE + 180)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the chaos run did not end in {RUN_DEADLINE + 180} s: {self.said()}") from None
        try:
            report = json.loads("\n".join(read_lines(self.out)))
        except ValueError:
            raise AssertionError(f"no report from the chaos run (exit {code}): {self.said()}") from None
        report["exit_code"] = code
        return report

    def said(self) -> str:
        out, err = ("\n".join(read_lines(path))[-2000:] for path in (self.out, self.err))
        return f"stdout {out!r}, stderr {err!r}"

    def stop(self) -> None:
        """Kill what is left of the run (on failure: its whole process group) and the probe."""
        if self.probe is not None and self.probe.poll() is None:
            self.probe.send_signal(signal.SIGTERM)
            try:
                self.probe.wait(10)
            except subprocess.TimeoutExpired:
                self.probe.kill()
                self.probe.wait(10)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        try:  # its workers and monitor, if the run itself was killed before stopping them
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def recovery(readings, killed_at: float, restarted_at: float) -> dict:
    """Recovery times from the probe's readings around the kill (to within its 0.2 s period):

    * ``writes_back_s``: from the kill to the end of the first write (begun after the kill)
      that committed: how long the cluster could not take writes;
    * ``writes_back_after_restart_s``: the same from the restart (None when writes came back
      before it, without the killed process);
    * ``jobs_progressed_s``: from the kill until the probe counted more committed outputs
      than its first count after the kill: until the workers committed jobs again;
    * ``longest_write_gap_s``: the longest time between two committed writes of the run,
      and ``..._after_restart_s`` from the restart on (the process rejoining);
    * ``failed_writes``: the probe's writes that failed (timed out: 1031) after the kill;
    * ``outputs_at_kill`` / ``outputs_after_restart``: jobs committed at the last count
      before the kill and at the first after the restart (the faults landed mid-run).
    """
    ok = [(s, e, n) for kind, s, e, n in readings if kind == "ok"]
    after = [(s, e, n) for s, e, n in ok if s >= killed_at]
    before = [n for _s, e, n in ok if e <= killed_at]
    restarted = [n for s, _e, n in ok if s >= restarted_at]
    out = {"writes_back_s": None, "writes_back_after_restart_s": None, "jobs_progressed_s": None,
           "longest_write_gap_s": None, "longest_write_gap_after_restart_s": None,
           "failed_writes": sum(1 for k, s, _e, _n in readings if k == "err" and s >= killed_at),
           "outputs_at_kill": before[-1] if before else None,
           "outputs_after_restart": restarted[0] if restarted else None}
    if after:
        first_end, first_n = after[0][1], after[0][2]
        out["writes_back_s"] = round(first_end - killed_at, 2)
        if first_end > restarted_at:
            out["writes_back_after_restart_s"] = round(first_end - restarted_at, 2)
        more = [e for s, e, n in after if s >= first_end and n > first_n]
        if more:
            out["jobs_progressed_s"] = round(more[0] - killed_at, 2)
    for key, ends in (("longest_write_gap_s", [e for _s, e, _n in ok]),
                      ("longest_write_gap_after_restart_s", [restarted_at] + [e for _s, e, _n in ok
                                                                              if e > restarted_at])):
        if len(ends) > 1:
            out[key] = round(max(b - a for a, b in zip(ends, ends[1:])), 2)
    return out


def run_through_fault(cluster, tmp_path, role: str | None, *, jobs: int, kills: int, down_for: float, seed: int,
                      record_property) -> dict:
    """A chaos run on ``cluster`` during which the server holding ``role`` then (the first
    server when None or when status does not tell) is killed with SIGKILL once a quarter of
    the jobs have committed, and started again ``down_for`` seconds later; every invariant
    of the run checked, the recovery times printed and recorded."""
    run = ChaosRun(cluster, tmp_path / "run", jobs=jobs, kills=kills, seed=seed)
    try:
        run.start_probe()
        run.wait_outputs(jobs // 4)
        victim = (cluster.with_role(role) if role else None) or 0
        victim_roles = cluster.roles().get(cluster.address(victim), []) if role else None
        killed_at = cluster.kill(victim)
        time.sleep(down_for)  # the fault's length: the server stays dead this long
        restarted_at = time.time()
        cluster.start(victim)
        report = run.report()
        times = recovery(run.readings(), killed_at, restarted_at)
    finally:
        run.stop()
    # The restarted server is part of the cluster again (its roles in `status json`).
    rejoined = time.monotonic()
    while cluster.address(victim) not in cluster.roles() and time.monotonic() - rejoined < 60:
        time.sleep(0.5)
    times["in_status_again"] = cluster.address(victim) in cluster.roles()
    summary = {"killed": cluster.address(victim), "its_roles": victim_roles, "down_for_s": down_for, **times,
               "chaos": {k: report.get(k) for k in ("ok", "problems", "jobs", "kills", "starts", "reruns",
                                                    "halted_lock_losers", "recovery_s", "elapsed_s",
                                                    "worker_exit_codes", "exit_code")}}
    print(f"\n{os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]}: {json.dumps(summary)}")
    for key, value in summary.items():
        record_property(key, json.dumps(value) if isinstance(value, (dict, list)) else value)

    assert report["ok"], report["problems"]
    assert report["exit_code"] == 0
    assert report["jobs"] == jobs and report["kills"] == kills  # the workers' chaos happened too
    assert report["worker_exit_codes"] == [0]  # the survivors stopped gracefully on SIGTERM
    assert times["writes_back_s"] is not None, "the probe never wrote again after the kill"
    assert times["in_status_again"], f"the restarted server is not in the cluster's status: {cluster.roles()}"
    # The faults landed mid-run: jobs were left to do after the kill and after the restart
    # (else the test proves nothing: give it more jobs).
    assert times["outputs_after_restart"] is not None and times["outputs_after_restart"] < jobs, times
    assert cluster.procs[victim].poll() is None, f"the restarted server exited: {cluster.server_output()}"
    return summary


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> fdbcluster.Binaries:
    return fdbcluster.binaries_or_skip(tmp_path_factory.mktemp("fdb"))


@pytest.mark.slow
@pytest.mark.parametrize("role", ["master", "cluster_controller"])
def test_three_process_cluster_loses_a_process(tmp_path, binaries, role, record_property):
    """Three processes, ``double`` replication, three coordinators: losing one of them costs
    a recovery, not the data, so the run must come through whole.  The process killed holds
    the master (sequencer) role, or the cluster controller's, when it is killed: the losses
    that force a recovery of the transaction system and an election (every process is a
    coordinator and, here, a log server as well)."""
    with fdbcluster.Cluster(tmp_path / "cluster", binaries, processes=3) as cluster:
        took = cluster.create("double memory", deadline=START_DEADLINE)
        settled = cluster.wait_healthy(START_DEADLINE)
        record_property("cluster_available_after_s", round(took, 1))
        record_property("cluster_healthy_after_s", round(took + settled, 1))
        print(f"\nthree-process cluster available after {took:.1f} s, healthy {settled:.1f} s later; "
              f"roles {cluster.roles()}")
        run_through_fault(cluster, tmp_path, role, jobs=600, kills=2, down_for=8.0, seed=49,
                          record_property=record_property)


@pytest.mark.slow
def test_one_process_cluster_killed_and_restarted(tmp_path, binaries, record_property):
    """The only server of a one-process cluster (``single`` replication, ``memory`` engine,
    which logs every commit to its data directory) killed and started again on the same
    data: the whole database is gone for a while and comes back with every committed
    write; the workers wait, their lost locks are fenced, and no job is lost or doubled."""
    with fdbcluster.Cluster(tmp_path / "cluster", binaries, processes=1) as cluster:
        took = cluster.create("single memory", deadline=START_DEADLINE)
        record_property("cluster_available_after_s", round(took, 1))
        print(f"\none-process cluster available after {took:.1f} s")
        run_through_fault(cluster, tmp_path, None, jobs=400, kills=1, down_for=5.0, seed=50,
                          record_property=record_property)
