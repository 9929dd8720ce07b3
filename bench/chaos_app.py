"""The worker application of the chaos run (``bench/chaos.py``), started through the real
CLI: ``jobs --store URL worker bench.chaos_app:processor``.

Each job sleeps its ``work_ms`` in small steps (so kills and stalls land mid-job) and
commits its output with the finish (``ctx.on_commit``): a counter per job under
("chaos", "out", id), which must end at exactly 1 whatever happens to the workers, and
the token of the run that committed it.  Every start is logged, with its wall-clock time,
to ``$CHAOS_LOGDIR/worker-PID.log`` (for re-runs and recovery times).
"""

from __future__ import annotations

import logging
import os
import time
import uuid

import jobs
from jobs import prefixes
from jobs.engine import Subspace
from processors import Processor

TYPE = "chaos"
OUT = Subspace(prefixes.ROOT + ("chaos", "out"))  # job id -> 8-byte little-endian count of committed outputs
BY = Subspace(prefixes.ROOT + ("chaos", "by"))  # job id -> token of the run whose output committed
ONE = (1).to_bytes(8, "little")

_logdir = os.environ.get("CHAOS_LOGDIR")
_log = open(os.path.join(_logdir, f"worker-{os.getpid()}.log"), "a", buffering=1) if _logdir else None
if _logdir:
    logging.basicConfig(filename=os.path.join(_logdir, f"worker-{os.getpid()}.events"), level=logging.WARNING)

processor = Processor(jobs.open(), grace=5)


# The chaos kills and stalls workers at random, not because of their jobs: every job must
# still finish, however many of its workers were lost (not a poison job, so no max_lost).
@processor.handler(TYPE, max_lost=2**31)
def work(ctx):
    token = f"{os.getpid()}:{uuid.uuid4().hex[:8]}"
    if _log is not None:
        _log.write(f"start {ctx.job_id} {time.time():.6f} {token}\n")
    end = time.monotonic() + ctx.data.get("work_ms", 0) / 1000
    while time.monotonic() < end:
        time.sleep(0.005)

    def commit(tr):
        tr.add(OUT.pack((ctx.job_id,)), ONE)
        tr.set(BY.pack((ctx.job_id,)), token.encode())

    ctx.on_commit(commit)
    return {"n": ctx.data["n"], "token": token}
