"""Failed jobs are counted one way everywhere people look: ``jobsctl status`` (text and
JSON), ``/status``, ``/metrics`` and the dashboard agree on one store with succeeded and
failed jobs, and their last hour counts a run once: finished (succeeded), failed (for
good) or retried (failed, its job to run again).  ``jobsctl show`` and the dashboard's
drill-in say ``failed`` for a failed job (the job API keeps couch_jobs' ``finished``)."""

from __future__ import annotations

import html
import re

import orjson
import pytest

import jobs
from stores import clear_store, store_url
from jobs.observe import status
from jobs.engine.urls import ENV_VAR
from jobsctl import cli
from monitor import StatusServer
from processors import Processor, Retry, TaskFailed
from test_http_status import get, parse_metrics
from waiting import DEADLINE, running

T = "work"
SUCCEEDED, FAILED = ["ok-1", "ok-2", "ok-3"], ["bad-1", "bad-2"]
ATTEMPTS = 2
# started: one run of each job that succeeded, ATTEMPTS of each that failed
EXPECTED = {"finished": 3, "failed": 2, "last_hour": {"started": 3 + 2 * ATTEMPTS, "finished": 3, "failed": 2,
                                                      "retried": 2 * (ATTEMPTS - 1)}}


@pytest.fixture(params=["embedded", "fdb"])
def url(request, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "recorded-so-that-it-is-restored")
    monkeypatch.delenv(ENV_VAR)
    url = store_url(request.param, tmp_path)
    with jobs.store.opened(url) as db:
        if request.param == "fdb":
            clear_store(db)
        _run_jobs(db)
    yield url
    if request.param == "fdb":
        with jobs.store.opened(url) as db:
            clear_store(db)


def _run_jobs(db) -> None:
    """Three jobs that succeed; two that fail each of their ATTEMPTS runs (one retry)."""
    p = Processor(db)

    @p.handler(T, timeout=30, retry=Retry(max_attempts=ATTEMPTS, backoff=0.05, jitter=0))
    def work(ctx):
        if ctx.data["fail"]:
            raise RuntimeError("boom")
        return {"done": True}

    with running(p):
        futures = [p.submit(T, {"fail": i in FAILED}, job_id=i) for i in SUCCEEDED + FAILED]
        for f in futures:
            if f.job_id in FAILED:
                with pytest.raises(TaskFailed):
                    f.result(DEADLINE)
            else:
                assert f.result(DEADLINE) == {"done": True}


def _counts(t: dict) -> dict:
    return {"finished": t["finished"], "failed": t["failed"],
            "last_hour": {k: t["last_hour"][k] for k in ("started", "finished", "failed", "retried")}}


def _cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_every_view_counts_failed_jobs_the_same(url, capsys):
    with jobs.store.opened(url) as db:
        st = status.gather(db)
        with StatusServer(db, port=0, min_interval=0) as server:
            status_doc = orjson.loads(get(server, "/status").body)
            metrics = parse_metrics(get(server, "/metrics").body.decode())
            page = get(server, "/").body.decode()
    (gathered,) = [t for t in orjson.loads(orjson.dumps(st))["types"] if t["type"] == T]
    assert _counts(gathered) == EXPECTED
    (served,) = [t for t in status_doc["types"] if t["type"] == T]
    assert _counts(served) == EXPECTED

    (listed,) = [t for t in orjson.loads(_cli(capsys, "--store", url, "--json", "status"))["types"] if t["type"] == T]
    assert _counts(listed) == EXPECTED
    text = _cli(capsys, "--store", url, "status")
    header, row = text.splitlines()[:2]
    column = lambda name: row[header.index(name):].split()[0]  # noqa: E731 - (columns are aligned)
    assert (column("FINISHED"), column("FAILED")) == ("3", "2"), text
    assert f"{T}: 7 started, 3 finished, 2 failed, 2 retried; wait p50" in text

    one = {"type": T}
    assert {name: metrics[f"jobs_{name}"][T] for name in ("finished", "failed")} == {"finished": 3, "failed": 2}
    assert {k: metrics[f"jobs_{k}_last_hour"][T] for k in EXPECTED["last_hour"]} == EXPECTED["last_hour"], one

    headers = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", page.split('id="types"')[0])]
    rows = re.findall(r"<tr>(.*?)</tr>", page.split('id="types">')[1].split("</tbody>")[0])
    (cells,) = [re.findall(r"<td>(.*?)</td>", r) for r in rows if r.startswith(f"<td>{T}</td>")]
    shown = dict(zip(headers, cells))
    assert (shown["finished"], shown["failed"]) == ("3", "2")
    assert shown["last hour: started / finished / failed (retried)"] == "7 / 3 / 2 (2 retried)"


def test_show_says_failed_for_a_failed_job(url, capsys):
    shown = orjson.loads(_cli(capsys, "--store", url, "--json", "show", T, "bad-1"))
    assert shown["state"] == "failed" and shown["failed"]["reason"] == "RuntimeError: boom"
    assert orjson.loads(_cli(capsys, "--store", url, "--json", "show", T, "ok-1"))["state"] == "finished"
    text = _cli(capsys, "--store", url, "show", T, "bad-1")
    assert re.search(r"^state +failed$", text, re.M), text
    with jobs.store.opened(url) as db:
        assert jobs.get_job(db, T, "bad-1").state == "finished"  # the job API: couch_jobs' states
        with StatusServer(db, port=0, min_interval=0) as server:
            drill_in = orjson.loads(get(server, f"/api/jobs/{T}/bad-1").body)
    assert drill_in["state"] == "failed"
