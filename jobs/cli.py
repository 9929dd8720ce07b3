"""The ``jobs`` console script: look at and change a job store, run a worker or the
activity monitor, serve the status over HTTP.

    jobs [--store URL] [--json] COMMAND [ARGS...]

The store is ``--store URL``, else ``$JOBS_STORE``, else the default file (see
``jobs.engine.urls``).  Output is aligned text for people; ``--json`` (before or after the
command) prints one JSON document on stdout instead.  Errors print one line,
``jobs: error: ...``, on stderr: exit status 2 for usage errors (argparse's), 1 for
everything else (unknown job, bad JSON, a store that cannot be opened).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from datetime import datetime

import orjson

import jobs

from . import checks
from . import status as status_mod
from .api import get_run_info
from .engine.transactional import run as run_transaction
from .job import RunInfo
from .engine.urls import ENV_VAR, default_url

STATES = ("pending", "running", "finished")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
POLL = 0.5  # seconds between looks at the monitor's re-enqueue counter
GC_GRACE = 600.0  # `gc --grace` default: pipeline.collector.DEFAULT_GRACE (checked by a test)


# --- argument types (argparse turns their ArgumentTypeError into a usage error, exit 2) --


def parse_time(text: str, now: float | None = None) -> float:
    """``--at``: seconds since the epoch, ``+N[s|m|h|d]`` from now, ``-N[s|m|h|d]`` ago, or
    an ISO-8601 time (local time when it names no zone); a time a date can show (as
    ``jobs.add`` checks it: not negative, before the year 9999)."""
    text = text.strip()
    try:
        if text[:1] in ("+", "-"):
            amount, unit = (text[1:-1], text[-1]) if text[-1:] in _UNITS else (text[1:], "s")
            sign = 1 if text[0] == "+" else -1
            value = (time.time() if now is None else now) + sign * float(amount) * _UNITS[unit]
        else:
            try:
                value = float(text)
            except ValueError:
                value = datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad time {text!r}: expected seconds since the epoch, an ISO-8601 time, +N[s|m|h|d] (from now) "
            "or -N[s|m|h|d] (ago)"
        ) from None
    try:
        return checks.scheduled_time(value, "the time")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad time {text!r}: {exc}") from None


_PAST = re.compile(r"-[0-9.]")


def _attach_past_times(argv: list[str]) -> list[str]:
    """``--at -5m`` as ``--at=-5m``: argparse takes an argument that starts with '-' for an
    option (unless it is a plain negative number) and --at would miss its value."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--at" and _PAST.match(arg):
            out[-1] = f"--at={arg}"
        else:
            out.append(arg)
    return out


def _count(text: str, least: int, most: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least or (most is not None and value > most):
        expected = f">= {least}" if most is None else f"from {least} to {most}"
        raise argparse.ArgumentTypeError(f"expected an integer {expected}, not {text!r}")
    return value


def _grace(text: str) -> float:
    try:
        return checks.seconds(float(text), "--grace")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, not {text!r}") from exc


def _target(text: str) -> tuple[str, str]:
    module, _sep, attr = text.partition(":")
    if not module or not attr:
        raise argparse.ArgumentTypeError(f"expected MODULE:PROCESSOR (e.g. tasks:processor), not {text!r}")
    return module, attr


def _data(text: str | None) -> dict | None:
    """``--data``: parsed here rather than by argparse, so bad JSON exits 1 as the other
    data errors do (jobs.add says when it is not an object)."""
    if text is None:
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"--data is not valid JSON: {exc}") from exc
    if data is None:  # (jobs.add takes None for {})
        raise jobs.JobDataError("--data null is not a JSON object: give one, such as '{\"k\": 1}', "
                                "or leave --data out for {}")
    return data


# --- human formatting -------------------------------------------------------------------


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): a name an older
    release stored with one must not break a line or a column."""
    return checks.CONTROL_CHARACTERS.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def _table(headers: list[str], rows: list[list]) -> str:
    cells = [headers, *[[_printable(str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def _duration(seconds: float) -> str:
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def _when(t: float, now: float) -> str:
    if t == 0:
        return "asap"
    try:
        stamp = datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # stored by an older release: jobs.add refuses it
        return f"{t:.15g} (seconds since the epoch, not a date)"
    return f"{stamp} (in {_duration(t - now)})" if t > now else f"{stamp} ({_duration(now - t)} ago)"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}s"


def _short(data: dict, width: int = 60) -> str:
    text = orjson.dumps(data).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def _ago(a: status_mod.Activity | None) -> str:
    if a is None:
        return "-"
    return f"{a.behind} commits ago" if a.age is None else f"~{_duration(a.age)} ago"


def _job_doc(info: jobs.JobInfo) -> dict:
    return info._asdict()


def _run_doc(run: RunInfo) -> dict:
    """``jobs show``'s extra keys, those known: the last worker, the lost workers, the
    failure (a job never accepted has none)."""
    lost = None if run.lost is None else run.lost._asdict()
    failed = None if run.failed is None else dict(zip(("at", "reason"), run.failed))
    return {k: v for k, v in (("worker", run.worker), ("lost", lost), ("failed", failed)) if v is not None}


def _human_job(doc: dict) -> str:
    now = time.time()
    head = [["type", _printable(doc["type"])], ["id", _printable(doc["id"])], ["state", doc["state"]],
            ["scheduled", _when(doc["scheduled_time"], now)]]
    return "\n".join(f"{k:<10} {v}" for k, v in head + _human_run(doc, now)) + f"\ndata       {_indented(doc['data'])}"


def _indented(data) -> str:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


def _human_run(doc: dict, now: float) -> list[list[str]]:
    """``jobs show``'s lines on the run: worker, lost workers, failure, attempts, last error
    (with its traceback as text: in the data it is one escaped string)."""
    lines = []
    if doc.get("worker"):
        lines.append(["worker", _printable(doc["worker"])])
    if doc.get("lost"):
        lost = doc["lost"]
        lines.append(["lost", _printable(f"{lost['count']} worker(s); last {lost['worker'] or 'unknown'}, "
                                         f"{_when(lost['at'], now)}")])
    if doc.get("failed"):
        lines.append(["failed", _printable(f"{_when(doc['failed']['at'], now)}: {doc['failed']['reason'] or '-'}")])
    task = doc["data"].get("_task") if isinstance(doc["data"].get("_task"), dict) else {}
    if "attempts" in task:
        lines.append(["attempts", str(task["attempts"])])
    error = task.get("last_error")
    if isinstance(error, dict):
        lines.append(["error", _printable(f"{error.get('type')}: {error.get('message')}")])
        if error.get("traceback"):  # as text, each line under the first
            tb = [_printable(line) for line in str(error["traceback"]).rstrip().splitlines()]
            lines.append(["traceback", ("\n" + " " * 11).join(tb)])
    return lines


def _human_jobs(docs: list[dict]) -> str:
    now = time.time()
    rows = [[d["type"], d["id"], d["state"], _when(d["scheduled_time"], now), _short(d["data"])] for d in docs]
    return _table(["TYPE", "ID", "STATE", "SCHEDULED", "DATA"], rows) if rows else "(no jobs)"


def _human_status(st: status_mod.Status) -> str:
    if not st.types:
        return "(no job types)"
    rows = [[t.type, _seconds(t.timeout), t.pending, t.due,
             "-" if t.oldest_due_age is None else _duration(t.oldest_due_age),
             t.running, t.finished, t.failed, t.lost, _ago(t.last_change)] for t in st.types]
    out = [_table(["TYPE", "TIMEOUT", "PENDING", "DUE", "LONGEST WAIT", "RUNNING", "FINISHED", "FAILED",
                   "LOST", "LAST CHANGE"], rows)]
    running = [[t.type, r.id, _ago(r.last_activity)] for t in st.types for r in t.running_jobs]
    if running:
        out.append("running jobs, least recently active first:\n"
                   + _table(["TYPE", "ID", "LAST ACTIVITY"], running))
    failures = [[t.type, f.id, _when(f.at, st.now), f.reason or "-"] for t in st.types for f in t.recent_failures]
    if failures:
        out.append("recent failures, per type ('jobs list --failed' lists them all):\n"
                   + _table(["TYPE", "ID", "FAILED", "LAST ERROR"], failures))
    notes = []
    if st.versions == "commits":
        notes.append("embedded engine: the store records activity as commit versions, not times")
    return "\n\n".join(out + ["\n".join(f"({n})" for n in notes)] if notes else out)


# --- commands: each returns the JSON document of its result ------------------------------


@contextlib.contextmanager
def _store(args, create: bool = True):
    """The store of ``--store``; commands that only read pass ``create=False``, so that a
    mistyped path is an error rather than a new empty store."""
    db = jobs.open(args.store, create=create)
    try:
        yield db
    finally:
        close = getattr(db, "close", None)
        if close is not None:
            close()


@jobs.transactional
def _add_and_get(tr, type, job_id, data, at):
    jobs.add(tr, type, job_id, data, at)
    return jobs.get_job(tr, type, job_id)


def cmd_add(args):
    data = _data(args.data)
    with _store(args) as db:
        try:
            return _job_doc(_add_and_get(db, args.type, args.id, data, args.at))
        except jobs.NoTypeTimeout as exc:
            raise jobs.NoTypeTimeout(
                f"job type {args.type!r} has no timeout: run 'jobs set-timeout {args.type} SECONDS' first"
            ) from exc


def cmd_remove(args):
    with _store(args, create=False) as db:
        jobs.remove(db, args.type, args.id)
    return {"removed": {"type": args.type, "id": args.id}}


@jobs.transactional
def _job_and_run(tr, type, job_id):
    return {**_job_doc(jobs.get_job(tr, type, job_id)), **_run_doc(get_run_info(tr, type, job_id))}


def cmd_show(args):
    with _store(args, create=False) as db:
        return _job_and_run(db, args.type, args.id)


def cmd_list(args):
    with _store(args, create=False) as db:
        if args.failed:
            return _failed_list(db, args.type)
        infos = jobs.get_jobs(db, args.type)
    return [_job_doc(i) for i in infos if args.state is None or i.state == args.state]


def _failed_list(db, type: str | None) -> list[dict]:
    """``jobs list --failed``: from the failed index, not by decoding every job."""
    import processors  # the task layer (as `worker`): only for the commands that use it
    types = [type] if type is not None else run_transaction(db, status_mod.job_types)
    return [{"failed": True, **vars(f)} for t in types for f in processors.failed_jobs(db, t)]


def _human_failed(docs: list[dict]) -> str:
    now = time.time()
    rows = [[d["type"], d["id"], _when(d["at"], now), d["reason"] or "-"] for d in docs]
    return _table(["TYPE", "ID", "FAILED", "LAST ERROR"], rows) if rows else "(no failed jobs)"


def cmd_retry(args):
    import processors

    with _store(args, create=False) as db:
        if args.all_failed:
            return {"retried": processors.retry_all_failed(db, args.type), "type": args.type}
        processors.retry_failed(db, args.type, args.id)
    return {"retried": 1, "type": args.type, "id": args.id}


def cmd_discard(args):
    import processors

    with _store(args, create=False) as db:
        processors.discard_failed(db, args.type, args.id)
    return {"discarded": {"type": args.type, "id": args.id}}


@jobs.transactional
def _timeouts(tr):
    return [{"type": t, "timeout": jobs.get_type_timeout(tr, t)} for t in jobs.get_types(tr)]


def cmd_types(args):
    with _store(args, create=False) as db:
        return _timeouts(db)


def cmd_set_timeout(args):
    with _store(args) as db:
        jobs.set_type_timeout(db, args.type, args.seconds)
    return {"type": args.type, "timeout": args.seconds}


def cmd_status(args):
    with _store(args, create=False) as db:
        return status_mod.gather(db, limit=args.limit)


@contextlib.contextmanager
def _until_signal():
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
    from monitor import ActivityMonitor

    seen = 0

    def report():
        nonlocal seen
        if monitor.reenqueued != seen:
            _say(args, f"{datetime.now().isoformat(timespec='seconds')} re-enqueued "
                       f"{monitor.reenqueued - seen} job(s), {monitor.reenqueued} in all")
            seen = monitor.reenqueued

    with _store(args) as db, _until_signal() as stop:
        monitor = ActivityMonitor(db).start()
        _say(args, f"monitoring {args.store or default_url()}; stop with SIGTERM or Ctrl-C")
        try:
            while not stop.wait(POLL):
                report()
        finally:
            monitor.stop()
    report()  # what the last pass did (stop() waited for it)
    return {"reenqueued": monitor.reenqueued}


def cmd_serve_status(args):
    """Prints where it serves first (a JSON object with --json), then nothing more: a
    script starting it reads that line and may stop it with SIGTERM."""
    from monitor import StatusServer

    with (_store(args, create=False) as db, _until_signal() as stop,
          StatusServer(db, args.host, args.port, limit=args.limit) as server):
        if args.json:
            print(orjson.dumps({"url": server.url}).decode(), flush=True)
        _say(args, f"serving status on {server.url} (/status, /metrics, /healthz)")
        stop.wait()
    return None


def cmd_gc(args):
    """The pipeline's garbage collector, by hand (the package above this one: imported
    only by this command)."""
    from pipeline import collect_garbage, get_trash

    with _store(args, create=False) as db:
        deleted = collect_garbage(db, grace=args.grace)
        return {"deleted": deleted, "grace": args.grace, "left": len(get_trash(db))}


def _load_processor(module_name: str, attr: str):
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
        where = " (looked in the working directory and sys.path)" if exc.name == module_name else ""
        raise ValueError(f"cannot import {module_name!r}: {exc}{where}") from exc
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
        raise TypeError(f"{module_name}:{attr} is not a processors.Processor but a {type(processor).__name__}")
    return processor


def cmd_worker(args):
    module_name, attr = args.target
    if args.store is not None:
        # The user's module opens its store at import time with jobs.open(): point it here.
        os.environ[ENV_VAR] = args.store
    processor = _load_processor(module_name, attr)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    _say(args, f"worker {module_name}:{attr} on {default_url()}: types {', '.join(processor.types) or '-'}, "
               f"concurrency {args.concurrency}; stop with SIGTERM or Ctrl-C", err=True)
    processor.run(concurrency=args.concurrency)
    return {"stats": dict(processor.stats)}


def cmd_help(args):
    parser = args.parser
    command = args.topic and parser.commands[args.topic]  # (argparse checked the name)
    sys.stdout.write((command or parser).format_help())
    return None


def _say(args, line: str, err: bool = False) -> None:
    """Progress for people; nothing in --json mode (stdout holds one document)."""
    if not args.json:
        print(line, file=sys.stderr if err else sys.stdout, flush=True)


# command -> text for people from the command's JSON document
HUMAN = {
    "add": _human_job,
    "show": _human_job,
    "remove": lambda d: _printable(f"removed {d['removed']['type']}/{d['removed']['id']}"),
    "list": lambda docs: _human_failed(docs) if docs and docs[0].get("failed") is True else _human_jobs(docs),
    "retry": lambda d: _printable(f"retried {d['retried']} failed job(s) of {d['type']}"),
    "discard": lambda d: _printable(f"discarded {d['discarded']['type']}/{d['discarded']['id']}"),
    "types": lambda docs: _table(["TYPE", "TIMEOUT"], [[d["type"], _seconds(d["timeout"])] for d in docs])
    if docs else "(no job types)",
    "set-timeout": lambda d: f"{d['type']}: timeout {_seconds(d['timeout'])}",
    "status": _human_status,
    "monitor": lambda d: f"stopped; re-enqueued {d['reenqueued']} job(s)",
    "gc": lambda d: "\n".join([*(_printable(loc) for loc in d["deleted"]),
                                f"deleted {len(d['deleted'])} location(s) trashed more than {d['grace']:g}s ago; "
                                f"{d['left']} left in the trash"]),
    "worker": lambda d: "stopped; " + (", ".join(f"{k} {v}" for k, v in sorted(d["stats"].items())) or "no jobs"),
}


# --- the parser --------------------------------------------------------------------------


def _common_options(parser, store, json) -> None:
    """--store and --json, accepted before and after the command: after it, the defaults
    are SUPPRESS so that an absent option keeps the value given before the command."""
    parser.add_argument("--store", metavar="URL", default=store,
                        help=f"sqlite:PATH, memory: or fdb:[CLUSTER_FILE] (default: ${ENV_VAR}, else "
                             f"sqlite:.jobs/jobs.sqlite)")
    parser.add_argument("--json", action="store_true", default=json,
                        help="print one JSON document on stdout instead of text")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobs", description="A job queue on FoundationDB (or its embedded SQLite engine).",
        epilog="'jobs help COMMAND' or 'jobs COMMAND -h' describes a command.")
    _common_options(parser, store=None, json=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = sub.choices

    def command(name, run, help, **kw):
        p = sub.add_parser(name, help=help, description=help, **kw)
        _common_options(p, store=argparse.SUPPRESS, json=argparse.SUPPRESS)
        p.set_defaults(run=run)
        return p

    p = command("add", cmd_add, "add a job, or re-add it (couch_jobs' rules)")
    p.add_argument("type", metavar="TYPE")
    p.add_argument("id", metavar="ID")
    p.add_argument("--data", metavar="JSON", help="the job's data, a JSON object (default {})")
    p.add_argument("--at", metavar="TIME", type=parse_time, default=0.0,
                   help="when it is due: seconds since the epoch, ISO-8601 (local time unless it has a "
                        "zone), +N[s|m|h|d] from now or -N[s|m|h|d] ago (default: as soon as possible)")
    for name, run, help in (("remove", cmd_remove, "remove a job in any state (its worker gets Halt)"),
                            ("show", cmd_show, "a job's state, data and scheduled time")):
        p = command(name, run, help)
        p.add_argument("type", metavar="TYPE")
        p.add_argument("id", metavar="ID")
    p = command("list", cmd_list, "list jobs (decodes every job of the type: see status for counts)")
    p.add_argument("type", metavar="TYPE", nargs="?")
    p.add_argument("--state", choices=STATES)
    p.add_argument("--failed", action="store_true",
                   help="only failed jobs (used up their retries, or lost too many workers), with the last error")
    p = command("retry", cmd_retry, "run a failed job (or every failed job of TYPE) again from its first attempt")
    p.add_argument("type", metavar="TYPE")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("id", metavar="ID", nargs="?", help="the failed job")
    which.add_argument("--all-failed", action="store_true", help="every failed job of TYPE")
    p = command("discard", cmd_discard, "remove a failed job")
    p.add_argument("type", metavar="TYPE")
    p.add_argument("id", metavar="ID")
    command("types", cmd_types, "job types and their timeouts")
    p = command("set-timeout", cmd_set_timeout, "set how long a running job of TYPE may go without update")
    p.add_argument("type", metavar="TYPE")
    p.add_argument("seconds", metavar="SECONDS", type=float)
    p = command("status", cmd_status, "job counts per type and state, waiting and running jobs")
    p.add_argument("--limit", metavar="N", type=functools.partial(_count, least=0), default=10,
                   help="running jobs (least recently active first) and failures (most recent first) "
                        "listed per type (default 10)")
    p = command("worker", cmd_worker,
                "run a processors.Processor until SIGTERM/SIGINT; its module should open its store "
                f"with jobs.open() (no URL): --store reaches it through ${ENV_VAR}")
    p.add_argument("target", metavar="MODULE:PROCESSOR", type=_target)
    p.add_argument("--concurrency", metavar="N", type=functools.partial(_count, least=1), default=1,
                   help="jobs run at once (default 1)")
    command("monitor", cmd_monitor,
            "run the activity monitor (re-enqueues jobs of dead workers) until SIGTERM/SIGINT")
    p = command("serve-status", cmd_serve_status,
                "serve the status over HTTP (/status, /metrics, /healthz, a dashboard at /) "
                "until SIGTERM/SIGINT")
    p.add_argument("--host", metavar="H", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", metavar="P", type=functools.partial(_count, least=0, most=65535), default=8080,
                   help="port to listen on, 0 for any free one (default 8080)")
    p.add_argument("--limit", metavar="N", type=functools.partial(_count, least=0), default=10,
                   help="running jobs listed per type, least recently active first (default 10)")
    p = command("gc", cmd_gc, "delete the pipeline's trashed data (dropped, replaced or aborted tables and "
                              "partitions, aborted ingest) trashed more than --grace seconds ago")
    p.add_argument("--grace", metavar="SECONDS", type=_grace, default=GC_GRACE,
                   help=f"keep what was trashed less than this long ago, for readers still reading it "
                        f"(default {GC_GRACE:g}, as the pipeline's collector job; 0: everything)")
    p = command("help", cmd_help, "describe the commands, or one command")
    p.add_argument("topic", metavar="COMMAND", nargs="?", choices=sub.choices)
    p.set_defaults(parser=parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    try:
        args = build_parser().parse_args(_attach_past_times(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: -h (0) or a usage error (2, message printed)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        doc = args.run(args)
        if doc is not None:  # help and serve-status print as they go
            print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() if args.json else HUMAN[args.command](doc))
        return 0
    except (jobs.JobsError, jobs.StoreOpenError, ValueError, TypeError) as exc:
        print(f"jobs: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `jobs list | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # serve-status: the address is in use, or not this machine's
        print(f"jobs: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
