"""What every peer's no-op handler does, identically: append one fixed-width line to
``$BENCH_LOGDIR/records.log`` (one ``write`` with O_APPEND, atomic for lines this short)

    <handler start, wall time> <enqueue wall time or 0> <block flag> <pid>

and, for the recovery workload's job (``block``), then sleep until killed.  The harness
counts finished jobs from the file's size (lines are LINE bytes), so polling is one stat.
Worker processes also call ``started()`` once at import, so the harness knows they are up.
Standard library only: this runs in the peers' venv and in ours.
"""

from __future__ import annotations

import os
import time

LINE = 47  # bytes per record line
_fd: dict[int, int] = {}


def _open(name: str) -> int:
    return os.open(os.path.join(os.environ["BENCH_LOGDIR"], name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def record(enq: float = 0.0, block: bool = False) -> None:
    pid = os.getpid()
    fd = _fd.get(pid)
    if fd is None:  # first job in this process (RQ forks a new one per job)
        _fd.clear()
        fd = _fd[pid] = _open("records.log")
    os.write(fd, b"%17.6f %17.6f %d %8d\n" % (time.time(), float(enq or 0.0), 1 if block else 0, pid))
    if block:  # the recovery job: hold it until this worker is killed (bounded anyway)
        end = time.monotonic() + 600
        while time.monotonic() < end:
            time.sleep(0.05)


def started() -> None:
    """Called once by each worker process when its app module is imported."""
    if "BENCH_LOGDIR" in os.environ:
        fd = _open("started.log")
        os.write(fd, b"%8d\n" % os.getpid())
        os.close(fd)


def read(logdir: str) -> list[tuple[float, float, int, int]]:
    """All records so far: (start, enqueued, block, pid)."""
    path = os.path.join(logdir, "records.log")
    if not os.path.exists(path):
        return []
    out = []
    with open(path, "rb") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4:
                out.append((float(parts[0]), float(parts[1]), int(parts[2]), int(parts[3])))
    return out


def count(logdir: str) -> int:
    try:
        return os.stat(os.path.join(logdir, "records.log")).st_size // LINE
    except FileNotFoundError:
        return 0


def started_pids(logdir: str) -> set[int]:
    try:
        with open(os.path.join(logdir, "started.log")) as f:
            return {int(x) for x in f.read().split()}
    except FileNotFoundError:
        return set()
