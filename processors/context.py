"""What a handler gets: the job's params, progress updates, and whether it was halted.

One ``Run`` per accepted job holds the worker's current ``Job`` (renewed by every update,
from the handler or the heartbeat) under a lock, since the heartbeat runs on another
thread than a sync handler.  Once halted, a run writes nothing more: ``update`` raises
``Halt`` and the processor does not finish the job.
"""

from __future__ import annotations

import threading
import time
import uuid

import anyio.to_thread

import jobs
from jobs import Halt

from . import behaviors
from .interrupt import shielded


class Run:
    """The processor's record of one job it holds."""

    def __init__(self, db, job: jobs.Job, beat_every: float):
        self.db = db
        self.job = job
        self.id = uuid.uuid4().hex  # this run of the job (a re-run elsewhere gets another)
        self.params, self.task = behaviors.split(job.data)
        self.beat_every = beat_every
        self.next_beat = time.monotonic() + beat_every
        self.halted = threading.Event()  # lost the job (Halt) or handed it back (shutdown)
        self.lock = threading.Lock()  # serializes updates: handler vs heartbeat
        self.on_commit: list = []  # fn(tr) to run in the transaction that finishes the job
        self.stopper = None  # stops the handler: set by the processor when it starts one
        self.started = False  # its handler was called (else it was only prefetched)
        self.finishing = False  # its outcome is queued or being written (the job leaves "running")

    def update(self, data: dict | None) -> None:
        """Heartbeat (data None) or progress: renew the job, or raise Halt once lost."""
        with self.lock:
            if self.halted.is_set():
                raise Halt(f"job {self.job.type}/{self.job.id} was halted; stop working on it")
            full = None if data is None else {**data, behaviors.TASK_KEY: self.task} if self.task else data
            try:
                with shielded():  # never interrupted inside a transaction
                    self.job = jobs.update(self.db, self.job, full)
            except Halt:
                self.halted.set()
                raise
            self.next_beat = time.monotonic() + self.beat_every

    def halt(self) -> None:
        with self.lock:
            self.halted.set()

    def stop_handler(self) -> None:
        """Cancel the async handler's scope or interrupt the sync handler's thread (if
        its handler allows it); nothing before the handler started."""
        if self.stopper is not None:
            self.stopper()


class Context:
    """Handed to a sync handler.  ``data``: the job's params (dict); ``update(data)``:
    record progress (replaces the params, renews the job); ``halted``: the job was taken
    away (stop, the result will not be written); ``check()`` raises Halt if so."""

    def __init__(self, run: Run):
        self._run = run

    @property
    def type(self) -> str:
        return self._run.job.type

    @property
    def job_id(self) -> str:
        return self._run.job.id

    @property
    def run_id(self) -> str:
        """Unique to this run of the job: name side outputs after it, so that the output
        of a run that lost its job is never mistaken for the committed one."""
        return self._run.id

    @property
    def data(self) -> dict:
        return self._run.params

    @property
    def attempt(self) -> int:
        """1 for the first run, n+1 after n failed attempts."""
        return int(self._run.task.get("attempts", 0)) + 1

    @property
    def lost(self) -> int:
        """How many workers this run of the job lost before (killed, or stopped
        heartbeating for a type timeout), as counted by the activity monitor."""
        lost = self._run.job.lost
        return 0 if lost is None else lost.count

    @property
    def last_error(self) -> dict | None:
        """The error of the previous failed attempt, if any."""
        return self._run.task.get("last_error")

    @property
    def halted(self) -> bool:
        return self._run.halted.is_set()

    def check(self) -> None:
        """Raise Halt if the job was taken away: call it between steps of long work."""
        if self.halted:
            raise Halt(f"job {self.type}/{self.job_id} was halted; stop working on it")

    def update(self, data: dict | None = None) -> None:
        """Record progress (``data`` replaces the params; None only heartbeats).  Raises
        Halt when the job is no longer this worker's."""
        self._run.update(data)
        if data is not None:
            self._run.params = data

    def on_commit(self, fn) -> None:
        """Run ``fn(tr)`` inside the transaction that finishes the job with the handler's
        result: its writes commit with the finish, exactly once, and never once the job
        was lost.  ``fn`` may run more than once if that transaction is retried (only the
        last run commits), so it should only write through ``tr``."""
        if not callable(fn):
            raise TypeError("on_commit() takes a function of the transaction")
        self._run.on_commit.append(fn)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type}/{self.job_id} attempt={self.attempt} lost={self.lost}>"


class AsyncContext(Context):
    """Handed to an async handler: the same, with ``await ctx.update(data)``."""

    async def update(self, data: dict | None = None) -> None:  # type: ignore[override]
        await anyio.to_thread.run_sync(Context.update, self, data)
