"""Monitoring of the job store: the activity monitor that re-enqueues the jobs of dead or
stalled workers (``ActivityMonitor``) and the status over HTTP for people and Prometheus
(``StatusServer``: JSON, metrics, a dashboard, a health check)."""

from .activity import ActivityMonitor

__all__ = ["ActivityMonitor", "StatusServer"]


def __getattr__(name):
    # Loaded on first use: every worker imports this package for its activity monitor,
    # and has no use for http.server.
    if name == "StatusServer":
        from .http import StatusServer

        return StatusServer
    raise AttributeError(f"module 'monitor' has no attribute {name!r}")
