"""Type timeouts (``activity_timeout/Type``), and the types they make known."""

from __future__ import annotations

from .. import checks, keys, store_ids
from ..calls import within_store
from ..engine import tuple as fdb_tuple
from ..engine import value_of


def set_type_timeout(tr, type: str, seconds: float) -> None:
    """Seconds a running job of ``type`` may go without ``update`` before the activity
    monitor re-enqueues it.  Must be set before jobs of the type are added.  ValueError
    unless positive and finite, or when ``type`` contains control characters."""
    checks.name(type, "type", new=True)
    seconds = checks.seconds(seconds, "type timeout", positive=True)

    def body(tr):
        store_ids.ensure_store(tr)
        tr.set(keys.timeout_key(type), fdb_tuple.pack((seconds,)))

    within_store(tr, body)


def get_type_timeout(tr, type: str) -> float | None:
    """The type's timeout in seconds, or None when it has none."""
    checks.name(type, "type")
    raw = within_store(tr, lambda tr: value_of(tr.get(keys.timeout_key(type))))
    return None if raw is None else float(fdb_tuple.unpack(raw)[0])


def clear_type_timeout(tr, type: str) -> None:
    """Forget the type's timeout (adding jobs of the type then raises NoTypeTimeout)."""
    checks.name(type, "type")
    within_store(tr, lambda tr: tr.clear(keys.timeout_key(type)))


def get_types(tr) -> list[str]:
    """Types that have a timeout, sorted."""
    r = keys.ACTIVITY_TIMEOUT.range()
    return within_store(tr, lambda tr: [keys.ACTIVITY_TIMEOUT.unpack(k)[0] for k, _v in tr.get_range(r.start, r.stop)])
