"""CTAS's records in the store, beside the catalog's, under ``("ctas",)``.  ``id`` is the
CTAS's id, drawn once per ``ctas()`` call, also the staged table's owner ``ctas.<id>``::

    ("ctas", id, "start")                  -> JSON {target, instance}   # a retried start finds it
    ("ctas", id, "source", qualified)      -> JSON {view, table_id, columns}   # pinned; cleared at the end
    ("ctas", id, "pin", qualified, pid)    -> JSON location                     # pinned; cleared at the end
    ("ctas", id, "outcome")                -> JSON {state: committed|aborted, table_id, reason, at}
    ("ctas", None, "layout")               -> (LAYOUT.version,)  tuple-packed

Readers go through :func:`read_record` or the functions below, which check the layout.
"""

from __future__ import annotations

import orjson

from jobs import prefixes
from jobs.codec import read_json
from jobs.layouts import Layout

from . import catalog, layout
from .ctas_query import view_name
from .errors import CatalogError, CatalogLayoutError, CatalogStoreError
from .frames import split_name
from .records import Table

LAYOUT = Layout("CTAS", prefixes.CTAS, 1, error=CatalogStoreError, newer=CatalogLayoutError)
CTAS = LAYOUT.space


def record_key(ctas_id: str, *rest) -> bytes:
    """The key of a record of CTAS ``ctas_id`` (see the layout above)."""
    return CTAS.pack((ctas_id, *rest))


def read_record(tr, ctas_id: str, *rest):
    """The decoded record of CTAS ``ctas_id`` at ``rest`` (see the layout above), or None."""
    LAYOUT.check(tr)
    return read_json(tr, record_key(ctas_id, *rest))


def owner(ctas_id: str) -> str:
    """The ``owner`` of a CTAS's staged table (``catalog.list_staged_tables(owner=...)``)."""
    return f"ctas.{ctas_id}"


def staged_version(tr, target: str, arg: dict) -> Table | None:
    """The CTAS's staged table version, None once committed or aborted."""
    dbname, _name = split_name(target)
    try:
        staged = catalog.list_staged_tables(tr, dbname, owner=owner(arg["id"]))
    except (ValueError, CatalogError):
        return None
    return next((t for t in staged if t.id == arg["table_id"]), None)


def pinned_sources(tr, ctas_id: str) -> dict[str, dict]:
    """qualified -> {view, table_id, columns, locations: [location by pid]}."""
    LAYOUT.check(tr)
    space = CTAS[ctas_id]
    out: dict[str, dict] = {}
    r = space["source"].range()
    for kv in tr.get_range(r.start, r.stop):
        out[space["source"].unpack(kv.key)[0]] = {**orjson.loads(bytes(kv.value)), "locations": []}
    r = space["pin"].range()
    for kv in tr.get_range(r.start, r.stop):
        qualified, _pid = space["pin"].unpack(kv.key)
        out[qualified]["locations"].append(orjson.loads(bytes(kv.value)))
    return out


def pin_sources(tr, ctas_id: str, sources: dict[str, Table]) -> None:
    """Pin the sources' versions and partition locations: every partition job reads them."""
    LAYOUT.ensure(tr)
    for qualified, table in sources.items():
        tr.set(record_key(ctas_id, "source", qualified),
               orjson.dumps({"view": view_name(qualified), "table_id": table.id, "columns": table.schema}))
        for part in catalog.get_partitions(tr, table):
            tr.set(record_key(ctas_id, "pin", qualified, part.pid), orjson.dumps(part.location))


def clear_pins(tr, ctas_id: str) -> None:
    """Forget the pinned sources (the CTAS ended)."""
    LAYOUT.check(tr)
    tr.clear_range(*layout.span(CTAS[ctas_id]["source"]))
    tr.clear_range(*layout.span(CTAS[ctas_id]["pin"]))
