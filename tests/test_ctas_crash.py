"""A CTAS partition whose query takes its worker down (SIGKILL, as an out-of-memory kill
would), run by ``jobs worker`` processes of the pipeline with a ``jobs monitor``: after
``max_lost`` lost workers the partition fails, the operation fails with the reason and the
CTAS is aborted (its staging to the trash), instead of being re-run forever.  Spark starts
in the test and in the workers that run the other partitions: about a minute."""

from __future__ import annotations

import textwrap

import pytest

from pipeline import ctas as pctas
from pipeline.errors import CtasFailed
from test_ctas import BIG, assert_aborted, only_staged, operations_for, source_files, store  # noqa: F401 (fixtures)
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
        if ctx.partition == "1":  # this partition's query takes its worker down
            open(os.path.join(MARKS, f"ran-ctas-{os.getpid()}"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return _start(self, ctx)


    ctas.CreateTableAs.start_or_resume_job = start_or_die
    # prefetch=1: a worker holds only the job it runs, so no other partition is lost with it
    processor = pipeline_processor(jobs.open(), job_timeout=2.0, prefetch=1, grace=0)
''')


def test_a_ctas_partition_that_kills_its_worker_aborts_the_ctas(store, tmp_path):  # noqa: F811 (fixture)
    (tmp_path / "ctasapp.py").write_text(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    supervisor = Supervisor("sqlite:" + store.path, tmp_path, marks, workers=2, target="ctasapp:processor")
    try:
        supervisor.keep_up()
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
