"""The pure-Python parts of the official ``foundationdb`` bindings, usable without libfdb_c.

``fdb.tuple`` and ``fdb.subspace_impl`` work without the C library except for one
reference: packing a :class:`Versionstamp` checks ``isinstance(x, fdb.impl.Value)``, and
``fdb.impl`` loads libfdb_c on import.  Until the real cluster engine loads the real
``fdb.impl``, a stand-in module with that one name is installed; the cluster engine removes
it before loading the bindings (see ``cluster.py``).
"""

from __future__ import annotations

import sys
import types

import fdb

_STANDIN_FLAG = "_jobs_standin"


def install_impl_standin() -> None:
    if "fdb.impl" in sys.modules:
        return
    standin = types.ModuleType("fdb.impl")
    standin.__doc__ = "Stand-in for fdb.impl while libfdb_c is not loaded (jobs embedded engine)."

    class Value:  # never instantiated: only isinstance() checks in fdb.tuple reach it
        pass

    standin.Value = Value
    setattr(standin, _STANDIN_FLAG, True)
    sys.modules["fdb.impl"] = standin
    fdb.impl = standin


def remove_impl_standin() -> None:
    """Forget the stand-in so that ``import fdb.impl`` loads the real bindings."""
    mod = sys.modules.get("fdb.impl")
    if mod is not None and getattr(mod, _STANDIN_FLAG, False):
        del sys.modules["fdb.impl"]
        del fdb.impl


install_impl_standin()

import fdb.tuple as tuple  # noqa: E402  (after the stand-in, on purpose)
from fdb.subspace_impl import Subspace  # noqa: E402
from fdb.tuple import Versionstamp  # noqa: E402

__all__ = ["tuple", "Subspace", "Versionstamp", "KeySelector", "KeyValue", "strinc"]


class KeySelector:
    """FoundationDB key selector: the key ``offset`` places after the last key below ``key``
    (or at/below ``key`` when ``or_equal``).  Same fields as ``fdb.KeySelector``."""

    __slots__ = ("key", "or_equal", "offset")

    def __init__(self, key: bytes, or_equal: bool, offset: int):
        self.key = key
        self.or_equal = or_equal
        self.offset = offset

    def __add__(self, offset: int) -> "KeySelector":
        return KeySelector(self.key, self.or_equal, self.offset + offset)

    def __sub__(self, offset: int) -> "KeySelector":
        return KeySelector(self.key, self.or_equal, self.offset - offset)

    @classmethod
    def last_less_than(cls, key: bytes) -> "KeySelector":
        return cls(key, False, 0)

    @classmethod
    def last_less_or_equal(cls, key: bytes) -> "KeySelector":
        return cls(key, True, 0)

    @classmethod
    def first_greater_than(cls, key: bytes) -> "KeySelector":
        return cls(key, True, 1)

    @classmethod
    def first_greater_or_equal(cls, key: bytes) -> "KeySelector":
        return cls(key, False, 1)

    def __repr__(self) -> str:
        return f"KeySelector({self.key!r}, {self.or_equal!r}, {self.offset!r})"


class KeyValue:
    """One row of a range read; unpacks as ``key, value`` like ``fdb.KeyValue``."""

    __slots__ = ("key", "value")

    def __init__(self, key: bytes, value: bytes):
        self.key = key
        self.value = value

    def __iter__(self):
        yield self.key
        yield self.value

    def __eq__(self, other) -> bool:
        if isinstance(other, KeyValue):
            return self.key == other.key and self.value == other.value
        if isinstance(other, (tuple, list)) and len(other) == 2:
            return self.key == other[0] and self.value == other[1]
        return NotImplemented

    def __repr__(self) -> str:
        return f"{self.key!r}: {self.value!r}"


def strinc(key: bytes) -> bytes:
    """First key after every key that starts with ``key`` (fdb's ``strinc``)."""
    key = key.rstrip(b"\xff")
    if not key:
        raise ValueError("Key must contain at least one byte not equal to 0xFF")
    return key[:-1] + bytes([key[-1] + 1])
