"""One SparkSession per process, started on demand and reused by every job the process runs.

    spark = spark_session()                 # local[2,3] unless $JOBS_SPARK_MASTER says otherwise
    spark = spark_session("spark://head:7077")
    spark = spark_session("sc://head:15002")   # a Spark Connect server: no JVM here

Local mode (the default) is set up for a machine that may have only a loopback interface:
the driver binds to 127.0.0.1 (``SPARK_LOCAL_IP`` too, unless already set), the web UI and
the console progress bar are off, shuffles use few partitions, session time zone is UTC,
Python workers run this interpreter, and logging is quiet (WARN, from the bundled
``log4j2.properties``, so not even the JVM's start-up chatter reaches stderr).  Failed tasks
are retried: ``local[N]`` becomes ``local[N,3]`` (local mode ignores
``spark.task.maxFailures``), and other masters get ``spark.task.maxFailures=3``.

A ``sc://`` master makes the session a Spark Connect client (pyspark's ``connect``
extra: grpcio, pandas...): no Java is needed in this process, only the SQL settings above
apply (the server owns the rest), :func:`new_session` gives sessions of their own on the
server, and a session the server closed (idle past its timeout) is replaced by a new one.  The pipeline's code paths that Connect lacks (``SparkContext`` job groups,
the JVM's query plan) branch on :func:`is_connect_session`.

pyspark is imported only when a session is first needed, so this module (and the catalog)
work without it; a missing pyspark or Java raises :class:`SparkUnavailable` saying what to
install.  Sessions do not survive ``fork``: a forked child must not use its parent's
session (spawn worker processes instead).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from .errors import SparkUnavailable
from .records import Table
from .schema import Column, columns as check_columns

__all__ = [
    "DEFAULT_MASTER",
    "MASTER_ENV",
    "TASK_ATTEMPTS",
    "check_connect_client",
    "check_java",
    "is_connect",
    "is_connect_session",
    "is_local",
    "new_session",
    "release_session",
    "resolve_master",
    "session_config",
    "spark_schema",
    "spark_session",
    "spark_type",
    "stop_spark_session",
]

MASTER_ENV = "JOBS_SPARK_MASTER"
DEFAULT_MASTER = "local[2]"
TASK_ATTEMPTS = 3  # attempts per task before the job fails (Spark's maxFailures)
SHUFFLE_PARTITIONS = 4
CONNECT_PROBE_AFTER = 60.0  # seconds unused after which a Connect session is checked before reuse
LOG_LEVEL = "WARN"
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")

_LOCAL = re.compile(r"local(?:\[(\*|[1-9]\d*)(?:,\s*([1-9]\d*))?\])?")
_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class _Running:
    pid: int  # the process that started it
    master: str
    session: object  # pyspark.sql.SparkSession
    conf: dict  # the settings it was started with
    last_use: list = field(default_factory=lambda: [time.monotonic()])  # [when spark_session() last returned it]


_lock = threading.Lock()
_running: _Running | None = None


def resolve_master(master: str | None = None) -> str:
    """The master URL to use: ``master``, else ``$JOBS_SPARK_MASTER``, else ``local[2]``;
    a local master without a failure count gets ``TASK_ATTEMPTS`` (``local[2]`` ->
    ``local[2,3]``, ``local`` -> ``local[1,3]``)."""
    if master is not None and (not isinstance(master, str) or not master.strip()):
        raise ValueError(f"master must be a Spark master URL such as 'local[2]' or 'spark://host:7077', not {master!r}")
    url = (master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER).strip()
    local = _LOCAL.fullmatch(url)
    if local is not None and local.group(2) is None:
        return f"local[{local.group(1) or 1},{TASK_ATTEMPTS}]"
    return url


def is_local(master: str) -> bool:
    return _LOCAL.fullmatch(master) is not None


def is_connect(master: str) -> bool:
    """A Spark Connect URL (``sc://host:port``): the session is a client of that server."""
    return master.startswith("sc://")


def is_connect_session(session) -> bool:
    """Is ``session`` a Spark Connect client (no SparkContext, no JVM in this process)?"""
    return type(session).__module__.startswith("pyspark.sql.connect")


def session_config(master: str, app_name: str = "fdb-jobs", config: dict | None = None) -> dict[str, str]:
    """The Spark settings :func:`spark_session` uses for ``master`` (a resolved URL), with
    ``config`` (str keys; str, int, float or bool values) applied over them."""
    conf = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        "spark.sql.session.timeZone": "UTC",
        "spark.task.maxFailures": str(TASK_ATTEMPTS),
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}",
    }
    if is_connect(master):  # the server's settings are its own; a client sets SQL ones
        conf = {k: v for k, v in conf.items() if k.startswith("spark.sql.")}
    elif is_local(master):
        conf.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.pyspark.python": sys.executable,
                "spark.pyspark.driver.python": sys.executable,
            }
        )
    for key, value in (config or {}).items():
        if not isinstance(key, str) or isinstance(value, (bytes, dict, list, tuple, type(None))):
            raise ValueError(f"Spark setting {key!r}={value!r:.60}: keys are str, values str, int, float or bool")
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return conf


def _import_pyspark():
    try:
        import pyspark
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable(
            "pyspark is not installed: install the spark extra (pip install 'fdb-jobs[spark]')"
        ) from exc
    return pyspark, SparkSession


def _java_required(pyspark_version: str) -> int:
    """Spark 4 runs on Java 17 or newer; Spark 3 on Java 8 or newer."""
    m = re.match(r"(\d+)", pyspark_version)
    return 17 if m is not None and int(m.group(1)) >= 4 else 8


def check_java(required: int = 17) -> str:
    """The path of the ``java`` Spark will run (``$JAVA_HOME/bin/java``, else ``java`` on
    PATH), after checking that it runs and is Java ``required`` or newer.  Raises
    SparkUnavailable naming what is missing."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    where = f"$JAVA_HOME ({home})" if home else "PATH"
    if not java or not os.access(java, os.X_OK):
        raise SparkUnavailable(
            f"Java was not found on {where}: Spark needs Java {required} or newer "
            "(e.g. apt-get install openjdk-17-jre-headless), with java on PATH or JAVA_HOME set"
        )
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SparkUnavailable(f"{java} -version failed: {exc}") from exc
    text = out.stderr + out.stdout
    m = _JAVA_VERSION.search(text)
    if out.returncode != 0 or m is None:
        raise SparkUnavailable(f"{java} -version failed (exit {out.returncode}): {text.strip()[:300]}")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_392" is Java 8
        major = int(m.group(2))
    if major < required:
        raise SparkUnavailable(f"{java} is Java {major}; this Spark needs Java {required} or newer: install it and set JAVA_HOME")
    return java


def check_connect_client() -> None:
    """pyspark's Connect client, after checking its extra dependencies are installed."""
    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except ImportError as exc:
        raise SparkUnavailable(
            f"a Spark Connect master (sc://) needs the connect extra (pip install 'fdb-jobs[connect]'): {exc}"
        ) from exc


def _alive(session) -> bool:
    if is_connect_session(session):
        return not session.is_stopped
    return getattr(session.sparkContext, "_jsc", None) is not None


def _still_open(running: _Running) -> bool:
    """False for a Connect session the server closed: a server drops a session unused for
    its timeout (``spark.connect.session.manager.defaultSessionTimeout``, 60 min by
    default) and refuses every later call on it, so one unused for CONNECT_PROBE_AFTER
    seconds is asked a setting first (one round trip).  Classic sessions: always True."""
    now = time.monotonic()
    idle, running.last_use[0] = now - running.last_use[0], now
    if not is_connect(running.master) or idle < CONNECT_PROBE_AFTER:
        return True
    try:
        running.session.conf.get("spark.sql.session.timeZone")
    except Exception as exc:  # noqa: BLE001 - gRPC and Spark errors; only a closed handle is ours to renew
        if "INVALID_HANDLE" in str(exc):
            return False
    return True


def spark_session(master: str | None = None, app_name: str = "fdb-jobs", *, config: dict | None = None):
    """This process's SparkSession, started on the first call (see the module doc for its
    settings; ``config`` adds or overrides Spark settings) and returned again by later
    calls, whatever their ``app_name`` and ``config``.  Thread-safe.

    Raises SparkUnavailable when pyspark or Java is missing or the JVM does not start,
    and ValueError when ``master`` names another master than the running session's (one
    session per process: :func:`stop_spark_session` first)."""
    global _running
    want = resolve_master(master)
    if not isinstance(app_name, str) or not app_name:
        raise ValueError(f"app_name must be a non-empty str, not {app_name!r}")
    with _lock:
        running = _running
        if running is not None and _alive(running.session):
            if running.pid != os.getpid():
                raise SparkUnavailable(
                    f"the Spark session was started by process {running.pid}, and this process is a fork "
                    "of it: a session cannot cross fork; start worker processes with spawn"
                )
            if master is not None and want != running.master:
                raise ValueError(
                    f"a Spark session for master {running.master!r} is running in this process; one session "
                    f"per process: call stop_spark_session() before asking for {want!r}"
                )
            if _still_open(running):
                return running.session
            running.session.stop()  # closed by the server: a new one below
        pyspark, SparkSession = _import_pyspark()
        conf = session_config(want, app_name, config)
        if is_connect(want):
            check_connect_client()
            builder = SparkSession.builder.remote(want)
        else:
            check_java(_java_required(pyspark.__version__))
            if is_local(want):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = SparkSession.builder.master(want)
        for key, value in conf.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
            if not is_connect(want):
                session.sparkContext.setLogLevel(LOG_LEVEL)
        except Exception as exc:  # noqa: BLE001 - py4j and JVM start-up errors have many types
            raise SparkUnavailable(f"Spark did not start (master {want!r}): {exc}") from exc
        _running = _Running(os.getpid(), want, session, conf)
        return session


def new_session(session=None):
    """A session with temporary views and SQL settings of its own, sharing ``session``'s
    (default: this process's) Spark.  On Connect a new session starts from the server's
    defaults, so this process's SQL settings (time zone, ...) are applied to it again."""
    session = session or spark_session()
    fresh = session.newSession()
    if is_connect_session(fresh):
        running = _running
        conf = running.conf if running is not None and running.session is session else session_config("sc://")
        for key, value in conf.items():
            fresh.conf.set(key, value)
    return fresh


def release_session(session) -> None:
    """Release a session :func:`new_session` gave, once done with it: on Connect its
    server-side state is dropped now instead of when the server's idle timeout ends it
    (a classic session is left to the garbage collector: stopping it would stop the
    process's SparkContext)."""
    if is_connect_session(session):
        session.stop()


def stop_spark_session() -> None:
    """Stop this process's session, if it started one (the next :func:`spark_session`
    starts a new one)."""
    global _running
    with _lock:
        running, _running = _running, None
        if running is not None and running.pid == os.getpid() and _alive(running.session):
            running.session.stop()


# --- schemas -------------------------------------------------------------------------------

_SIMPLE = {
    "boolean": "BooleanType",
    "tinyint": "ByteType",
    "smallint": "ShortType",
    "int": "IntegerType",
    "bigint": "LongType",
    "float": "FloatType",
    "double": "DoubleType",
    "string": "StringType",
    "binary": "BinaryType",
    "date": "DateType",
    "timestamp": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
}


def spark_type(type_name: str):
    """The pyspark DataType of a catalog column type (``schema.TYPES`` or decimal(p,s))."""
    from pyspark.sql import types as T

    if type_name in _SIMPLE:
        return getattr(T, _SIMPLE[type_name])()
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", type_name)
    if m is None:
        raise ValueError(f"{type_name!r} is not a catalog column type")
    return T.DecimalType(int(m.group(1)), int(m.group(2)))


def spark_schema(table_or_columns):
    """The pyspark StructType of a Table, or of a schema (list of column dicts or Columns)."""
    from pyspark.sql import types as T

    cols: tuple[Column, ...]
    cols = table_or_columns.columns if isinstance(table_or_columns, Table) else check_columns(table_or_columns)
    return T.StructType([T.StructField(c.name, spark_type(c.type), c.nullable) for c in cols])
