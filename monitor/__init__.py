"""Monitoring of the job store: the activity monitor that re-enqueues the jobs of dead or
stalled workers (``ActivityMonitor``).  Subscriptions and status surfaces come next."""

from .activity import ActivityMonitor

__all__ = ["ActivityMonitor"]
