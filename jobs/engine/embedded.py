"""The embedded engine: FoundationDB's transaction semantics on one SQLite file (WAL).

How FDB's guarantees are obtained (see docs/design.md, "The embedded engine"):

* **Read version / snapshot**: a transaction's reads all come from one SQLite read
  transaction opened at its first read; its read version is the store's commit version
  read (from the shared commit history, ``history.py``, without any lock) just before
  that snapshot starts, so every commit the snapshot lacks has a later version.  A
  commit's version is one more than the last, or the wall clock in microseconds if that
  is later: as on FoundationDB, versions advance about a million a second, so a
  versionstamp's age is known on both engines.
* **Optimistic conflicts**: reads record conflict ranges (a point read ``[k, k+\\0)``, a
  range read the span it really scanned).  Writes are buffered in the transaction (and
  visible to its own reads).  At commit, under the store's single write lock, the read
  ranges are compared with the write ranges of every transaction committed after the read
  version (the commit history, a memory-mapped file ``<store>-hist`` shared by the
  store's processes); any overlap is error 1020 and nothing is written.  A commit costs
  SQLite its own writes only (a one-write commit is one statement).
* **Versionstamps**: the commit version (8 bytes, big-endian) plus batch order 0 (2 bytes),
  so stamps increase with commit order.
* **Lifetime**: a transaction older than 5 s gets 1007, as do read versions older than
  the history kept (the ring of ``<store>-hist`` grows rather than drop commits younger
  than 10 s, up to 512 MB).
* **Read-only transactions** take no lock: their commit checks nothing, as on FDB.
* **Watches**: a per-database thread, woken at once by local commits and, for other
  processes' commits, by inotify on the store's log (``doorbell.py``), else by polling
  the commit counter while any watch is armed; it reads from SQLite only the watched
  keys that the history shows written since its last look.

This module names the engine's parts and exports what users open:

=================  ==========================================================================
``store.py``       the store file, its connections and writer lock, the database API
``reads.py``       a transaction's state and reads (``TransactionRead``), read conflicts
``transaction.py`` writes, versionstamps, watches and the commit (``Transaction``)
``commit.py``      under the write lock: conflict check, log replay
``history.py``     the commit counter and recent commits' write ranges, shared in memory
``atomic.py``      atomic operations
``ranges.py``      key-range arithmetic; where versionstamped keys may land
``keyvalues.py``   keys and values: conversion and FoundationDB's limits on them
``limits.py``      FoundationDB's limits (``TRANSACTION_LIFETIME`` read at run time)
``options.py``     ``tr.options``
``watches.py``     armed watches and the thread that fires them
``checkpoints.py`` WAL checkpoints on a thread of their own
``memory_dirs.py`` the directories of ``memory:`` stores: removed at close, or once unowned
=================  ==========================================================================

Several OS processes share the file: writers serialise on an ``flock`` (woken by the kernel,
unlike SQLite's sleeping busy handler), then take SQLite's write lock (``BEGIN
IMMEDIATE``, or the one statement of a one-write commit); WAL keeps readers unblocked,
and a killed process leaves the last committed state (SQLite's recovery) and a history
that counts its last commit as done whether or not SQLite committed it.
"""

from __future__ import annotations

from .errors import StoreFileError
from .store import FORMAT_NAME, FORMAT_VERSION, EmbeddedDatabase
from .transaction import Transaction

__all__ = ["EmbeddedDatabase", "Transaction", "StoreFileError", "FORMAT_NAME", "FORMAT_VERSION"]
