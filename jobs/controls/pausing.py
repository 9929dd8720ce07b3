"""Pausing a type (``paused/Type``): while a type is paused no accept takes its jobs, on
any process of the store; accepts wait as when nothing is due, and running jobs go on
(``update``, ``finish``) as usual.

Accept reads the flag with a conflicting read, in the transaction that takes its jobs, so
no accept that commits after a pause takes a job (one concurrent with the pause conflicts
and retries).  ``resume`` bumps the pending watch (``pending.wake``) that waiting accepts
already wait on, so they wake at once without a second watch.

A type need not be known (have a timeout) to be paused: pausing before the workers start
is how a type is kept from running until it is resumed.
"""

from __future__ import annotations

import time

from .. import checks, keys
from ..indexes import pending
from ..calls import within_store
from ..engine import tuple as fdb_tuple
from ..engine import value_of


def pause(tr, type: str) -> None:
    """Stop every worker of the store from taking jobs of ``type`` until :func:`resume`;
    jobs already running finish normally, adding jobs goes on.  Pausing a paused type
    changes nothing (it stays paused since the first pause), so a retry after 1021 is
    harmless.  ValueError for a bad type name."""
    checks.name(type, "type", new=True)

    def body(tr):
        if value_of(flag(tr, type)) is not None:
            return
        keys.ensure_layout(tr)  # (maybe before the type has a timeout)
        tr.set(keys.paused_key(type), fdb_tuple.pack((time.time(),)))

    within_store(tr, body)


def resume(tr, type: str) -> None:
    """Let workers take jobs of ``type`` again; accepts waiting for them wake at once.
    Resuming a type that is not paused changes nothing (a retry after 1021 included)."""
    checks.name(type, "type")

    def body(tr):
        if value_of(flag(tr, type)) is not None:
            tr.clear(keys.paused_key(type))
            pending.wake(tr, type)

    within_store(tr, body)


def is_paused(tr, type: str) -> bool:
    """Whether ``type`` is paused (a conflicting read: a transaction that decides on it
    retries if a pause or resume commits meanwhile)."""
    checks.name(type, "type")
    return within_store(tr, lambda tr: value_of(flag(tr, type)) is not None)


def flag(tr, type: str):
    """Future of the type's pause flag, read with a conflict (present: paused); for
    accept, which waits on it after its other reads are under way."""
    return tr.get(keys.paused_key(type))


def paused_types(tr) -> dict[str, float]:
    """Paused type -> since when (the pauser's wall clock); a snapshot read, for people."""
    r = keys.PAUSED.range()
    return {keys.PAUSED.unpack(k)[0]: float(fdb_tuple.unpack(v)[0]) for k, v in tr.snapshot.get_range(r.start, r.stop)}
