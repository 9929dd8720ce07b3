"""Read-your-writes against a model: random committed state, random buffered mutations,
then every read of the transaction (point, range forward/reverse/limited, key selectors)
must equal the same read of a dict, and so must the store after the commit.  Runs on every
engine, like the conformance suite."""

from __future__ import annotations

import bisect

from enginekit import rows, val
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.engine import KeySelector

N = 8  # keys 0..N-1 under the test prefix

values = st.binary(min_size=0, max_size=4)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, N - 1), values),
        st.tuples(st.just("clear"), st.integers(0, N - 1)),
        st.tuples(st.just("clear_range"), st.integers(0, N), st.integers(0, N)),
        st.tuples(st.just("add"), st.integers(0, N - 1), st.binary(min_size=1, max_size=3)),
        st.tuples(st.just("max"), st.integers(0, N - 1), st.binary(min_size=1, max_size=3)),
    ),
    max_size=12,
)


def _le(b: bytes, n: int) -> int:
    return int.from_bytes(b[:n].ljust(n, b"\x00"), "little")


def _apply(model: dict, op, key) -> None:
    kind = op[0]
    if kind == "set":
        model[key(op[1])] = op[2]
    elif kind == "clear":
        model.pop(key(op[1]), None)
    elif kind == "clear_range":
        lo, hi = key(op[1]), key(op[2])
        for k in [k for k in model if lo <= k < hi]:
            del model[k]
    else:
        k, param = key(op[1]), op[2]
        n = len(param)
        base = model.get(k)
        if kind == "add":
            model[k] = ((_le(base or b"", n) + _le(param, n)) % (1 << (8 * n))).to_bytes(n, "little")
        else:  # max: an absent key takes the parameter
            model[k] = param if base is None else max(_le(base, n), _le(param, n)).to_bytes(n, "little")


def _resolve(keys: list[bytes], sel: KeySelector) -> bytes | None:
    """The model's answer for a key selector, or None when it points outside the test keys
    (where a shared cluster may hold other keys)."""
    if sel.or_equal:
        i = bisect.bisect_right(keys, sel.key) - 1  # last key <= sel.key
    else:
        i = bisect.bisect_left(keys, sel.key) - 1  # last key < sel.key
    i += sel.offset
    return keys[i] if 0 <= i < len(keys) else None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    initial=st.dictionaries(st.integers(0, N - 1), values),
    mutations=ops,
    limit=st.integers(0, N + 1),
    selectors=st.lists(st.tuples(st.integers(0, N - 1), st.booleans(), st.integers(-3, 3)), max_size=6),
)
def test_read_your_writes_matches_model(db, ks, initial, mutations, limit, selectors):
    def key(i: int) -> bytes:
        return ks.pack((i,))

    begin, end = ks.range().start, ks.range().stop
    db.clear_range(begin, end)
    model = {key(i): v for i, v in initial.items()}
    tr = db.create_transaction()
    for k, v in model.items():
        tr.set(k, v)
    tr.commit().wait()

    tr = db.create_transaction()
    for op in mutations:
        if op[0] == "clear_range" and op[1] > op[2]:
            continue  # inverted: an error, tested elsewhere
        _apply(model, op, key)
        if op[0] == "clear":
            tr.clear(key(op[1]))
        elif op[0] == "clear_range":
            tr.clear_range(key(op[1]), key(op[2]))
        else:  # set and the atomic ops
            getattr(tr, op[0])(key(op[1]), op[2])

    expected = sorted(model.items())
    keys = [k for k, _v in expected]
    for i in range(N):
        assert val(tr.get(key(i))) == model.get(key(i)), f"get({i})"
    assert rows(tr.get_range(begin, end)) == expected
    assert rows(tr.get_range(begin, end, reverse=True)) == expected[::-1]
    if limit:
        assert rows(tr.get_range(begin, end, limit=limit)) == expected[:limit]
        assert rows(tr.get_range(begin, end, limit=limit, reverse=True)) == expected[::-1][:limit]
    assert rows(tr.snapshot.get_range(begin, end)) == expected
    for i, or_equal, offset in selectors:
        sel = KeySelector(key(i), or_equal, offset)
        want = _resolve(keys, sel)
        if want is not None:
            assert val(tr.get_key(sel)) == want, f"get_key({sel!r})"
    tr.commit().wait()
    assert rows(db.create_transaction().get_range(begin, end)) == expected
