"""A CTAS partition whose query takes its worker down (SIGKILL, as an out-of-memory kill
would), run by ``jobsctl worker`` processes of the pipeline with a ``jobsctl monitor``.  Killed
once, it is re-run elsewhere and the table commits with every row once; killed every time,
after ``max_lost`` lost workers the partition fails, the operation fails with the reason
and the CTAS is aborted (its staging to the trash), instead of being re-run forever.
Spark starts in the test and in the workers: about a minute each."""

from __future__ import annotations

import textwrap

import pytest

from pipeline import ctas as pctas
from pipeline.errors import CtasFailed
from test_ctas import (  # noqa: F401 (source_files and store are fixtures)
    BIG,
    N_ORDERS,
    assert_aborted,
    only_staged,
    operations_for,
    rows_of,
    source_files,
    store,
)
from test_poison_crash import Supervisor, lost_message, ran, wait_supervising
from waiting import DEADLINE

APP = textwrap.dedent('''
    import os, signal
    import jobs
    from pipeline import ctas
    from pipeline.runtime import processor as pipeline_processor

    MARKS = os.environ["POISON_MARKS"]
    _start = ctas.CreateTableAs.start_or_resume_job


    def start_or_die(self, ctx):
        once = os.path.exists(os.path.join(MARKS, "once"))  # else every run of it dies
        if ctx.partition == "1" and not (once and ctx.job.lost):  # its query takes the worker down
            open(os.path.join(MARKS, f"ran-ctas-{os.getpid()}"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return _start(self, ctx)


    ctas.CreateTableAs.start_or_resume_job = start_or_die
    # prefetch=1: a worker holds only the job it runs, so no other partition is lost with it
    processor = pipeline_processor(jobs.open(), job_timeout=2.0, prefetch=1, grace=0)
''')


def supervise(store, tmp_path, once: bool = False):
    """A Supervisor of two pipeline workers whose CTAS partition 1 kills its worker (its
    first run only, with ``once``); the marks directory."""
    (tmp_path / "ctasapp.py").write_text(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    if once:
        (marks / "once").touch()
    supervisor = Supervisor("sqlite:" + store.path, tmp_path, marks, workers=2, target="ctasapp:processor")
    supervisor.keep_up()
    return supervisor, marks


def test_a_ctas_partition_that_kills_its_worker_aborts_the_ctas(store, tmp_path):  # noqa: F811 (fixture)
    supervisor, marks = supervise(store, tmp_path)
    try:
        ops = operations_for(store)
        instance = pctas.ctas(store, ops, "shop.out", BIG, partition_by="id", partitions=3)
        staged = only_staged(store)
        assert wait_supervising(supervisor, lambda: ops.operation_status(store, "shop.out", pctas.TYPE,
                                                                         instance).done), ran(marks, "ctas")
        with pytest.raises(CtasFailed) as failed:
            pctas.wait(ops, "shop.out", instance, timeout=DEADLINE)
    finally:
        supervisor.stop()
    operation = failed.value.outcome.operation
    killed = ran(marks, "ctas")
    assert len(killed) == 3 and operation.state == "failed" and operation.partitions["1"] == "failed"
    assert lost_message(killed).match(operation.results["1"]["reason"]), operation.results["1"]
    assert "worker lost 3 times" in str(failed.value)
    assert_aborted(store, staged.location)


def test_a_ctas_partition_whose_worker_is_killed_once_is_rerun_and_commits(store, spark, tmp_path):  # noqa: F811
    supervisor, marks = supervise(store, tmp_path, once=True)
    try:
        ops = operations_for(store)
        instance = pctas.ctas(store, ops, "shop.out", BIG, partition_by="id", partitions=3)
        assert wait_supervising(supervisor, lambda: ops.operation_status(store, "shop.out", pctas.TYPE,
                                                                         instance).done), ran(marks, "ctas")
        outcome = pctas.wait(ops, "shop.out", instance, timeout=DEADLINE)
    finally:
        supervisor.stop()
    (killed,) = ran(marks, "ctas")
    assert outcome.state == "committed" and outcome.operation.state == "success"
    assert outcome.operation.ran_on["1"][0].endswith(f":{killed}") and len(outcome.operation.ran_on["1"]) == 2
    _table, found = rows_of(spark, store, "shop.out")
    ids = sorted(row["id"] for rows in found.values() for row in rows)
    assert ids == [i for i in range(N_ORDERS) if i % 7 > 3]  # BIG: qty = id % 7 > 3, each row once
