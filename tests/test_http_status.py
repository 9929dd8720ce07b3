"""``monitor.StatusServer``: /status, /metrics, / and /healthz on a real store over loopback
(port 0), the shared and cached gather, a failing gather or store, bad arguments, and
``jobsctl serve-status`` run as a process until SIGTERM."""

from __future__ import annotations

import html
import http.client
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import NamedTuple

import orjson
import pytest

import jobs
import monitor
from jobs.observe import status
from jobsctl import cli
from stored import add_unchecked
from monitor import StatusServer
from waiting import DEADLINE, wait_until

WEIRD = 'we"ird\\type\nx'  # a quote, a backslash and a newline: escaped in label values
SCRIPT_ID = "<script>alert(1)</script>"


class Response(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes


def get(server: StatusServer, path: str, method: str = "GET") -> Response:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=DEADLINE)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return Response(r.status, r.headers, r.read())
    finally:
        conn.close()


@pytest.fixture
def store(tmp_path):
    """One embedded store file (the scenario test runs on every engine through ``db``)."""
    database = jobs.open("sqlite:" + str(tmp_path / "jobs.sqlite"))
    yield database
    database.close()


def fill(db) -> None:
    """Jobs in every state: pending (due now, due long ago, scheduled later), running and
    finished; a type with a cleared timeout; a type whose name needs escaping."""
    jobs.set_type_timeout(db, "t", 30)
    for job_id in ("a", "b", "c", "d", SCRIPT_ID):
        jobs.add(db, "t", job_id)
    first = jobs.accept(db, "t", timeout=0)
    jobs.finish(db, jobs.accept(db, "t", timeout=0))
    jobs.update(db, first)
    jobs.add(db, "t", "late", scheduled_time=time.time() - 500)  # after the accepts: they may pick it
    jobs.add(db, "t", "future", scheduled_time=time.time() + 3600)
    # (jobs.add refuses control characters in names: as another program could write it)
    add_unchecked(db, WEIRD, "w", scheduled_time=time.time() + 3600, timeout=5)  # no due job: no oldest-wait sample
    jobs.set_type_timeout(db, "cleared", 5)
    jobs.add(db, "cleared", "c")
    jobs.clear_type_timeout(db, "cleared")  # its job still shows, with no timeout


COUNTS = ("type", "timeout", "pending", "due", "due_asap", "running", "finished")


def counts(doc: dict) -> dict:
    return {t["type"]: {**{k: t[k] for k in COUNTS}, "ids": [r["id"] for r in t["running_jobs"]]}
            for t in doc["types"]}


def test_status_is_the_gather(db):
    fill(db)
    with StatusServer(db, port=0, min_interval=0) as server:
        r = get(server, "/status?pretty=1")  # the query string is ignored
        expected = orjson.loads(orjson.dumps(status.gather(db)))
    assert r.status == 200 and r.headers["Content-Type"] == "application/json"
    doc = orjson.loads(r.body)
    assert set(doc) == {"now", "versions", "types", "schedules", "workers"}
    assert doc["versions"] == expected["versions"]
    assert doc["schedules"] == expected["schedules"] == [] and doc["workers"] == expected["workers"] == []
    assert counts(doc) == counts(expected)
    t = counts(doc)["t"]
    assert (t["pending"], t["due"], t["due_asap"], t["running"], t["finished"]) == (5, 4, 3, 1, 1)


# --- /metrics ------------------------------------------------------------------------------

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{type="((?:[^"\\\n]|\\.)*)"(?:,(?:priority|kind|place|quantile)="([^"]*)")?\})? (\S+)$')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m[1], m[1]), value)


def parse_metrics(text: str) -> dict[str, dict]:
    """family -> {type label (None without one; (type, second label) with a priority, quantile,
    kind or place label) -> value}; every sample's family must have had its HELP and TYPE lines first."""
    helped, typed, samples = set(), {}, {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            typed[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, label, second, value = m.groups()
            assert name in helped and typed.get(name) == "gauge", line
            key = None if label is None else _unescape(label)
            samples.setdefault(name, {})[key if second is None else (key, second)] = float(value)
    return samples


def test_metrics(store):
    fill(store)
    with StatusServer(store, port=0, min_interval=0) as server:
        r = get(server, "/metrics")
        st = status.gather(store)
    assert r.status == 200 and r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = r.body.decode()
    assert 'type="we\\"ird\\\\type\\nx"' in text  # the raw, escaped form
    m = parse_metrics(text)
    by_type = {t.type: t for t in st.types}
    assert set(by_type) == {"cleared", "t", WEIRD}
    for family, field in (("jobs_pending", "pending"), ("jobs_due", "due"), ("jobs_running", "running"),
                          ("jobs_finished", "finished")):
        assert m[family] == {name: getattr(t, field) for name, t in by_type.items()}, family
    assert m["jobs_type_timeout_seconds"] == {"t": 30.0, WEIRD: 5.0}  # "cleared" has none
    assert set(m["jobs_oldest_due_age_seconds"]) == {"t", "cleared"}  # WEIRD has no due job
    assert 0 <= m["jobs_oldest_due_age_seconds"]["t"] <= by_type["t"].oldest_due_age  # gathered later
    assert m["jobs_status_up"] == {None: 1.0}
    assert m["jobs_status_gather_seconds"][None] >= 0


def test_paused_types_in_status_metrics_and_dashboard(store):
    fill(store)
    jobs.pause(store, "t")
    jobs.pause(store, "not-yet")  # paused before it has a timeout or jobs
    with StatusServer(store, port=0, min_interval=0) as server:
        doc = orjson.loads(get(server, "/status").body)
        m = parse_metrics(get(server, "/metrics").body.decode())
        page = get(server, "/").body.decode()
        jobs.resume(store, "t")
        after = parse_metrics(get(server, "/metrics").body.decode())
    by_type = {t["type"]: t for t in doc["types"]}
    assert by_type["t"]["paused"] is True and by_type["t"]["paused_since"] > 0
    assert by_type["cleared"]["paused"] is False and by_type["cleared"]["paused_since"] is None
    assert m["jobs_paused"] == {"t": 1.0, "not-yet": 1.0, "cleared": 0.0, WEIRD: 0.0}
    assert "<td>t (paused)</td>" in page and "<td>not-yet (paused)</td>" in page
    assert after["jobs_paused"]["t"] == 0.0 and after["jobs_paused"]["not-yet"] == 1.0


def test_priority_bands_and_retention_in_metrics(store):
    jobs.set_type_timeout(store, "p", 30)
    for i, priority in enumerate([-2, -2, 0, 5]):
        jobs.add(store, "p", f"j{i}", {}, priority=priority)
    jobs.add(store, "p", "later", {}, scheduled_time=time.time() + 3600, priority=5)
    jobs.set_retention(store, "p", finished=600)
    with StatusServer(store, port=0, min_interval=0) as server:
        m = parse_metrics(get(server, "/metrics").body.decode())
    assert m["jobs_pending_by_priority"] == {("p", "-2"): 2.0, ("p", "0"): 1.0, ("p", "5"): 2.0}
    assert m["jobs_due_by_priority"] == {("p", "-2"): 2.0, ("p", "0"): 1.0, ("p", "5"): 1.0}
    assert m["jobs_retention_seconds"] == {("p", "finished"): 600.0}  # failed: kept forever


def test_limits_and_keys_in_status_and_metrics(store):
    jobs.set_type_timeout(store, "k", 30)
    jobs.set_type_timeout(store, "plain", 30)
    for i in range(2):
        jobs.add(store, "k", f"a{i}", key="a")
    jobs.add(store, "k", "b0", key="b", scheduled_time=time.time() + 3600)
    jobs.add(store, "k", "u")
    jobs.set_limits(store, "k", concurrency=10, rate=(100, 60), key_concurrency=1, key_rate=(5, 1.5))
    jobs.set_limits(store, "r", rate=(3, 0.5))  # limits only: no timeout, no jobs
    taken = jobs.accept_many(store, "k", 10, timeout=0)
    assert sorted(j.id[0] for j in taken) == ["a", "u"]
    with StatusServer(store, port=0, min_interval=0) as server:
        doc = orjson.loads(get(server, "/status").body)
        m = parse_metrics(get(server, "/metrics").body.decode())
    by_type = {t["type"]: t for t in doc["types"]}
    k = by_type["k"]
    assert (k["pending"], k["due"], k["running"], k["finished"]) == (2, 1, 2, 0)  # a1 (due), b0 (later)
    assert k["limits"] == {"concurrency": 10, "rate": {"count": 100, "seconds": 60.0}, "key_concurrency": 1,
                           "key_rate": {"count": 5, "seconds": 1.5}}
    assert (k["running_slots"], k["started_in_period"], k["keys"]) == (2, 2, {"turns": 0, "asleep": 1, "full": 1})
    assert by_type["r"]["limits"]["rate"] == {"count": 3, "seconds": 0.5} and by_type["plain"]["limits"] is None
    assert m["jobs_limit_running"] == {"k": 10}
    assert m["jobs_limit_rate"] == {"k": 100, "r": 3}
    assert m["jobs_limit_rate_period_seconds"] == {"k": 60.0, "r": 0.5}
    assert m["jobs_key_limit_running"] == {"k": 1}
    assert m["jobs_key_limit_rate"] == {"k": 5}
    assert m["jobs_key_limit_rate_period_seconds"] == {"k": 1.5}
    assert m["jobs_running_slots"] == {"k": 2}  # types with a concurrency limit
    assert m["jobs_started_in_rate_period"] == {"k": 2, "r": 0}  # types with a rate limit
    assert m["jobs_keys"] == {("k", "turns"): 0, ("k", "asleep"): 1, ("k", "full"): 1, ("plain", "turns"): 0,
                              ("plain", "asleep"): 0, ("plain", "full"): 0, ("r", "turns"): 0,
                              ("r", "asleep"): 0, ("r", "full"): 0}
    assert m["jobs_pending"] == {"k": 2, "plain": 0, "r": 0}


# --- / ---------------------------------------------------------------------------------------


def test_dashboard(store):
    fill(store)
    jobs.set_type_timeout(store, "a<b>", 10)
    with StatusServer(store, port=0) as server:
        r = get(server, "/")
    page = r.body.decode()
    assert r.status == 200 and r.headers["Content-Type"] == "text/html; charset=utf-8"
    for name in ("t", "cleared", WEIRD, "a<b>"):
        assert f"<td>{html.escape(name)}</td>" in page
    running = jobs.get_active_jobs_ids(store, "t")
    assert running and all(f"<td>{html.escape(i)}</td>" in page for i in running)
    assert "a<b>" not in page  # escaped
    assert 'fetch("status"' in page and "setInterval(refresh, 2000)" in page
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)|src=|href=", page)  # self-contained


def test_the_dashboard_draws_the_last_hour_per_minute_without_script(store):
    jobs.set_type_timeout(store, "t", 30)
    for i in range(3):
        jobs.add(store, "t", f"j{i}")
        jobs.finish(store, jobs.accept(store, "t", timeout=0), failed="no" if i == 0 else False)
    with StatusServer(store, port=0) as server:
        page = get(server, "/").body.decode()
    assert re.search(r'<svg class="minutes"[^>]*><rect [^>]*class="finished"><title>2 finished</title>', page)
    assert '<title>1 failed</title>' in page


def test_dashboard_escapes_a_running_id(store):
    jobs.set_type_timeout(store, "t", 30)
    jobs.add(store, "t", SCRIPT_ID)
    jobs.accept(store, "t", timeout=0)
    with StatusServer(store, port=0) as server:
        page = get(server, "/").body.decode()
    assert html.escape(SCRIPT_ID) in page and SCRIPT_ID not in page


def test_status_shows_whatever_another_program_stored(store):
    """Times no date can show and ids with control characters (jobs.add refuses both)."""
    add_unchecked(store, "t", "far", 1e30)
    add_unchecked(store, "t", "y10k", 253402300800.0)
    add_unchecked(store, "t", "a\nb\x1b[31m")
    jobs.accept(store, "t", timeout=0)  # the one due job: running, listed by id
    with StatusServer(store, port=0, min_interval=0) as server:
        responses = {path: get(server, path) for path in ("/status", "/metrics", "/")}
    assert {path: r.status for path, r in responses.items()} == {"/status": 200, "/metrics": 200, "/": 200}
    (t,) = orjson.loads(responses["/status"].body)["types"]
    assert (t["pending"], t["due"], t["running"]) == (2, 0, 1)
    assert [r["id"] for r in t["running_jobs"]] == ["a\nb\x1b[31m"]
    assert parse_metrics(responses["/metrics"].body.decode())["jobs_pending"] == {"t": 2}


# --- routes and methods ----------------------------------------------------------------------


def test_healthz_routes_and_methods(store):
    with StatusServer(store, port=0) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/" and server.port != 0
        r = get(server, "/healthz")
        assert (r.status, r.body.strip()) == (200, b"ok")
        assert get(server, "/nope").status == 404
        assert get(server, "/status/").status == 404
        head = get(server, "/metrics", "HEAD")
        assert head.status == 200 and head.body == b"" and int(head.headers["Content-Length"]) > 0
        for method in ("POST", "PUT", "DELETE", "FOO"):
            r = get(server, "/status", method)
            assert r.status == 405 and r.headers["Allow"] == "GET, HEAD", method


def test_access_log_goes_to_logging(store, caplog, capfd):
    with caplog.at_level(logging.DEBUG, logger="monitor.http"), StatusServer(store, port=0) as server:
        get(server, "/healthz")
        get(server, "/nope")
        assert wait_until(lambda: sum("GET /nope" in r.getMessage() for r in caplog.records) == 1)
    assert any("GET /healthz" in r.getMessage() and r.name == "monitor.http" for r in caplog.records)
    assert capfd.readouterr().err == ""


class BrokenStore:
    """A store that cannot even start a transaction."""

    def create_transaction(self):
        raise RuntimeError("the store is down")


def test_broken_store():
    with StatusServer(BrokenStore(), port=0) as server:
        r = get(server, "/healthz")
        assert r.status == 503 and b"the store is down" in r.body
        r = get(server, "/status")
        assert r.status == 503 and "the store is down" in orjson.loads(r.body)["error"]
        assert get(server, "/").status == 503
        r = get(server, "/metrics")
        assert r.status == 200 and parse_metrics(r.body.decode())["jobs_status_up"] == {None: 0.0}


# --- the shared gather -----------------------------------------------------------------------


class CountingGather:
    """Wraps status.gather: counts calls and the most that ran at once; raises while
    ``failing`` is set."""

    def __init__(self, real):
        self.real, self.calls, self.running, self.most = real, 0, 0, 0
        self.failing = False
        self.lock = threading.Lock()

    def __call__(self, db, limit=10, now=None):
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self.failing:
                raise RuntimeError("index unreadable")
            time.sleep(0.01)  # widen the window in which two gathers could overlap
            return self.real(db, limit, now)
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def counting(monkeypatch):
    wrapper = CountingGather(status.gather)
    monkeypatch.setattr(status, "gather", wrapper)
    return wrapper


def _concurrently(server: StatusServer, path: str, n: int = 6) -> list[Response]:
    results: list[Response] = []
    threads = [threading.Thread(target=lambda: results.append(get(server, path))) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert len(results) == n
    return results


def test_gather_is_cached_and_shared(store, counting):
    fill(store)
    with StatusServer(store, port=0, min_interval=DEADLINE) as server:
        first, second = get(server, "/status"), get(server, "/metrics")
        assert counting.calls == 1
        assert orjson.loads(first.body)["now"] == orjson.loads(get(server, "/status").body)["now"]
        assert all(r.status == 200 for r in _concurrently(server, "/"))
        assert counting.calls == 1 and second.status == 200
    with StatusServer(store, port=0, min_interval=0) as server:
        assert all(r.status == 200 for r in _concurrently(server, "/status"))
        assert counting.calls == 1 + 6 and counting.most == 1  # never two at once


def test_gather_failure_is_an_answer(store, counting):
    jobs.set_type_timeout(store, "t", 30)
    counting.failing = True
    with StatusServer(store, port=0, min_interval=0) as server:
        r = get(server, "/status")
        assert r.status == 503 and r.headers["Content-Type"] == "application/json"
        assert "RuntimeError: index unreadable" in orjson.loads(r.body)["error"]
        r = get(server, "/")
        assert r.status == 503 and b"index unreadable" in r.body
        r = get(server, "/metrics")
        m = parse_metrics(r.body.decode())
        assert r.status == 200 and m["jobs_status_up"] == {None: 0.0} and "jobs_pending" not in m
        counting.failing = False  # the server kept running
        assert get(server, "/status").status == 200
        assert parse_metrics(get(server, "/metrics").body.decode())["jobs_status_up"] == {None: 1.0}


# --- arguments and lifecycle -----------------------------------------------------------------


@pytest.fixture
def busy_port():
    """A loopback port something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("kw, name", [
    ({"port": "8080"}, "port"), ({"port": -1}, "port"), ({"port": 65536}, "port"), ({"port": True}, "port"),
    ({"port": 1.5}, "port"), ({"limit": -1}, "limit"), ({"limit": "3"}, "limit"), ({"limit": True}, "limit"),
    ({"min_interval": -1}, "min_interval"), ({"min_interval": "1"}, "min_interval"),
    ({"min_interval": math.nan}, "min_interval"), ({"host": None}, "host"), ({"host": 127}, "host"),
])
def test_bad_arguments(store, busy_port, kw, name):
    args = {"port": busy_port, **kw}  # checked before binding: ValueError, not the busy port's OSError
    with pytest.raises(ValueError, match=name):
        StatusServer(store, **args)


def test_busy_port(store, busy_port):
    with pytest.raises(OSError, match=f"127.0.0.1:{busy_port}"):
        StatusServer(store, port=busy_port)


def test_start_and_stop(store):
    server = StatusServer(store, port=0)
    assert server.start() is server
    with pytest.raises(RuntimeError):
        server.start()
    assert get(server, "/healthz").status == 200
    server.stop()
    server.stop()  # idempotent
    with pytest.raises(OSError):
        get(server, "/healthz")
    StatusServer(store, port=0).stop()  # never started: closes its socket


def test_exported():
    assert set(monitor.__all__) == {"ActivityMonitor", "CounterPruner", "Duty", "Pruner", "StatusServer", "duties"}
    assert monitor.StatusServer is StatusServer


# --- jobsctl serve-status -----------------------------------------------------------------------


def test_cli_help_and_busy_port(capsys, busy_port, tmp_path, store):
    assert cli.main(["help"]) == 0 and "serve-status" in capsys.readouterr().out
    code = cli.main(["--store", "sqlite:" + str(tmp_path / "jobs.sqlite"), "serve-status", "--port", str(busy_port)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("jobsctl: error: ") and f"127.0.0.1:{busy_port}" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_serve_status_until_sigterm(tmp_path, store, as_json):
    jobs.set_type_timeout(store, "t", 30)
    jobs.add(store, "t", "a")
    url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobsctl", "--store", url, "serve-status", "--port", "0",
         *(["--json"] if as_json else [])],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "JOBS_STORE"},
    )
    lines: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    try:
        reader.start()
        assert wait_until(lambda: lines or proc.poll() is not None), "no output"
        assert lines, proc.stderr.read()
        if as_json:
            served = orjson.loads(lines[0])["url"]
        else:
            m = re.fullmatch(r"serving status on (http://127\.0\.0\.1:\d+/) \(/status, /metrics, /healthz\)\n",
                             lines[0])
            assert m, lines[0]
            served = m[1]
        with urllib.request.urlopen(served + "status", timeout=DEADLINE) as r:
            assert r.status == 200
            assert [(t["type"], t["pending"]) for t in orjson.loads(r.read())["types"]] == [("t", 1)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0, proc.stderr.read()
        reader.join(DEADLINE)
        assert lines == [lines[0]]  # nothing after the first line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
