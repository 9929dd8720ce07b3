"""Idle workers of one machine take turns watching for new jobs.

An add wakes every accept that watches its type: with four idle worker processes, four
accepts ran for each new job, one took it, and the others conflicted or found nothing
(at a steady 200 jobs/s on 2 cores that cost more CPU than the jobs' own accepts).  Now
the idle processors of a machine that serve the same types of the same store take
turns: the one holding the *turn* (an exclusive ``flock`` on a file named after the store
id and the types, in the machine's temporary directory, ``jobs/lockfiles.py``: a processor
closing its turn removes the file if no one holds it) watches; the others look at the
queue without a watch once every ``ACCEPT_SLICE`` (so a stuck holder delays jobs by
that at most), and wait for the turn (a thread blocked on the lock).  The holder gives
the turn up as soon as it takes jobs (unless it will have run them within a couple of
milliseconds: it keeps the turn through them, given up by its waiting thread if they run
longer), or as soon as its accept conflicts (another worker
took a job it picked: it backs off before it looks again, up to 40 ms after several
conflicts in a row); the kernel then hands the lock to one waiter, which looks at the
queue (taking what came meanwhile) and watches.  A holder that dies loses the lock with
its process.

Once the queue is drained (a processor's last look took fewer jobs than it asked for:
jobs come a few at a time), a processor without the turn waits for it, a slice at most,
before it looks, and a busy one commits its outcomes on their own rather than in an
accept: the holder takes the few jobs as they come, and a second look would pick the same
ones and conflict (``feed.Acceptor``).  A full batch (a backlog) ends that.

Where the lock cannot be had (no store id yet, a temporary directory it may not write,
``JOBS_IDLE_TURNS=off``), every idle processor watches, as before: each is then its own
holder.  Nothing here decides who gets a job (accepts still do, each in its
transaction): turns only decide who is woken, and who looks first.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
import weakref

from jobs import lockfiles
from jobs.engine import run
from jobs.store_ids import store_id_future, store_id_of

_open_turns: "weakref.WeakSet[Turn]" = weakref.WeakSet()


def lock_path(db, types) -> str | None:
    """The turn's lock file for ``types`` of ``db``'s store, or None (no store id yet, or
    no lock directory to be had)."""
    store_id = run(db, lambda tr: store_id_of(store_id_future(tr)))
    directory = None if store_id is None else lockfiles.directory("jobs-turns")
    if directory is None:
        return None
    served = hashlib.sha256("\0".join(sorted(types)).encode()).hexdigest()[:16]
    return os.path.join(directory, f"{store_id.hex()}-{served}")


class Turn:
    """One processor's part in the turns of its store and types (thread-safe).

    ``take()``: hold the turn now if it is free; ``wait(event)``: set ``event`` when it
    comes; ``release()``: give it up (and stop waiting for it); ``close()``."""

    def __init__(self, path: str | None):
        self._lock = threading.Lock()
        self._path = path
        self._fd: int | None = None
        self._alone = path is None or os.environ.get("JOBS_IDLE_TURNS", "on") == "off"
        if not self._alone:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                self._fd = lockfiles.open_file(path)
            except OSError:
                self._alone = True
            else:
                _open_turns.add(self)
        self._held = False
        self._wanted = False  # waiting for the turn
        self._ready = threading.Condition(self._lock)  # (the waiting thread's: wanted, or closed)
        self._waiter: threading.Thread | None = None  # started at the first wait, then kept
        self._blocked = False  # the waiting thread is (or is about to be) blocked on the lock
        self._notify: threading.Event | None = None
        self._keep_until: float | None = None  # (monotonic) held through a short run until then
        self._wake_at: float | None = None  # (monotonic) when the waiting thread's timed wait ends
        self._kept = 0  # keep() calls, over this processor's life
        self._keep_span = 0.0  # the last keep's seconds
        self._closed = False
        self.taken = 0  # turns held, over this processor's life

    @property
    def held(self) -> bool:
        """This processor watches: it holds the turn, or takes no turns."""
        return self._alone or self._held

    def take(self) -> bool:
        """Hold the turn if it is free (not waiting for it); True if held."""
        with self._lock:
            if self._alone or self._held:
                return True
            if self._closed or self._blocked:
                return False  # (the waiting thread takes it when it comes)
            for _ in range(lockfiles.TRIES):
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                if lockfiles.current(self._fd, self._path) or not self._reopen():
                    break
            else:
                return False
            self._held, self._wanted = True, False  # (a waiting thread not blocked yet waits on)
            self.taken += 1
            return True

    def wait(self, event: threading.Event) -> None:
        """Set ``event`` when this processor holds the turn (at once if it does)."""
        with self._lock:
            if self._alone or self._held:
                event.set()
                return
            if self._closed:
                return
            self._wanted, self._notify = True, event
            self._rouse_waiter()

    def keep(self, seconds: float) -> bool:
        """Go on holding the turn through a run expected to take less than ``seconds`` (the
        next accept looks, watching, as it comes back): given up by the waiting thread if
        :meth:`resume` has not come by then.  False if the turn is not held here."""
        with self._lock:
            if self._alone or not self._held or self._closed:
                return False
            self._keep_until = until = time.monotonic() + seconds
            self._keep_span = seconds
            self._kept += 1
            # (a thread in a timed wait ending by then looks at the deadline anyway: a busy
            # processor keeping the turn job after job does not wake it each time)
            if self._wake_at is None or until < self._wake_at:
                self._rouse_waiter()
            return True

    def _rouse_waiter(self) -> None:
        """(Under the lock.)  Start the waiting thread, or have it look again."""
        if self._waiter is None:
            self._waiter = threading.Thread(target=self._wait_for_lock, name="jobs-turn", daemon=True)
            self._waiter.start()
        else:
            self._ready.notify()

    def resume(self) -> None:
        """Back from the run :meth:`keep` held the turn through (still held, if it is)."""
        self._keep_until = None

    def _wait_for_lock(self) -> None:
        """The waiting thread, one per Turn for its life: blocks on the lock each time the
        turn is wanted, and gives up a turn kept past its run's deadline (:meth:`keep`),
        until closed (no thread started per wait)."""
        kept = self._kept
        while True:
            with self._lock:
                while not self._wanted and not self._closed:
                    until, now = self._keep_until, time.monotonic()
                    if until is not None and now >= until:  # (the run went on longer: another
                        self._keep_until = None              # idle processor watches)
                        self._give_up()
                        continue
                    if until is None:
                        if kept == self._kept:  # not kept since the last look: wait to be told
                            self._ready.wait()
                            continue
                        # back, but kept since the last look: busy, likely to keep it again
                        # soon: look again in a keep's time rather than be woken each time
                        until = now + self._keep_span
                    kept = self._kept
                    self._wake_at = until
                    self._ready.wait(until - now)
                    self._wake_at = None
                if self._closed:
                    self._waiter = None
                    self._close_fd(remove=True)
                    return
                self._blocked = True  # (take() leaves the lock to this thread from here)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            with self._lock:
                self._blocked = False
                if not self._closed and not lockfiles.current(self._fd, self._path) and self._reopen():
                    continue  # (a removed file's lock: wait for the path's new file's)
                if not self._wanted or self._closed:  # (took jobs or stopped meanwhile: pass it on)
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    continue
                self._held, self._wanted = True, False
                self.taken += 1
                event = self._notify
            event.set()

    def release(self) -> bool:
        """Give the turn up (this processor is busy), and stop waiting for it; whether it
        was held (a processor that takes no turns never holds one)."""
        with self._lock:
            self._wanted = False
            self._keep_until = None
            return self._give_up()

    def _give_up(self) -> bool:
        """(Under the lock.)  Unlock the turn if held here; whether it was."""
        if not self._held:
            return False
        self._held = False
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        return True

    def close(self) -> None:
        with self._lock:
            if self._closed or self._alone:
                return
            self._closed, self._wanted = True, False
            self._give_up()
            if not self._blocked:  # (else the waiting thread closes it once the lock comes)
                self._close_fd(remove=True)
            self._ready.notify()  # (a waiting thread ends)

    def _reopen(self) -> bool:
        """(Under the lock, the descriptor not in a blocking ``flock``.)  The lock file was
        removed (``lockfiles.py``): use the path's new file, closing the old one's
        descriptor (its lock, if held here, excludes no one); False if it cannot be
        opened (the old one is kept: its holders still exclude one another)."""
        try:
            fd = lockfiles.open_file(self._path)
        except OSError:
            return False
        os.close(self._fd)
        self._fd = fd
        return True

    def _close_fd(self, remove: bool = False) -> None:
        """Close the descriptor; ``remove``: remove the file too if its lock is free (no
        processor holds the turn, so none waits for it either)."""
        _open_turns.discard(self)
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pass
            else:
                if lockfiles.current(fd, self._path):
                    lockfiles.remove(fd, self._path)
                    return
        try:
            os.close(fd)
        except OSError:
            pass

    def _forget_in_child(self) -> None:
        """(In a forked child.)  The lock belongs to the parent: close the inherited
        descriptor without unlocking, so that the lock goes with the parent's last one
        (a child outliving a dead holder would keep the turn taken)."""
        self._closed, self._held, self._wanted, self._waiter, self._blocked = True, False, False, None, False
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._close_fd()


def _after_fork_in_child() -> None:
    for turn in list(_open_turns):
        turn._forget_in_child()
    _open_turns.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
