"""A CTAS partition job's pieces: its pinned sources as DataFrames, the watcher that cancels
its Spark jobs when the job is halted, and the attempt directories it writes (and the sweep
of those no partition record references, sent to the trash).
"""

from __future__ import annotations

import contextlib
import os
import threading
from functools import reduce

from processors.operations import JobFailed

from . import catalog
from .ctas_query import summary
from .errors import PartitionDataError, TableNotFound
from .partition_files import read_partition
from .records import Table
from .spark import is_connect_session, spark_schema

HALT_POLL = 0.1  # seconds between checks that a partition job still holds its lock


def source_frame(session, qualified: str, pinned: dict):
    """A DataFrame of a pinned source version: the union of its pinned partitions."""
    cols = pinned["columns"]
    try:
        frames = [read_partition(session, loc, columns=cols) for loc in pinned["locations"]]
    except PartitionDataError as exc:
        raise JobFailed(
            f"data of source {qualified} pinned when the CTAS started is gone (replaced and collected "
            f"since?): {summary(exc)}; run the CTAS again"
        ) from exc
    if not frames:
        return session.createDataFrame([], spark_schema(cols))
    return reduce(lambda a, b: a.unionByName(b), frames)


@contextlib.contextmanager
def cancelled_when_halted(session, job, group: str):
    """Run the block's Spark jobs in job group ``group``, cancelled as soon as the partition
    job is halted (lost, cancelled, handed back) instead of running on unseen.  A Spark
    Connect session has no SparkContext: its operations are tagged and interrupted by tag."""
    if is_connect_session(session):
        session.addTag(group)
        cancel, end = (lambda: session.interruptTag(group)), (lambda: session.removeTag(group))
    else:
        sc = session.sparkContext
        sc.setJobGroup(group, "ctas partition", interruptOnCancel=False)
        cancel, end = (lambda: sc.cancelJobGroup(group)), (lambda: sc.setLocalProperty("spark.jobGroup.id", None))
    done = threading.Event()

    def watch():
        while not done.wait(HALT_POLL):
            if job.halted:
                cancel()
                return

    watcher = threading.Thread(target=watch, name=f"halt-{group}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        end()


def attempt_token(ctas_id: str, attempt_id: str) -> str:
    """The partition-directory token of one attempt: ``<ctas id>.<attempt id>``."""
    return f"{ctas_id}.{attempt_id}"


def _attempt_dirs(table: Table, ctas_id: str, pid: int | None = None) -> list[str]:
    """Directories in ``table``'s location written by attempts of this CTAS (of ``pid``)."""
    try:
        names = os.listdir(table.location)
    except FileNotFoundError:
        return []
    stem = "part-" if pid is None else f"part-{pid:05d}-"
    mark = f"-{ctas_id}."
    return sorted(os.path.join(table.location, n) for n in names if n.startswith(stem) and mark in n)


def trash_attempts(tr, table: Table, ctas_id: str, pid: int | None = None) -> list[str]:
    """Send to the trash, in ``tr``, the directories of this CTAS's attempts (of partition
    ``pid``) that no partition record references: runs that lost their job, failed, or
    were cancelled.  Only this CTAS's directories (named after its id), so other writers'
    are safe; the collector deletes them after its grace period, once ``tr`` committed.
    Returns the paths trashed."""
    if not table.managed:
        return []
    try:
        referenced = {p.location for p in catalog.get_partitions(tr, table)}
    except TableNotFound:
        return []  # dropped or aborted: its whole location is in the trash
    unreferenced = [path for path in _attempt_dirs(table, ctas_id, pid) if path not in referenced]
    if unreferenced:
        catalog.send_to_trash(tr, unreferenced, f"attempts of CTAS {ctas_id} that were not registered")
    return unreferenced
