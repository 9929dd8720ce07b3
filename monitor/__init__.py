"""Monitoring of the job store: its upkeep (``duties``: the activity monitor that
re-enqueues the jobs of dead or stalled workers, ``ActivityMonitor``; retention, which
prunes finished jobs, ``Pruner``; the job counters' upkeep, ``CounterPruner``) and the
status over HTTP for people and Prometheus (``StatusServer``: JSON, metrics, a dashboard,
a health check)."""

from .activity import ActivityMonitor
from .counters import CounterPruner
from .duty import Duty
from .retention import Pruner

__all__ = ["ActivityMonitor", "CounterPruner", "Duty", "Pruner", "StatusServer", "duties"]


def duties(db, types: list[str] | None = None) -> list[Duty]:
    """The store's upkeep for ``types`` (None: every type), each a :class:`Duty` to
    ``start()`` and ``stop()`` on a thread or ``await serve()``: the activity monitor,
    retention and the counters' upkeep, in that order.  A processor with ``monitor=True``
    runs them for its types and ``jobsctl monitor`` for every type; a program that runs
    neither runs these, or finished jobs are never pruned."""
    monitor = ActivityMonitor(db, types)
    return [monitor, Pruner(db, types, unreadable=monitor.unreadable), CounterPruner(db, types)]


def __getattr__(name):
    # Loaded on first use: every worker imports this package for its activity monitor,
    # and has no use for http.server.
    if name == "StatusServer":
        from .http import StatusServer

        return StatusServer
    raise AttributeError(f"module 'monitor' has no attribute {name!r}")
