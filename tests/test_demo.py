"""The README's main command, small: ``python -m jobsctl.demos.pipeline`` with a few thousand rows
must run end to end (ingest, validate finding the planted violations, build index with a
worker killed half-way, CTAS) and exit 0, on its own fresh store and on a store given to it.
Three JVMs start: about a minute each."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_demo(tmp_path, *more: str) -> str:
    cmd = [sys.executable, "-m", "jobsctl.demos.pipeline", "--rows", "3000", "--workers", "2", "--dir", str(tmp_path / "demo"),
           *more]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_demo_output(done.stdout)
    return done.stderr


def assert_demo_output(out: str) -> None:
    assert "validate on sky.objects: failed" in out  # the planted rows were found
    assert "'ra CHECK (ra >= 0 AND ra < 360)': 2" in out and "'decl CHECK (decl BETWEEN -90 AND 90)': 1" in out
    assert "build_index on sky.objects: success" in out and "ctas on sky.bright: success" in out
    assert "killed worker pid" in out and "index rows: 12,000" in out


def test_pipeline_demo_runs_end_to_end(tmp_path):
    run_demo(tmp_path)


def test_pipeline_demo_on_a_given_store_runs_in_a_key_prefix_of_its_own(tmp_path, shared_store):
    """``--store URL`` (FoundationDB's too, with ``FDB_CLUSTER_FILE``): the same run, and the
    store's own keys are as they were afterwards."""
    stderr = run_demo(tmp_path, "--store", shared_store.url)
    assert "demo: cleared the key prefix 'demo-" in stderr
    assert shared_store.unchanged()
