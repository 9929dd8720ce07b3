"""The ``jobs`` commands of retention: ``set-retention``, ``clear-retention`` (how long a
type's finished and failed jobs are kept) and ``prune`` (remove the older ones now)."""

from __future__ import annotations

import argparse

import jobs

from .arguments import _UNITS
from .commands import open_store
from .views import duration, printable


def period(text: str) -> float:
    """A retention period: seconds, or N[s|m|h|d]."""
    amount, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(amount) * _UNITS[unit]
    except ValueError:
        value = None
    if value is None or not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0 or N[s|m|h|d] (such as 7d), not {text!r}")
    return value


def add_commands(command) -> None:
    p = command("set-retention", cmd_set_retention,
                "remove TYPE's finished (and failed) jobs once they are older than a period; "
                "a period left out keeps those jobs forever")
    p.add_argument("type", metavar="TYPE")
    p.add_argument("--finished", metavar="PERIOD", type=period, help="for jobs finished without failing: seconds or N[s|m|h|d]")
    p.add_argument("--failed", metavar="PERIOD", type=period, help="for failed jobs: seconds or N[s|m|h|d]")
    p = command("clear-retention", cmd_clear_retention, "keep TYPE's finished jobs forever again")
    p.add_argument("type", metavar="TYPE")
    p = command("prune", cmd_prune, "remove finished jobs older than their type's retention now (or --older-than)")
    p.add_argument("type", metavar="TYPE", nargs="?", help="only this type (default: every type)")
    p.add_argument("--older-than", metavar="PERIOD", type=period,
                   help="instead of the retention: jobs finished more than PERIOD ago")
    p.add_argument("--failed", action="store_true", help="failed jobs instead of those finished without failing")


def retention_doc(type: str, retention: jobs.Retention) -> dict:
    return {"type": type, "finished": retention.finished, "failed": retention.failed}


def cmd_set_retention(args):
    with open_store(args, create=False) as db:
        jobs.set_retention(db, args.type, finished=args.finished, failed=args.failed)
        return retention_doc(args.type, jobs.get_retention(db, args.type))


def cmd_clear_retention(args):
    with open_store(args, create=False) as db:
        jobs.clear_retention(db, args.type)
        return retention_doc(args.type, jobs.get_retention(db, args.type))


def cmd_prune(args):
    with open_store(args, create=False) as db:
        removed = jobs.prune(db, args.type, older_than=args.older_than, failed=args.failed)
    return {"removed": [{"type": t, "id": i} for t, i in removed], "failed": args.failed,
            "older_than": args.older_than}


def human_retention(doc: dict) -> str:
    kept = {k: "forever" if doc[k] is None else duration(doc[k]) for k in ("finished", "failed")}
    return printable(f"{doc['type']}: finished jobs kept {kept['finished']}, failed jobs kept {kept['failed']}")


def human_prune(doc: dict) -> str:
    which = "failed" if doc["failed"] else "finished"
    lines = [printable(f"{r['type']}/{r['id']}") for r in doc["removed"]]
    return "\n".join([*lines, f"removed {len(doc['removed'])} {which} job(s)"])


HUMAN = {"set-retention": human_retention, "clear-retention": human_retention, "prune": human_prune}
