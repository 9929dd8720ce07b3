"""A Spark standalone cluster and a Spark Connect server on this machine, started from the
pyspark distribution (no separate Spark download), for the tests and ``make demo SPARK=...``.

    with LocalSparkCluster(workdir, cores=1) as cluster:      # a master and one worker
        env = cluster.client_env()      # JOBS_SPARK_MASTER=spark://127.0.0.1:PORT, ...
    with ConnectServer(workdir, master="local[1]") as server:  # or master=cluster.master_url
        env = server.client_env()       # JOBS_SPARK_MASTER=sc://127.0.0.1:PORT

Everything listens on 127.0.0.1 (web UIs included: Spark binds them to ``SPARK_LOCAL_IP``)
on ports chosen free; logs, the generated Spark configuration and the worker's directory
are kept in ``workdir``.  Start-up waits on a condition (the master reports the worker
alive; the Connect server accepts connections; each on the port its log says it bound,
which Spark moves on when the one asked for is taken) up to ``deadline`` seconds and fails early,
with the log's tail, if a process exits.  Each process runs in a session of its own, so
``stop`` (SIGTERM, then SIGKILL after a grace period) reaches the executors the worker
started too; an ``atexit`` hook stops whatever is still running when the interpreter exits.

This is for one machine.  A real deployment runs Spark's own ``sbin/start-master.sh`` and
``start-worker.sh`` on its hosts (docs/operations/spark.md).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from .errors import SparkUnavailable
from .spark import MASTER_ENV, _import_pyspark, _java_required, check_java

__all__ = ["BACKENDS", "ConnectServer", "DEADLINE", "LocalSparkCluster", "spark_backend", "spark_home"]

DEADLINE = 180.0  # seconds a start-up may take (JVMs start slowly on a loaded 2-core machine)
GRACE = 30.0  # seconds a stopped process gets before SIGKILL
LOOPBACK = "127.0.0.1"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT_SERVICE = "org.apache.spark.sql.connect.service.SparkConnectService"  # (the name its log gives it)
# What an application of the local cluster asks for: one core and a modest executor, so
# that several processors share a small worker.
APP_DEFAULTS = {"spark.cores.max": "1", "spark.executor.cores": "1", "spark.executor.memory": "512m"}

_running: set = set()  # daemons started and not yet stopped (stopped at exit)


def spark_home() -> str:
    """``$SPARK_HOME``, else the pyspark package's directory (pip's pyspark carries the
    jars and ``bin/``).  SparkUnavailable when neither has ``bin/spark-class``."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        try:
            import pyspark
        except ImportError as exc:
            raise SparkUnavailable("pyspark is not installed: install the spark extra") from exc
        home = os.path.dirname(os.path.abspath(pyspark.__file__))
    if not os.access(os.path.join(home, "bin", "spark-class"), os.X_OK):
        raise SparkUnavailable(f"{home}/bin/spark-class is missing: is SPARK_HOME a Spark distribution?")
    return home


def free_port() -> int:
    """A TCP port free on loopback now (the daemon binds it a moment later)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on loopback now.  All are held open until the last is
    chosen: ports asked for one after the other may be the same one (the kernel is free to
    hand a port it just got back out again), and a daemon then gives one of its services
    the next port instead."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind((LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]


def bound_port(log_text: str, service: str) -> int | None:
    """The port a Spark daemon's log says ``service`` started on, or None before it did.
    Spark tries the next port when the one asked for is taken (``spark.port.maxRetries``),
    so the port asked for is not necessarily the one bound."""
    found = re.findall(rf"Successfully started service '{re.escape(service)}' on port (\d+)", log_text)
    return int(found[-1]) if found else None


def _wait(condition, daemons, deadline: float, what: str):
    """Poll ``condition()`` until it returns a true value; RuntimeError (with the logs'
    tails) if a daemon exits first or ``deadline`` seconds pass."""
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        dead = [d for d in daemons if not d.alive()]
        if dead or time.monotonic() > end:
            why = f"{dead[0].name} exited ({dead[0].proc.returncode})" if dead else f"not ready after {deadline:.0f} s"
            tails = "\n".join(f"--- {d.log_path}\n{d.log_tail()}" for d in daemons)
            raise RuntimeError(f"{what}: {why}\n{tails}")
        time.sleep(0.2)


class Daemon:
    """One JVM started by a script of the Spark distribution, logging to ``log_path``."""

    def __init__(self, name: str, argv: list[str], env: dict, log_path: str):
        self.name, self.log_path = name, log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        _running.add(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError as exc:
            return f"(no log: {exc})"

    def log_tail(self, lines: int = 25) -> str:
        return "".join(self.log_text().splitlines(keepends=True)[-lines:])

    def stop(self, grace: float = GRACE) -> None:
        """SIGTERM the process's session (the JVM and what it started), SIGKILL after
        ``grace`` seconds."""
        _running.discard(self)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, GRACE)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            try:  # the JVM is gone; end what it started and left behind (executors)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break


@atexit.register
def _stop_all() -> None:
    for daemon in list(_running):
        daemon.stop(grace=5)


def _prepare(workdir: str) -> dict:
    """Check that Spark can start here (SparkUnavailable says what is missing) and return
    the daemons' environment: the Spark home, a configuration directory of ours in
    ``workdir`` (APP_DEFAULTS for the applications), loopback addresses, this interpreter
    for Python workers."""
    home = spark_home()
    pyspark, _ = _import_pyspark()
    check_java(_java_required(pyspark.__version__))
    conf = os.path.join(workdir, "conf")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "spark-defaults.conf"), "w") as f:
        f.writelines(f"{k} {v}\n" for k, v in APP_DEFAULTS.items())
    return {**os.environ, "SPARK_HOME": home, "SPARK_CONF_DIR": conf, "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOG_DIR": os.path.join(workdir, "logs"), "PYSPARK_PYTHON": sys.executable}


class _Started:
    """Context-manager and stop for a group of daemons."""

    daemons: list

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()
        self.daemons = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class LocalSparkCluster(_Started):
    """A standalone master and one worker of ``cores`` cores and ``memory`` on loopback,
    started at construction (raises SparkUnavailable without Java or pyspark, RuntimeError
    if they do not come up within ``deadline`` seconds; nothing is left running then)."""

    def __init__(self, workdir: str, *, cores: int = 1, memory: str = "1g", deadline: float = DEADLINE):
        self.workdir, self.daemons = os.path.abspath(workdir), []
        self.env = _prepare(self.workdir)
        spark_class = os.path.join(self.env["SPARK_HOME"], "bin", "spark-class")
        port, ui, worker_port, worker_ui = free_ports(4)
        try:
            self.daemons.append(Daemon("master", [
                spark_class, "org.apache.spark.deploy.master.Master",
                "--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui),
            ], self.env, os.path.join(self.workdir, "master.log")))
            self.master_url = _wait(self._master_url, self.daemons, deadline, "Spark master")
            self.daemons.append(Daemon("worker", [
                spark_class, "org.apache.spark.deploy.worker.Worker",
                "--host", LOOPBACK, "--port", str(worker_port), "--webui-port", str(worker_ui),
                "--cores", str(cores), "--memory", memory,
                "--work-dir", os.path.join(self.workdir, "work"), self.master_url,
            ], self.env, os.path.join(self.workdir, "worker.log")))
            _wait(lambda: self._status().get("aliveworkers", 0) >= 1, self.daemons, deadline, "Spark worker")
        except BaseException:
            self.stop()
            raise

    def _master_url(self) -> str | None:
        """The master's ``spark://`` URL once its web UI answers (the UI's port read from
        the master's log), else None."""
        ui = bound_port(self.daemons[0].log_text(), "MasterUI")
        if ui is None:
            return None
        self.ui_url = f"http://{LOOPBACK}:{ui}"
        return self._status().get("url")

    def _status(self) -> dict:
        try:
            return self.status()
        except (OSError, ValueError):
            return {}

    def status(self) -> dict:
        """The master's view (its web UI's JSON): workers, cores, active and completed
        applications."""
        with urllib.request.urlopen(self.ui_url + "/json/", timeout=10) as response:
            return json.load(response)

    def applications(self) -> list[dict]:
        """Applications that ran or run on the cluster (name, id, state, cores...)."""
        status = self.status()
        return status.get("activeapps", []) + status.get("completedapps", [])

    def client_env(self) -> dict[str, str]:
        """Environment for processes whose Spark sessions should run on this cluster."""
        return {MASTER_ENV: self.master_url, "SPARK_CONF_DIR": self.env["SPARK_CONF_DIR"],
                "SPARK_LOCAL_IP": LOOPBACK, "PYSPARK_PYTHON": sys.executable}


class ConnectServer(_Started):
    """A Spark Connect server on loopback whose own Spark runs on ``master``
    (``local[N]``, or a cluster's ``spark://`` URL, of which it uses ``cores`` cores),
    started at construction."""

    def __init__(self, workdir: str, *, master: str = "local[1]", cores: int = 1, deadline: float = DEADLINE):
        self.workdir, self.daemons = os.path.abspath(workdir), []
        env = _prepare(self.workdir)
        self.port = free_port()
        settings = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": self.port,
            "spark.connect.grpc.port.maxRetries": 16,  # (as Spark's other services: the next port if taken)
            "spark.ui.enabled": "false",
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.sql.session.timeZone": "UTC",
            "spark.cores.max": cores,
        }
        argv = [os.path.join(env["SPARK_HOME"], "bin", "spark-submit"), "--class", CONNECT_CLASS,
                "--name", "Spark Connect server", "--master", master]
        for key, value in settings.items():
            argv += ["--conf", f"{key}={value}"]
        try:
            self.daemons.append(Daemon("connect", argv, env, os.path.join(self.workdir, "connect.log")))
            self.port = _wait(self._serving, self.daemons, deadline, "Spark Connect server")
        except BaseException:
            self.stop()
            raise
        self.url = f"sc://{LOOPBACK}:{self.port}"

    def _serving(self) -> int | None:
        """The port the server's log says it bound, once it accepts connections there;
        None before.  (Not the port asked for: taken meanwhile, Spark binds the next one,
        and a connection to the one asked for would reach whatever took it.)"""
        port = bound_port(self.daemons[0].log_text(), CONNECT_SERVICE)
        if port is None:
            return None
        try:
            with socket.create_connection((LOOPBACK, port), timeout=2):
                return port
        except OSError:
            return None

    def client_env(self) -> dict[str, str]:
        """Environment for processes whose Spark sessions should be this server's clients."""
        return {MASTER_ENV: self.url}


BACKENDS = ("local", "cluster", "connect")


@contextlib.contextmanager
def spark_backend(kind: str, workdir: str, processes: int = 1):
    """Start the Spark of ``kind`` for the block; yields the environment that makes a
    process's session use it.  ``local``: nothing started (each process its own local
    Spark); ``cluster``: a standalone master and a worker with a core and 512 MiB for each
    of ``processes`` Spark applications, plus one; ``connect``: that cluster and a Spark
    Connect server on it, whose clients the processes are.  ``workdir`` (replaced) keeps
    the logs."""
    if kind not in BACKENDS:
        raise ValueError(f"Spark backend must be one of {', '.join(BACKENDS)}, not {kind!r}")
    if kind == "local":
        yield {}
        return
    shutil.rmtree(workdir, ignore_errors=True)
    slots = processes + 1
    with LocalSparkCluster(os.path.join(workdir, "cluster"), cores=slots, memory=f"{512 * slots}m") as cluster:
        if kind == "cluster":
            yield cluster.client_env()
            return
        with ConnectServer(os.path.join(workdir, "connect"), master=cluster.master_url, cores=processes) as server:
            yield server.client_env()
