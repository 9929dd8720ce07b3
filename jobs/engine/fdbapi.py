"""The pure-Python parts of the official ``foundationdb`` bindings, and what the project
needs beside them to work without libfdb_c.

``fdb.tuple`` and ``fdb.subspace_impl`` work without the C library, with one exception:
packing a :class:`Versionstamp` reads ``fdb.impl``, which loads libfdb_c on import.  The
bindings are used as they are (nothing in ``fdb`` is replaced or patched, so an
application's own ``fdb.api_version()``/``fdb.open()`` work in any import order); the
project packs versionstamps itself, to the same bytes (:func:`pack_versionstamp`,
:func:`pack_with_versionstamp`).  :class:`KeySelector` works with every call of either engine (see there).
"""

from __future__ import annotations

import struct
import sys

import fdb.tuple as tuple
from fdb.subspace_impl import Subspace
from fdb.tuple import Versionstamp

__all__ = [
    "tuple", "Subspace", "Versionstamp", "KeySelector", "KeyValue", "strinc",
    "pack_versionstamp", "pack_with_versionstamp", "versionstamp_at",
]

_STAMP_CODE = b"\x33"  # the tuple layer's type code of a versionstamp
_INCOMPLETE = b"\xff" * 10  # the tuple layer's placeholder for a stamp filled in at commit
_OFFSET = struct.Struct("<L")  # where the stamp starts, after the key (API version >= 520)
_new_object = object.__new__  # (versionstamp_at: an instance without __init__'s checks)


def pack_versionstamp(stamp: Versionstamp) -> bytes:
    """``stamp`` as one packed tuple element (code 0x33, 10 + 2 bytes), the bytes
    ``fdb.tuple.pack((stamp,))`` gives, without libfdb_c.  An incomplete stamp gets the
    tuple layer's 0xFF placeholder."""
    tr_version = _INCOMPLETE if stamp.tr_version is None else bytes(stamp.tr_version)
    return _STAMP_CODE + tr_version + stamp.user_version.to_bytes(2, "big")


def versionstamp_at(raw: bytes, pos: int) -> Versionstamp:
    """The stamp whose 12 bytes start at ``pos`` (after its 0x33 code; the caller saw that
    they are there): ``Versionstamp.from_bytes(raw, pos)`` without its checks of the
    arguments, which cost more than the rest (rows carry a stamp, read on every job
    operation)."""
    stamp = _new_object(Versionstamp)
    tr_version = raw[pos:pos + 10]
    stamp.tr_version = None if tr_version == _INCOMPLETE else tr_version
    stamp.user_version = raw[pos + 10] << 8 | raw[pos + 11]
    return stamp


def pack_with_versionstamp(prefix, items: tuple) -> bytes:
    """A key for ``set_versionstamped_key``: ``prefix`` (bytes or a :class:`Subspace`)
    followed by the tuple ``items``, exactly one of which is an incomplete
    :class:`Versionstamp` (at the top level), then the 4-byte offset of its 10 bytes:
    what ``Subspace.pack_with_versionstamp`` gives, without libfdb_c."""
    key = prefix.key() if isinstance(prefix, Subspace) else bytes(prefix)
    offset = None
    for item in items:
        if isinstance(item, Versionstamp):
            if not item.is_complete():
                if offset is not None:
                    raise ValueError("pack_with_versionstamp: more than one incomplete versionstamp")
                offset = len(key) + 1
            key += pack_versionstamp(item)
        else:
            key += tuple.pack((item,))  # (a nested Versionstamp needs fdb.impl: refused there)
    if offset is None:
        raise ValueError("pack_with_versionstamp: no incomplete versionstamp in the tuple")
    return key + _OFFSET.pack(offset)


class KeySelector:
    """FoundationDB key selector: the key ``offset`` places after the last key below ``key``
    (or at/below ``key`` when ``or_equal``).  Same fields as ``fdb.KeySelector``.

    Once the bindings are loaded (libfdb_c, which a cluster needs), a new selector is the
    bindings' own ``fdb.KeySelector``: their ``get_range`` takes no other class (anything
    else is taken for a key); the embedded engine takes both.  A selector made before
    that, used on a cluster, is refused by ``get_range`` there."""

    __slots__ = ("key", "or_equal", "offset")

    def __new__(cls, key: bytes, or_equal: bool, offset: int):
        impl = sys.modules.get("fdb.impl")  # (imported only by a successful load of libfdb_c)
        if impl is not None:
            return impl.KeySelector(key, or_equal, offset)
        return object.__new__(cls)

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
