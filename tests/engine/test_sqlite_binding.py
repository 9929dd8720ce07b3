"""How the embedded engine hands keys and values to Python's ``sqlite3``: ``bytes`` bind
through an adapter that returns them as they are (``store._bind_bytes_directly``)."""

from __future__ import annotations

import sqlite3

from jobs.engine import store
from jobs.engine.embedded import EmbeddedDatabase


def test_bytes_bind_as_they_are_through_the_engines_adapter(tmp_path):
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is bytes
    db = EmbeddedDatabase(str(tmp_path / "jobs.sqlite"))
    try:
        values = {b"\x00k": b"\x00\xff v", b"k\xff": b"", b"k" * 9000: b"v" * 90_000}
        tr = db.create_transaction()
        for key, value in values.items():
            tr.set(key, value)
        tr.commit().wait()
        tr = db.create_transaction()
        assert {key: tr.get(key).wait() for key in values} == values
    finally:
        db.close()


def test_a_bytes_subclass_still_binds_as_bytes():
    class Tagged(bytes):
        pass

    conn = sqlite3.connect(":memory:")
    assert conn.execute("SELECT ?", (Tagged(b"\x01\x02"),)).fetchone()[0] == b"\x01\x02"


def test_an_adapter_registered_before_is_kept(monkeypatch):
    def mine(value: bytes) -> bytes:
        return value

    monkeypatch.setitem(sqlite3.adapters, (bytes, sqlite3.PrepareProtocol), mine)
    store._bind_bytes_directly()
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is mine
