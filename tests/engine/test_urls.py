"""Store URLs: what each opens, the default, and a clear StoreOpenError for every way
opening can fail."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest
from enginekit import REPO, proc_env, read

from jobs.engine import Subspace, Versionstamp, pack_with_versionstamp
from jobs.engine.urls import DEFAULT_STORE_PATH, StoreOpenError, default_url, open_database, parse_url

HAVE_LIBFDB_C = ctypes.util.find_library("fdb_c") is not None


def _roundtrip(db) -> None:
    tr = db.create_transaction()
    tr.set(b"k", b"v")
    tr.commit().wait()
    assert read(db, b"k") == b"v"


def test_sqlite_url_creates_and_reopens(tmp_path):
    path = tmp_path / "s.sqlite"
    db = open_database(f"sqlite:{path}")
    _roundtrip(db)
    db.close()
    assert path.exists()
    db = open_database(f"sqlite:{path}")
    assert read(db, b"k") == b"v"
    db.close()


def test_memory_url():
    db = open_database("memory:")
    _roundtrip(db)
    db.close()


def test_env_var(tmp_path, monkeypatch):
    path = tmp_path / "env.sqlite"
    monkeypatch.setenv("JOBS_STORE", f"sqlite:{path}")
    assert default_url() == f"sqlite:{path}"
    db = open_database()
    _roundtrip(db)
    db.close()
    assert path.exists()


def test_default_store_in_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("JOBS_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    db = open_database()
    _roundtrip(db)
    db.close()
    assert (tmp_path / DEFAULT_STORE_PATH).exists()


def test_parse_url():
    assert parse_url("sqlite:/a/b.sqlite") == ("sqlite", "/a/b.sqlite")
    assert parse_url("sqlite:rel.sqlite") == ("sqlite", "rel.sqlite")
    assert parse_url("sqlite:~/x.sqlite") == ("sqlite", os.path.expanduser("~/x.sqlite"))
    assert parse_url("memory:") == ("memory", None)
    assert parse_url("fdb:") == ("fdb", None)
    assert parse_url("fdb:/etc/foundationdb/fdb.cluster") == ("fdb", "/etc/foundationdb/fdb.cluster")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("", "bad store URL"),
        ("postgres://x", "bad store URL"),
        ("/tmp/x.sqlite", "did you mean 'sqlite:/tmp/x.sqlite'"),
        ("sqlite:", "needs a file path"),
        ("memory:x", "takes no path"),
    ],
)
def test_bad_urls(url, words):
    with pytest.raises(StoreOpenError) as info:
        open_database(url)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bad_url_type():
    with pytest.raises(StoreOpenError):
        open_database(42)


def test_missing_directory(tmp_path):
    url = f"sqlite:{tmp_path / 'nope' / 's.sqlite'}"
    with pytest.raises(StoreOpenError) as info:
        open_database(url)
    assert url in str(info.value) and "does not exist" in str(info.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(StoreOpenError) as info:
        open_database(f"sqlite:{tmp_path}")
    assert "is a directory" in str(info.value)


def test_corrupt_file(tmp_path):
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"this is not an SQLite database" * 100)
    with pytest.raises(StoreOpenError) as info:
        open_database(f"sqlite:{path}")
    assert str(path) in str(info.value)


def test_sqlite_file_that_is_not_a_store(tmp_path):
    import sqlite3

    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
    conn.execute("INSERT INTO kv VALUES (x'01', x'02')")
    conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value) WITHOUT ROWID")
    conn.execute("INSERT INTO meta VALUES ('format', 'something-else')")
    conn.commit()
    conn.close()
    with pytest.raises(StoreOpenError) as info:
        open_database(f"sqlite:{path}")
    assert "not a job store" in str(info.value)


def _file_state(path) -> tuple:
    """Bytes of the file and the names next to it: to show that opening changed nothing."""
    return path.read_bytes(), sorted(os.listdir(path.parent))


@pytest.mark.parametrize("tables", [
    ["CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"],
    ["CREATE TABLE meta (name TEXT PRIMARY KEY, value)", "INSERT INTO meta VALUES ('format', 'their-app')"],
    ["CREATE TABLE kv (k, v)", "CREATE TABLE users (name TEXT)"],
], ids=["other tables", "another format in meta", "a kv table among others"])
def test_another_applications_sqlite_file_is_refused_untouched(tmp_path, tables):
    import sqlite3

    path = tmp_path / "app.sqlite"
    conn = sqlite3.connect(path)
    for sql in tables:
        conn.execute(sql)
    conn.commit()
    conn.close()
    before = _file_state(path)
    for create in (True, False):
        with pytest.raises(StoreOpenError) as info:
            open_database(f"sqlite:{path}", create=create)
        assert f"'{path}' is an SQLite database but not a job store" in str(info.value)
        assert _file_state(path) == before  # no table, no WAL mode, no lock file


def test_create_false_needs_an_existing_store(tmp_path, monkeypatch):
    path = tmp_path / "typo.sqlite"
    with pytest.raises(StoreOpenError) as info:
        open_database(f"sqlite:{path}", create=False)
    assert f"store file '{path}' does not exist; check the path" in str(info.value)
    with pytest.raises(StoreOpenError, match="store file .* does not exist"):
        open_database(f"sqlite:{tmp_path / 'nodir' / 's.sqlite'}", create=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBS_STORE", raising=False)
    with pytest.raises(StoreOpenError, match="store file .* does not exist"):
        open_database(None, create=False)  # the default store: its directory is not made either
    assert os.listdir(tmp_path) == []
    open_database(f"sqlite:{path}").close()  # made by a writer, then readers open it
    open_database(f"sqlite:{path}", create=False).close()
    open_database("memory:", create=False).close()  # (a private store is always new)


def test_fdb_missing_cluster_file(tmp_path):
    url = f"fdb:{tmp_path / 'no.cluster'}"
    with pytest.raises(StoreOpenError) as info:
        open_database(url)
    assert "does not exist" in str(info.value) and url in str(info.value)


def test_fdb_default_cluster_file_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("FDB_CLUSTER_FILE", str(tmp_path / "none.cluster"))
    with pytest.raises(StoreOpenError) as info:
        open_database("fdb:")
    assert "$FDB_CLUSTER_FILE" in str(info.value)


_NO_CLIENT_SCRIPT = """
import sys
from jobs.engine import Subspace, Versionstamp, pack_with_versionstamp
from jobs.engine.urls import StoreOpenError, open_database
open(sys.argv[1], "w").write("docker:docker@127.0.0.1:4500\\n")
try:
    open_database("fdb:" + sys.argv[1])
except StoreOpenError as exc:
    print("ERROR:", exc)
else:
    raise SystemExit("opened a cluster without libfdb_c?")
# the embedded engine still packs versionstamps (without fdb.impl)
db = open_database("memory:")
tr = db.create_transaction()
tr.set_versionstamped_key(pack_with_versionstamp(Subspace(("v",)), (Versionstamp(),)), b"")
tr.commit().wait()
print("EMBEDDED OK")
"""


@pytest.mark.skipif(HAVE_LIBFDB_C, reason="libfdb_c is installed here: the missing-library error cannot be seen")
def test_fdb_without_client_library(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _NO_CLIENT_SCRIPT, str(tmp_path / "fdb.cluster")],
        env=proc_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "foundationdb-clients" in done.stdout and "libfdb_c" in done.stdout
    assert "EMBEDDED OK" in done.stdout


@pytest.mark.skipif(HAVE_LIBFDB_C, reason="libfdb_c is installed here: the missing-library error cannot be seen")
def test_fdb_without_client_library_in_process(tmp_path):
    cluster = tmp_path / "fdb.cluster"
    cluster.write_text("docker:docker@127.0.0.1:4500\n")
    with pytest.raises(StoreOpenError):
        open_database(f"fdb:{cluster}")
    db = open_database("memory:")  # the embedded engine is unharmed
    tr = db.create_transaction()
    tr.set_versionstamped_key(pack_with_versionstamp(Subspace(("v",)), (Versionstamp(),)), b"")
    tr.commit().wait()
    db.close()


def test_cluster_file_search_order(tmp_path, monkeypatch):
    from jobs.engine.cluster import resolve_cluster_file

    given = tmp_path / "given.cluster"
    env = tmp_path / "env.cluster"
    local = tmp_path / "fdb.cluster"
    for f in (given, env, local):
        f.write_text("docker:docker@127.0.0.1:4500\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FDB_CLUSTER_FILE", str(env))
    assert resolve_cluster_file(given) == str(given)
    assert resolve_cluster_file(None) == str(env)
    monkeypatch.delenv("FDB_CLUSTER_FILE")
    assert resolve_cluster_file(None) == str(local)
