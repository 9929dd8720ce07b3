"""The row codec's fast path writes and reads exactly the tuple layer's bytes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.codec import Lost, Row, decode_row, encode_new_row, encode_row, encode_stamped_row
from jobs.engine import Versionstamp, versionstamp_at
from jobs.engine import tuple as fdb_tuple
from jobs.errors import StoreError

maybe_bytes = st.one_of(st.none(), st.binary(max_size=20))
complete_seq = st.builds(Versionstamp, st.binary(min_size=10, max_size=10), st.integers(0, 0xFFFF))
doubles = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e-300, -1e300])
rows = st.tuples(st.one_of(st.none(), complete_seq), maybe_bytes, doubles, st.booleans(),
                  st.binary(max_size=50), maybe_bytes).map(lambda fields: Row(*fields))  # (the rest: defaults)


def tuple_layer_bytes(fields: tuple) -> bytes:
    """The tuple layer's bytes for a row's fields.  A versionstamp is packed by hand (code
    0x33, 10 + 2 bytes, 0xFF placeholder when incomplete): the bindings' own packer needs
    libfdb_c for it (tests/engine/test_bindings.py compares the two where it is loaded)."""
    seq, rest = fields[0], fields[1:]
    if seq is None:
        return fdb_tuple.pack(fields)
    stamp = seq.tr_version if seq.is_complete() else b"\xff" * 10
    return b"\x33" + stamp + seq.user_version.to_bytes(2, "big") + fdb_tuple.pack(rest)


@given(rows)
def test_rows_encode_as_the_tuple_layer_does_and_read_back(row):
    raw = encode_row(row)
    fields = (row.seq, row.lock, row.stime, row.resubmit, row.data, row.last_lock)
    assert raw == tuple_layer_bytes(fields)
    assert fdb_tuple.unpack(raw) == fields  # the bindings' own decoder agrees
    assert decode_row(raw) == row
    assert math.copysign(1.0, decode_row(raw).stime) == math.copysign(1.0, row.stime)  # (-0.0 is not 0.0)


@given(st.binary(min_size=10, max_size=10) | st.just(b"\xff" * 10), st.integers(0, 0xFFFF))
def test_a_stamp_reads_as_the_bindings_read_it(tr_version, user_version):
    raw = b"\x33" + tr_version + user_version.to_bytes(2, "big")
    ours, theirs = versionstamp_at(raw, 1), Versionstamp.from_bytes(raw, 1)
    assert type(ours) is Versionstamp and ours == theirs and hash(ours) == hash(theirs)
    assert (ours.tr_version, ours.user_version, ours.is_complete()) == \
        (theirs.tr_version, theirs.user_version, theirs.is_complete())


@given(doubles.filter(lambda t: t >= 0), st.binary(max_size=50), st.integers(-(1 << 63), (1 << 63) - 1))
def test_a_new_pending_row_encodes_as_its_row_does(stime, data, priority):
    """``add_many``'s shortcut writes the bytes of the Row it stands for."""
    row = Row(None, None, stime, False, data, priority=priority)
    raw = encode_new_row(stime, data, priority)
    assert raw == encode_row(row)
    assert decode_row(raw) == row


@given(rows, st.integers(0, 0xFFFF))
def test_stamped_rows_encode_as_the_tuple_layer_does(row, user_version):
    seq = Versionstamp(user_version=user_version)
    fields = (seq, row.lock, row.stime, row.resubmit, row.data, row.last_lock)
    assert encode_stamped_row(row, seq) == tuple_layer_bytes(fields) + (1).to_bytes(4, "little")


losts = st.none() | st.builds(Lost, st.integers(1, 2**40), st.none() | st.text(max_size=20), doubles)
rows_with_workers = st.tuples(st.one_of(st.none(), complete_seq), maybe_bytes, doubles, st.booleans(),
                               st.binary(max_size=50), maybe_bytes, st.none() | st.text(max_size=20),
                               losts).map(lambda fields: Row(*fields))


@given(rows_with_workers)
def test_rows_with_worker_and_lost_encode_as_the_tuple_layer_does_and_read_back(row):
    raw = encode_row(row)
    head = (row.seq, row.lock, row.stime, row.resubmit, row.data, row.last_lock)
    fields = head if row.worker is None and row.lost is None else (*head, row.worker, row.lost)
    assert raw == tuple_layer_bytes(fields)  # six fields while both are None: layout 1's rows
    assert fdb_tuple.unpack(raw) == fields
    assert decode_row(raw) == row


def test_five_field_rows_as_couch_jobs_writes_them_still_read():
    raw = fdb_tuple.pack((None, None, 5.0, False, b"{}"))
    assert decode_row(raw) == Row(None, None, 5.0, False, b"{}", None)


@pytest.mark.parametrize("raw", [b"", b"\x01abc", b"\x21\x00", b"\x15\x01" * 6, fdb_tuple.pack((1, 2))])
def test_corrupt_rows_are_a_store_error(raw):
    with pytest.raises(StoreError, match="corrupt"):
        decode_row(raw)


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30), doubles)
def test_job_keys_are_the_tuple_layers(type, job_id, stime):
    from jobs import keys

    assert keys.data_key(type, job_id) == keys.DATA.pack((type, job_id))
    assert keys.pending_key(type, 0, stime, job_id) == keys.PENDING.pack((type, 0, stime, job_id))
    assert keys.pending_key(type, -7, stime, job_id) == keys.PENDING.pack((type, -7, stime, job_id))
