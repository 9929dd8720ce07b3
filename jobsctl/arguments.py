"""Arguments of the ``jobs`` command: times (``--at``), counts, rates, grace periods, worker
targets and job data, each checked with a clear usage error."""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime

import orjson

import jobs
from jobs import checks
from jobs.controls import limits

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


# --- argument types (argparse turns their ArgumentTypeError into a usage error, exit 2) --


def parse_priority(text: str) -> int:
    """``--priority``: an int, lower runs first (as ``jobs.add`` checks it)."""
    try:
        return checks.priority(int(text.strip()))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad priority {text!r}: expected an int of 64 bits ({exc})") from None


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


def attach_past_times(argv: list[str]) -> list[str]:
    """``--at -5m`` as ``--at=-5m``: argparse takes an argument that starts with '-' for an
    option (unless it is a plain negative number) and --at would miss its value."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--at" and _PAST.match(arg):
            out[-1] = f"--at={arg}"
        else:
            out.append(arg)
    return out


def count(text: str, least: int, most: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least or (most is not None and value > most):
        expected = f">= {least}" if most is None else f"from {least} to {most}"
        raise argparse.ArgumentTypeError(f"expected an integer {expected}, not {text!r}")
    return value


def parse_rate(text: str) -> tuple[int, float]:
    """``--rate``/``--key-rate``: ``COUNT/SECONDS``, at most COUNT jobs started per SECONDS
    (``100/60``, ``5/1.5``; the seconds may be N[s|m|h|d]: ``1000/1h``), as
    ``jobs.set_limits`` checks it: a count from 1 to ``limits.MAX_SLOTS``, positive seconds."""
    count_text, slash, period = text.strip().partition("/")
    amount, unit = (period[:-1], period[-1]) if period[-1:] in _UNITS else (period, "s")
    try:
        n, seconds = int(count_text), float(amount) * _UNITS[unit]
    except ValueError:
        n = seconds = None
    if not slash or n is None:
        raise argparse.ArgumentTypeError(
            f"bad rate {text!r}: expected COUNT/SECONDS, such as 100/60 (100 jobs started per minute), "
            "5/1.5 or 1000/1h") from None
    if not 1 <= n <= limits.MAX_SLOTS or not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(
            f"bad rate {text!r}: the count must be from 1 to {limits.MAX_SLOTS} and the seconds a positive "
            "number (to stop a type, pause it)")
    return n, seconds


def grace(text: str) -> float:
    try:
        return checks.seconds(float(text), "--grace")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, not {text!r}") from exc


def target(text: str) -> tuple[str, str]:
    module, _sep, attr = text.partition(":")
    if not module or not attr:
        raise argparse.ArgumentTypeError(f"expected MODULE:PROCESSOR (e.g. tasks:processor), not {text!r}")
    return module, attr


def data_object(text: str | None) -> dict | None:
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


