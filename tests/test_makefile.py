"""The Makefile's install paths: ``make demo-queue`` installs the project alone, not the
development extras (Spark, pandas, Playwright...) that ``make test`` and ``make demo`` need.

Each test runs the real Makefile in a scratch directory whose ``.venv/bin/python`` is a
stand-in that records its arguments, so what each target would install is seen without
installing anything."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _checkout(tmp_path: pathlib.Path) -> pathlib.Path:
    """A scratch directory with the Makefile, a pyproject.toml and a recording fake venv."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/../calls.log"\n')
    python.chmod(0o755)
    # the venv is newer than pyproject.toml, as after `python -m venv`
    old = time.time() - 100
    os.utime(tmp_path / "pyproject.toml", (old, old))
    return tmp_path


def _make(where: pathlib.Path, target: str) -> list[str]:
    log = where / ".venv" / "calls.log"
    if log.exists():
        log.unlink()
    subprocess.run(["make", "-s", target], cwd=where, check=True, timeout=60,
                   stdout=subprocess.DEVNULL)
    return log.read_text().splitlines() if log.exists() else []


def _installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip install")]


def test_demo_queue_installs_only_the_project(tmp_path):
    where = _checkout(tmp_path)
    calls = _make(where, "demo-queue")
    assert _installs(calls) == ["-m pip install --quiet -e ."], calls
    assert not any(".[dev]" in c for c in calls), calls
    assert calls[-1].startswith("-m jobsctl.demos.queue"), calls
    # run again: nothing more is installed
    assert _installs(_make(where, "demo-queue")) == []


def test_demo_queue_uses_the_development_install_when_there(tmp_path):
    where = _checkout(tmp_path)
    assert _installs(_make(where, "install")) == ["-m pip install --quiet -e .[dev]"]
    calls = _make(where, "demo-queue")
    assert _installs(calls) == [], calls
    assert calls[-1].startswith("-m jobsctl.demos.queue"), calls


@pytest.mark.parametrize("target, runs", [("demo", "-m jobsctl.demos.pipeline"), ("test", "-m pytest")])
def test_test_and_demo_still_install_the_development_extras(tmp_path, target, runs):
    where = _checkout(tmp_path)
    calls = _make(where, target)
    assert _installs(calls) == ["-m pip install --quiet -e .[dev]"], calls
    assert calls[-1].startswith(runs), calls
