"""What the engine wrappers (``faults.py``, ``counting.py``) share: the transaction methods
that write, and a database's shortcuts (``db.get``, ``db[key] = value``, ...), which run a
transaction of their own *through the wrapper* so that it sees them too."""

from __future__ import annotations

from .futures import value_of

# Transaction methods that make a commit a writing one.
MUTATORS = (
    "set", "clear", "clear_range", "clear_range_startswith",
    "add", "max", "min", "bit_and", "bit_or", "bit_xor", "byte_max", "byte_min",
    "append_if_fits", "compare_and_clear",
    "set_versionstamped_key", "set_versionstamped_value",
    "add_write_conflict_key", "add_write_conflict_range",
)  # fmt: skip

# Transaction methods that read (each also on ``tr.snapshot``).
READS = ("get", "get_key", "get_range", "get_range_startswith", "get_read_version")


class WrappedDatabase:
    """Base of a wrapper around ``self.db`` (embedded or ``fdb.Database``): subclasses
    give ``create_transaction``; every other attribute is the wrapped database's."""

    def __init__(self, db):
        self.db = db

    def create_transaction(self):
        raise NotImplementedError

    def _run(self, fn):
        from .transactional import run

        return run(self, fn)

    def get(self, key):
        return self._run(lambda tr: value_of(tr.get(key)))

    def set(self, key, value) -> None:
        self._run(lambda tr: tr.set(key, value))

    __setitem__ = set

    def clear(self, key) -> None:
        self._run(lambda tr: tr.clear(key))

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.get_range(key.start or b"", key.stop or b"\xff")
        return self.get(key)

    def __delitem__(self, key) -> None:
        if isinstance(key, slice):
            self.clear_range(key.start or b"", key.stop or b"\xff")
        else:
            self.clear(key)

    def get_range(self, begin, end, limit=0, reverse=False, **kwargs) -> list:
        return self._run(lambda tr: list(tr.get_range(begin, end, limit, reverse, **kwargs)))

    def get_range_startswith(self, prefix, *args, **kwargs) -> list:
        return self._run(lambda tr: list(tr.get_range_startswith(prefix, *args, **kwargs)))

    def clear_range(self, begin, end) -> None:
        self._run(lambda tr: tr.clear_range(begin, end))

    def clear_range_startswith(self, prefix) -> None:
        self._run(lambda tr: tr.clear_range_startswith(prefix))

    def __getattr__(self, name):  # close(), path, options, ...: the wrapped database's
        return getattr(self.db, name)


def delegate(cls, names, call, doc: str) -> None:
    """Give the wrapper class ``cls`` a method for each of ``names`` that returns
    ``call(self, name, args, kwargs)``; ``doc`` (with ``{name}``) is its docstring."""
    for name in names:
        setattr(cls, name, _method(name, call, doc))


def _method(name: str, call, doc: str):
    def method(self, *args, **kwargs):
        return call(self, name, args, kwargs)

    method.__name__ = name
    method.__doc__ = doc.format(name=name)
    return method
