"""README.md's quickstart, run as a user runs it: its files and commands are read from the
README itself (the fenced block after each ``<!-- quickstart: NAME -->`` marker), so a
change there that breaks the quickstart breaks this test.

In a fresh directory with no ``JOBS_STORE`` (the default store, ``.jobs/jobs.sqlite``
there, as the quickstart says): tasks.py written, ``jobsctl worker tasks:processor``
started (and waited for until ``jobsctl workers`` lists it), submit.py run and its result checked, ``jobsctl status`` and ``jobsctl
serve-status`` (on a free loopback port) asked about the type, and the worker stopped by
SIGTERM, exiting 0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JOBSCTL = str(Path(sys.executable).parent / "jobsctl")
DEADLINE = 60.0  # seconds any one step may take (generous: 2 shared cores)
MARKER = re.compile(r"^<!-- quickstart: (\S+) -->\n(```|~~~)(\w*)\n(.*?)\n\2$", re.MULTILINE | re.DOTALL)


def quickstart() -> dict[str, str]:
    """The quickstart's blocks by marker name (tasks.py, worker, submit.py, status)."""
    blocks = {m.group(1): m.group(4) + "\n" for m in MARKER.finditer((ROOT / "README.md").read_text())}
    missing = {"tasks.py", "worker", "submit.py", "status"} - blocks.keys()
    assert not missing, f"README.md's quickstart lacks the blocks {sorted(missing)} (<!-- quickstart: NAME -->)"
    return blocks


def commands(block: str) -> list[list[str]]:
    """The shell block's command lines, as argv lists (comments dropped)."""
    return [argv for line in block.splitlines() if (argv := shlex.split(line, comments=True))]


def jobsctl(argv: list[str]) -> list[str]:
    assert argv[0] == "jobsctl", f"the quickstart runs {argv[0]!r}, not jobsctl"
    return [JOBSCTL, *argv[1:]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_port(argv: list[str], port: int) -> list[str]:
    """serve-status's argv with its --port replaced (or given) by ``port``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--port":
            skip = True
        elif not arg.startswith("--port="):
            out.append(arg)
    return [*out, "--port", str(port)]


def wait_for(condition, what: str, deadline: float = DEADLINE):
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {what} after {deadline} s")
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(DEADLINE)


def test_quickstart(tmp_path):
    blocks = quickstart()
    env = {k: v for k, v in os.environ.items() if k != "JOBS_STORE"}
    env["PYTHONUNBUFFERED"] = "1"
    (tmp_path / "tasks.py").write_text(blocks["tasks.py"])
    (tmp_path / "submit.py").write_text(blocks["submit.py"])

    (worker_argv,) = commands(blocks["worker"])
    worker_log = tmp_path / "worker.log"
    with open(worker_log, "wb") as log:
        worker = subprocess.Popen(jobsctl(worker_argv), cwd=tmp_path, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    server = None
    try:
        def serving():  # registered as a live worker: its type's timeout is declared, it accepts
            assert worker.poll() is None, worker_log.read_text()
            listed = subprocess.run([JOBSCTL, "workers", "--json"], cwd=tmp_path, env=env, capture_output=True,
                                    text=True, timeout=DEADLINE)
            return listed.returncode == 0 and any(w["pid"] == worker.pid for w in json.loads(listed.stdout))

        wait_for(serving, "the worker to serve")

        submitted = subprocess.run([sys.executable, "submit.py"], cwd=tmp_path, env=env, capture_output=True,
                                   text=True, timeout=DEADLINE + 30)
        assert submitted.returncode == 0, submitted.stderr
        assert "Hello, Ada!" in submitted.stdout
        assert (tmp_path / ".jobs" / "jobs.sqlite").exists()  # the default store, as the README says

        status_argv, serve_argv = commands(blocks["status"])
        assert status_argv[:2] == ["jobsctl", "status"] and serve_argv[:2] == ["jobsctl", "serve-status"]
        status = subprocess.run(jobsctl(status_argv), cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=DEADLINE)
        assert status.returncode == 0, status.stderr
        assert re.search(r"^greet\s", status.stdout, re.MULTILINE), status.stdout

        port = free_port()
        server = subprocess.Popen(jobsctl(with_port(serve_argv, port)), cwd=tmp_path, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def get_status():
            assert server.poll() is None, "serve-status exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as response:
                    return json.loads(response.read())
            except OSError:
                return None

        document = wait_for(get_status, "the status server")
        (greet,) = [t for t in document["types"] if t["type"] == "greet"]
        assert greet["finished"] == 1
        server.send_signal(signal.SIGTERM)
        server.wait(DEADLINE)

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(DEADLINE) == 0, worker_log.read_text()
        assert "succeeded 1" in worker_log.read_text()
    finally:
        stop(worker)
        if server is not None:
            stop(server)
