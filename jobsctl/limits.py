"""The ``jobs`` commands of limits: ``set-limits`` and ``clear-limits`` (how many jobs of a
type, and of each of its job keys, run at once and start per period) and ``limits`` (every
type's).  ``jobsctl status`` shows how much of them is in use."""

from __future__ import annotations

import functools
from dataclasses import asdict

import jobs
from jobs.controls import limits as limits_mod
from jobs.engine import run as run_transaction

from .arguments import count, parse_rate
from .commands import open_store
from .views import printable, table

OPTIONS = ("concurrency", "rate", "key_concurrency", "key_rate")


def add_commands(command) -> None:
    p = command("set-limits", cmd_set_limits,
                "bound how many jobs of TYPE run at once and start per period, for the whole type and for each "
                "job key (jobs added with --key); replaces TYPE's limits: a limit left out is removed")
    p.add_argument("type", metavar="TYPE")
    slots = functools.partial(count, least=1, most=limits_mod.MAX_SLOTS)
    p.add_argument("--concurrency", metavar="N", type=slots, help="most jobs of TYPE running at once")
    p.add_argument("--rate", metavar="M/SECONDS", type=parse_rate,
                   help="most jobs of TYPE started per SECONDS (seconds or N[s|m|h|d]): 100/60, 5/1.5, 1000/1h")
    p.add_argument("--key-concurrency", metavar="N", type=slots,
                   help="most jobs of each key running at once (jobs without a key are not subject to it)")
    p.add_argument("--key-rate", metavar="M/SECONDS", type=parse_rate,
                   help="most jobs of each key started per SECONDS (jobs without a key are not subject to it)")
    p.set_defaults(check=functools.partial(_some_limit, p))
    p = command("clear-limits", cmd_clear_limits, "remove every limit of TYPE")
    p.add_argument("type", metavar="TYPE")
    command("limits", cmd_limits, "every type's limits ('jobsctl status' shows how much of them is in use)")


def _some_limit(parser, args) -> None:
    """A set-limits without any limit would clear them: a usage error, not a silent clear."""
    if all(getattr(args, name) is None for name in OPTIONS):
        parser.error("give at least one of --concurrency, --rate, --key-concurrency, --key-rate "
                     f"(to remove every limit: 'jobsctl clear-limits {args.type}')")


def limits_doc(type: str, limits: jobs.Limits | None) -> dict:
    """``{"type", "concurrency", "rate", "key_concurrency", "key_rate"}``, a rate as
    ``{"count", "seconds"}``; None where there is no such limit."""
    return {"type": type, **asdict(limits or jobs.Limits())}


def cmd_set_limits(args):
    with open_store(args, create=False) as db:
        jobs.set_limits(db, args.type, **{name: getattr(args, name) for name in OPTIONS})
        return limits_doc(args.type, jobs.get_limits(db, args.type))


def cmd_clear_limits(args):
    with open_store(args, create=False) as db:
        jobs.clear_limits(db, args.type)
        return limits_doc(args.type, jobs.get_limits(db, args.type))


def cmd_limits(args):
    with open_store(args, create=False) as db:
        limited = run_transaction(db, limits_mod.limited_types)
    return [limits_doc(t, limited[t]) for t in sorted(limited)]


def _rate(rate: dict | None) -> str:
    return "-" if rate is None else str(jobs.Rate(rate["count"], rate["seconds"]))


def human_set(doc: dict) -> str:
    limits = jobs.Limits(doc["concurrency"], doc["rate"] and jobs.Rate(**doc["rate"]), doc["key_concurrency"],
                         doc["key_rate"] and jobs.Rate(**doc["key_rate"]))
    if limits == jobs.Limits():
        return printable(f"{doc['type']}: no limits")
    return printable(f"{doc['type']}: {limits} (only jobs started while a limit is set count against it)")


def human_limits(docs: list[dict]) -> str:
    if not docs:
        return "(no limits: 'jobsctl set-limits TYPE ...' sets some)"
    rows = [[d["type"], "-" if d["concurrency"] is None else d["concurrency"], _rate(d["rate"]),
             "-" if d["key_concurrency"] is None else d["key_concurrency"], _rate(d["key_rate"])] for d in docs]
    return table(["TYPE", "RUNNING", "RATE", "PER KEY RUNNING", "PER KEY RATE"], rows)


HUMAN = {"set-limits": human_set, "clear-limits": human_set, "limits": human_limits}
