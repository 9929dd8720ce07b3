"""Waiting accepts of one process share the watches of a type's pending wake keys.

An add bumps one of the type's ``watches_pending`` shards (``keys.py``), so a waiting
accept must watch them all: 16 keys.  Rather than each waiting accept arming 16 watches
of its own (a process holding a thousand waiting
``aio.accept`` calls would pass the client's limit of 10,000 watches), the accepts of a
process join one set, a *generation*, armed by one of them.

Joining is safe when the generation was armed at or before the joiner's read version: a
watch fires on any change after the version its transaction read at, so every add the
joiner did not see (committed after its read version) fires it.  A joiner that read
earlier than every unfired generation arms one of its own.  A generation fires once, for
all who joined it (each then looks at the queue again), and is forgotten; its watches are
cancelled when it fires, or when the last of its waiters leaves (a timeout).  Watches of
an attempt that does not commit fail (``transactional.run`` cancels them): the generation
fails, and whoever joined it looks again, as after any watch error.
"""

from __future__ import annotations

import threading

from ..engine import OPERATION_CANCELLED, FDBError, Future, watch_keys
from .. import dbstate


class Ticket(Future):
    """One waiter's share of a generation, with a watch future's interface: ready when the
    generation fires (its error, if it failed); ``cancel`` leaves it."""

    __slots__ = ("_generation",)

    def __init__(self, generation: "_Generation"):
        super().__init__()
        self._generation = generation

    def cancel(self) -> None:
        if self.set_error(FDBError(OPERATION_CANCELLED)):
            self._generation.leave(self)


class _Generation:
    """Watches armed by one transaction at read ``version``; fires once, when one does."""

    def __init__(self, hub: "_Hub | None", keys: tuple, version: int, watches: list):
        self.hub, self.keys, self.version = hub, keys, version
        self._watches = watches
        self._lock = threading.Lock()
        self._tickets: set[Ticket] = set()
        self.done = False
        for w in watches:
            w.on_ready(self._fired)

    def join(self) -> Ticket:
        ticket = Ticket(self)
        with self._lock:
            if not self.done:
                self._tickets.add(ticket)
                return ticket
        ticket.set_result(None)  # fired meanwhile: look again at once
        return ticket

    def leave(self, ticket: Ticket) -> None:
        with self._lock:
            self._tickets.discard(ticket)
            if self._tickets or self.done:
                return
            self.done = True  # nobody waits: free the watch slots
        self._end()

    def _fired(self, watch) -> None:
        with self._lock:
            if self.done:
                return
            self.done = True
            tickets, self._tickets = self._tickets, set()
        try:
            watch.wait()
            error = None
        except Exception as exc:  # noqa: BLE001 - handed to every waiter
            error = exc
        self._end()
        for ticket in tickets:
            ticket.set_error(error) if error is not None else ticket.set_result(None)

    def _end(self) -> None:
        if self.hub is not None:
            self.hub.forget(self)
        for w in self._watches:
            if not w.is_ready():
                w.cancel()


class _Hub:
    """The live generations of one database, by the keys they watch, oldest first."""

    def __init__(self):
        self._lock = threading.Lock()
        self._generations: dict[str, list[_Generation]] = {}

    def usable(self, keys: tuple, version: int) -> _Generation | None:
        with self._lock:
            for g in self._generations.get(keys, ()):
                if g.version <= version and not g.done:
                    return g
        return None

    def add(self, g: _Generation) -> None:
        with self._lock:
            self._generations.setdefault(g.keys, []).append(g)
        if g.done:  # fired (and forgotten) before it was added
            self.forget(g)

    def forget(self, g: _Generation) -> None:
        with self._lock:
            found = self._generations.get(g.keys, [])
            if g in found:
                found.remove(g)
            if not found:
                self._generations.pop(g.keys, None)


def _hub_of(tr) -> _Hub | None:
    """The hub of ``tr``'s database (None: a transaction whose database keeps no state)."""
    state = dbstate.of(getattr(tr, "db", None))
    if state is None:
        return None
    with state.lock:
        if state.hub is None:
            state.hub = _Hub()
        return state.hub


def watch_any(tr, keys) -> Ticket:
    """A watch (a :class:`Ticket`) that fires on the next change to any of ``keys`` after
    ``tr``'s read version: a share of a generation of this process watching the same keys
    when one is usable, else a generation armed in ``tr`` (a transaction that writes
    nothing: a watch is a read)."""
    version = tr.get_read_version().wait()
    keys, hub = tuple(keys), _hub_of(tr)
    if hub is not None and (g := hub.usable(keys, version)) is not None:
        return g.join()
    g = _Generation(hub, keys, version, watch_keys(tr, keys))
    if hub is not None:
        hub.add(g)
    return g.join()


def seen(tr, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
    """The wake keys in ``[begin, end)`` and their values in ``tr``'s snapshot, read
    without a conflict (one range read: cheaper than a read per key), for a transaction
    that writes, where a watch may not go (:func:`joined_since`)."""
    return [(bytes(k), bytes(v)) for k, v in tr.snapshot.get_range(begin, end)]


def joined_since(db, keys, version: int) -> Ticket | None:
    """A share of a generation of ``db`` watching ``keys`` that is usable at ``version``
    (armed at or before it), for a transaction at that read version that could not watch
    (it writes: a watch is a read, it would conflict with every change meanwhile); None
    if there is none: the caller watches in a new transaction, after checking the keys
    still hold what that one saw (:func:`seen`)."""
    state = dbstate.of(db)
    hub = None if state is None else state.hub
    if hub is not None and (g := hub.usable(tuple(keys), version)) is not None:
        return g.join()
    return None


def sleep_until_any(watches, wake: threading.Event, timeout: float) -> None:
    """Block until one of ``watches`` fires, ``wake`` is set (by the caller's own news) or
    ``timeout`` s pass; then cancel them all (a fired one is left as it is)."""
    for w in watches:
        w.on_ready(lambda _f: wake.set())
    wake.wait(timeout)
    for w in watches:
        w.cancel()


def waiting(db, keys) -> tuple[int, int]:
    """``(generations, waiters)`` watching ``keys`` in this process (for tests)."""
    state = dbstate.of(db)
    hub = None if state is None else state.hub
    found = [] if hub is None else list(hub._generations.get(tuple(keys), ()))
    return len(found), sum(len(g._tickets) for g in found)
