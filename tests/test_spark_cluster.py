"""The pipeline's operations on a real Spark, started here from the pyspark distribution
(``pipeline.spark_cluster``): a standalone cluster (a master and one worker on loopback) and
a Spark Connect server.  A processor *process* (``jobsctl worker pipeline.worker:processor``)
runs validate, build_index and a CTAS on each, and every result must equal that of the same
operations run in local mode by a processor in this process (the ``spark`` session).

On Connect the processor process is given no Java at all (``JAVA_HOME`` names a missing
directory and ``PATH`` holds only this interpreter's directory): it needs none.

Skipped without Java (or, for Connect, without pyspark's Connect client dependencies),
unless ``JOBS_REQUIRE_SPARK_CLUSTER`` is set: then they fail (so each test names its
cluster fixture first: it is set up, and judged, before the local ``spark`` session).  Starting the cluster takes
~10 s, each processor process's Spark another ~10 s."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

import pytest

import jobs
import pipeline
from pipeline import ctas as pctas
from pipeline import index as pindex
from pipeline.partition_files import write_partition
from pipeline.runtime import operations, processor
from waiting import running

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE = 600.0  # a generous bound on an operation run by a processor process (JVM starts included)
SOURCE = "shop.orders"
COLUMNS = [
    {"name": "id", "type": "bigint", "nullable": False},
    {"name": "chunk", "type": "int", "nullable": False},
    {"name": "qty", "type": "bigint", "check": "qty >= 0"},
    {"name": "name", "type": "string", "nullable": False},
]
BAD = {7: ("qty", -5), 19: ("name", None), 20: ("qty", 100_000)}  # id -> a value validate must find
QUERY = f"SELECT id, chunk, qty * 2 AS qty2, upper(name) AS name FROM {SOURCE} WHERE qty > 10 OR qty IS NULL"


# CTAS queries and how the analysis judges them (must be the same on Connect as in local mode)
VERDICTS = {
    f"SELECT id, qty * 2 AS q FROM {SOURCE}": "ok",
    f"SELECT id, 'rand(1)' AS s FROM {SOURCE} -- rand()": "ok",
    f"SELECT id, rand() AS r FROM {SOURCE}": "not deterministic",
    f"SELECT id, RAND (7) AS r FROM {SOURCE}": "not deterministic",
    f"SELECT id, uuid() AS u FROM {SOURCE}": "not deterministic",
    f"SELECT id, monotonically_increasing_id() AS m FROM {SOURCE}": "not deterministic",
    f"SELECT id, spark_partition_id() AS p FROM {SOURCE}": "not deterministic",
    f"SELECT nope FROM {SOURCE}": "does not analyse",
}


def print_verdicts(url: str) -> None:
    """Print (JSON) how this process's Spark judges each query of VERDICTS."""
    from jobs.engine.transactional import run

    from pipeline.ctas_query import analyse, find_sources
    from pipeline.errors import QueryError

    db = jobs.open(url)
    out = {}
    for query in VERDICTS:
        try:
            analyse(query, run(db, lambda tr: find_sources(tr, query)), None)
            out[query] = "ok"
        except QueryError as exc:
            out[query] = next((v for v in VERDICTS.values() if v in str(exc)), str(exc))
    print(json.dumps(out))


def print_renewal() -> None:
    """Print (JSON) whether this process's Connect session is replaced once the server
    closed it, as a server does with a session idle past its timeout."""
    from pipeline import spark as pspark

    first = pspark.spark_session()
    first.client.release_session()  # what the server's idle timeout does
    pspark.CONNECT_PROBE_AFTER = 0.0
    second = pspark.spark_session()
    print(json.dumps({"renewed": second is not first, "answer": second.sql("SELECT 41 + 1 AS x").first()["x"]}))


def print_answer() -> None:
    """Print (JSON) what this process's Connect session answers to a query."""
    from pipeline import spark as pspark

    print(json.dumps({"answer": pspark.spark_session().sql("SELECT 41 + 1 AS x").first()["x"]}))


def _row(i):
    qty, name = i % 50, f"n{i % 10}"
    if i in BAD:
        column, value = BAD[i]
        qty, name = (value, name) if column == "qty" else (qty, value)
    return (i, i % 3, qty, name)


# --- without a JVM ------------------------------------------------------------------------------


def test_connect_sessions_set_only_sql_settings():
    from pipeline import spark as pspark

    assert pspark.is_connect("sc://head:15002") and not pspark.is_connect("spark://head:7077")
    conf = pspark.session_config("sc://head:15002", "app", {"spark.sql.shuffle.partitions": 8})
    assert conf == {"spark.sql.shuffle.partitions": "8", "spark.sql.session.timeZone": "UTC"}


def test_the_connect_determinism_check_sees_calls_outside_strings_and_comments():
    from pipeline.ctas_query import NONDETERMINISTIC, _calls

    query = "SELECT RAND (1) AS r, 'uuid()' AS s, `shuffle`(x) AS y /* input_file_name() */ FROM a.b -- uuid()"
    assert _calls(query) & NONDETERMINISTIC == {"rand", "shuffle"}


def test_spark_backends_are_named():
    from pipeline.spark_cluster import spark_backend

    with spark_backend("local", "/nonexistent") as env:
        assert env == {}  # nothing started
    with pytest.raises(ValueError, match="local, cluster, connect"):
        with spark_backend("yarn", "/nonexistent"):
            pass


def test_the_ports_given_to_the_daemons_are_distinct():
    # CI once gave the master's RPC and web UI the same port (two free ports asked for one
    # after the other): the UI moved to the next port and the start-up polled the RPC port.
    from pipeline.spark_cluster import free_ports

    for _ in range(20):
        ports = free_ports(4)
        assert len(set(ports)) == 4


def test_the_master_ui_is_found_on_the_port_spark_bound_not_the_one_asked_for():
    from pipeline.spark_cluster import bound_port

    log = ("INFO Utils: Successfully started service 'sparkMaster' on port 38629.\n"
           "WARN Utils: Service 'MasterUI' could not bind on port 38629. Attempting port 38630.\n"
           "INFO Utils: Successfully started service 'MasterUI' on port 38630.\n")
    assert bound_port(log, "MasterUI") == 38630
    assert bound_port(log, "sparkMaster") == 38629
    assert bound_port(log.split("WARN")[0], "MasterUI") is None  # not started yet


# --- on a real Spark ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Store:
    db: object
    url: str


@pytest.fixture(scope="module")
def store(spark, tmp_path_factory):
    """A store file with published table shop.orders: 3 partitions, 2 files each, 60 rows."""
    tmp = tmp_path_factory.mktemp("spark-cluster-store")
    url = "sqlite:" + str(tmp / "jobs.sqlite")
    db = jobs.open(url)
    pipeline.create_database(db, "shop", location=str(tmp / "data"))
    table = pipeline.stage_table(db, "shop", "orders", COLUMNS, partition_by="chunk", partitions=3)
    schema = pipeline.spark_schema([{**c, "nullable": True} for c in COLUMNS])  # the files may break NOT NULL
    for pid in range(3):
        frame = spark.createDataFrame([_row(i) for i in range(60) if i % 3 == pid], schema).repartition(2)
        out = write_partition(frame, table.partition_location(pid, "load"), columns=table)
        pipeline.set_partition(db, table, pid, out.location, rows=out.rows, bytes=out.bytes)
    pipeline.commit_table(db, table)
    pipeline.publish_database(db, "shop")
    yield Store(db, url)
    db.close()


def run_operations(db, spark, mode: str) -> dict:
    """Validate and build an index of shop.orders (together), then a CTAS of it; the
    outcomes, with everything that names ``mode`` (index and target names) taken out."""
    ops = operations(db)
    v = ops.start_operation("validate", SOURCE, {"types": {"qty": "smallint"}})
    i = pindex.build_index(db, ops, SOURCE, "name", f"by_name_{mode}")
    vs = ops.wait_operation(SOURCE, "validate", v, timeout=DEADLINE)
    ixs = ops.wait_operation(SOURCE, "build_index", i, timeout=DEADLINE)
    target = f"shop.big_{mode}"
    c = pctas.ctas(db, ops, target, QUERY, partition_by="chunk", partitions=2)
    cs = ops.wait_operation(target, "ctas", c, timeout=DEADLINE)
    return {"validate": _validate_outcome(vs), "index": _index_outcome(db, spark, ixs, f"by_name_{mode}"),
            "ctas": _ctas_outcome(db, spark, cs, target), "ran_on": {
                op: {w.rsplit(":", 1)[-1] for ran in st.ran_on.values() for w in ran} for op, st in
                (("validate", vs), ("build_index", ixs), ("ctas", cs))}}


def _validate_outcome(status) -> dict:
    reports = {}
    for part, report in status.results.items():
        report = dict(report)
        report["samples"] = {k: sorted(rows, key=lambda r: r["id"]) for k, rows in report.get("samples", {}).items()}
        reports[part] = (status.partitions[part], report)
    return {"state": status.state, "partitions": reports}


def _index_outcome(db, spark, status, name: str) -> dict:
    index = pindex.get_index(db, SOURCE, name)
    entries = {pid: [tuple(r) for r in pipeline.read_partition(
        spark, pindex.index_location(index["location"], pid) + "/sorted").collect()] for pid in range(3)}
    counts = {p: (r["rows"], r["runs"]) for p, r in status.results.items()}
    found = sorted(r["id"] for r in pindex.lookup(db, spark, SOURCE, name, "n3"))
    return {"state": status.state, "index": index["state"], "entries": entries, "counts": counts, "n3": found}


def _ctas_outcome(db, spark, status, target: str) -> dict:
    dbname, name = target.split(".")
    table = pipeline.get_table(db, dbname, name)
    rows = {}
    for part in pipeline.get_partitions(db, table):
        rows[part.pid] = sorted(tuple(r) for r in pipeline.read_partition(spark, part.location, columns=table).collect())
    columns = [(c.name, c.type, c.nullable) for c in table.columns]
    counts = {p: r["rows"] for p, r in status.results.items()}
    return {"state": status.state, "columns": columns, "rows": rows, "counts": counts}


@pytest.fixture(scope="module")
def local_outcome(store, spark):
    """The operations run in local mode, by a processor in this process."""
    with running(processor(store.db), concurrency=2):
        outcome = run_operations(store.db, spark, "local")
    assert outcome["ran_on"] == {op: {str(os.getpid())} for op in ("validate", "build_index", "ctas")}
    assert outcome["validate"]["state"] == "failed" and outcome["index"]["state"] == "success"
    assert outcome["ctas"]["state"] == "success" and sum(len(r) for r in outcome["ctas"]["rows"].values()) > 0
    return outcome


@contextlib.contextmanager
def processor_process(store, env: dict, log_path: str):
    """A processor process (``jobsctl worker pipeline.worker:processor``) on ``store`` with
    ``env`` added; stopped (SIGTERM, as an operator would) at the end of the block."""
    cmd = [sys.executable, "-m", "jobsctl", "--store", store.url, "worker", "pipeline.worker:processor",
           "--concurrency", "2"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **env},
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _log(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-4000:]


def test_standalone_cluster_gives_the_local_results(spark_cluster, store, spark, local_outcome, tmp_path):
    log = str(tmp_path / "processor.log")
    with processor_process(store, spark_cluster.client_env(), log) as proc:
        outcome = run_operations(store.db, spark, "cluster")
        assert proc.poll() is None, _log(log)
    assert outcome["ran_on"] == {op: {str(proc.pid)} for op in ("validate", "build_index", "ctas")}, _log(log)
    assert outcome == {**local_outcome, "ran_on": outcome["ran_on"]}
    # the processor was an application of the cluster, and the worker ran its executor
    apps = [a for a in spark_cluster.applications() if a.get("name") == "fdb-jobs"]
    assert apps, spark_cluster.applications()
    work = os.path.join(spark_cluster.workdir, "work")
    assert any(os.listdir(os.path.join(work, app)) for app in os.listdir(work)), "no executor ran"


def test_spark_connect_gives_the_local_results_with_no_java_in_the_processor(spark_connect, store, spark,
                                                                           local_outcome, tmp_path):
    log = str(tmp_path / "processor.log")
    no_java = {**spark_connect.client_env(), "JAVA_HOME": str(tmp_path / "no-java"),
               "PATH": os.path.dirname(sys.executable)}
    with processor_process(store, no_java, log) as proc:
        outcome = run_operations(store.db, spark, "connect")
        assert proc.poll() is None, _log(log)
    assert outcome["ran_on"] == {op: {str(proc.pid)} for op in ("validate", "build_index", "ctas")}, _log(log)
    assert outcome == {**local_outcome, "ran_on": outcome["ran_on"]}


def on_connect(server, call: str, tmp_path) -> dict:
    """What ``call`` (a function of this module) prints, run in a Connect client process
    with no Java."""
    code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_spark_cluster as t; t.{call}"
    env = {**os.environ, "PYTHONPATH": ROOT, **server.client_env(), "JAVA_HOME": str(tmp_path / "no-java"),
           "PATH": os.path.dirname(sys.executable)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=DEADLINE)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_spark_connect_judges_ctas_queries_as_local_mode_does(spark_connect, store, spark, tmp_path, capsys):
    """The CTAS analysis (result schema, determinism) in a Connect client with no Java."""
    print_verdicts(store.url)
    local = json.loads(capsys.readouterr().out)
    assert local == VERDICTS
    assert on_connect(spark_connect, f"print_verdicts({store.url!r})", tmp_path) == VERDICTS


def test_a_connect_session_the_server_closed_is_replaced(spark_connect, tmp_path):
    assert on_connect(spark_connect, "print_renewal()", tmp_path) == {"renewed": True, "answer": 42}


def test_a_connect_server_whose_port_was_taken_is_found_on_the_port_it_bound(tmp_path, monkeypatch,
                                                                            spark_unavailable):
    """The port chosen for the server can be taken before the server binds it (CI once had
    the master's web UI land on its RPC port that way): Spark then binds the next one, and
    the server is looked for there, not on the taken one, which accepts connections too."""
    from pipeline import spark as pspark
    from pipeline import spark_cluster
    from pipeline.errors import SparkUnavailable

    with socket.socket() as taken:
        taken.bind((spark_cluster.LOOPBACK, 0))
        taken.listen()
        held = taken.getsockname()[1]
        monkeypatch.setattr(spark_cluster, "free_port", lambda: held)
        try:
            pspark.check_connect_client()
            server = spark_cluster.ConnectServer(str(tmp_path / "connect"), master="local[1]")
        except SparkUnavailable as exc:
            spark_unavailable("a Spark Connect server", exc)
        with server:
            assert server.port != held and server.url == f"sc://127.0.0.1:{server.port}"
            assert on_connect(server, "print_answer()", tmp_path) == {"answer": 42}
