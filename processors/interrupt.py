"""Run a sync handler on a thread of its own that can be interrupted when its job is lost.

Python cannot kill a thread; it can raise an exception in one at its next bytecode
(``PyThreadState_SetAsyncExc``).  That is safe only with care, so:

* the thread is the handler's alone (never a pool thread that goes on to other work), and
  an interrupt is only raised while the handler function runs;
* the job-layer calls a handler makes (``ctx.update``) run shielded: an interrupt that
  arrives then is delivered when the call returns, never inside a store transaction;
* an interrupt that lands after the handler returned is cleared, or caught, before the
  thread ends.

Code blocked in C (``time.sleep``, a socket read) sees the interrupt when it returns to
Python.  Handlers registered with ``interrupt=False`` are only told (``ctx.halted``,
``ctx.check()``, ``ctx.update`` raising ``Halt``).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

from jobs import Halt


class Interrupted(Halt):
    """Raised inside a sync handler whose job was taken away or handed back."""


def _set_async_exc(thread_id: int, exc_type) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), None if exc_type is None else ctypes.py_object(exc_type)
    )


_current = threading.local()  # .thread: the HandlerThread running on this thread


def shielded():
    """Context manager: no interrupt inside (a no-op outside handler threads)."""
    thread = getattr(_current, "thread", None)
    return contextlib.nullcontext() if thread is None else _Shield(thread)


class HandlerThread:
    """``fn()`` on a new daemon thread; ``done`` is set when it ended, with ``result`` or
    ``error``."""

    def __init__(self, fn, name: str):
        self._fn = fn
        self.result = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._ident: int | None = None
        self._running = False  # the handler function is running (interrupts may be raised)
        self._shield = 0  # depth of shielded calls
        self._deferred = False  # an interrupt arrived while shielded
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> "HandlerThread":
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            try:
                _current.thread = self
                with self._lock:
                    self._ident = threading.get_ident()
                    self._running = True
                self.result = self._fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the processor as is
                self.error = exc
            finally:
                with self._lock:
                    self._running = False
                _set_async_exc(self._ident, None)  # one raised too late is dropped
        except BaseException:  # noqa: BLE001 - an interrupt delivered during the cleanup
            pass
        finally:
            self.done.set()

    def interrupt(self) -> None:
        """Raise Interrupted in the handler, now or when its shielded call returns."""
        with self._lock:
            if not self._running:
                return
            if self._shield:
                self._deferred = True
            else:
                _set_async_exc(self._ident, Interrupted)


class _Shield:
    def __init__(self, thread: HandlerThread):
        self._t = thread

    def __enter__(self):
        with self._t._lock:
            self._t._shield += 1

    def __exit__(self, *exc):
        t = self._t
        with t._lock:
            t._shield -= 1
            deliver = t._shield == 0 and t._deferred and t._running
            if deliver:
                t._deferred = False
        if deliver:
            raise Interrupted("the job was taken away while the handler ran")
        return False
