"""Keys and values as the embedded engine takes them: converted from what callers pass
(bytes, or objects with ``as_foundationdb_key``/``_value`` as the bindings allow) and
checked against FoundationDB's limits, with its error codes."""

from __future__ import annotations

from . import errors as E
from .errors import FDBError
from .limits import KEY_SIZE_LIMIT, VALUE_SIZE_LIMIT


def to_key(key) -> bytes:
    if type(key) is bytes:
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    to_key = getattr(key, "as_foundationdb_key", None)
    if to_key is not None:
        return to_key()
    raise TypeError(f"keys must be bytes, not {type(key).__name__}")


def to_value(value) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    to_value = getattr(value, "as_foundationdb_value", None)
    if to_value is not None:
        return to_value()
    raise TypeError(f"values must be bytes, not {type(value).__name__}")


def check_write_key(key: bytes) -> None:
    if len(key) > KEY_SIZE_LIMIT:
        raise FDBError(E.KEY_TOO_LARGE, f"{len(key)} bytes > {KEY_SIZE_LIMIT}")
    if key[:1] == b"\xff":
        raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE, "keys starting with 0xFF are reserved")


def check_value(value: bytes) -> None:
    if len(value) > VALUE_SIZE_LIMIT:
        raise FDBError(E.VALUE_TOO_LARGE, f"{len(value)} bytes > {VALUE_SIZE_LIMIT}")


def strinc_or_end(prefix: bytes) -> bytes:
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff"
    return stripped[:-1] + bytes([stripped[-1] + 1])


_POINT = "SELECT k, v FROM kv WHERE k = ?"
_UNION_MAX = 32  # up to this many keys, point SELECTs joined by UNION ALL (see below)
_IN_CHUNK = 500  # keys per SELECT ... IN (...) (under SQLite's limit of bound parameters)
# the IN lists' lengths: a chunk of keys is padded up to one
_IN_SIZES = (*range(2 * _UNION_MAX, _IN_CHUNK, _UNION_MAX), _IN_CHUNK)


def stored_values(conn, keys: list[bytes]) -> dict[bytes, bytes]:
    """The values stored under those of ``keys`` that exist (table ``kv``), read in one
    statement per _IN_CHUNK keys rather than one per key.  A few keys are read by one
    compound of point SELECTs: SQLite builds a temporary index for an IN list, which costs
    more than the reads themselves up to a few dozen keys (2 keys: 8 µs against 19 here).
    An IN list is padded (its last key repeated) to a multiple of 32 keys: each length is
    a statement of its own in every connection's cache, and one per number of keys kept
    up to 128 compiled statements of up to 500 parameters in each, re-preparing those it
    dropped (``bench.soak``: SQLite's memory grew for as long as the run)."""
    if len(keys) <= _UNION_MAX:
        return dict(conn.execute(" UNION ALL ".join([_POINT] * len(keys)), keys)) if keys else {}
    found: dict[bytes, bytes] = {}
    for start in range(0, len(keys), _IN_CHUNK):
        chunk = keys[start:start + _IN_CHUNK]
        size = next(size for size in _IN_SIZES if size >= len(chunk))
        found.update(conn.execute(_IN_SELECT[size], chunk + chunk[-1:] * (size - len(chunk))))
    return found


_IN_SELECT = {size: f"SELECT k, v FROM kv WHERE k IN ({','.join('?' * size)})" for size in _IN_SIZES}
