"""The official bindings are used as they are: importing or using this package patches
nothing in ``fdb``, so an application's own ``fdb.api_version()``/``fdb.open()`` database
and a ``jobs.open("fdb:")`` one are interchangeable, in either import order."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import textwrap

import pytest
from enginekit import REPO, proc_env, skip_without_fdb

from jobs.engine import Subspace, Versionstamp, pack_versionstamp, pack_with_versionstamp
from jobs.engine import tuple as fdb_tuple

HAVE_LIBFDB_C = ctypes.util.find_library("fdb_c") is not None


def _python(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=proc_env(), cwd=str(REPO), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


_SELECT = """
import fdb
try:
    fdb.api_version(730)
    print("SELECT:", "loaded")
except Exception as exc:
    print("SELECT:", type(exc).__name__, exc)
"""

_JOB_CYCLE = """
import sys
import fdb
import jobs
db = jobs.open("memory:")
jobs.set_type_timeout(db, "t", 5)
jobs.add(db, "t", "a", {"n": 1})
job = jobs.accept(db, "t", timeout=0)
jobs.finish(db, job, {"ok": True})
assert jobs.get_job_state(db, "t", "a") == "finished"
db.close()
if not fdb.is_api_version_selected():
    assert "fdb.impl" not in sys.modules and not hasattr(fdb, "impl"), "fdb.impl was touched"
print("CYCLE OK")
"""


def _selected(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("SELECT:"))


def test_the_package_patches_nothing_in_the_bindings():
    """``fdb.api_version`` gives the same outcome with or without the package imported and
    used (here, without libfdb_c: the bindings' own "Unable to locate" error, not an
    AttributeError from a stand-in module), and the package works after either order."""
    clean = _selected(_python(_SELECT))
    jobs_first = _python(_JOB_CYCLE + _SELECT)
    app_first = _python(_SELECT + _JOB_CYCLE)
    assert "CYCLE OK" in jobs_first and "CYCLE OK" in app_first
    assert _selected(jobs_first) == clean and _selected(app_first) == clean
    if not HAVE_LIBFDB_C:
        assert "Unable to locate the FoundationDB API shared library" in clean


@pytest.mark.parametrize("user_version", [0, 1, 0xFFFF])
def test_versionstamp_packing_is_the_tuple_layers(user_version):
    complete = Versionstamp(bytes(range(10)), user_version)
    assert fdb_tuple.unpack(pack_versionstamp(complete)) == (complete,)
    incomplete = Versionstamp(user_version=user_version)
    space = Subspace(("s", 1))
    key = pack_with_versionstamp(space, ("a", incomplete, 2))
    body, offset = key[:-4], int.from_bytes(key[-4:], "little")
    assert body[offset:offset + 10] == b"\xff" * 10
    filled = body[:offset] + bytes(range(10)) + body[offset + 10:]
    assert space.unpack(filled) == ("a", complete, 2)
    with pytest.raises(ValueError):
        pack_with_versionstamp(space, ("no stamp",))
    with pytest.raises(ValueError):
        pack_with_versionstamp(space, (incomplete, incomplete))


@pytest.mark.skipif(not HAVE_LIBFDB_C, reason="libfdb_c is not installed here: the bindings cannot pack versionstamps")
def test_versionstamp_packing_matches_the_bindings():
    import fdb

    fdb.api_version(fdb.get_api_version() if fdb.is_api_version_selected() else 730)
    space = Subspace(("s",))
    for stamp in (Versionstamp(), Versionstamp(user_version=7)):
        assert pack_with_versionstamp(space, ("a", stamp)) == space.pack_with_versionstamp(("a", stamp))
    complete = Versionstamp(b"\x01" * 10, 3)
    assert pack_versionstamp(complete) == fdb_tuple.pack((complete,))


_INTERCHANGEABLE = """
import sys
cluster_file, order = sys.argv[1], sys.argv[2]
if order == "app-first":
    import fdb
    fdb.api_version(730)
    app_db = fdb.open(cluster_file)
    import jobs
    jobs_db = jobs.open("fdb:" + cluster_file)
else:
    import jobs
    jobs_db = jobs.open("fdb:" + cluster_file)
    import fdb
    fdb.api_version(730)  # already selected by the package, at this version: fine
    app_db = fdb.open(cluster_file)
from jobs import prefixes
prefixes.clear_all(app_db)
jobs.set_type_timeout(app_db, "appt", 30)
jobs.add(app_db, "appt", "x1", {"n": 1})
assert jobs.get_job_state(app_db, "appt", "x1") == "pending"
assert jobs.get_job_state(jobs_db, "appt", "x1") == "pending"
job = jobs.accept(jobs_db, "appt", timeout=5)
assert job is not None and job.id == "x1"
out = fdb.Subspace(("jobs-tests-app",))

@fdb.transactional
def publish(tr):
    tr[out.pack(("x1",))] = b"done"      # the application's own write ...
    jobs.finish(tr, job, {"ok": True})   # ... and the finish: one transaction
publish(app_db)
assert app_db[out.pack(("x1",))] == b"done"
assert jobs.get_job_state(jobs_db, "appt", "x1") == "finished"
assert jobs.get_job_data(app_db, "appt", "x1") == {"ok": True}
del app_db[out.range()]
prefixes.clear_all(app_db)
print("INTERCHANGEABLE OK")
"""


@pytest.mark.parametrize("order", ["app-first", "jobs-first"])
def test_application_database_and_jobs_open_are_interchangeable(order):
    cluster_file = os.environ.get("FDB_CLUSTER_FILE")
    if not cluster_file:
        skip_without_fdb("fdb engine: FDB_CLUSTER_FILE is not set")
    assert "INTERCHANGEABLE OK" in _python(_INTERCHANGEABLE, cluster_file, order)


_SELECTORS = """
import sys
import jobs
from jobs.engine import KeySelector
db = jobs.open("memory:")
for k in (b"a", b"b", b"c"):
    db[k] = b"x"

def through(sel):
    tr = db.create_transaction()
    return [kv.key for kv in tr.get_range(sel.first_greater_than(b"a"), sel.last_less_or_equal(b"c") + 1)]

print("OWN:", type(KeySelector(b"a", False, 1)).__module__, through(KeySelector))
if sys.argv[1] == "load":
    import fdb
    fdb.api_version(730)
    print("LOADED:", type(KeySelector.first_greater_than(b"a")) is fdb.KeySelector, through(KeySelector))
"""


def test_a_selector_of_the_package_is_the_bindings_own_once_they_are_loaded():
    """``jobs.engine.KeySelector`` works with every call of either engine: the bindings'
    ``get_range`` takes only ``fdb.KeySelector``, which a selector made once they are
    loaded is; before (no libfdb_c needed), it is the package's own."""
    out = _python(_SELECTORS, "load" if HAVE_LIBFDB_C else "no")
    assert "OWN: jobs.engine.fdbapi [b'b', b'c']" in out
    if HAVE_LIBFDB_C:
        assert "LOADED: True [b'b', b'c']" in out
