"""Key-range arithmetic of the embedded engine's conflict checks: half-open ``(begin,
end)`` byte ranges, merged, subtracted and tested for overlap; and where the keys and
values of versionstamped mutations go."""

from __future__ import annotations

import bisect

from . import errors as E
from .errors import FDBError


def merge_ranges(ranges):
    """Sorted, disjoint, coalesced copy of half-open ``(begin, end)`` ranges."""
    out: list[tuple[bytes, bytes]] = []
    end = None
    for b, e in sorted(ranges):
        if end is not None and b <= end:
            if e > end:
                out[-1] = (out[-1][0], e)
                end = e
        else:
            out.append((b, e))
            end = e
    return out


def overlaps(merged, begins, ranges) -> bool:
    """Does any of ``ranges`` overlap the merged (sorted, disjoint) ranges?"""
    for b, e in ranges:
        i = bisect.bisect_left(begins, e) - 1
        if i >= 0 and merged[i][1] > b:
            return True
    return False


def in_ranges(key: bytes, ranges) -> bool:
    for b, e in ranges:
        if b <= key < e:
            return True
    return False


def overlaps_spans(begin: bytes, end: bytes, spans) -> bool:
    return any(b < end and begin < e for b, e in spans)


def subtract(ranges, cuts):
    """``ranges`` (sorted, disjoint) less the sorted, disjoint ``cuts``."""
    out = []
    for b, e in ranges:
        for cb, ce in cuts:
            if ce <= b or cb >= e:
                continue
            if cb > b:
                out.append((b, cb))
            b = max(b, ce)
            if b >= e:
                break
        if b < e:
            out.append((b, e))
    return out


def stamped_key_span(param: bytes, read_version: int) -> tuple[bytes, bytes]:
    """Where a ``set_versionstamped_key`` key may land: from the key stamped with the read
    version to the key stamped with 0xFF bytes (FoundationDB's ``getVersionstampKeyRange``;
    reads there raise 1036 until commit)."""
    body, pos = param[:-4], int.from_bytes(param[-4:], "little")
    low = body[:pos] + read_version.to_bytes(8, "big") + b"\x00\x00" + body[pos + 10:]
    high = body[:pos] + b"\xff" * 10 + body[pos + 10:] + b"\x00"
    return low, high


def apply_stamp(param: bytes, stamp: bytes) -> bytes:
    body, pos = param[:-4], int.from_bytes(param[-4:], "little")
    return body[:pos] + stamp + body[pos + 10 :]


def check_stamp_param(param: bytes) -> None:
    if len(param) < 4:
        raise FDBError(E.CLIENT_INVALID_OPERATION, "versionstamp parameter lacks its 4-byte offset")
    pos = int.from_bytes(param[-4:], "little")
    if pos + 10 > len(param) - 4:
        raise FDBError(E.CLIENT_INVALID_OPERATION, "versionstamp offset past the end of the key or value")
