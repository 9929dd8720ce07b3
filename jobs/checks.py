"""Argument checks of the public API, run before anything is read or written.

Each raises :class:`ArgumentTypeError` (wrong kind of value) or ``ValueError`` (right
kind, bad value) naming the argument, and returns the normalised value.
"""

from __future__ import annotations

import math


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type.  A TypeError, as Python code expects, and a
    ValueError, as the API promises for every bad argument."""


def name(value, what: str) -> str:
    """A job type or id: a non-empty str that encodes as UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} {value!r} is not valid text: {exc.reason}") from exc
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
