"""The crash test: the chaos run of ``bench/chaos.py`` in small: worker processes started
through the real CLI, killed with SIGKILL and stalled past their type timeout while they
run jobs.  Every job must end finished, its output committed exactly once and only by the
run that held its lock; ``bench.chaos`` checks each invariant and exits non-zero if one
fails (its report says which)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_workers_killed_and_stalled_lose_and_double_nothing(tmp_path, shared_store):
    """On a store given to it (the embedded engine, and FoundationDB with ``FDB_CLUSTER_FILE``),
    which it leaves as it was."""
    cmd = [sys.executable, "-m", "bench.chaos", "--jobs", "150", "--workers", "3", "--concurrency", "2",
           "--kills", "3", "--stalls", "1", "--timeout", "1", "--work-ms", "100", "250",
           "--deadline", "300", "--dir", str(tmp_path), "--seed", "11", "--json",
           "--store", shared_store.url]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"], report["problems"]
    assert done.returncode == 0
    assert report["kills"] == 3 and report["stalls"] == 1  # the chaos really happened
    assert report["worker_exit_codes"] == [0]  # the survivors stopped gracefully on SIGTERM
    assert shared_store.unchanged()
