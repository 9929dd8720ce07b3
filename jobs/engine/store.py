"""The embedded store: one SQLite file (WAL) shared by the processes of one machine, its
connections, its single writer lock, its commit history (``history.py``), and the
database API (``create_transaction``, and the bindings' one-transaction shortcuts
``get``/``set``/``get_range``...)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
import weakref

from . import errors as E, memory_dirs
from .atomic import sql_atomic
from .checkpoints import Checkpointer
from .errors import FDBError, StoreFileError
from .history import History
from .items import DatabaseShortcuts
from .transaction import Transaction
from .watches import Watches

_forks = 0  # forks of this process so far: cheaper to compare than getpid() per call


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)


def _bind_bytes_directly() -> None:
    """Give ``bytes`` an adapter that returns the value itself.  Python's ``sqlite3``
    binds int, float, str and bytearray parameters as they are, but looks for an adapter
    for a ``bytes`` one: without one registered it tries ``__adapt__`` and ``__conform__``
    and formats two AttributeErrors, for every key and value the engine binds (ten a job
    added in bulk).  With an adapter, a lookup finds it
    and ``bytes(value)`` gives the same object back.  Process-wide, and nothing else
    changes: it applies to exact ``bytes`` only (not subclasses), and an adapter someone
    registered already is kept."""
    if (bytes, sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(bytes, bytes)


_bind_bytes_directly()

FORMAT_NAME = "fdb-jobs-embedded"
# The file's format: tables ``kv``, ``meta`` (the format, its version, the history's id)
# and ``state`` (``version``: the durable ceiling of the commit counter, which lives with
# the commit history in ``<store>-hist``, ``history.py``).  A file of any other version is
# refused when opened.
FORMAT_VERSION = 2

# The page size of a new store (SQLite fixes it when the file is made).  A commit writes,
# and checksums into the write-ahead log, every page it changed, and a transaction that
# begins after another process's commit reads again every page it needs; a job's rows are
# a few hundred bytes, so half of SQLite's default 4096 moves half the bytes for the same
# rows.
PAGE_BYTES = 2048

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state (id INTEGER PRIMARY KEY CHECK (id = 0),
                                  version INTEGER NOT NULL, pruned INTEGER NOT NULL);
"""


class EmbeddedDatabase(DatabaseShortcuts):
    """A store file opened by this process.  Thread-safe; share one per process.

    ``path``: the SQLite file (created with ``create=True`` when missing; its directory
    must exist).  ``memory=True``: a private store in a temporary directory (in RAM under
    /dev/shm where available), deleted by :meth:`close`.  ``sync="full"`` makes every
    commit durable against power loss, not only against process crashes."""

    def __init__(self, path=None, *, memory: bool = False, create: bool = True, sync: str = "normal"):
        if sync not in ("normal", "full"):
            raise ValueError(f"sync must be 'normal' or 'full', not {sync!r}")
        self._tmpdir = self._owner_fd = None
        if memory:  # (a directory of its own, removed at close, or by a sweep once unowned)
            self._tmpdir, self._owner_fd = memory_dirs.make()
            path = os.path.join(self._tmpdir, "store.sqlite")
        if path is None:
            raise ValueError("EmbeddedDatabase needs a path (or memory=True)")
        self.path = os.fspath(path)
        self.memory = memory
        self._sync = sync.upper()
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StoreFileError(f"cannot open store {self.path!r}: directory {directory!r} does not exist")
        if not create and not os.path.exists(self.path):
            raise StoreFileError(f"store file {self.path!r} does not exist")
        self._forks = _forks  # (another count in a forked child: see _after_fork)
        # Kept for the store's life: a weak reference made to it later (the job layer's
        # caches key on the store, in weak dictionaries and sets) is then this one, not a
        # new object for every lookup.
        self._ref = weakref.ref(self)
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._thread_lock = threading.Lock()
        self._lock_fd = None
        self._writer = _WriteLock(self)
        self._gate = _CommitGate(self)
        self._closed = False
        self._history: History | None = None
        # watches hear other processes' commits through inotify unless told to poll
        self._use_doorbell = os.environ.get("JOBS_EMBEDDED_WATCHES", "inotify") != "poll"
        self._watches = Watches(self, self._use_doorbell)
        self._checkpointer = Checkpointer(self)
        self._init_store()

    def __repr__(self) -> str:
        return f"EmbeddedDatabase({'memory' if self.memory else self.path!r})"

    # --- connections -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            # (timeout: SQLite's busy timeout, 30 s of waiting for its locks)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute(f"PRAGMA synchronous = {self._sync}")
            conn.execute("PRAGMA cache_size = -16000")
            conn.execute(f"PRAGMA wal_autocheckpoint = {Checkpointer.SAFETY_PAGES}")
            # (a log started over is cut to this size by the next write: checkpoints.py)
            page_bytes = conn.execute("PRAGMA page_size").fetchone()[0]
            conn.execute(f"PRAGMA journal_size_limit = {Checkpointer.log_limit_bytes(page_bytes)}")
            conn.create_function("fdb_atomic", 3, sql_atomic, deterministic=True)
        except sqlite3.DatabaseError as exc:
            raise StoreFileError(f"cannot open store {self.path!r}: {exc}") from exc
        return conn

    def _after_fork(self) -> None:
        # SQLite connections and flock descriptions must not be shared with a parent.
        self._forks = _forks
        self._pool = []
        self._lock_fd = None
        self._writer.reset_counts()  # (the parent's counts are not this process's)
        self._gate = _CommitGate(self)
        self._watches = Watches(self, self._use_doorbell)
        self._checkpointer = Checkpointer(self)
        if self._history is not None:
            self._history.after_fork()

    def _get_conn(self) -> sqlite3.Connection:
        if self._closed:
            raise FDBError(E.OPERATION_CANCELLED, "database is closed")
        if self._forks != _forks:
            self._after_fork()
        try:
            return self._pool.pop()  # (atomic: no lock needed)
        except IndexError:
            pass
        try:
            return self._connect()
        except StoreFileError:
            if self._closed:  # closed meanwhile: a memory store's files went under this connect
                raise FDBError(E.OPERATION_CANCELLED, "database is closed") from None
            raise

    def _put_conn(self, conn: sqlite3.Connection, rollback: bool) -> None:
        if rollback and conn.in_transaction:
            conn.execute("ROLLBACK")
        if self._forks != _forks or self._closed:
            return
        if len(self._pool) < 16:  # (a bound, not exact between threads)
            self._pool.append(conn)
            return
        conn.close()

    def _write_lock(self) -> "_WriteLock":
        return self._writer

    def _commit_gate(self) -> "_CommitGate":
        return self._gate

    def write_lock_stats(self) -> dict:
        """This process's use of the store's single writer lock since it opened the store
        (every commit that writes takes it): ``acquired`` (times), ``wait_seconds`` (spent
        waiting for it, behind other threads and processes), ``hold_seconds`` (spent
        holding it: the conflict check, the history and SQLite's writes and commit).
        Summed over a store's processes, held time over wall time is how busy the lock is:
        near 1, commits queue for it and adding processes adds no throughput.  Not a
        FoundationDB API (a cluster has no such lock)."""
        w = self._writer
        return {"acquired": w.acquired, "wait_seconds": w.waited, "hold_seconds": w.held}

    # --- store file --------------------------------------------------------------------

    def _init_store(self) -> None:
        conn = self._connect()
        try:
            self._refuse_foreign(conn)  # before the lock file, the WAL mode or a table is made
            with self._write_lock():
                history_id, ceiling = self._prepare(conn)
                self._history = History(self.path + "-hist", history_id, ceiling)
        except sqlite3.DatabaseError as exc:
            raise StoreFileError(
                f"{self.path!r} is not a usable job store ({exc}); point the store URL at "
                "another file or remove this one"
            ) from exc
        finally:
            conn.close()

    def _prepare(self, conn) -> tuple[int, int]:
        """(Under the write lock.)  Make a new store's tables and format, or check an
        existing store's; returns its history id and the durable ceiling of its versions."""
        conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # (before the WAL mode makes the file)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(conn.execute("SELECT name, value FROM meta"))
            if not meta:
                if conn.execute("SELECT 1 FROM kv LIMIT 1").fetchone():
                    raise StoreFileError(f"{self.path!r} holds data but no store format")
                meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                        "history_id": int.from_bytes(os.urandom(8), "little") >> 1}
                conn.executemany("INSERT INTO meta (name, value) VALUES (?, ?)", meta.items())
                conn.execute("INSERT INTO state (id, version, pruned) VALUES (0, 0, 0)")
            self._check_format(meta)
            ceiling = conn.execute("SELECT version FROM state").fetchone()[0]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return int(meta["history_id"]), ceiling

    def _check_format(self, meta: dict) -> None:
        if meta.get("format") != FORMAT_NAME:
            raise StoreFileError(f"{self.path!r} is an SQLite file but not a job store")
        version = int(meta.get("format_version", 0))
        if version > FORMAT_VERSION:
            raise StoreFileError(
                f"{self.path!r} was written by a newer release (format "
                f"{meta['format_version']} > {FORMAT_VERSION}); upgrade this package"
            )
        if version < FORMAT_VERSION:
            raise StoreFileError(
                f"{self.path!r} has store format {version}, which no release opens (this one's is "
                f"{FORMAT_VERSION}); point the store URL at another file or remove this one"
            )

    def _refuse_foreign(self, conn) -> None:
        """StoreFileError when the file is another application's SQLite database: it has
        tables a store has not, or a ``meta`` table naming another format.  (An empty file,
        or one with only a store's tables, is a new or half-created store.)"""
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if not name.startswith("sqlite_")}  # (SQLite's own: statistics, sequences)
        foreign = sorted(tables - {"kv", "meta", "state"})
        if not foreign and "meta" in tables:
            fmt = conn.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
            foreign = [] if fmt is None or fmt[0] == FORMAT_NAME else [f"meta (format {fmt[0]!r:.40})"]
        if foreign:
            raise StoreFileError(
                f"{self.path!r} is an SQLite database but not a job store (it has tables "
                f"{', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); it was left as it was"
            )

    # --- the database API --------------------------------------------------------------

    def create_transaction(self) -> Transaction:
        if self._closed:
            raise FDBError(E.OPERATION_CANCELLED, "database is closed")
        return Transaction(self)

    def commit_version(self) -> int:
        """The store's commit counter (the last versionstamp's first 8 bytes)."""
        if self._closed:
            raise FDBError(E.OPERATION_CANCELLED, "database is closed")
        return self._history.read_version()

    def close(self) -> None:
        """Close connections and stop the watch thread; a memory store is deleted."""
        if self._closed:
            return
        self._closed = True
        self._watches.close()
        self._checkpointer.close()
        with self._pool_lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self._gate.close()
        if self._history is not None:
            self._history.close()
        if self._tmpdir is not None:
            memory_dirs.remove(self._tmpdir, self._owner_fd)
            self._owner_fd = None

    def __enter__(self) -> "EmbeddedDatabase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _WriteLock:
    """The store's single writer lock: a thread lock inside the process, ``flock`` on
    ``<store>-lock`` across processes (released by the kernel if the process dies)."""

    __slots__ = ("_db", "acquired", "waited", "held", "_since")

    def __init__(self, db: EmbeddedDatabase):
        self._db = db
        self._since = 0.0
        self.reset_counts()

    def reset_counts(self) -> None:
        """Zero what ``write_lock_stats`` reports (times taken; seconds waited, held)."""
        self.acquired, self.waited, self.held = 0, 0.0, 0.0

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def acquire(self, before_wait=None) -> "_WriteLock":
        """Take the lock; ``before_wait()``, if given, is called first when another thread or
        process holds it (a committer ends its read snapshot there: the commit under way
        makes it stale anyway, and a snapshot held while waiting keeps SQLite from
        starting its write-ahead log over, ``checkpoints.py``)."""
        db = self._db
        asked = time.perf_counter()
        if not db._thread_lock.acquire(blocking=False):
            if before_wait is not None:
                before_wait()
                before_wait = None
            db._thread_lock.acquire()
        try:
            if db._lock_fd is None or db._forks != _forks:
                if db._forks != _forks:
                    db._after_fork()
                db._lock_fd = os.open(db.path + "-lock", os.O_RDWR | os.O_CREAT, 0o644)
            if before_wait is None:
                fcntl.flock(db._lock_fd, fcntl.LOCK_EX)
            else:
                try:
                    fcntl.flock(db._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    before_wait()
                    fcntl.flock(db._lock_fd, fcntl.LOCK_EX)
        except BaseException:
            db._thread_lock.release()
            raise
        self._since = now = time.perf_counter()  # (counted under the lock: no other writer)
        self.waited += now - asked
        self.acquired += 1
        return self

    def release(self) -> None:
        self.held += time.perf_counter() - self._since
        try:
            fcntl.flock(self._db._lock_fd, fcntl.LOCK_UN)
        finally:
            self._db._thread_lock.release()


class _CommitGate:
    """Held, no commit of any process is under way: a shared ``flock`` on the write lock's
    file (which a committer holds exclusively), taken by a read snapshot that found one
    under way and past its writes, in its SQLite commit (``reads._begin_snapshot``).
    Readers do not wait for each other, only for the commit under way (no snapshot begins
    under the write lock: a thread holding it would wait here for its own commit,
    ``GATE_WAIT``).  One thread of a process at a time: the lock belongs to the
    descriptor.

    The wait is bounded (``GATE_WAIT``): a committer stopped in its commit (``SIGSTOP``, a
    debugger) holds every writer up, but must not hang reads such as ``jobsctl status``; past
    the bound the snapshot starts anyway, and the commit under way, if in it, counts as a
    conflict (safe, as before the gate)."""

    GATE_WAIT = 0.1  # seconds a snapshot waits for the commit under way at most
    _POLL_FIRST, _POLL_MAX = 0.00002, 0.0002  # (seconds between two tries, doubling: a commit takes 0.1-1 ms)

    __slots__ = ("_db", "_lock", "_fd", "_held")

    def __init__(self, db: EmbeddedDatabase):
        self._db = db
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._held = False

    def __enter__(self):
        self._lock.acquire()
        try:
            if self._fd is None:
                self._fd = os.open(self._db.path + "-lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._held = self._take_shared()
        except BaseException:
            self._lock.release()
            raise
        return self

    def _take_shared(self) -> bool:
        """The shared lock, tried until ``GATE_WAIT`` has passed (flock has no timeout);
        whether it was had."""
        deadline, pause = None, self._POLL_FIRST
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.GATE_WAIT
                elif now >= deadline:
                    return False
            time.sleep(pause)
            pause = min(pause * 2, self._POLL_MAX)

    def __exit__(self, *exc):
        try:
            if self._held:
                self._held = False
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

