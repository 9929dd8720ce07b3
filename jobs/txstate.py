"""What the job layer keeps for one transaction while it runs (couch_jobs' ``JTx``).

Every call of the layer takes the transaction ``tr`` first; what it keeps for that
transaction beside the transaction's own reads and writes is ``txstate.of(tr)``, one
:class:`TxState` held on the transaction object itself, so that it lives exactly as long
as the transaction (its retried attempts included) and no module keeps a table of
transactions.  A wrapper around a transaction (``jobs/engine/counting.py``, ``faults.py``)
holds its own: the layer's calls reach the transaction they are given.
"""

from __future__ import annotations

import itertools
import random

_ATTR = "_jobs_txstate"


class TxState:
    """One transaction's state in the job layer (each field says who keeps it)."""

    __slots__ = ("draw", "stamps", "heads", "ranges", "ahead", "tally", "store_id")

    def __init__(self):
        # counts.shard: a number drawn for the transaction, which picks the shards of the
        # counters it adds to and of the keys it stamps or bumps
        self.draw = random.getrandbits(32)
        # rows.new_seq: the user versions of the versionstamps it handed out
        self.stamps = itertools.count()
        # pending: {pending key: value} of the heads its picks read (a job's start wait)
        self.heads: dict[bytes, bytes] = {}
        # pending.read_head_ahead: {(begin, end, limit): a snapshot range read issued early}
        self.ranges: dict[tuple, object] = {}
        # ahead.block: {key: future of its read} issued ahead, while a block runs
        self.ahead: dict[bytes, object] | None = None
        # counts.sharing: the Tally the state changes are summed in, while a block runs
        self.tally = None
        # store_ids: (read version, future of the store id) of the current attempt
        self.store_id: tuple | None = None


def of(tr) -> TxState:
    """``tr``'s state (made at its first use).  A transaction object that takes no
    attribute gets a fresh state each call: what is kept then lasts one call."""
    try:
        return tr.__dict__[_ATTR]
    except KeyError:
        state = tr.__dict__[_ATTR] = TxState()
        return state
    except AttributeError:  # (no __dict__)
        return TxState()
