"""Everything the comparison needs from outside the project, installed and started here:

* the Debian packages ``redis-server`` and ``postgresql`` (``apt-get``, only when their
  binaries are missing; services are kept from starting by a temporary policy-rc.d);
* a Redis server and a PostgreSQL cluster on loopback, with their data under a temporary
  directory, stopped by ``Servers.stop()``;
* the peers' virtualenv ``bench/.peers-venv`` with the pinned packages of
  ``bench/peers/requirements.txt`` (re-installed only when that file changes).

Runs in the project's venv (standard library only).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEERS_VENV = os.path.join(ROOT, "bench", ".peers-venv")
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
REDIS_PORT = 6390
PG_PORT = 5440


def log(msg: str) -> None:
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, timeout=timeout, **kw)


# --- Debian packages ------------------------------------------------------------------------


def pg_bindir() -> str | None:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)
    for d in reversed(dirs):
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "pg_ctl")):
            return d
    return None


def ensure_packages() -> None:
    """apt-get install redis-server and postgresql unless their binaries are there already."""
    missing = []
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    if pg_bindir() is None:
        missing.append("postgresql")
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"compare: {', '.join(missing)} missing and not root: apt-get install -y {' '.join(missing)}")
    log(f"apt-get install {' '.join(missing)}")
    policy = "/usr/sbin/policy-rc.d"
    made_policy = not os.path.exists(policy)
    if made_policy:  # keep the packages' services from starting (we start our own)
        with open(policy, "w") as f:
            f.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        _run(["apt-get", "update", "-q"], 600, env=env, stdout=subprocess.DEVNULL)
        _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], 900, env=env,
             stdout=subprocess.DEVNULL)
    finally:
        if made_policy:
            os.remove(policy)
    if shutil.which("redis-server") is None or pg_bindir() is None:
        raise SystemExit("compare: apt-get finished but redis-server or initdb is still missing")


# --- the peers' venv ------------------------------------------------------------------------


def peers_python() -> str:
    return os.path.join(PEERS_VENV, "bin", "python")


def base_interpreter() -> str:
    """The interpreter the running venv was made from (resolved): the one every peer of a
    comparison runs on."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def venv_interpreter(venv: str) -> str | None:
    """The interpreter ``venv`` was made from (resolved; its ``pyvenv.cfg``'s
    ``executable``, which Python 3.11 writes), or None: no venv there, or an older one."""
    try:
        with open(os.path.join(venv, "pyvenv.cfg")) as f:
            for line in f:
                name, sep, value = line.partition("=")
                if sep and name.strip() == "executable":
                    return os.path.realpath(value.strip())
    except OSError:
        pass
    return None


def ensure_peers_venv() -> str:
    """bench/.peers-venv with requirements.txt installed, made from the interpreter the
    project's venv was made from (made again if it was not: one build of CPython ran the
    peers up to a third faster than another of the same version, and
    a comparison runs on one interpreter as on one machine); its python."""
    stamp = os.path.join(PEERS_VENV, ".installed")
    base = base_interpreter()
    with open(REQUIREMENTS, "rb") as f:
        wanted = f.read()
    made_from = venv_interpreter(PEERS_VENV)
    if made_from == base and os.path.exists(stamp):
        with open(stamp, "rb") as f:
            if f.read() == wanted:
                return peers_python()
    if made_from != base or not os.path.exists(peers_python()):
        log(f"creating {os.path.relpath(PEERS_VENV, ROOT)} with {base}")
        _run([base, "-m", "venv", "--clear", PEERS_VENV], 300)
    log("pip install -r bench/peers/requirements.txt into the peers' venv")
    _run([peers_python(), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", REQUIREMENTS], 1200)
    with open(stamp, "wb") as f:
        f.write(wanted)
    return peers_python()


# --- servers --------------------------------------------------------------------------------


def _free_port(port: int) -> int:
    for p in range(port, port + 50):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise SystemExit(f"compare: no free port in {port}-{port + 49}")


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} at start (see its log)")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


class Servers:
    """Redis and PostgreSQL on loopback, data under ``workdir``; ``stop()`` ends both."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.redis: subprocess.Popen | None = None
        self.pg_data: str | None = None
        self.pg_ctl: str | None = None
        self.redis_port = self.pg_port = 0
        self.versions: dict[str, str] = {}

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}"

    @property
    def pg_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    def start(self) -> "Servers":
        self._start_redis()
        self._start_postgres()
        return self

    def _start_redis(self) -> None:
        self.redis_port = _free_port(REDIS_PORT)
        d = os.path.join(self.workdir, "redis")
        os.makedirs(d, exist_ok=True)
        logf = open(os.path.join(d, "redis.log"), "ab")
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", d, "--daemonize", "no"], stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_port(self.redis_port, self.redis, "redis-server")
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=30).stdout
        self.versions["redis-server"] = next((w[2:] for w in out.split() if w.startswith("v=")), out.strip())
        log(f"redis-server {self.versions['redis-server']} on 127.0.0.1:{self.redis_port}")

    def _start_postgres(self) -> None:
        bindir = pg_bindir()
        self.pg_port = _free_port(PG_PORT)
        d = os.path.join(self.workdir, "pg")
        os.makedirs(d, exist_ok=True)
        os.chmod(self.workdir, 0o755)  # the postgres user must reach its directory
        as_pg: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(d, "postgres", "postgres")
            as_pg = ["runuser", "-u", "postgres", "--"]
        self.pg_data = os.path.join(d, "data")
        self.pg_ctl = os.path.join(bindir, "pg_ctl")
        self._as_pg = as_pg
        _run([*as_pg, os.path.join(bindir, "initdb"), "-D", self.pg_data, "-U", "postgres", "--auth=trust",
              "-E", "UTF8", "--no-sync"], 300, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        opts = (f"-p {self.pg_port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={d} "
                "-c max_connections=200 -c synchronous_commit=off")
        _run([*as_pg, self.pg_ctl, "-D", self.pg_data, "-l", os.path.join(d, "postgres.log"), "-o", opts, "-w",
              "-t", "60", "start"], 120, stdout=subprocess.DEVNULL)
        out = subprocess.run([os.path.join(bindir, "postgres"), "--version"], capture_output=True, text=True,
                             timeout=30).stdout
        found = re.search(r"\d+\.\d+", out)
        self.versions["postgresql"] = found.group(0) if found else "?"
        log(f"postgresql {self.versions['postgresql']} on 127.0.0.1:{self.pg_port}")

    def stop(self) -> None:
        if self.pg_data and self.pg_ctl:
            try:
                _run([*self._as_pg, self.pg_ctl, "-D", self.pg_data, "-m", "immediate", "-w", "-t", "30", "stop"], 60,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except (subprocess.SubprocessError, OSError) as exc:
                log(f"stopping postgres failed: {exc}")
            self.pg_data = None
        if self.redis is not None and self.redis.poll() is None:
            self.redis.terminate()
            try:
                self.redis.wait(10)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait(10)
        self.redis = None
