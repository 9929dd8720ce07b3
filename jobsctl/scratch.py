"""Runs of the demos and benchmarks on any store, in a key prefix of their own.

A program given a store (``--store URL``, else ``$JOBS_STORE``) must neither see nor harm
what else that store holds: on a FoundationDB cluster shared with an application, or in a
user's store file.  So it runs again as a child process under a fresh root
(``$JOBS_KEY_PREFIX``, ``jobs/prefixes.py``: ``demo-20261124-101500-3fa2c1``, below the
caller's own root if it has one), which its workers inherit; when the child ends, however it
ends, the parent clears that root, unless asked to keep it.

The root has to be chosen before the child imports anything: every subspace is built from
it at import.  Hence a child process rather than a setting.

A program's ``main`` begins with::

    url = scratch.store_url(args.store)
    if url is not None and (code := scratch.rerun("bench.chaos", argv, url, label="chaos")) is not None:
        return code
    ...  # here: no store given (a fresh embedded one), or this is the child on ``url``
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time

from jobs import StoreOpenError, prefixes, store
from jobs.engine import ENV_VAR

SCRATCH_ENV = "JOBS_SCRATCH"  # set in the child: the root's last name, so it does not run again
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project (bench/ is not installed)


def store_url(given: str | None) -> str | None:
    """The store a program was given: ``--store URL``, else ``$JOBS_STORE``; None: none."""
    return given or os.environ.get(ENV_VAR) or None


def in_scratch() -> bool:
    """Whether this process is a scratch run (its root is one :func:`rerun` chose)."""
    name = os.environ.get(SCRATCH_ENV)
    return bool(name) and prefixes.ROOT[-1:] == (name,)


def rerun(module: str, argv: list[str] | None, url: str, *, label: str, keep: bool = False) -> int | None:
    """Run ``python -m module argv`` on ``url`` under a fresh root and return its exit code,
    the root cleared afterwards (kept with ``keep``, and said how to look at it).  None when
    this process is that run already: the caller goes on."""
    if in_scratch():
        return None
    try:
        with store.opened(url):  # a bad URL or an unreachable cluster: said here, once
            pass
    except StoreOpenError as exc:
        raise SystemExit(f"{label}: {exc}") from None
    name = f"{label}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    root = prefixes.ROOT + (name,)
    env = {**os.environ, ENV_VAR: url, prefixes.ROOT_ENV: prefixes.format_root(root), SCRATCH_ENV: name,
           "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    argv = sys.argv[1:] if argv is None else argv
    _say(f"{label}: on {url}, under the key prefix {prefixes.format_root(root)!r}")
    try:
        return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode
    except KeyboardInterrupt:  # the child had the same SIGINT and stops; clear after it
        return 130
    finally:
        if keep:
            _say(f"{label}: kept; look with {prefixes.ROOT_ENV}={prefixes.format_root(root)} "
                 f"jobs --store {url} status")
        else:
            clear(url, root)
            _say(f"{label}: cleared the key prefix {prefixes.format_root(root)!r}")


def clear(url: str, root: tuple[str, ...]) -> None:
    """Remove everything under ``root`` in the store of ``url``."""
    with store.opened(url) as db:
        prefixes.clear_root(db, root)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
