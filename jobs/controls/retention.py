"""Retention: how long finished jobs of a type are kept (``("jobs", "retention", Type)``),
and pruning those kept longer, oldest first, from the index of finished jobs
(``finished.py``, whose docstring says which clock decides and why).

None keeps forever, the default (as couch_jobs, which never removes a finished job).
Finished jobs and failed ones have periods of their own.  The activity monitor prunes in
bounded batches (``monitor/retention.py``); ``pruning.prune`` does it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ahead, checks, keys
from ..calls import within_store
from ..engine import tuple as fdb_tuple
from ..engine import value_of


@dataclass(frozen=True)
class Retention:
    """Seconds a finished job of a type is kept: ``finished`` (finished without failing)
    and ``failed``; None keeps forever."""

    finished: float | None = None
    failed: float | None = None

    def period(self, kind: str) -> float | None:
        return self.failed if kind == "failed" else self.finished


KEEP_FOREVER = Retention()


def set_retention(tr, type: str, *, finished: float | None = None, failed: float | None = None) -> None:
    """Remove the type's finished jobs ``finished`` seconds after they finished, and its
    failed jobs ``failed`` seconds after they failed (None: keep them forever; both None
    is :func:`clear_retention`).  Pruned by running activity monitors or ``prune``.
    ValueError for a negative, NaN or infinite period or a type with control characters."""
    checks.name(type, "type", new=True)
    periods = tuple(None if v is None else checks.seconds(v, f"{what} retention")
                    for v, what in ((finished, "finished"), (failed, "failed")))
    raw = None if periods == (None, None) else fdb_tuple.pack(periods)
    within_store(tr, lambda tr: _store(tr, type, raw))


def get_retention(tr, type: str) -> Retention:
    """The type's retention (``Retention(None, None)``, keep forever, when none was set)."""
    checks.name(type, "type")
    return within_store(tr, lambda tr: _decode(value_of(tr.get(keys.retention_key(type)))))


def clear_retention(tr, type: str) -> None:
    """Keep the type's finished jobs forever again."""
    checks.name(type, "type")
    within_store(tr, lambda tr: _store(tr, type, None))


def _store(tr, type: str, raw: bytes | None) -> None:
    """Write the type's retention (None: clear it) unless it is already so: a retry after
    its own commit (1021) then writes nothing."""
    key = keys.retention_key(type)
    current = value_of(tr.get(key))
    if current == raw:
        return
    ahead.written(tr, key)  # (finishes later in a read_ahead block see the new setting)
    if raw is None:
        tr.clear(key)
        return
    keys.ensure_layout(tr)  # (maybe before the type has a timeout)
    if current is None:  # finishes were not indexed meanwhile: the backfill starts over
        tr.clear(keys.retention_backfill_key(type))
    tr.set(key, raw)


def retentions(tr) -> dict[str, Retention]:
    """Every type's retention that was set, by type (one range read)."""
    r = keys.RETENTION.range()
    return {keys.RETENTION.unpack(k)[0]: _decode(v) for k, v in tr.get_range(r.start, r.stop)}


def _decode(raw: bytes | None) -> Retention:
    return KEEP_FOREVER if raw is None else Retention(*fdb_tuple.unpack(raw))
