"""``LastAttempt``: what the last attempt of a retried transaction did, for the next attempt
to tell whether that one committed behind ``commit_unknown_result`` (1021)."""

from __future__ import annotations

import uuid

from jobs.engine import tuple as fdb_tuple
from jobs.engine import value_of
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import LastAttempt, run


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
