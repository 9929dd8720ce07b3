"""Helpers shared by the engine tests; written against the FDB Python API only, so that
they work on the embedded engine and on the real bindings alike."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.engine import error_code

REPO = Path(__file__).resolve().parents[2]
PROC = Path(__file__).with_name("engine_proc.py")
REQUIRE_FDB_ENV = "JOBS_REQUIRE_FDB"  # set (as .ci/run does where it starts a cluster): fail, not skip


def skip_without_fdb(reason: str) -> None:
    """Skip the calling fdb case, which has no cluster here (or, with $JOBS_REQUIRE_FDB,
    fail it: a run that promised a cluster must not pass by skipping its cases)."""
    if os.environ.get(REQUIRE_FDB_ENV):
        pytest.fail(f"{REQUIRE_FDB_ENV} is set but {reason}")
    pytest.skip(reason)


def val(x) -> bytes | None:
    """``bytes | None`` from a value, a ``get`` future or a ``get_key`` future (any engine)."""
    if hasattr(x, "wait"):
        x = x.wait()
    if x is None or x == None:  # noqa: E711 - the bindings' Value compares equal to None
        return None
    return bytes(x)


def read(db, key) -> bytes | None:
    """The value of ``key`` in a transaction of its own, kept alive until the read is done
    (a dropped transaction cancels its reads: 1025)."""
    tr = db.create_transaction()
    return val(tr.get(key))


def rows(result) -> list[tuple[bytes, bytes]]:
    """A range read as a list of ``(key, value)`` tuples (the bindings return an iterator)."""
    return [(bytes(k), bytes(v)) for k, v in result]


def le(n: int, size: int = 8) -> bytes:
    return n.to_bytes(size, "little", signed=n < 0)


def from_le(b: bytes | None) -> int:
    return 0 if b is None else struct.unpack("<q", b.ljust(8, b"\x00")[:8])[0]


@contextlib.contextmanager
def expect_fdb_error(*codes: int):
    """Assert that the block raises a FoundationDB error with one of ``codes`` (either
    engine's FDBError); where the real bindings defer an error to commit, the block must
    include the commit."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - filtered on the code below
        code = error_code(exc)
        if code is None:
            raise
        assert code in codes, f"expected FDB error {codes}, got {code}: {exc}"
    else:
        pytest.fail(f"expected FDB error {codes}; nothing was raised")


def wait_until(predicate, timeout: float = 60.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes (generous, never a timing
    assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def proc_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def spawn(*args: str, **kwargs) -> subprocess.Popen:
    """Start ``engine_proc.py ARGS...`` in a new Python process."""
    return subprocess.Popen(
        [sys.executable, str(PROC), *map(str, args)], env=proc_env(), cwd=str(REPO), **kwargs
    )


def run_proc(*args: str, timeout: float = 300.0) -> str:
    """Run ``engine_proc.py ARGS...`` to completion; its stdout.  Fails the test, with the
    child's stderr, if it exits non-zero."""
    done = subprocess.run(
        [sys.executable, str(PROC), *map(str, args)],
        env=proc_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"child {args} exited {done.returncode}:\n{done.stderr}"
    return done.stdout
