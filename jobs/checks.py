"""Argument checks of the public API, run before anything is read or written.

Each raises :class:`ArgumentTypeError` (wrong kind of value) or ``ValueError`` (right
kind, bad value) naming the argument, and returns the normalised value.
"""

from __future__ import annotations

import math
import re

from . import keys

# Latest scheduled time: the start of the year 9999, so that every view can show any stored
# time as a date in any time zone (Python's dates end with the year 9999).
MAX_TIME = 253370764800.0  # 9999-01-01T00:00:00Z
# Characters that break a line or a column of text: C0 and C1 controls (tab and newline
# included), DEL, and the Unicode line and paragraph separators.
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type.  A TypeError, as Python code expects, and a
    ValueError, as the API promises for every bad argument."""


def name(value, what: str, *, new: bool = False) -> str:
    """A job type or id: a non-empty str that encodes as UTF-8 (no lone surrogates).
    ``new``: a name being written, which must not contain control characters either (every
    text view shows it); names only looked up may, so that whatever the store holds
    (another program may have written it) can be read, shown and removed, and the readers
    that pass stored names back to these calls (the status gather) never trip on one."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if not value.isascii():  # (ASCII always encodes: no bytes made for the commonest names)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{what} {value!r} is not valid text: {exc.reason}") from exc
    control = CONTROL_CHARACTERS.search(value) if new else None
    if control is not None:
        raise ValueError(
            f"{what} {value!r:.200} contains the control character {control.group()!r} (at {control.start()}): "
            "names are shown in text tables and logs; use printable characters"
        )
    return value


def seconds(value, what: str, *, positive: bool = False, allow_inf: bool = False) -> float:
    """A number of seconds (or a time in seconds since the epoch): not bool, not NaN, not
    negative; zero only unless ``positive``; infinite only with ``allow_inf``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{what} must be a finite number, not {value}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{what} must be {'positive' if positive else 'zero or more'}, not {value}")
    return value


def scheduled_time(value, what: str = "scheduled_time") -> float:
    """A time to run at, in seconds since the epoch (0: as soon as possible): as
    :func:`seconds`, and before :data:`MAX_TIME` (the year 9999), so that it can be shown."""
    if type(value) is float and 0.0 <= value < MAX_TIME:  # (the commonest: checked in one step)
        return value
    if type(value) is int and 0 <= value < MAX_TIME:
        return float(value)
    value = seconds(value, what)
    if value >= MAX_TIME:
        raise ValueError(
            f"{what} must be before the year 9999 (less than {MAX_TIME:.0f} seconds since the epoch), not {value:.15g}"
        )
    return value


PRIORITY_LIMIT = 1 << 63  # priorities are 64-bit signed ints


def priority(value, what: str = "priority") -> int:
    """A job priority: an int (not bool) in the 64-bit signed range; lower runs first."""
    if type(value) is int and -PRIORITY_LIMIT <= value < PRIORITY_LIMIT:  # (the commonest)
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{what} must be an int (lower runs first), not {type(value).__name__}")
    if not -PRIORITY_LIMIT <= value < PRIORITY_LIMIT:
        raise ValueError(f"{what} must fit in 64 signed bits (-2**63 to 2**63 - 1), not {value}")
    return value


def optional_seconds(value, what: str) -> float | None:
    """None, or seconds where infinity also means None (no bound)."""
    if value is None:
        return None
    value = seconds(value, what, allow_inf=True)
    return None if math.isinf(value) else value


def limit(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"limit must be a non-negative int or None, not {value!r}")
    return value


# Bytes of the longest key (a pending key) beyond its names' characters, at most: the
# subspace prefix, the priority and time, the names' framing, and a keyed one's 16 more.
_KEY_FRAME = max(len(keys.PENDING.key()), len(keys.KPENDING.key())) + 64


def key_sizes(type: str, job_id: str, key: str | None = None) -> None:
    """ValueError when the longest key of this job (its pending key) is over FDB's limit."""
    if 4 * (len(type) + len(job_id) + len(key or "")) + _KEY_FRAME < keys.KEY_LIMIT:
        return  # (surely short: a character packs into 4 bytes at most, framing included)
    longest = keys.pending_key(type, -(1 << 63), 0.0, job_id)
    size = len(longest) + (0 if key is None else len(keys.pack_str(key)) + 16)
    if size > keys.KEY_LIMIT:
        raise ValueError(
            f"type and job id are too long: their keys would be {size} bytes, over FoundationDB's "
            f"limit of {keys.KEY_LIMIT}; use shorter ids"
        )
