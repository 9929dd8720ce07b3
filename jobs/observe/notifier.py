"""The notifier behind ``jobs.subscribe`` / ``jobs.wait`` / ``jobs.unsubscribe``.

One notifier thread per database per process holds one watch per job type with subscribers
(``activity.watch``: on the type's ``watches_activity`` keys, one of which every change to
a job of the type stamps; a share of the set the process's processors hold too), so
thousands of subscriptions cost one set each type.  When it fires (or a subscription is
added) it re-reads the subscribed jobs' rows in one snapshot transaction
and queues an :class:`Event` for each job whose state or last activity changed: pending ->
running (again for each update while running) -> finished, or ``not_found`` once removed.
A subscription ends after ``finished`` or ``not_found``.  Changes that happen between two
reads coalesce (a job that ran and finished in between gives one ``finished`` event): the
latest state is always delivered, intermediate ones may not be.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from dataclasses import dataclass

from .. import dbstate, keys
from ..codec import decode_data, decode_row
from ..engine import OPERATION_CANCELLED, describe_store, error_code, run as run_transaction, value_of
from ..errors import NotFound
from ..indexes import wakeups
from ..queue import activity, rows

POLL_CAP = 1.0  # longest sleep without a watch firing (watches may fire late; cheap re-read)


@dataclass(frozen=True, slots=True)
class Event:
    """One change of a subscribed job: ``state`` is pending, running, finished or not_found."""

    type: str
    id: str
    state: str
    data: dict | None


class Subscription:
    """A subscription to one job: ``state`` and ``data`` are as of its last event."""

    def __init__(self, notifier: "Notifier", type: str, job_id: str, state: str, data, seq):
        self.type, self.id, self.state, self.data = type, job_id, state, data
        self._notifier = notifier
        self._seq = seq  # last activity versionstamp seen (changes with each update)
        self._events: collections.deque[Event] = collections.deque()
        self.active = state not in ("finished", "not_found")

    def __repr__(self) -> str:
        return f"<Subscription {self.type}/{self.id} {self.state}>"


class Notifier:
    """Subscriptions of one database in this process, and the thread that feeds them."""

    def __init__(self, db):
        self.db = db
        self.cond = threading.Condition()
        self._subs: list[Subscription] = []
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # set by the watches of this round, or a new subscriber

    def subscribe(self, type: str, job_id: str) -> Subscription:
        def read(tr):
            return rows.get(tr, type, job_id)

        row = run_transaction(self.db, read)
        if row is None:
            raise NotFound(f"job {type}/{job_id} not found in {describe_store(self.db)}")
        sub = Subscription(self, type, job_id, row.state, decode_data(row.data), row.seq)
        if sub.active:
            with self.cond:
                self._subs.append(sub)
                self._wake.set()
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="jobs-notifier", daemon=True)
                    self._thread.start()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self.cond:
            sub.active = False
            sub._events.clear()  # couch_jobs kept queued events; a dropped subscription has none
            if sub in self._subs:
                self._subs.remove(sub)

    def _run(self) -> None:
        while True:
            with self.cond:
                subs = list(self._subs)
                if not subs:
                    self._thread = None
                    return
                wake = self._wake = threading.Event()
            try:
                watches = run_transaction(self.db, lambda tr: self._poll(tr, subs))
            except Exception:  # noqa: BLE001 - the store is closed or failing
                # end the subscriptions so that no waiter hangs on a notifier that stopped
                self._end_all()
                if error_code(sys.exc_info()[1]) != OPERATION_CANCELLED:
                    raise
                return
            wakeups.sleep_until_any(watches, wake, POLL_CAP)

    def _end_all(self) -> None:
        with self.cond:
            for sub in self._subs:
                sub.active = False
            self._subs.clear()
            self._thread = None
            self.cond.notify_all()

    def _poll(self, tr, subs: list[Subscription]):
        """Read the subscribed rows; queue events for changes; return the watches of each
        type's activity (one set per type)."""
        snap = tr.snapshot
        found = [(sub, value_of(snap.get(keys.data_key(sub.type, sub.id)))) for sub in subs]
        events = []
        for sub, raw in found:
            if raw is None:
                state, data, seq = "not_found", None, None
            else:
                row = decode_row(raw)
                state, data, seq = row.state, row.data, row.seq
            if state == sub.state and seq == sub._seq:
                continue
            event = Event(sub.type, sub.id, state, None if data is None else decode_data(data))
            events.append((sub, event, seq))
        with self.cond:
            for sub, event, seq in events:
                if not sub.active:
                    continue
                sub.state, sub.data, sub._seq = event.state, event.data, seq
                sub._events.append(event)
                if event.state in ("finished", "not_found"):
                    sub.active = False
                    self._subs.remove(sub)
            if events:
                self.cond.notify_all()
        return [activity.watch(tr, t) for t in {s.type for s in subs}]


def notifier_for(db) -> Notifier:
    """``db``'s notifier, one per database handle (a handle that keeps no state: one per call)."""
    state = dbstate.of(db)
    if state is None:
        return Notifier(db)
    with state.lock:
        if state.notifier is None:
            state.notifier = Notifier(db)
        return state.notifier


def wait(subs, timeout: float | None, state: str | None = None) -> Event | None:
    """The next event of ``subs`` (a Subscription or a list of them) whose state is
    ``state`` (None: any); events of other states are dropped.  None after ``timeout``
    seconds (None: wait forever)."""
    many = list(subs) if isinstance(subs, (list, tuple)) else [subs]
    if not many:
        raise ValueError("wait() needs at least one subscription")
    deadline = None if timeout is None else time.monotonic() + timeout
    if any(not isinstance(s, Subscription) for s in many):
        raise TypeError("wait() takes Subscriptions from jobs.subscribe()")
    if len({id(s._notifier) for s in many}) > 1:
        raise ValueError("wait() on a list takes subscriptions of one database")
    cond = many[0]._notifier.cond
    with cond:
        while True:
            for sub in many:
                while sub._events:
                    event = sub._events.popleft()
                    if state is None or event.state == state:
                        return event
            if all(not s.active for s in many):
                return None  # nothing more can come
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            cond.wait(left if left is not None else None)
