"""Armed watches of an embedded database, and the thread that fires them."""

from __future__ import annotations

import bisect
import threading
import time

from . import errors as E
from .doorbell import Doorbell
from .errors import FDBError, StoreFileError
from .futures import Future
from .keyvalues import stored_values

from .limits import MAX_WATCHES

UNKNOWN = object()  # a watch baseline that differs from every value


class WatchFuture(Future):
    """A watch's future.  Once armed, its cancel tells its :class:`Watches` that a prune
    is due (the watch thread knows of those it fires itself)."""

    __slots__ = ("_watches",)  # (set when armed)

    def cancel(self) -> None:
        if self.set_error(FDBError(E.OPERATION_CANCELLED)):
            try:
                self._watches._settled = True
            except AttributeError:  # (not armed yet: its transaction is cancelling it)
                pass


class Watches:
    """Armed watches of one database: ``key -> [(baseline value, future)]``.

    A daemon thread looks at the store whenever it changes: at once after a local commit
    (``poke``), and for other processes' commits as soon as the store's doorbell rings
    (inotify on its log; see ``doorbell.py``).  Without a doorbell it polls the store's
    commit counter every few milliseconds while any watch is armed; with one it still
    looks now and then (``BELL_SAFETY``), and goes back to polling for good if it finds
    commits that the doorbell missed (a filesystem that does not report them).

    A look reads from SQLite only the watched keys that a commit wrote since the last look
    (or, for a watch armed since, since its transaction's read version), as the shared
    commit history tells (``History.writes_since``): other commits (most of them on a
    busy store: other workers' accepts and finishes) and new watches cost no query.
    When the history cannot tell (it no longer reaches back), or would tell only by
    decoding more than ``WRITES_READ_MAX`` commits, every watched key is read."""

    POLL_MIN = 0.0005  # also the least time between two checks: a busy store wakes the thread often
    POLL_MAX = 0.004
    BELL_SAFETY = 0.25
    # A ring whose commit is not settled yet (history.committing) is looked at again after
    # SETTLE_PAUSE, not after the doorbell's shortest wait (poll(2) counts whole
    # milliseconds): it settles within microseconds of its last write to the log, which
    # rings no more.  At most SETTLE_MAX after the ring (a committer killed under the lock
    # leaves its commit unsettled until the next commit).  A sleep lasts some 80 us longer
    # than asked here (timer slack, a virtual machine's wake-up), so the pause asked is
    # short: at 0.1 ms each look again took about 0.19 ms, and a job added just as another
    # commit was under way waited for it (a quarter of the steady workload's slowest
    # starts, traced).
    SETTLE_PAUSE = 0.00002
    SETTLE_MAX = 0.005
    BELL_MISSES = 3  # unannounced commits seen before the doorbell is given up
    # Commits since the last look beyond which the thread reads every watched key rather
    # than the commits' write ranges: one statement (a type's wake shards are 17 keys)
    # against decoding each commit's ranges.  A processor that takes its turn to watch
    # after seconds without a watch would otherwise decode thousands, for tens of
    # milliseconds, while the first job it should wake for waits.
    WRITES_READ_MAX = 64

    def __init__(self, db, use_doorbell: bool = True):
        self._db = db
        self._use_doorbell = use_doorbell  # False: poll (JOBS_EMBEDDED_WATCHES=poll)
        self._cond = threading.Condition()
        self._armed: dict[bytes, list[tuple[object, Future]]] = {}
        self._keys: list[bytes] | None = []  # the armed keys, sorted (None: to be sorted)
        # Watches armed since the last look: the lowest read version of their
        # transactions (their baselines hold there), and the keys to read from the store
        # whatever the history says (baselines not known: own atomic or stamped writes)
        self._from: int | None = None
        self._fresh: set[bytes] = set()
        self._settled = False  # a watch fired or was cancelled since the last prune
        # (known from WatchFuture.cancel and from the thread's own firing)
        self._poked = False
        self._thread: threading.Thread | None = None
        self._closed = False
        self._bell: Doorbell | None = None  # set and cleared under _cond by the thread

    def count(self) -> int:
        """Armed watches that have not fired nor been cancelled."""
        with self._cond:
            self._prune(every=True)
            return self._armed_total()

    def _armed_total(self) -> int:
        """(Under _cond.)  Watches in the armed set, fired and cancelled ones not yet pruned
        included."""
        return sum(map(len, self._armed.values()))

    def _prune(self, every: bool = False) -> None:
        """(Under _cond.)  Drop the watches that fired or were cancelled: done here, in
        one pass when any did (``every``: look whatever the flag says), rather than by a
        callback each (a waiting accept cancels a watch per wake shard at once)."""
        if not (self._settled or every):
            return
        self._settled = False  # (before the pass: one settled meanwhile makes another)
        armed = self._armed
        for key, items in list(armed.items()):
            if len(items) == 1:  # (the common case: a key has one watch per process)
                if not items[0][1].is_ready():
                    continue
                live = None
            else:
                live = [item for item in items if not item[1].is_ready()]
                if len(live) == len(items):
                    continue
            if live:
                armed[key] = live
            else:
                del armed[key]
                self._keys = None

    def add(self, watches, since: int) -> None:
        """Arm ``watches``, ``(key, baseline, future)`` items (a committed transaction's:
        one wake of the thread for them all), whose baselines are the values at read
        version ``since`` or later."""
        with self._cond:
            room = MAX_WATCHES - self._armed_total()
            if room < len(watches):  # (fired and cancelled ones still in: count only live ones)
                self._prune(every=True)
                room = MAX_WATCHES - self._armed_total()
            for key, baseline, future in watches:
                if room <= 0:
                    future.set_error(FDBError(E.TOO_MANY_WATCHES))
                    continue
                room -= 1
                items = self._armed.get(key)
                if items is None:
                    items = self._armed[key] = []
                    self._keys = None
                items.append((baseline, future))
                if baseline is UNKNOWN:  # (fires at its first look: the store is read)
                    self._fresh.add(key)
                future._watches = self
                if future.is_ready():  # (cancelled meanwhile)
                    self._settled = True
            self._from = since if self._from is None else min(self._from, since)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="jobs-watches", daemon=True)
                self._thread.start()
            self._wake()  # check the baselines against the store at once

    def _wake(self) -> None:
        """(Under _cond.)  Make the thread look at the store now, wherever it waits."""
        self._poked = True
        self._cond.notify()
        if self._bell is not None:
            self._bell.ring()

    def poke(self) -> None:
        if self._armed:
            with self._cond:
                self._wake()

    def _fail_all(self, error: FDBError) -> None:
        armed, self._armed, self._keys = self._armed, {}, []
        for items in armed.values():
            for _b, f in items:
                f.set_error(error)

    def close(self) -> None:
        """Fail armed watches and stop the thread (joined, so the store can be deleted)."""
        with self._cond:
            self._closed = True
            self._fail_all(FDBError(E.OPERATION_CANCELLED))
            self._wake()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self) -> None:
        conn = self._start()
        if conn is None:
            return
        history = self._db._history
        pace = _Pace(self._bell, self, history.committing)
        seen = None  # the version up to which every armed key has been compared
        try:
            while True:
                look = self._wait(pace)
                if look is None:
                    return  # closed
                poked, keys, fresh, since = look
                version = history.read_version()  # (before the reads: they see it all)
                if not poked and since is None and not fresh and pace.unchanged(version):
                    continue
                if pace.missed_a_commit(poked):
                    with self._cond:
                        self._bell = None
                    pace.give_up_bell()
                pace.looked(version)
                # New watches' keys were written if a commit after their read version wrote
                # them; the others if one after the last look did.
                written = (None if seen is None
                           else history.writes_since(seen if since is None else min(seen, since), version,
                                                     self.WRITES_READ_MAX))
                self._check(conn, keys if written is None else _written(keys, written) | fresh)
                seen = version
        finally:
            with self._cond:
                self._bell = None
            pace.give_up_bell()
            conn.close()

    def _start(self):
        """(On the thread.)  Its own connection, and the doorbell unless polling was asked
        for; None when closed or the store is gone."""
        with self._cond:
            if self._closed:
                return None
            try:  # under the lock: close() cannot delete a memory store meanwhile
                conn = self._db._connect()
            except StoreFileError:
                self._fail_all(FDBError(E.OPERATION_CANCELLED, "store is gone"))
                return None
            if self._use_doorbell:
                self._bell = Doorbell.open(self._db.path)
            return conn

    def _wait(self, pace: "_Pace") -> tuple[bool, list[bytes], set[bytes], int | None] | None:
        """Wait until a look at the store is due: a poke (a local commit, a new watch), the
        doorbell, or the pace's interval.  ``(poked, watched keys sorted, keys to read
        anyway, the lowest read version of watches armed since the last look)``, or None
        when closed."""
        with self._cond:
            self._prune()
            while not self._armed and not self._closed:
                self._cond.wait()
                self._prune()
            if self._closed:
                return None
            if not self._poked and pace.bell is None:
                self._cond.wait(pace.interval)
            waiting = not self._poked and pace.bell is not None
        if waiting:
            pace.wait_for_bell(lambda: self._poked)
        with self._cond:
            if self._closed:
                return None
            poked, self._poked = self._poked, False
            if poked and pace.bell is not None:
                pace.bell.clear()  # (rung with the poke, under this lock)
            if self._keys is None:
                self._keys = sorted(self._armed)
            fresh, self._fresh = self._fresh, set()
            since, self._from = self._from, None
            return poked, self._keys, fresh, since

    def _check(self, conn, keys) -> None:
        """Fire the watches of ``keys`` whose value is no longer their baseline."""
        if not keys:
            return
        keys = list(keys)
        current = dict.fromkeys(keys)  # absent keys: None
        current.update(stored_values(conn, keys))  # (few statements for many keys: a type's shards are 17)
        fired = []
        with self._cond:
            for key, value in current.items():
                for baseline, future in self._armed.get(key, ()):
                    if baseline is UNKNOWN or baseline != value:
                        fired.append(future)
        if fired:
            self._settled = True
        for future in fired:
            future.set_result(None)


def _written(keys: list[bytes], commits: list[list]) -> set[bytes]:
    """Those of ``keys`` (sorted) inside the write ranges of ``commits``."""
    hit = set()
    n = len(keys)
    for ranges in commits:
        for begin, end in ranges:
            i = bisect.bisect_left(keys, begin)
            while i < n and keys[i] < end:
                hit.add(keys[i])
                i += 1
    return hit


class _Pace:
    """When the watch thread looks at the store again, and whether it still trusts the
    doorbell: the state of its loop, in one place.

    ``interval``: the longest wait before the next look (polling grows it from POLL_MIN to
    POLL_MAX while nothing changes; with a doorbell it is BELL_SAFETY, or short while a
    ring has not yet shown a commit: the log is being written).  ``misses``: commits of
    other processes the doorbell did not announce; at BELL_MISSES it is given up.
    ``committing()``: a commit is under way (its ring is followed up in SETTLE_PAUSE)."""

    def __init__(self, bell: Doorbell | None, watches: Watches, committing):
        self.bell = bell
        self._k = watches  # its POLL_MIN, POLL_MAX, BELL_SAFETY, BELL_MISSES, SETTLE_*
        self._committing = committing
        self._settle_until = 0.0  # (monotonic) rung, the commit unsettled: look again soon until then
        self.interval = watches.POLL_MIN
        self._last_version = None
        self._last_look = 0.0
        self._waited = False  # this round waited on the doorbell
        self._ring = False  # ... and it rang
        self._rang = False  # the doorbell rang and no new commit was seen since
        self._misses = 0

    def wait_for_bell(self, poked) -> None:
        """Wait on the doorbell for up to ``interval``; a burst of rings makes one look
        (no sooner than POLL_MIN after the last) unless ``poked()`` says a look is due."""
        self._waited = True
        now = time.monotonic()
        pause = self._last_look + self._k.POLL_MIN - now
        if now < self._settle_until:  # (the ring's commit is being settled: it counts as rung)
            time.sleep(max(self._k.SETTLE_PAUSE, pause))
            self._ring = True
            return
        self._ring = self.bell.wait(self.interval)
        self._rang = self._rang or self._ring
        pause = self._last_look + self._k.POLL_MIN - time.monotonic()
        if self._ring and pause > 0 and not poked():
            time.sleep(pause)

    def unchanged(self, version) -> bool:
        """Nothing committed since the last look (``version``: the store's commit counter):
        pace the next wait, and skip this look."""
        if version != self._last_version:
            return False
        k = self._k
        if self.bell is None:
            self.interval = min(self.interval * 1.25, k.POLL_MAX)
        elif self._rang:  # the log is being written; the commit shows once it is whole
            self.interval = k.POLL_MIN if self._ring else min(self.interval * 1.25, k.BELL_SAFETY)
            if not self._ring or not self._committing():
                self._settle_until = 0.0
            elif not self._settle_until:
                self._settle_until = time.monotonic() + k.SETTLE_MAX
        else:
            self.interval = k.BELL_SAFETY
        self._waited = self._ring = False
        return True

    def missed_a_commit(self, poked: bool) -> bool:
        """Another process committed and the doorbell did not say so (its event would be
        queued by now: inotify queues it in the write itself): True once that happened
        BELL_MISSES times."""
        silent = (self._waited and not self._rang and not poked and self._last_version is not None
                  and not self.bell.wait(0))
        self._misses += silent
        return silent and self._misses >= self._k.BELL_MISSES

    def give_up_bell(self) -> None:
        if self.bell is not None:
            self.bell.close()
            self.bell = None

    def looked(self, version) -> None:
        """A look at ``version``: with a doorbell the next commit rings, so the next look
        can wait long; polling starts over at POLL_MIN."""
        self._last_version = version
        self.interval = self._k.POLL_MIN if self.bell is None else self._k.BELL_SAFETY
        self._rang = self._waited = self._ring = False
        self._settle_until = 0.0
        self._last_look = time.monotonic()

