"""Dict-style access, as the FoundationDB bindings give their databases and transactions:
``x[key]`` reads a key and ``x[begin:end]`` a range; ``x[key] = value`` writes;
``del x[key]`` and ``del x[begin:end]`` clear.  One pair of mixins for every database and
transaction class of the engine and of its wrappers, which give the named methods."""

from __future__ import annotations

from .futures import value_of

END = b"\xff"  # a slice's open end: the end of the keys an application may use


class ReadItems:
    """``x[key]`` (``get``) and ``x[begin:end]`` (``get_range``): a transaction's reads,
    its snapshot's, a wrapper's."""

    __slots__ = ()

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.get_range(key.start or b"", key.stop or END)
        return self.get(key)


class Items(ReadItems):
    """:class:`ReadItems`, and ``x[key] = value`` (``set``), ``del x[key]`` (``clear``),
    ``del x[begin:end]`` (``clear_range``)."""

    __slots__ = ()

    def __setitem__(self, key, value) -> None:
        self.set(key, value)

    def __delitem__(self, key) -> None:
        if isinstance(key, slice):
            self.clear_range(key.start or b"", key.stop or END)
        else:
            self.clear(key)


class DatabaseShortcuts(Items):
    """A database's one-call reads and writes (``db.get(key)``, ``db[key] = value``, ...),
    each a retried transaction of its own from ``self.create_transaction``: so a wrapper's
    shortcuts go through the wrapper, as the bindings' ``Database`` does."""

    __slots__ = ()

    def _run(self, fn):
        from .transactional import run

        return run(self, fn)

    def get(self, key):
        return self._run(lambda tr: value_of(tr.get(key)))  # (bytes or None, as the bindings' Database.get)

    def set(self, key, value) -> None:
        self._run(lambda tr: tr.set(key, value))

    def clear(self, key) -> None:
        self._run(lambda tr: tr.clear(key))

    def get_range(self, begin, end, limit=0, reverse=False, **kwargs) -> list:
        return self._run(lambda tr: list(tr.get_range(begin, end, limit, reverse, **kwargs)))

    def get_range_startswith(self, prefix, *args, **kwargs) -> list:
        return self._run(lambda tr: list(tr.get_range_startswith(prefix, *args, **kwargs)))

    def clear_range(self, begin, end) -> None:
        self._run(lambda tr: tr.clear_range(begin, end))

    def clear_range_startswith(self, prefix) -> None:
        self._run(lambda tr: tr.clear_range_startswith(prefix))
