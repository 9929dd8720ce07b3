"""What a handler gets: the job's params, progress updates, and whether it was halted.

A Context is a view of the processor's ``Run`` of the job (``run.py``): once the run is
halted it writes nothing more, ``update`` raises ``Halt`` and the job is not finished.
"""

from __future__ import annotations

import anyio.to_thread

from .run import Run


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
        self._run.state.check()

    def update(self, data: dict | None = None) -> None:
        """Record progress (``data`` replaces the params; None only heartbeats).  Raises
        Halt when the job is no longer this worker's."""
        self._run.update(data)

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
