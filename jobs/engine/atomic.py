"""Atomic operations of the embedded engine: ``(base value or None, param) -> new value or
None`` (None: the key is cleared), with FoundationDB's semantics for each mutation type
(little-endian integers of the parameter's length; byte-wise min/max; append_if_fits;
compare_and_clear)."""

from __future__ import annotations

from .limits import VALUE_SIZE_LIMIT


def _le_int(b: bytes | None, n: int) -> int:
    b = (b or b"")[:n]
    return int.from_bytes(b.ljust(n, b"\x00"), "little")


def _op_add(base, param):
    n = len(param)
    return ((_le_int(base, n) + _le_int(param, n)) % (1 << (8 * n))).to_bytes(n, "little")


def _op_max(base, param):
    n = len(param)
    return max(_le_int(base, n), _le_int(param, n)).to_bytes(n, "little")


def _op_min(base, param):
    if base is None:
        return param
    n = len(param)
    return min(_le_int(base, n), _le_int(param, n)).to_bytes(n, "little")


def _bitwise(fn, absent_is_param):
    def op(base, param):
        if base is None and absent_is_param:
            return param
        n = len(param)
        return fn(_le_int(base, n), _le_int(param, n)).to_bytes(n, "little")

    return op


def _op_byte_max(base, param):
    return param if base is None else max(base, param)


def _op_byte_min(base, param):
    return param if base is None else min(base, param)


def _op_append_if_fits(base, param):
    joined = (base or b"") + param
    return joined if len(joined) <= VALUE_SIZE_LIMIT else base


def _op_compare_and_clear(base, param):
    return None if base == param else base


def apply_ops(base: bytes | None, ops) -> bytes | None:
    """``base`` after the atomic operations ``ops`` (``(op, param)`` pairs, in order): what
    a read sees of a key the transaction changed atomically (None: absent)."""
    for op, param in ops:
        base = ATOMIC_OPS[op](base, param)
    return base


def sql_atomic(op: str, base: bytes | None, param: bytes) -> bytes | None:
    """``ATOMIC_OPS[op]`` as an SQLite function (``fdb_atomic``), so that an op which
    always leaves a value is one UPSERT statement instead of a read and a write."""
    return ATOMIC_OPS[op](base, param)


# The ops whose result is never None (absent): applied by one UPSERT (commit.py).
KEEPS_A_VALUE = frozenset({"add", "max", "min", "bit_and", "bit_or", "bit_xor", "byte_max", "byte_min"})

ATOMIC_OPS = {
    "add": _op_add,
    "max": _op_max,
    "min": _op_min,
    "bit_and": _bitwise(lambda a, b: a & b, True),
    "bit_or": _bitwise(lambda a, b: a | b, False),
    "bit_xor": _bitwise(lambda a, b: a ^ b, False),
    "byte_max": _op_byte_max,
    "byte_min": _op_byte_min,
    "append_if_fits": _op_append_if_fits,
    "compare_and_clear": _op_compare_and_clear,
}
