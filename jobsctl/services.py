"""The ``jobs`` commands that run until a signal: a worker (a ``processors.Processor``
from the user's module), the activity monitor, the status server."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import secrets
import signal
import sys
import threading
import traceback
from datetime import datetime

import orjson

import jobs
from jobs.engine import ENV_VAR, default_url, is_database

from .commands import open_store
from .views import say

POLL = 0.5  # seconds between looks at the monitor's counters

@contextlib.contextmanager
def until_signal():
    """An Event set by SIGTERM or SIGINT while inside (the handlers are put back after).
    The handler sets it from another thread: it runs in the main thread, which may be
    inside ``stop.wait()`` holding the Event's own (not reentrant) lock."""
    stop = threading.Event()

    def handler(*_):
        threading.Thread(target=stop.set, daemon=True).start()

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def cmd_monitor(args):
    from monitor import duties as monitor_duties

    seen = {"reenqueued": 0, "pruned": 0, "failed_passes": 0}

    def report():
        counts = {"reenqueued": monitor.reenqueued, "pruned": pruner.removed,
                  "failed_passes": sum(duty.errors for duty in duties)}
        for name, what in (("reenqueued", "re-enqueued {} job(s)"), ("pruned", "pruned {} finished job(s)"),
                           ("failed_passes", "{} pass(es) failed (logged)")):
            if counts[name] != seen[name]:
                say(args, f"{datetime.now().isoformat(timespec='seconds')} {what.format(counts[name] - seen[name])}, "
                           f"{counts[name]} in all")
        seen.update(counts)

    _log_to_stderr()
    with open_store(args) as db, until_signal() as stop:
        duties = monitor_duties(db)
        monitor, pruner = duties[0], duties[1]  # (re-enqueues; retention)
        for duty in duties:
            duty.start()
        say(args, f"monitoring {args.store or default_url()}; stop with SIGTERM or Ctrl-C")
        try:
            while not stop.wait(POLL):
                report()
        finally:
            for duty in duties:
                duty.stop()
    report()  # what the last pass did (stop() waited for it)
    return {**seen, "unreadable": sorted(f"{t}/{j}" for t, j in monitor.unreadable.jobs)}


def _log_to_stderr() -> None:
    """The service's log lines (a re-enqueue, a failed pass) on stderr, with their time and
    logger, unless the program set logging up itself."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")


def cmd_serve_status(args):
    """Prints where it serves first (a JSON object with --json), then nothing more: a
    script starting it reads that line and may stop it with SIGTERM."""
    from monitor import StatusServer
    from processors.failures import TaskActions

    token = read_token(args.token_file) if args.token_file else secrets.token_urlsafe(24) if args.new_token else None
    with open_store(args, create=False) as db, until_signal() as stop:
        with StatusServer(db, args.host, args.port, limit=args.limit, token=token, actions=TaskActions(db)) as server:
            if args.json:
                print(orjson.dumps({"url": server.url, **({"token": token} if args.new_token else {})}).decode(),
                      flush=True)
            elif args.new_token:
                print(f"token: {token}", flush=True)
            actions = ", /api with the token" if token else ""
            say(args, f"serving status on {server.url} (/status, /metrics, /healthz{actions})")
            stop.wait()
    return None


def read_token(path: str) -> str:
    """The token in file ``path`` (its first line); ValueError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the token file {path}: {exc.strerror or exc}") from exc
    if not token:
        raise ValueError(f"the token file {path} is empty: put a token of 16 characters or more in it")
    return token


def load_processor(module_name: str, attr: str):
    """The Processor ``attr`` of ``module_name``, imported as ``python -m`` would (the
    working directory first on sys.path).  ValueError/TypeError say what is missing; an
    error in the module's own code prints its traceback first."""
    import processors

    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise ValueError(f"cannot import {module_name!r}: there is no such module in the working directory "
                             "or on sys.path") from exc
        raise ValueError(f"cannot import {module_name!r}: {exc}") from exc
    except (jobs.StoreOpenError, jobs.JobsError):  # from jobs.open() in the module: a bad --store, ...
        raise
    except Exception:  # noqa: BLE001 - the module's own code failed: its traceback tells where
        traceback.print_exc()
        raise ValueError(f"importing {module_name!r} failed (traceback above)") from None
    try:
        processor = functools.reduce(getattr, attr.split("."), module)
    except AttributeError as exc:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from exc
    if not isinstance(processor, processors.Processor):
        kind = type(processor).__name__
        if is_database(processor):
            kind, hint = f"{kind} (a store's database)", "name the Processor made on it"
        else:
            hint = "name a Processor"
        raise TypeError(f"{module_name}:{attr} is not a processors.Processor but {_article(kind)} {kind}: {hint} "
                        "(processor = processors.Processor(db)) as MODULE:ATTR")
    return processor


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"



def cmd_worker(args):
    module_name, attr = args.target
    if args.store is not None:
        # The user's module opens its store at import time with jobs.open(): point it here.
        os.environ[ENV_VAR] = args.store
    processor = load_processor(module_name, attr)
    _log_to_stderr()
    say(args, f"worker {module_name}:{attr} on {default_url()}: types {', '.join(processor.types) or '-'}, "
               f"concurrency {args.concurrency}; stop with SIGTERM or Ctrl-C", err=True)
    processor.run(concurrency=args.concurrency)
    return {"stats": dict(processor.stats)}


