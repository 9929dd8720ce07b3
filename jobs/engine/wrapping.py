"""What the engine wrappers (``faults.py``, ``counting.py``) share: the transaction methods
that write, and a database's shortcuts (``db.get``, ``db[key] = value``, ...:
``items.DatabaseShortcuts``), which run a transaction of their own *through the wrapper*
so that it sees them too."""

from __future__ import annotations

from .items import DatabaseShortcuts

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


class WrappedDatabase(DatabaseShortcuts):
    """Base of a wrapper around ``self.db`` (embedded or ``fdb.Database``): subclasses
    give ``create_transaction``; every other attribute is the wrapped database's."""

    def __init__(self, db):
        self.db = db

    def create_transaction(self):
        raise NotImplementedError

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
