"""Any store for every program: ``$JOBS_KEY_PREFIX`` (a root for all of the project's keys,
``jobs/prefixes.py``) and the scratch runs of the demos and benchmarks on a store given by
``--store URL`` or ``$JOBS_STORE`` (``jobsctl/scratch.py``): they run under a root of their
own, leave the store's other keys as they were, and clear what they wrote.

``shared_store`` (conftest) is a store that an application already uses (a job of its own),
on the embedded engine and, when ``FDB_CLUSTER_FILE`` is set, on FoundationDB.  (The pipeline demo and the
chaos run on such a store are in ``test_demo.py`` and ``test_chaos.py``.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import jobs
from jobs import prefixes, store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


def announced_root(stderr: str) -> tuple[str, ...]:
    """The root a scratch run said it uses."""
    found = re.search(r"under the key prefix '([^']+)'", stderr)
    assert found, stderr
    return prefixes.parse_root(found.group(1))


def test_a_root_is_names_separated_by_slashes():
    assert prefixes.parse_root("staging") == ("staging",)
    assert prefixes.parse_root("staging/demo-1") == ("staging", "demo-1")
    assert prefixes.format_root(("staging", "demo-1")) == "staging/demo-1"
    for bad in ("a//b", "/a", "a/", "tab\there"):
        with pytest.raises(ValueError, match="JOBS_KEY_PREFIX"):
            prefixes.parse_root(bad)


def test_a_bad_root_stops_every_program_with_its_reason():
    done = run(["-m", "jobsctl", "--store", "memory:", "status"], env={prefixes.ROOT_ENV: "a//b"})
    assert done.returncode != 0
    assert "JOBS_KEY_PREFIX='a//b': expected names separated by '/'" in done.stderr


def test_processes_with_a_root_see_only_their_own_jobs(shared_store):
    url = shared_store.url
    add = ("import jobs; db = jobs.open(); jobs.set_type_timeout(db, 'demo', 30); "
           "jobs.add(db, 'demo', 'staged', {}); print(sorted(j.id for j in jobs.get_jobs(db, 'demo')))")
    env = {"JOBS_STORE": url, prefixes.ROOT_ENV: "staging/a"}
    done = run(["-c", add], env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['staged']"  # not the application's own job
    status = run(["-m", "jobsctl", "status", "--json"], env=env)
    assert status.returncode == 0, status.stderr
    assert [t["type"] for t in json.loads(status.stdout)["types"]] == ["demo"]
    with store.opened(url) as db:
        assert [j.id for j in jobs.get_jobs(db, "demo")] == ["theirs"]
        prefixes.clear_root(db, ("staging",))
    assert shared_store.unchanged()


def test_under_a_root_the_counters_agree_with_a_count(tmp_path):
    """The counters a taken queue entry moves are the type's, whatever the root: the type
    is read from the entry's key after the root's names (it was read at a fixed place, so
    under a root every accept counted its jobs for a type named "pending")."""
    script = ("import jobs; from jobs.observe import status; db = jobs.open(); jobs.set_type_timeout(db, 't', 30); "
              "jobs.add_many(db, 't', [(f'j{i}', {}) for i in range(6)]); "
              "jobs.add(db, 't', 'k', {}, key='tenant'); "
              "held = jobs.accept_many(db, 't', 4, timeout=0); jobs.release(db, held[0]); "
              "(counted,) = status.gather(db).types; (exact,) = status.gather(db, exact=True).types; "
              "print([(t.type, t.pending, t.running) for t in (counted, exact)])")
    env = {"JOBS_STORE": f"sqlite:{tmp_path / 'jobs.sqlite'}", prefixes.ROOT_ENV: "staging/b"}
    done = run(["-c", script], env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('t', 4, 3), ('t', 4, 3)]"


def test_the_queue_demo_on_a_given_store_leaves_it_as_it_was(shared_store):
    url = shared_store.url
    done = run(["-m", "jobsctl.demos.queue", "--jobs", "60", "--workers", "2", "--store", url])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "jobs not finished exactly once with the right result: 0" in done.stdout
    root = announced_root(done.stderr)
    assert root[-1].startswith("demo-queue-") and f"cleared the key prefix '{root[-1]}'" in done.stderr
    assert shared_store.unchanged()


def test_the_queue_demo_takes_JOBS_STORE_and_keeps_its_keys_when_asked(shared_store):
    url = shared_store.url
    done = run(["-m", "jobsctl.demos.queue", "--jobs", "40", "--workers", "1", "--keep"], env={"JOBS_STORE": url})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    root = announced_root(done.stderr)
    look = run(["-m", "jobsctl", "--store", url, "status", "--json"], env={prefixes.ROOT_ENV: prefixes.format_root(root)})
    assert look.returncode == 0, look.stderr
    (demo,) = json.loads(look.stdout)["types"]
    assert demo["type"] == "demo" and demo["finished"] == 40
    with store.opened(url) as db:
        prefixes.clear_root(db, root)
    assert shared_store.unchanged()


def test_a_bad_store_url_is_one_line(tmp_path):
    done = run(["-m", "jobsctl.demos.queue", "--store", str(tmp_path / "x.sqlite")])
    assert done.returncode == 1
    assert done.stderr.strip().startswith("demo-queue: bad store URL") and "did you mean 'sqlite:" in done.stderr
    assert "Traceback" not in done.stderr


def test_bench_engine_measures_a_given_store(shared_store):
    url = shared_store.url
    done = run(["-m", "bench.bench_engine", "--quick", "--store", url])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"store {url}: 1000 transactions" in done.stdout and "accept + finish: 300 jobs" in done.stdout
    assert shared_store.unchanged()


def test_ours_in_the_peer_comparison_runs_on_a_given_store(shared_store, tmp_path):
    """What ``bench.compare --store URL`` runs for ours: the harness in a scratch run."""
    url = shared_store.url
    root = ("compare-test",)
    env = {"JOBS_STORE": url, prefixes.ROOT_ENV: prefixes.format_root(root), "JOBS_SCRATCH": root[-1]}
    for i in range(2):  # the second run starts from a store cleared of the first one's jobs
        workdir = tmp_path / f"work-{i}"  # a run's own, as bench.compare gives it (records.log counts the runs)
        workdir.mkdir()
        out = workdir / "result.json"
        done = run(["-m", "bench.peers.harness", "ours", "burndown", "--workdir", str(workdir), "--out", str(out),
                    "--params", json.dumps({"jobs": 30, "workers": 1})], env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(out.read_text())
        assert result["ok"] and result["runs"] == 30, result
        assert not (workdir / "jobs.sqlite").exists()  # not a store file of its own
    with store.opened(url) as db:
        prefixes.clear_root(db, root)
    assert shared_store.unchanged()
