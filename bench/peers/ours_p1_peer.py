"""Ours with ``Processor(prefetch=1)``: one job per accept transaction, as a worker that
never holds a job it has not started (the setting Celery runs with here).  Finished jobs
are still committed together when several are waiting.  Otherwise as ``ours_peer``; no
recovery workload (the same mechanism)."""

from __future__ import annotations

from .ours_peer import OursPeer, _processor


def __getattr__(name):  # `jobsctl worker bench.peers.ours_p1_peer:processor`
    if name == "processor":
        return _processor(prefetch=1)
    raise AttributeError(name)


class OursPrefetch1Peer(OursPeer):
    name = "ours_p1"
    label = "ours, prefetch 1"
    title = "ours, prefetch 1 (embedded engine)"
    module = "bench.peers.ours_p1_peer"
    skip = ("recovery",)
    settings = "as ours, with `Processor(prefetch=1)`: one job per accept transaction"


PEER = OursPrefetch1Peer
