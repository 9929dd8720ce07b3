"""FoundationDB clusters of a test's own, for the tests of faults of the cluster itself
(``tests/test_fdb_cluster_faults.py``): ``fdbserver`` processes on free loopback ports, in a
directory of the test's, which a test kills with SIGKILL and starts again with the same
arguments (same port, data directory and locality), and which are always stopped at the end.
Never the shared server of ``../shared/fdb/start`` (127.0.0.1:4500): a test that kills servers
must own them.

The binaries (FoundationDB 7.3: ``fdbserver``, ``fdbcli``, ``libfdb_c.so``) come from
``$FDB_DIR`` (``bin/`` and ``lib/``), else ``/tmp/fdb-test`` where ``../shared/fdb/start``
unpacks them, else they are unpacked from ``../shared/fdb/*.gz`` into the test's directory;
without any of those the tests skip, unless ``$JOBS_REQUIRE_FDB`` is set: then they fail.

Run as a script (``python tests/fdbcluster.py probe CLUSTER_FILE``), this module is the
probe the tests watch a cluster through while it loses a process: about five times a second
one short write transaction (1.5 s timeout) that also counts, in a snapshot read, the chaos
run's committed outputs (``bench/chaos_app.py``'s ``OUT``, under ``$JOBS_KEY_PREFIX``), one
line each on stdout: ``ok START END COUNT`` or ``err START END CODE`` (wall-clock seconds).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_FDB = os.path.join(os.path.dirname(REPO), "shared", "fdb")  # ../shared/fdb: the gzipped binaries
DEFAULT_FDB_DIR = "/tmp/fdb-test"
SHARED_PORT = 4500  # the shared server's: never ours
PROBE_KEY = b"fault-probe/writes"  # outside every prefix the project owns


@dataclasses.dataclass(frozen=True)
class Binaries:
    fdbserver: str
    fdbcli: str
    libdir: str  # holds libfdb_c.so

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with ``libdir`` first on ``LD_LIBRARY_PATH`` (for the
        bindings in child processes) and ``extra`` added."""
        path = os.pathsep.join(filter(None, [self.libdir, os.environ.get("LD_LIBRARY_PATH")]))
        return {**os.environ, "LD_LIBRARY_PATH": path, **extra}


def _installed(fdb_dir: str) -> Binaries | None:
    b = Binaries(os.path.join(fdb_dir, "bin", "fdbserver"), os.path.join(fdb_dir, "bin", "fdbcli"),
                 os.path.join(fdb_dir, "lib"))
    if all(os.access(p, os.X_OK) for p in (b.fdbserver, b.fdbcli)) and os.path.isfile(
            os.path.join(b.libdir, "libfdb_c.so")):
        return b
    return None


def _unpack(into: str) -> Binaries:
    os.makedirs(os.path.join(into, "bin"), exist_ok=True)
    os.makedirs(os.path.join(into, "lib"), exist_ok=True)
    for name, dest, mode in (("fdbserver", "bin", 0o755), ("fdbcli", "bin", 0o755), ("libfdb_c.so", "lib", 0o644)):
        target = os.path.join(into, dest, name)
        with gzip.open(os.path.join(SHARED_FDB, name + ".gz"), "rb") as src, open(target + ".tmp", "wb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(target + ".tmp", mode)
        os.replace(target + ".tmp", target)
    return _installed(into)


def find_binaries(scratch: str) -> Binaries | str:
    """The binaries to run (unpacked into ``scratch`` when only the gzipped ones exist), or
    why there are none."""
    for fdb_dir in filter(None, [os.environ.get("FDB_DIR"), DEFAULT_FDB_DIR]):
        found = _installed(fdb_dir)
        if found is not None:
            return found
    if all(os.path.isfile(os.path.join(SHARED_FDB, n + ".gz")) for n in ("fdbserver", "fdbcli", "libfdb_c.so")):
        return _unpack(os.path.join(scratch, "fdb-binaries"))
    return (f"no FoundationDB binaries: none in $FDB_DIR or {DEFAULT_FDB_DIR} (bin/fdbserver, bin/fdbcli, "
            f"lib/libfdb_c.so; ../shared/fdb/start puts them there) and no {SHARED_FDB}/*.gz to unpack")


def binaries_or_skip(scratch) -> Binaries:
    """:func:`find_binaries`, or skip the test (fail it with ``$JOBS_REQUIRE_FDB``)."""
    from enginekit import skip_without_fdb

    found = find_binaries(str(scratch))
    if isinstance(found, str):
        skip_without_fdb(f"there are {found}")
    return found


def free_ports(n: int, first: int = 4801, last: int = 4999) -> list[int]:
    """``n`` loopback ports from ``first`` to ``last`` that nothing listens on now."""
    ports = []
    for port in range(first, last + 1):
        if port == SHARED_PORT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == n:
            return ports
    raise RuntimeError(f"fewer than {n} free loopback ports in {first}-{last}")


class Cluster:
    """``processes`` fdbservers on loopback, every one a coordinator, each with a zone and a
    machine id of its own (so ``double`` replication can place its two copies), their data
    and logs under ``directory``.  A context manager: every server it started is killed at
    the end, however the block ends."""

    def __init__(self, directory, binaries: Binaries, *, processes: int, name: str = "faults"):
        self.directory = os.fspath(directory)
        self.binaries = binaries
        self.ports = free_ports(processes)
        os.makedirs(self.directory, exist_ok=True)
        self.cluster_file = os.path.join(self.directory, "fdb.cluster")
        with open(self.cluster_file, "w") as f:
            f.write(f"{name}:{name}@" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "\n")
        self.procs: list[subprocess.Popen | None] = [None] * processes

    @property
    def url(self) -> str:
        return "fdb:" + self.cluster_file

    def address(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i]}"

    def _args(self, i: int) -> list[str]:
        data, logs = (os.path.join(self.directory, f"{kind}{i}") for kind in ("data", "log"))
        os.makedirs(data, exist_ok=True)
        os.makedirs(logs, exist_ok=True)
        return [self.binaries.fdbserver, "-p", self.address(i), "-C", self.cluster_file, "-d", data, "-L", logs,
                "--locality-zoneid", f"z{i}", "--locality-machineid", f"m{i}"]

    def start(self, i: int | None = None) -> None:
        """Start server ``i`` (every server when None), with the same arguments every time."""
        for j in range(len(self.procs)) if i is None else [i]:
            assert self.procs[j] is None or self.procs[j].poll() is not None, f"server {j} is running"
            out = open(os.path.join(self.directory, f"server{j}.out"), "a")
            self.procs[j] = subprocess.Popen(self._args(j), cwd=self.directory, stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            out.close()

    def kill(self, i: int) -> float:
        """SIGKILL server ``i``; the wall-clock time of the kill."""
        proc = self.procs[i]
        assert proc is not None and proc.poll() is None, f"server {i} is not running"
        at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        return at

    def stop(self) -> None:
        """Kill every server this cluster started (by its pid) and reap it."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def cli(self, command: str, timeout: int = 5) -> str:
        """``fdbcli --exec command``'s output (its failures included: it is read, not trusted)."""
        try:
            done = subprocess.run([self.binaries.fdbcli, "-C", self.cluster_file, "--timeout", str(timeout),
                                   "--exec", command], capture_output=True, text=True, timeout=timeout + 30,
                                  env=self.binaries.env())
        except subprocess.TimeoutExpired:
            return f"fdbcli {command!r}: no answer in {timeout + 30} s"
        return done.stdout + done.stderr

    def available(self) -> bool:
        return "The database is available" in self.cli("status minimal")

    def wait_available(self, deadline: float) -> float:
        """Seconds until ``status minimal`` says the database is available (bounded by
        ``deadline`` seconds, then AssertionError with what the servers said)."""
        began = time.monotonic()
        while time.monotonic() - began < deadline:
            if self.available():
                return time.monotonic() - began
            time.sleep(0.5)
        raise AssertionError(f"cluster {self.cluster_file} not available after {deadline} s: "
                             f"{self.cli('status minimal')!r}; server output: {self.server_output()}")

    def create(self, mode: str, deadline: float = 90.0) -> float:
        """Start every server, ``configure new MODE`` (e.g. ``double memory``) and wait until
        the database is available; the seconds it took."""
        began = time.monotonic()
        self.start()
        said = ""
        while time.monotonic() - began < deadline:
            said = self.cli(f"configure new {mode}", timeout=10)
            if "Database created" in said or "already exists" in said:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"`configure new {mode}` did not succeed in {deadline} s: {said!r}; "
                                 f"server output: {self.server_output()}")
        self.wait_available(max(1.0, deadline - (time.monotonic() - began)))
        return time.monotonic() - began

    def status(self) -> dict:
        """``status json`` (empty when there is no answer)."""
        text = self.cli("status json", timeout=10)
        try:
            return json.loads(text[text.index("{"):])
        except ValueError:
            return {}

    def roles(self) -> dict[str, list[str]]:
        """Address -> roles of each server, from ``status json`` (empty when it cannot tell)."""
        return {p.get("address", "?"): sorted({r["role"] for r in p.get("roles", [])})
                for p in self.status().get("cluster", {}).get("processes", {}).values()}

    def with_role(self, role: str) -> int | None:
        """The server holding ``role`` now (e.g. ``master``), if ``status json`` tells."""
        roles = self.roles()
        return next((i for i in range(len(self.procs)) if role in roles.get(self.address(i), [])), None)

    def wait_healthy(self, deadline: float) -> float:
        """Seconds until ``status json`` says the database is healthy (every copy placed) and
        can lose a zone without losing availability (bounded: AssertionError after
        ``deadline`` seconds)."""
        began = time.monotonic()
        status: dict = {}
        while time.monotonic() - began < deadline:
            status = self.status()
            tolerance = status.get("cluster", {}).get("fault_tolerance", {})
            if (status.get("client", {}).get("database_status", {}).get("healthy")
                    and tolerance.get("max_zone_failures_without_losing_availability", 0) >= 1):
                return time.monotonic() - began
            time.sleep(0.5)
        raise AssertionError(f"cluster {self.cluster_file} not healthy and fault tolerant after {deadline} s: "
                             f"{status.get('client')}, {status.get('cluster', {}).get('fault_tolerance')}")

    def server_output(self) -> str:
        outs = []
        for j in range(len(self.procs)):
            path = os.path.join(self.directory, f"server{j}.out")
            if os.path.exists(path):
                with open(path) as f:
                    outs.append(f"[{j}] {f.read()[-500:]!r}")
        return "; ".join(outs) or "(none)"


def probe(cluster_file: str) -> None:
    """The probe (see the module docstring); runs until killed."""
    sys.path.insert(0, REPO)
    import fdb

    fdb.api_version(730)
    from bench.chaos_app import OUT

    db = fdb.open(cluster_file)
    r = OUT.range()
    while True:
        start = time.time()
        tr = db.create_transaction()
        try:
            tr.options.set_timeout(1500)
            tr.add(PROBE_KEY, (1).to_bytes(8, "little"))
            n = sum(1 for _ in tr.snapshot.get_range(r.start, r.stop))  # no conflict with the workers
            tr.commit().wait()
            line = f"ok {start:.6f} {time.time():.6f} {n}"
        except fdb.FDBError as exc:
            line = f"err {start:.6f} {time.time():.6f} {exc.code}"
        print(line, flush=True)
        time.sleep(max(0.0, 0.2 - (time.time() - start)))


if __name__ == "__main__":
    if sys.argv[1:2] != ["probe"] or len(sys.argv) != 3:
        raise SystemExit("usage: python tests/fdbcluster.py probe CLUSTER_FILE")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    probe(sys.argv[2])
