"""Reads issued ahead: a block of job calls in one transaction finds the keys it will read
already being read, all at once.  On a cluster every read a call waits for is a round trip;
a worker finishing 32 jobs in one transaction would wait for 32 row reads one after another,
and with the rows read ahead waits for one (``jobs.read_ahead``, ``worker.py``).

A key read ahead is used by the first read of it in the block (``shared``: by every read, for
a per-type setting read by each call), and forgotten as soon as the job layer writes it in
the same transaction, so that reads still see the transaction's own writes.  Outside a block
nothing changes.
"""

from __future__ import annotations

from . import txstate


class block:
    """``with block(tr, keys):`` issue the reads of ``keys`` now, for the calls made in the
    block.  Inside a block of the same transaction, it joins that block (reads of keys not
    in it yet are added to it), so that a call reading ahead within a caller's block spoils
    neither.  (A class, not a generator: every accept and finish enters one.)"""

    __slots__ = ("_state", "_ahead")

    def __init__(self, tr, keys):
        self._state = txstate.of(tr)
        ahead = self._state.ahead
        if ahead is not None:  # (joining the block under way: its end forgets these reads too)
            for key in dict.fromkeys(keys):
                if key not in ahead:
                    ahead[key] = tr.get(key)
            self._ahead = None
        else:
            self._ahead = {key: tr.get(key) for key in dict.fromkeys(keys)}

    def __enter__(self) -> None:
        if self._ahead is not None:
            self._state.ahead = self._ahead

    def __exit__(self, *exc) -> None:
        if self._ahead is not None and self._state.ahead is self._ahead:
            self._state.ahead = None


def read(tr, key: bytes, shared: bool = False):
    """The future of ``key``'s read: one issued ahead (taken, unless ``shared``), else a new
    one, with a conflict as ``tr.get`` has."""
    ahead = txstate.of(tr).ahead
    if ahead:
        future = ahead.get(key) if shared else ahead.pop(key, None)
        if future is not None:
            return future
    return tr.get(key)


def written(tr, key: bytes) -> None:
    """``tr`` writes ``key``: a read of it issued ahead no longer tells its value."""
    if ahead := txstate.of(tr).ahead:
        ahead.pop(key, None)
