"""The ``jobs`` console script: look at and change a job store, run a worker or the
activity monitor, serve the status over HTTP.

    jobs [--store URL] [--json] COMMAND [ARGS...]

The store is ``--store URL``, else ``$JOBS_STORE``, else the default file (see
``jobs.engine.urls``).  Output is aligned text for people; ``--json`` (before or after the
command) prints one JSON document on stdout instead.  Errors print one line,
``jobsctl: error: ...``, on stderr: exit status 2 for usage errors (argparse's), 1 for
everything else (unknown job, bad JSON, a store that cannot be opened).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import orjson

import jobs
from jobs.engine import ENV_VAR

from .arguments import attach_past_times, count, grace, parse_priority, parse_time, target
from .commands import (
    Incomplete, cmd_add, cmd_discard, cmd_gc, cmd_list, cmd_remove, cmd_retry, cmd_schedules, cmd_set_timeout,
    cmd_show, cmd_status, cmd_types,
)
from .retention import HUMAN as RETENTION_HUMAN, add_commands as _add_retention_commands
from .limits import HUMAN as LIMITS_HUMAN, add_commands as _add_limits_commands
from .workers import HUMAN as WORKERS_HUMAN, add_commands as _add_workers_commands
from .commands import cmd_migrate, cmd_pause, cmd_resume
from .services import cmd_monitor, cmd_serve_status, cmd_worker
from .views import HUMAN

STATES = ("pending", "running", "finished", "failed")  # (as people see them: failed jobs are not "finished")
HUMAN = {**HUMAN, **RETENTION_HUMAN, **LIMITS_HUMAN, **WORKERS_HUMAN}
GC_GRACE = 600.0  # `gc --grace` default: pipeline.collector.DEFAULT_GRACE (checked by a test)


def cmd_help(args):
    parser = args.parser
    command = args.topic and parser.commands[args.topic]  # (argparse checked the name)
    sys.stdout.write((command or parser).format_help())
    return None


# --- the parser --------------------------------------------------------------------------


def _common_options(parser, store, json) -> None:
    """--store and --json, accepted before and after the command: after it, the defaults
    are SUPPRESS so that an absent option keeps the value given before the command."""
    parser.add_argument("--store", metavar="URL", default=store,
                        help=f"sqlite:PATH, memory: or fdb:[CLUSTER_FILE] (default: ${ENV_VAR}, else "
                             f"sqlite:.jobs/jobs.sqlite)")
    parser.add_argument("--json", action="store_true", default=json,
                        help="print one JSON document on stdout instead of text")


def _positive_seconds(text: str) -> float:
    try:
        return jobs.checks.seconds(float(text), "seconds", positive=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}") from exc


def _job_arguments(p) -> None:
    p.add_argument("type", metavar="TYPE")
    p.add_argument("id", metavar="ID")


def _add_job_commands(command) -> None:
    """Commands on one job, or the jobs of a type: add, remove, show, list, retry, discard."""
    p = command("add", cmd_add, "add a job, or re-add it (couch_jobs' rules)")
    _job_arguments(p)
    p.add_argument("--data", metavar="JSON", help="the job's data, a JSON object (default {})")
    p.add_argument("--at", metavar="TIME", type=parse_time, default=0.0,
                   help="when it is due: seconds since the epoch, ISO-8601 (local time unless it has a "
                        "zone), +N[s|m|h|d] from now or -N[s|m|h|d] ago (default: as soon as possible)")
    p.add_argument("--priority", metavar="N", type=parse_priority, default=0,
                   help="its priority band: due jobs of a lower priority run first (default 0; negatives allowed)")
    p.add_argument("--key", metavar="KEY",
                   help="its job key (a tenant, say): each key's jobs wait in their own queue and the keys take "
                        "turns, under the type's per-key limits ('jobsctl set-limits'; default: no key)")
    p.add_argument("--type-timeout", metavar="SECONDS", type=_positive_seconds,
                   help="the type's timeout (heartbeat timeout) to set if it has none yet: a job can be added "
                        "before any worker of its type ever ran (a worker's declared timeout replaces it as it "
                        "starts); without it, adding to a type with no timeout fails")
    p = command("remove", cmd_remove, "remove a job in any state (its worker gets Halt)")
    _job_arguments(p)
    p.add_argument("--unreadable", action="store_true",
                   help="the job's row cannot be read (damaged): find the keys that name the job by reading "
                        "the type's queues, and remove them with the row")
    _job_arguments(command("show", cmd_show, "a job's state, data and scheduled time"))
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
    _job_arguments(command("discard", cmd_discard, "remove a failed job"))


def _add_type_commands(command) -> None:
    """Commands on job types: types, set-timeout, pause, resume, status (counts per type)."""
    command("types", cmd_types, "job types and their timeouts")
    p = command("set-timeout", cmd_set_timeout, "set how long a running job of TYPE may go without update")
    p.add_argument("type", metavar="TYPE")
    p.add_argument("seconds", metavar="SECONDS", type=float)
    p = command("pause", cmd_pause, "stop every worker from taking jobs of TYPE (running jobs finish) until resumed")
    p.add_argument("type", metavar="TYPE")
    p = command("resume", cmd_resume, "let workers take jobs of TYPE again (waiting workers wake at once)")
    p.add_argument("type", metavar="TYPE")
    p = command("status", cmd_status, "job counts per type and state, waiting and running jobs")
    p.add_argument("--limit", metavar="N", type=functools.partial(count, least=0), default=10,
                   help="running jobs (least recently active first) and failures (most recent first) "
                        "listed per type (default 10)")
    p.add_argument("--exact", action="store_true",
                   help="count every job key by key instead of reading the counters (linear in jobs: "
                        "to check the counters)")
    command("migrate", cmd_migrate, "migrate the store's layouts written by an older release to this "
            "release's (stop the older release's processes first)")
    p = command("schedules", cmd_schedules, "cron schedules: type, expression, zone, last and next tick")
    p.add_argument("--clear", metavar="TYPE", help="stop scheduling TYPE (until a processor with a cron "
                                                   "handler for it starts)")


def _add_service_commands(command) -> None:
    """Commands that run the system's parts: a worker, the monitor, the status server (each
    until stopped), the garbage collector (once)."""
    p = command("worker", cmd_worker,
                "run a processors.Processor until SIGTERM/SIGINT; its module should open its store "
                f"with jobs.open() (no URL): --store reaches it through ${ENV_VAR}")
    p.add_argument("target", metavar="MODULE:PROCESSOR", type=target)
    p.add_argument("--concurrency", metavar="N", type=functools.partial(count, least=1), default=1,
                   help="jobs run at once (default 1)")
    command("monitor", cmd_monitor,
            "run the activity monitor (re-enqueues jobs of dead workers) until SIGTERM/SIGINT")
    p = command("serve-status", cmd_serve_status,
                "serve the status over HTTP (/status, /metrics, /healthz, a dashboard at /) "
                "until SIGTERM/SIGINT")
    p.add_argument("--host", metavar="H", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", metavar="P", type=functools.partial(count, least=0, most=65535), default=8080,
                   help="port to listen on, 0 for any free one (default 8080)")
    p.add_argument("--limit", metavar="N", type=functools.partial(count, least=0), default=10,
                   help="running jobs listed per type, least recently active first (default 10)")
    token = p.add_mutually_exclusive_group()
    token.add_argument("--token-file", metavar="PATH",
                       help="file holding the bearer token the actions (POST /api/...) need; without a token "
                            "the server is read-only and serves on a loopback address only")
    token.add_argument("--new-token", action="store_true",
                       help="generate a token and print it first (a line of its own, or the JSON's 'token')")
    p = command("gc", cmd_gc, "delete the pipeline's trashed data (dropped, replaced or aborted tables and "
                              "partitions, aborted ingest) trashed more than --grace seconds ago")
    p.add_argument("--grace", metavar="SECONDS", type=grace, default=GC_GRACE,
                   help=f"keep what was trashed less than this long ago, for readers still reading it "
                        f"(default {GC_GRACE:g}, as the pipeline's collector job; 0: everything)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobsctl", description="A job queue on FoundationDB (or its embedded SQLite engine).",
        epilog="'jobsctl help COMMAND' or 'jobs COMMAND -h' describes a command.")
    _common_options(parser, store=None, json=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = sub.choices

    def command(name, run, help, **kw):
        p = sub.add_parser(name, help=help, description=help, **kw)
        _common_options(p, store=argparse.SUPPRESS, json=argparse.SUPPRESS)
        p.set_defaults(run=run)
        return p

    # in this order in `jobsctl -h`
    _add_job_commands(command)
    _add_type_commands(command)
    _add_retention_commands(command)
    _add_limits_commands(command)
    _add_workers_commands(command)
    _add_service_commands(command)
    p = command("help", cmd_help, "describe the commands, or one command")
    p.add_argument("topic", metavar="COMMAND", nargs="?", choices=sub.choices)
    p.set_defaults(parser=parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command in ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    try:
        args = build_parser().parse_args(attach_past_times(sys.argv[1:] if argv is None else argv))
        if getattr(args, "check", None) is not None:  # what one option alone does not tell
            args.check(args)
    except SystemExit as exc:  # argparse: -h (0) or a usage error (2, message printed)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        doc, errors = args.run(args), []
        if isinstance(doc, Incomplete):
            doc, errors = doc.doc, doc.errors
        if doc is not None:  # help and serve-status print as they go
            print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() if args.json else HUMAN[args.command](doc))
        for error in errors:
            print(f"jobsctl: error: {error}", file=sys.stderr)
        return 1 if errors else 0
    except (jobs.JobsError, jobs.StoreOpenError, ValueError, TypeError) as exc:
        print(f"jobsctl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `jobsctl list | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # serve-status: the address is in use, or not this machine's
        print(f"jobsctl: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
