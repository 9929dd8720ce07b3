"""A cron expression in an IANA time zone, and its ticks as seconds since the epoch.

Parsing and matching are cronsim's (Debian cron's rules, DST included: a tick in the hour
skipped when clocks go forward runs just after the change; a fixed-time tick in the hour
repeated when they go back runs once, a tick with a wildcard hour runs in both).  Ticks are
stored as epoch seconds, which name an instant even inside the repeated hour; this module
turns them back into local times without losing that hour (cronsim starts from a wall time
and does not look at ``fold``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..checks import ArgumentTypeError

DEFAULT_TZ = "UTC"
_TINY = timedelta(microseconds=1)


@dataclass(frozen=True)
class Cron:
    """``expression`` (5 fields, or cronsim's extensions) in zone ``tz``.  ValueError for an
    expression cronsim refuses, an unknown zone, or an expression that never fires (such
    as ``0 0 30 2 *``)."""

    expression: str
    tz: str = DEFAULT_TZ
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for what, value in (("cron expression", self.expression), ("time zone", self.tz)):
            if not isinstance(value, str):
                raise ArgumentTypeError(f"{what} must be a str, not {type(value).__name__}")
        object.__setattr__(self, "expression", " ".join(self.expression.split()))
        object.__setattr__(self, "zone", _zone(self.tz))
        try:
            CronSim(self.expression, datetime.now(self.zone))
        except CronSimError as exc:
            raise ValueError(f"bad cron expression {self.expression!r}: {exc} "
                             "(expected 5 fields: minute hour day-of-month month day-of-week)") from None
        if self.after(datetime.now(self.zone).timestamp()) is None:
            raise ValueError(f"cron expression {self.expression!r} never fires")

    def after(self, t: float) -> float | None:
        """The first tick after ``t`` (None: none within cronsim's 50-year horizon)."""
        start = datetime.fromtimestamp(t, self.zone)
        # Inside the repeated hour, start from its first occurrence (cronsim would treat the
        # second as the first and go back in time); ticks up to t are skipped below.
        for tick in CronSim(self.expression, start.replace(fold=0)):
            if tick.timestamp() > t:
                return tick.timestamp()
        return None

    def latest(self, t: float) -> float | None:
        """The last tick at or before ``t`` (None: none in the 50 years before)."""
        start = datetime.fromtimestamp(t, self.zone).replace(fold=0) + _TINY
        try:
            tick = next(CronSim(self.expression, start, reverse=True)).timestamp()
        except StopIteration:
            return None
        # Going backwards cronsim misses the second occurrence of the repeated hour: walk
        # forward from its answer up to t.
        while (later := self.after(tick)) is not None and later <= t:
            tick = later
        return tick if tick <= t else None

    def local(self, t: float) -> str:
        """``t`` as an ISO time in the schedule's zone (for people)."""
        return datetime.fromtimestamp(t, self.zone).isoformat(timespec="seconds")


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}: expected an IANA name such as 'UTC' or "
                         f"'Europe/Paris' ({exc})") from None
