"""The ``jobsctl workers`` command: the live workers (``jobs.observe.workers``), the processors
serving the store, with the types they handle, their lanes and the jobs they hold."""

from __future__ import annotations

import time

from jobs.observe import workers as workers_mod

from .commands import open_store
from .views import duration, table, when


def add_commands(command) -> None:
    command("workers", cmd_workers,
            "live workers (running processors): id, host/pid, types, lanes, jobs held, started, last heartbeat; "
            "stale ones (killed, or silent too long) are dropped")


def cmd_workers(args):
    """A list of the live workers (``jobs.observe.workers.Worker``: one JSON object each)."""
    with open_store(args, create=False) as db:
        return workers_mod.live_workers(db)


def held(w: workers_mod.Worker) -> str:
    """``2 (t/a, t/b)``: the count, and the jobs named in the record (``t/a over its
    time limit``: its handler runs on past it, blocked where it cannot be interrupted)."""
    named = ", ".join(f"{j.type}/{j.id}" + (" over its time limit" if j.over_time_limit_since is not None else "")
                      for j in w.held_jobs)
    more = ", ..." if w.held > len(w.held_jobs) else ""
    return f"{w.held} ({named}{more})" if named else str(w.held)


def human_workers(docs: list[workers_mod.Worker]) -> str:
    if not docs:
        return "(no live workers)"
    now = time.time()
    rows = [[w.id, f"{w.host}/{w.pid}", ",".join(w.types), w.concurrency, held(w), when(w.started, now),
             f"{duration(now - w.heartbeat)} ago"] for w in docs]
    return table(["ID", "HOST/PID", "TYPES", "LANES", "HELD", "STARTED", "LAST HEARTBEAT"], rows)


HUMAN = {"workers": human_workers}
