"""Futures of the embedded engine, and waiting on any engine's futures with a timeout.

The embedded engine's futures have the methods of the bindings' ``fdb.Future`` that the
project uses (``wait``, ``is_ready``, ``on_ready``, ``cancel``).  The bindings'
``wait()`` has no timeout; :func:`wait_future` adds one for both engines.
"""

from __future__ import annotations

import threading

from .errors import OPERATION_CANCELLED, FDBError


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
    value = future.wait()
    if value is None:
        return None
    return bytes(value) if value.present() else None


class Future:
    """A value or an error that arrives later (set once, from any thread)."""

    __slots__ = ("_event", "_value", "_error", "_callbacks", "_lock")

    def __init__(self):
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._value = None
        self._error: BaseException | None = None
        self._callbacks: list = []

    @classmethod
    def ready(cls, value=None) -> "Future":
        f = cls()
        f._value = value
        f._event.set()
        return f

    def _settle(self, value=None, error: BaseException | None = None) -> bool:
        with self._lock:
            if self._event.is_set():
                return False
            self._value, self._error = value, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)
        return True

    def set_result(self, value=None) -> bool:
        return self._settle(value=value)

    def set_error(self, error: BaseException) -> bool:
        return self._settle(error=error)

    def is_ready(self) -> bool:
        return self._event.is_set()

    def block_until_ready(self) -> None:
        self._event.wait()

    def wait(self):
        """The value; raises the error (an FDBError) if the future failed."""
        self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value

    def on_ready(self, callback) -> None:
        """Call ``callback(self)`` once the future is ready (at once if it already is)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def cancel(self) -> None:
        self.set_error(FDBError(OPERATION_CANCELLED))


class Value:
    """Result of ``get``/``get_key``: a ready future of ``bytes | None``, comparable like
    the bindings' ``fdb.impl.Value`` (``== b"..."``, ``== None``, ``present()``)."""

    __slots__ = ("value",)

    def __init__(self, value: bytes | None):
        self.value = value

    def wait(self) -> bytes | None:
        return self.value

    def is_ready(self) -> bool:
        return True

    def on_ready(self, callback) -> None:
        callback(self)

    def present(self) -> bool:
        return self.value is not None

    def __eq__(self, other) -> bool:
        if isinstance(other, Value):
            other = other.value
        return self.value == other

    def __hash__(self) -> int:
        return hash(self.value)

    def __bytes__(self) -> bytes:
        if self.value is None:
            raise ValueError("no value: the key is not present")
        return self.value

    def __len__(self) -> int:
        return len(bytes(self))

    def __repr__(self) -> str:
        return repr(self.value)
