"""``transactional``: run a function in the caller's transaction or in its own, retried.

Works with both engines: a *database* is anything with ``create_transaction()``; anything
else is taken to be a transaction, which the function joins and does not commit (the FDB
layer convention: ``tr`` first, never commit the caller's transaction).  A body that must
recognise its own earlier commit behind ``commit_unknown_result`` keeps a
:class:`LastAttempt`.
"""

from __future__ import annotations

import functools
import inspect

from .errors import MAYBE_COMMITTED, error_code

# On a transaction object: the watches its current attempt set through watch() (see there).
_WATCHES = "_jobs_attempt_watches"


def is_database(obj) -> bool:
    return hasattr(obj, "create_transaction")


def close(handle) -> None:
    """Release what a database or transaction of either engine holds: the embedded engine's
    store connections (a ``memory:`` store is deleted); the bindings' ``fdb.Database`` and
    transactions have no ``close`` (their client lives as long as the process), so nothing."""
    close_ = getattr(handle, "close", None)
    if close_ is not None:
        close_()


def watch(tr, key: bytes):
    """``tr.watch(key)``, cancelled by :func:`run` if this attempt does not commit.

    FoundationDB does not reliably cancel the watches of an attempt that ``on_error``
    resets (one was seen alive 10 s later), and a watch nobody waits on holds a slot of
    the client's watch limit: code that sets watches in a retried transaction sets them
    through this."""
    return watch_keys(tr, (key,))[0]


def watch_keys(tr, keys) -> list:
    """:func:`watch` of each of ``keys`` (registered for :func:`run` at once)."""
    futures = [tr.watch(key) for key in keys]
    try:
        tr.__dict__.setdefault(_WATCHES, []).extend(futures)
    except AttributeError:  # a transaction that takes no attribute: the caller's care
        pass
    return futures


def _drop_attempt_watches(tr, cancel: bool) -> None:
    try:
        futures = tr.__dict__.pop(_WATCHES, None)
    except AttributeError:
        return
    if futures and cancel:
        for future in futures:
            future.cancel()


def run(db, func, /, *args, **kwargs):
    """Run ``func(tr, *args, **kwargs)`` in a new transaction of ``db``; commit; retry the
    errors ``on_error`` retries, exactly as ``fdb.transactional`` does.  Watches set with
    :func:`watch` by an attempt that fails are cancelled."""
    return run_noting(db, None, func, *args, **kwargs)


def run_noting(db, failed, func, /, *args, **kwargs):
    """:func:`run`, calling ``failed(exc)`` (if not None) with each store error of an
    attempt before ``on_error`` sees it (it may re-raise it): a body that keeps state across
    attempts learns which attempts surely did not commit (``not_committed``, 1020).  When
    ``failed`` returns True, the caller has changed what the next attempt does (a smaller
    batch after 2101, too large, or 1007, too old): the next attempt starts at once on the
    reset transaction, without ``on_error``, which would not retry those errors or would
    back off first.  The one retry loop of the project: every other is this one."""
    tr = db.create_transaction()
    try:
        while True:
            try:
                ret = func(tr, *args, **kwargs)
                tr.commit().wait()
                _drop_attempt_watches(tr, cancel=False)
                return ret
            except Exception as exc:  # noqa: BLE001 - filtered on the FDB code just below
                _drop_attempt_watches(tr, cancel=True)
                if error_code(exc) is None:
                    raise
                if failed is not None and failed(exc) is True:
                    tr.reset()
                    continue
                on_error(tr, exc)
    finally:
        close(tr)


def on_error(tr, exc: BaseException) -> None:
    """``tr.on_error(exc).wait()`` for a store error of either engine's class: back off and
    reset ``tr`` for a retryable one, else raise ``exc`` as it was raised.

    The bindings' ``on_error`` re-raises any exception that is not their own class, so a
    body that raises the embedded engine's :class:`~jobs.engine.errors.FDBError` (a
    simulated conflict, say) on a cluster transaction would end the retry loop there: the
    error is passed as its code, which both engines take, so that it is retried alike."""
    code = error_code(exc)
    try:
        tr.on_error(code).wait()
    except Exception as again:  # noqa: BLE001 - the engine's answer for a code it does not retry
        if error_code(again) != code:
            raise
        raise exc from exc.__cause__  # (the attempt's own error, not the engine's copy of it)


def within(tr, func, *args, **kwargs):
    """``func(tr, *args, **kwargs)`` joining ``tr`` if it is a transaction, else in a
    retried transaction of the database ``tr`` (:func:`run`)."""
    if is_database(tr):
        return run(tr, func, *args, **kwargs)
    return func(tr, *args, **kwargs)


class LastAttempt:
    """What the attempts of a retried transaction did (an id drawn, a record removed, jobs
    locked), kept across attempts, so that a retry after ``commit_unknown_result`` (1021)
    can tell whether an earlier attempt's commit happened instead of doing it again.  The
    one way the project survives 1021: what the store shows (a nonce found, a record gone,
    a row carrying the call's lock) is the evidence, this is the memory of what to look for.

    Create one per call, outside the transactional body.  The body records what it did
    (:meth:`record`) and, first thing, asks :meth:`committed`, with the evidence the store
    shows, whether an earlier attempt's commit happened.  Given :func:`run_noting`'s
    ``failed`` hook (:meth:`failed`), what each attempt that may have committed recorded is
    kept (:attr:`values`: every one of them, oldest first) and an attempt that surely did
    not commit (a conflict, 1020) is forgotten; without it, each record replaces the last."""

    __slots__ = ("_kept", "_open")

    def __init__(self):
        self._kept: list = []  # what attempts that may have committed recorded, oldest first
        self._open = False  # the last of _kept is the current attempt's (it may record again)

    def record(self, value):
        """Remember ``value`` as what this attempt did (replacing what it, or without the
        ``failed`` hook any earlier attempt, recorded); returns it."""
        if self._open:
            self._kept[-1] = value
        else:
            self._kept.append(value)
            self._open = True
        return value

    def failed(self, exc) -> None:
        """As :func:`run_noting`'s ``failed``: the current attempt ended with ``exc``.  What
        it recorded is forgotten unless its commit may have happened (1021), so that a retry
        after a conflict (1020) starts over instead of claiming that attempt's work; the
        next attempt records beside it."""
        if self._open and error_code(exc) not in MAYBE_COMMITTED:
            self._kept.pop()
        self._open = False

    def committed(self, evidence=None):
        """False if no attempt recorded anything; else ``evidence(value)``, truthy when the
        store shows that the last attempt that recorded committed (the caller's answer is
        passed on, e.g. the record it re-read); without ``evidence``, True: the caller
        already saw it."""
        if not self._kept:
            return False
        return True if evidence is None else evidence(self._kept[-1])

    @property
    def value(self):
        """What the last attempt that recorded recorded (None before any did)."""
        return self._kept[-1] if self._kept else None

    @property
    def values(self) -> tuple:
        """What each attempt that may have committed recorded, oldest first."""
        return tuple(self._kept)


def transactional(func=None, *, parameter: str = "tr"):
    """Decorator: the ``parameter`` argument (default ``tr``) may be a database or a
    transaction.  Given a database, the function runs in a new transaction that is committed
    and retried on retryable errors, so the function may run several times and must not
    have side effects outside the transaction.  Given a transaction, it simply joins it."""

    def decorate(f):
        if inspect.isgeneratorfunction(f):
            raise ValueError("Generators can not be wrapped with transactional")
        index = inspect.getfullargspec(inspect.unwrap(f)).args.index(parameter)

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            if index < len(args):
                target = args[index]
                if not is_database(target):
                    return f(*args, **kwargs)
                if index == 0:  # (the usual shape: ``tr`` first)
                    return run(target, f, *args[1:], **kwargs)
                head, tail = args[:index], args[index + 1 :]
                return run(target, lambda tr: f(*head, tr, *tail, **kwargs))
            target = kwargs[parameter]
            if not is_database(target):
                return f(*args, **kwargs)

            def body(tr):
                return f(*args, **{**kwargs, parameter: tr})

            return run(target, body)

        return wrapper

    return decorate if func is None else decorate(func)
