"""``LastAttempt``: what the last attempt of a retried transaction did, for the next attempt
to tell whether that one committed behind ``commit_unknown_result`` (1021)."""

from __future__ import annotations

import uuid

import pytest

from jobs.engine import error_code, value_of
from jobs.engine import tuple as fdb_tuple
from jobs.engine.errors import FDBError
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import LastAttempt, run, run_noting


def test_nothing_recorded_is_never_committed():
    attempt = LastAttempt()
    asked = []
    assert attempt.committed() is False
    assert attempt.committed(lambda value: asked.append(value) or True) is False
    assert asked == [] and attempt.value is None


def test_the_evidence_decides_and_its_answer_is_passed_on():
    attempt = LastAttempt()
    assert attempt.record(7) == 7 and attempt.value == 7
    assert attempt.committed() is True
    assert attempt.committed(lambda value: value == 8) is False
    assert attempt.committed(lambda value: {"id": value}) == {"id": 7}
    attempt.record([])  # a later attempt's record replaces it, falsy values too
    assert attempt.committed() is True and attempt.value == []


def test_a_drawn_id_is_drawn_once_when_every_commit_reports_an_unknown_result(db, ks):
    faulty = FaultInjectingDatabase(db, unknown_committed=1.0)
    counter, nonce = ks.pack(("next",)), uuid.uuid4().bytes
    drawn = LastAttempt()
    attempts = []

    def draw(tr):
        attempts.append(1)
        if drawn.committed(lambda n: value_of(tr.get(ks.pack(("id", n)))) == nonce):
            return drawn.value
        raw = tr.get(counter).wait()
        n = fdb_tuple.unpack(raw)[0] + 1 if raw.present() else 1
        tr.set(counter, fdb_tuple.pack((n,)))
        tr.set(ks.pack(("id", n)), nonce)
        return drawn.record(n)

    assert run(faulty, draw) == 1
    assert len(attempts) == 2 and faulty.faults == 1  # the retry found its commit: read-only
    assert fdb_tuple.unpack(db.create_transaction().get(counter).wait()) == (1,)


def test_failed_forgets_an_attempt_that_surely_did_not_commit():
    """``failed`` (``run_noting``'s hook): after a conflict the failed attempt's record is
    forgotten (another worker may have done that work: a retry must not claim it); after
    1021 it is kept, and the next attempt records beside it: every attempt that may have
    committed stays in ``values``, whatever the attempts after it end with."""
    attempt = LastAttempt()
    attempt.record(["a"])
    attempt.failed(FDBError(1021))
    assert attempt.committed() is True and attempt.value == ["a"]
    attempt.failed(FDBError(1020))  # an attempt that recorded nothing: ["a"] stays
    assert attempt.values == (["a"],)
    attempt.record(["b"])
    attempt.record(["b", "c"])  # (an attempt's second record replaces its first)
    attempt.failed(FDBError(1021))
    assert attempt.values == (["a"], ["b", "c"]) and attempt.value == ["b", "c"]
    attempt.record(["d"])
    attempt.failed(FDBError(1020))
    assert attempt.values == (["a"], ["b", "c"])
    fresh = LastAttempt()
    fresh.record(["a"])
    fresh.failed(FDBError(1020))
    assert fresh.committed() is False and fresh.value is None and fresh.values == ()


def test_without_the_hook_each_record_replaces_the_last():
    """A body retried by ``run`` (no ``failed`` hook) keeps one record: its last."""
    attempt = LastAttempt()
    attempt.record(1)
    attempt.record(2)
    assert attempt.values == (2,) and attempt.committed() is True


def test_a_hook_that_answers_true_starts_the_next_attempt_at_once_afresh(db, ks):
    """``run_noting``'s ``failed`` returning True (the caller made the next attempt smaller):
    the transaction is reset and run again without ``on_error``, also after an error that
    ``on_error`` would not retry (2101, too large); the attempt's writes are gone."""
    sizes, errors = [4], []

    def body(tr):
        for i in range(sizes[0]):
            tr.set(ks.pack(("row", i)), b"x")
        if sizes[0] > 1:
            raise FDBError(2101)  # (as a commit too large for the batch would)
        return sizes[0]

    def failed(exc):
        errors.append(error_code(exc))
        sizes[0] //= 2
        return True

    assert run_noting(db, failed, body) == 1
    assert errors == [2101, 2101]
    rows = db.create_transaction().get_range_startswith(ks.pack(("row",)))
    assert [fdb_tuple.unpack(kv.key)[-1] for kv in rows] == [0]


def test_a_hook_that_answers_otherwise_leaves_the_error_to_on_error(db, ks):
    """Any other answer: ``on_error`` decides, and raises what it does not retry."""
    def body(tr):
        raise FDBError(2101)

    with pytest.raises(FDBError) as raised:
        run_noting(db, lambda exc: None, body)
    assert raised.value.code == 2101
