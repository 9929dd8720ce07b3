"""A run: the processor's record of one job it holds, and the states that run goes through.

A run's state is changed from the lane running its handler, the event loop (heartbeats,
the lost-job watcher, shutdown) and the group commit, so it changes only through
``RunState``'s transitions, each under the run's one lock.  That lock is also held
around the run's store writes (heartbeat or progress, finish, hand-back), so that none
of them lands in the middle of another.

    held --start()--> started --finish()--> finishing    (its outcome is queued or being written)
      |                  |                      |
      +------------------+----------------------+--> halted    (lost, or handed back:
                                                                 nothing more is written)

``halt()`` is the job found lost by one of the run's own writes; ``take_away()`` halts
only a run that is not finishing (the lost-job watcher, a hand-back): a finish under way
decides for itself whether the job was still ours.  ``started`` and ``finishing`` stay
set once halted: a halted handler may still be running.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import jobs
from jobs import Halt

from . import behaviors
from .interrupt import shielded

_ids_lock = threading.Lock()  # draws of run ids


class Flag:
    """A flag any thread reads without a lock (set once, never cleared): an Event's
    ``is_set``/``set`` without the condition and lock an Event makes, one a job, for a
    flag nobody waits on."""

    __slots__ = ("_set",)

    def __init__(self):
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True


class RunState:
    """Where one run is.  ``halted`` is a :class:`Flag` so that any thread reads it without
    the lock; only the transitions below set it."""

    def __init__(self, what: str):
        self._what = what  # "job TYPE/ID", for Halt's message
        self._lock = threading.Lock()
        self.halted = Flag()
        self._started = False  # its handler was called (else it was only prefetched)
        self._finishing = False  # its outcome is queued or being written (no more heartbeats)
        self._stopper = None  # stops the running handler (None: none running, or not stoppable)

    @property
    def started(self) -> bool:
        return self._started

    @property
    def finishing(self) -> bool:
        return self._finishing

    @property
    def active(self) -> bool:
        """Still to be heartbeated and watched: neither halted nor finishing."""
        return not self.halted.is_set() and not self._finishing

    def check(self) -> None:
        """Raise Halt if the run was halted."""
        if self.halted.is_set():
            raise Halt(f"{self._what} was halted; stop working on it")

    def start(self) -> bool:
        """held -> started, as its handler is called; False if halted first."""
        with self._lock:
            if self.halted.is_set():
                return False
            self._started = True
            return True

    def finish(self) -> bool:
        """-> finishing, as its outcome is queued; False if halted first (nothing to write)."""
        with self._lock:
            if self.halted.is_set():
                return False
            self._finishing = True
            return True

    @contextlib.contextmanager
    def writing(self, *, finish: bool = False):
        """Hold the lock around one of the run's store writes (``finish``: the one that
        writes its outcome, -> finishing).  Raises Halt if halted; a Halt from the write
        (the job is no longer ours) halts the run."""
        with self._lock:
            self.check()
            if finish:
                self._finishing = True
            try:
                yield
            except Halt:
                self.halted.set()
                raise

    def halt(self) -> None:
        """-> halted: the job was found lost."""
        with self._lock:
            self.halted.set()

    def take_away(self, then=None) -> bool:
        """-> halted, unless halted or finishing already (then False).  ``then()``, if
        given, runs under the lock once halted (the hand-back's write) and its result is
        returned."""
        with self._lock:
            if not self.active:
                return False
            self.halted.set()
            return True if then is None else then()

    def stoppable(self, stopper) -> "RunState":
        """``with state.stoppable(stopper):`` while the handler runs, :meth:`stop_handler`
        calls ``stopper`` (None: the handler is not to be stopped).  (The state is its own
        context manager, which clears it: no generator a job.)"""
        self._stopper = stopper
        return self

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        self._stopper = None

    def stop_handler(self) -> None:
        """Cancel the async handler's scope or interrupt the sync handler's thread (if
        its handler allows it); nothing before the handler started or after it returned."""
        stopper = self._stopper
        if stopper is not None:
            stopper()


class Run:
    """The processor's record of one job it holds: the worker's current ``Job`` (renewed
    by every update, from the handler or the heartbeat), the handler's params, when the
    next heartbeat is due, the handler's ``on_commit`` writes, and its ``state``."""

    def __init__(self, db, job: jobs.Job, beat_every: float):
        self.db = db
        self.job = job
        self._id: str | None = None  # (drawn when first asked: few handlers ask)
        self.params, self.task = behaviors.split(job.data)
        self.beat_every = beat_every
        self.held_since = time.monotonic()
        self.next_beat = self.held_since + beat_every
        self.on_commit: list = []  # fn(tr) to run in the transaction that finishes the job
        self.queued_at = 0.0  # (monotonic) when its outcome was queued for the group commit
        self.state = RunState(f"job {job.type}/{job.id}")
        self.over_limit: float | None = None  # the time_limit its handler went over
        self._over_since = 0.0  # (wall clock) when
        self._over_marked = False  # the mark is in the job's data (the next heartbeat writes it)

    @property
    def id(self) -> str:
        """Unique to this run of the job (a re-run, here or elsewhere, gets another)."""
        if self._id is None:
            with _ids_lock:  # (not the run's lock: an on_commit hook asks under it)
                if self._id is None:
                    self._id = uuid.uuid4().hex
        return self._id

    @property
    def halted(self) -> Flag:
        return self.state.halted

    def update(self, data: dict | None) -> None:
        """Heartbeat (data None) or progress (the new params): renew the job, or raise
        Halt once lost."""
        with self.state.writing():
            full = None if data is None else {**data, behaviors.TASK_KEY: self.task} if self.task else data
            marking = data is None and self.over_limit is not None and not self._over_marked
            if marking:  # a heartbeat of a handler over its limit: the data says so
                over = {"limit": self.over_limit, "since": self._over_since}
                full = {**self.params, behaviors.TASK_KEY: {**self.task, behaviors.OVER_TIME_LIMIT: over}}
            with shielded():  # never interrupted inside a transaction
                self.job = jobs.update(self.db, self.job, full)
            self.beat_in(self.beat_every)
            if marking:
                self._over_marked = True
            if data is not None:
                self.params = data

    def exceed(self, limit: float) -> None:
        """Its handler went over its time limit (``limit`` seconds): its next heartbeat,
        due now, marks the job's data, for as long as the handler has not returned."""
        self._over_since = time.time()
        self.over_limit = limit
        self.beat_in(0)

    @property
    def over_since(self) -> float | None:
        """When its handler went over its time limit (wall clock), None if it has not."""
        return None if self.over_limit is None else self._over_since

    def beat_in(self, seconds: float) -> None:
        """Make the next heartbeat due in ``seconds``."""
        self.next_beat = time.monotonic() + seconds
