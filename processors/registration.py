"""A processor's entry in the workers registry (``jobs/observe/workers.py``): written as it starts
serving, renewed every ``interval`` seconds by one small blind write (a ``periodic`` duty,
whatever the number of jobs), with how many jobs it holds then, and cleared when it stops
(normally, on a signal, when cancelled or interrupted).  A processor that dies without
stopping writes nothing more: its record goes stale and readers drop it.
"""

from __future__ import annotations

import logging
import threading

from jobs.observe import workers

from .holding import Held

log = logging.getLogger("processors")

HEARTBEAT = 5.0  # default seconds between two heartbeats of a processor's registration


class Registration:
    """The registry record of one processor while it serves (``worker``: None when it
    does not).  ``start``, ``beat`` and ``stop`` block (run them off the event loop)."""

    def __init__(self, db, held: Held, interval: float):
        self.db = db
        self.interval = interval
        self._held = held
        self._lock = threading.Lock()  # a beat never writes the record back after stop()
        self.worker: workers.Worker | None = None

    def start(self, types: list[str], concurrency: int) -> workers.Worker:
        """Register a new worker (a new id) for this run of the processor."""
        worker = workers.new_worker(types, concurrency, interval=self.interval)
        workers.register(self.db, worker)
        with self._lock:
            self.worker = worker
        return worker

    def beat(self) -> None:
        """Renew the record with the jobs held now (raises if the write fails: the periodic
        duty logs it and beats again at the next tick)."""
        with self._lock:
            if self.worker is None:
                return
            runs = self._held.runs()
            named = [(r.job.type, r.job.id, r.over_since) for r in runs[:workers.MAX_HELD_IDS]]
            self.worker = workers.heartbeat(self.db, self.worker, named, held_count=len(runs))

    def stop(self) -> None:
        """Clear the record (idempotent; a failure is logged: the record then goes stale)."""
        with self._lock:
            worker, self.worker = self.worker, None
            if worker is None:
                return
            try:
                workers.unregister(self.db, worker)
            except Exception:  # noqa: BLE001 - stopping goes on; readers drop the stale record
                log.exception("unregistering worker %s failed; it drops out once stale", worker.id)
