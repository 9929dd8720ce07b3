"""Futures of the embedded engine, and waiting on any engine's futures with a timeout.

The embedded engine's futures have the methods of the bindings' ``fdb.Future`` that the
project uses (``wait``, ``is_ready``, ``on_ready``, ``cancel``).  The bindings'
``wait()`` has no timeout; :func:`wait_future` adds one for both engines.
"""

from __future__ import annotations

import threading

from .atomic import apply_ops
from .errors import OPERATION_CANCELLED, TRANSACTION_CANCELLED, FDBError


def wait_future(future, timeout: float | None) -> bool:
    """Block until ``future`` is ready or ``timeout`` seconds pass (None: forever).

    Returns True when ready; the caller still calls ``future.wait()`` to get the value or
    the error.  Does not cancel the future on timeout."""
    if future.is_ready():
        return True
    if timeout is not None and timeout <= 0:
        return False
    ready = threading.Event()
    future.on_ready(lambda _f: ready.set())
    return ready.wait(timeout)


def value_of(future) -> bytes | None:
    """The bytes a ``get`` future holds, or None when the key is absent, on either engine.

    The bindings' ``Value`` future is its own result (``wait()`` returns the future, which is
    never None) and tells absence by ``present()``; read values through this."""
    if type(future) in _ENGINE_VALUES:  # (this engine's: its bytes or None, in one look)
        return future.value
    value = future.wait()
    return bytes(value) if value.present() else None


def copy_outcome(inner, out) -> None:
    """Settle ``out`` with the value or the error of ``inner`` (a ready future of either
    engine)."""
    try:
        value = inner.wait()
    except BaseException as exc:  # noqa: BLE001 - handed on to out's waiter
        out.set_error(exc)
    else:
        out.set_result(value)


class Future:
    """A value or an error that arrives later (set once, from any thread).

    The ``threading.Event`` a waiter blocks on is made only when one has to block: most
    futures here are settled before anyone waits (a commit's, a read version's), and an
    Event (a Condition and its locks, in Python) costs more than the rest of the future."""

    __slots__ = ("_done", "_value", "_error", "_callbacks", "_lock", "_event")

    def __init__(self):
        self._done = False
        self._lock = threading.Lock()
        self._event: threading.Event | None = None  # made by the first waiter that blocks
        self._value = None
        self._error: BaseException | None = None
        self._callbacks: list = []

    @classmethod
    def ready(cls, value=None) -> "Future":
        f = cls()
        f._value = value
        f._done = True
        return f

    def _settle(self, value=None, error: BaseException | None = None) -> bool:
        with self._lock:
            if self._done:
                return False
            self._value, self._error = value, error
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
            event = self._event
        if event is not None:
            event.set()
        for cb in callbacks:
            cb(self)
        return True

    def set_result(self, value=None) -> bool:
        return self._settle(value=value)

    def set_error(self, error: BaseException) -> bool:
        return self._settle(error=error)

    def is_ready(self) -> bool:
        return self._done

    def block_until_ready(self) -> None:
        if self._done:
            return
        with self._lock:
            if self._done:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        event.wait()

    def wait(self):
        """The value; raises the error (an FDBError) if the future failed."""
        if not self._done:
            self.block_until_ready()
        if self._error is not None:
            raise self._error
        return self._value

    def on_ready(self, callback) -> None:
        """Call ``callback(self)`` once the future is ready (at once if it already is)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)

    def cancel(self) -> None:
        self.set_error(FDBError(OPERATION_CANCELLED))


class Value:
    """Result of ``get``/``get_key``, shaped like the bindings' ``fdb.impl.Value``: a future
    whose ``wait()`` returns the future itself; ``present()`` tells an absent key; ``value``
    is the ``bytes`` or None; otherwise it behaves as the bytes (comparisons, ``len``,
    ``decode``, slicing...), raising ``TypeError`` on an absent key as the bindings do.
    Read a key's bytes with :func:`value_of`.

    Tied to its transaction as the bindings' futures are: a transaction destroyed (dropped)
    before the value was first looked at cancels it (1025), which is what FoundationDB does
    to a read still in flight.  This engine's reads count as ready at once (a point read
    is made when a value is first looked at: :class:`DeferredValue`), so the rule applies
    to values not yet looked at: code that drops a transaction too early fails here as it
    would on a cluster."""

    __slots__ = ("_value", "_owner")

    def __init__(self, value: bytes | None, owner=None):
        self._value = value
        self._owner = owner  # a weak reference to the transaction, or None

    @property
    def value(self) -> bytes | None:
        owner = self._owner
        if owner is not None:
            if owner() is None:
                raise FDBError(TRANSACTION_CANCELLED, "the transaction was destroyed before this read was used")
            self._owner = None  # looked at while alive: the value is kept from now on
        return self._value

    def wait(self) -> "Value":
        self.value  # noqa: B018 - raises 1025 if the transaction was destroyed
        return self

    def is_ready(self) -> bool:
        return True

    def block_until_ready(self) -> None:
        pass

    def on_ready(self, callback) -> None:
        callback(self)

    def cancel(self) -> None:
        pass

    def present(self) -> bool:
        return self.value is not None

    def as_foundationdb_key(self):
        return self.value

    as_foundationdb_value = as_foundationdb_key

    def __bytes__(self) -> bytes:
        return self.value

    def __eq__(self, other) -> bool:
        if isinstance(other, Value):
            other = other.value
        return self.value == other

    def __ne__(self, other) -> bool:
        return not self == other

    def __lt__(self, other):
        return bytes.__lt__(self.value, _plain(other))

    def __le__(self, other):
        return bytes.__le__(self.value, _plain(other))

    def __gt__(self, other):
        return bytes.__gt__(self.value, _plain(other))

    def __ge__(self, other):
        return bytes.__ge__(self.value, _plain(other))

    def __hash__(self) -> int:
        return bytes.__hash__(self.value)

    def __len__(self) -> int:
        return bytes.__len__(self.value)

    def __getitem__(self, index):
        return bytes.__getitem__(self.value, index)

    def __iter__(self):
        return bytes.__iter__(self.value)

    def __contains__(self, item) -> bool:
        return bytes.__contains__(self.value, item)

    def __int__(self) -> int:
        return int(self.value)

    def __add__(self, other):
        return self.value + _plain(other)

    def __radd__(self, other):
        return _plain(other) + self.value

    def __getattr__(self, name):
        method = getattr(bytes, name, None)  # decode, startswith, hex...: as the bindings
        if name.startswith("_") or method is None:
            raise AttributeError(name)
        return lambda *args, **kwargs: method(self.value, *args, **kwargs)

    def __str__(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


_UNREAD = object()


class DeferredValue(Value):
    """A point read its transaction has not made yet: when one of them is first looked
    at, the transaction reads every key it was asked for and has not read, in one query
    (as a cluster serves reads issued together in one round trip, not one after another).
    ``ops``: the transaction's atomic operations on the key when it was asked, applied to
    the stored value (a read sees the writes made before it, not after)."""

    __slots__ = ("key", "ops", "error")

    def __init__(self, key: bytes, ops, owner):
        self._value, self._owner, self.key, self.ops, self.error = _UNREAD, owner, key, ops, None

    def settle(self, stored: bytes | None = None, error: BaseException | None = None) -> None:
        """(By the transaction.)  The key's stored value, or why it could not be read."""
        if error is not None:
            self.error = error
            return
        self._value = apply_ops(stored, self.ops) if self.ops else stored

    @property
    def value(self) -> bytes | None:
        if self._value is _UNREAD:
            if self.error is not None:
                raise self.error
            tr = self._owner() if self._owner is not None else None
            if tr is None:
                raise FDBError(TRANSACTION_CANCELLED, "the transaction was destroyed before this read was used")
            tr._read_deferred()
            if self.error is not None:
                raise self.error
            self._owner = None  # looked at while alive: the value is kept from now on
        elif self._owner is not None:
            return Value.value.fget(self)
        return self._value


_ENGINE_VALUES = (Value, DeferredValue)


def _plain(other):
    return other.value if isinstance(other, Value) else other


class RangeResult:
    """Result of ``get_range``, shaped like the bindings' lazy ``FDBRange``: iterate it (or
    ``to_list()``); it has no ``len()`` and no indexing, as on a cluster.  Like
    ``FDBRange``, it keeps its transaction alive while it lives."""

    __slots__ = ("_rows", "_tr")

    def __init__(self, rows: list, tr=None):
        self._rows = rows
        self._tr = tr

    def __iter__(self):
        return iter(self._rows)

    def to_list(self) -> list:
        return list(self._rows)

    def __repr__(self) -> str:
        return f"<RangeResult of {len(self._rows)} rows>"
