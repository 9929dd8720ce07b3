"""The status server's actions: POST /api/types/T/pause|resume and
/api/jobs/T/ID/retry|discard|cancel, GET /api/jobs/T/ID, behind a bearer token (401
without it, 403 with a wrong one or on a read-only server); a foreign Origin is refused;
no binding outside loopback without a token; ``jobsctl serve-status --token-file``."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from urllib.parse import quote

import pytest

import jobs
from monitor import StatusServer
from monitor.actions import JobActions, is_loopback
from waiting import DEADLINE

T = "t"
TOKEN = "s3cret-token-for-tests"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call(server, method: str, path: str, token: str | None = TOKEN, **headers):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=DEADLINE)
    try:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        is_json = r.headers.get("Content-Type") == "application/json"
        return r.status, r.headers, (json.loads(body) if is_json else body.decode())
    finally:
        conn.close()


@pytest.fixture
def store(tmp_path):
    database = jobs.open("sqlite:" + str(tmp_path / "jobs.sqlite"))
    jobs.set_type_timeout(database, T, 60)
    yield database
    database.close()


@pytest.fixture
def server(store):
    with StatusServer(store, port=0, min_interval=0, token=TOKEN) as s:
        yield s


def test_pause_and_resume(store, server):
    assert call(server, "POST", f"/api/types/{T}/pause")[0] == 200
    assert jobs.is_paused(store, T)
    status, _, doc = call(server, "POST", f"/api/types/{T}/resume")
    assert status == 200 and doc == {"done": "resume", "type": T}
    assert not jobs.is_paused(store, T)


def test_no_token_is_401_a_wrong_one_403_and_nothing_changes(store, server):
    status, headers, doc = call(server, "POST", f"/api/types/{T}/pause", token=None)
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer" and "token" in doc["error"]
    assert call(server, "POST", f"/api/types/{T}/pause", token="not-the-token-at-all")[0] == 403
    assert call(server, "POST", f"/api/types/{T}/pause", token=None, Authorization="Basic eDp5")[0] == 401
    assert not jobs.is_paused(store, T)


def test_a_foreign_origin_is_refused(store, server):
    status, _, doc = call(server, "POST", f"/api/types/{T}/pause", Origin="http://evil.example")
    assert status == 403 and not jobs.is_paused(store, T)
    # the token is good: the error says the Origin is the reason, and names it
    assert doc["error"] == (f"the Origin 'http://evil.example' is refused: actions come from this server's own "
                            f"pages (http://127.0.0.1:{server.port}) or from clients that send no Origin")
    status, _, doc = call(server, "POST", f"/api/types/{T}/pause", token="not-the-token-at-all",
                          Origin="http://evil.example")
    assert status == 403 and doc["error"] == "a valid bearer token is needed"
    here = f"http://127.0.0.1:{server.port}"
    assert call(server, "POST", f"/api/types/{T}/pause", Origin=here)[0] == 200


def test_retry_and_discard_failed_jobs(store, server):
    for job_id in ("f1", "f2", "ok"):
        jobs.add(store, T, job_id)
    for _ in range(3):
        job = jobs.accept(store, T, timeout=0)
        jobs.finish(store, job, failed=None if job.id == "ok" else "boom")
    assert call(server, "POST", f"/api/jobs/{T}/f1/retry")[0] == 200
    assert jobs.get_job(store, T, "f1").state == "pending"
    assert call(server, "POST", f"/api/jobs/{T}/f2/discard")[0] == 200
    with pytest.raises(jobs.NotFound):
        jobs.get_job(store, T, "f2")
    status, _, doc = call(server, "POST", f"/api/jobs/{T}/ok/retry")  # finished, not failed
    assert status == 409 and "not failed" in doc["error"]
    assert jobs.get_job(store, T, "ok").state == "finished"


def test_cancel_a_running_job_and_drill_into_one(store, server):
    job_id = "a/b c"  # percent-encoded in the path
    jobs.add(store, T, job_id, {"x": 1})
    job = jobs.accept(store, T, timeout=0)
    status, _, doc = call(server, "GET", f"/api/jobs/{T}/{quote(job_id, safe='')}")
    assert status == 200 and doc["state"] == "running" and doc["data"] == {"x": 1} and doc["worker"]
    assert set(doc["times"]) == {"started", "last_activity"}  # (wall clock, for the drill-in)
    assert call(server, "POST", f"/api/jobs/{T}/{quote(job_id, safe='')}/cancel")[0] == 200
    with pytest.raises(jobs.Halt):
        jobs.finish(store, job)
    status, _, doc = call(server, "POST", f"/api/jobs/{T}/{quote(job_id, safe='')}/cancel")
    assert status == 404 and "not found" in doc["error"]


def test_unknown_routes_and_methods(server):
    assert call(server, "POST", f"/api/types/{T}/explode")[0] == 404
    assert call(server, "GET", f"/api/types/{T}/explode")[0] == 404
    assert call(server, "POST", "/api/jobs//x/retry")[0] == 400
    assert call(server, "POST", "/status")[0] == 405


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("path", [f"/api/types/{T}/pause", f"/api/types/{T}/resume", f"/api/jobs/{T}/j/retry",
                                  f"/api/jobs/{T}/j/discard", f"/api/jobs/{T}/j/cancel"])
def test_another_method_on_an_action_is_405_with_allow_post(store, server, method, path):
    jobs.add(store, T, "j")
    status, headers, doc = call(server, method, path)
    assert status == 405 and headers["Allow"] == "POST"
    assert doc == {"error": f"method {method} not allowed on {path}; use POST"}
    assert not jobs.is_paused(store, T) and jobs.get_job(store, T, "j").state == "pending"


def test_a_post_on_a_job_is_405_with_allow_get(store, server):
    jobs.add(store, T, "j")
    status, headers, _ = call(server, "POST", f"/api/jobs/{T}/j")
    assert status == 405 and headers["Allow"] == "GET, HEAD"


def test_a_server_without_a_token_is_read_only(store):
    jobs.add(store, T, "j")
    with StatusServer(store, port=0, min_interval=0) as server:
        status, _, doc = call(server, "POST", f"/api/types/{T}/pause", token=None)
        assert status == 403 and "read-only" in doc["error"]
        assert call(server, "GET", f"/api/jobs/{T}/j", token=None)[0] == 200  # a loopback client
    assert not jobs.is_paused(store, T)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "example.com"])
def test_no_binding_outside_loopback_without_a_token(store, host):
    with pytest.raises(ValueError, match="without a token"):
        StatusServer(store, host, port=0)


def test_hosts_and_tokens():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.8.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")
    with pytest.raises(ValueError, match="at least 16"):
        StatusServer(jobs.open("memory:"), port=0, token="short")
    assert isinstance(JobActions(None), JobActions)


def _serve(tmp_path, *argv):
    url = "sqlite:" + str(tmp_path / "jobs.sqlite")
    jobs.open(url).close()
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.Popen([sys.executable, "-m", "jobsctl", "--store", url, "--json", "serve-status", "--port", "0",
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_serve_status_with_a_token_file(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc = _serve(tmp_path, "--token-file", str(token_file))
    try:
        url = json.loads(proc.stdout.readline())["url"]
        port = int(url.rsplit(":", 1)[1].strip("/"))
        server = type("S", (), {"port": port})
        assert call(server, "POST", f"/api/types/{T}/pause", token=None)[0] == 401
        assert call(server, "POST", f"/api/types/{T}/pause")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(DEADLINE)


def test_serve_status_new_token_and_bad_token_files(tmp_path):
    proc = _serve(tmp_path, "--new-token")
    try:
        first = json.loads(proc.stdout.readline())
        assert len(first["token"]) >= 16
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(DEADLINE)
    missing = _serve(tmp_path, "--token-file", str(tmp_path / "nope"))
    assert missing.wait(DEADLINE) != 0 and "cannot read the token file" in missing.stderr.read()
    (tmp_path / "empty").write_text("\n")
    empty = _serve(tmp_path, "--token-file", str(tmp_path / "empty"))
    assert empty.wait(DEADLINE) != 0 and "is empty" in empty.stderr.read()
    outside = _serve(tmp_path, "--host", "0.0.0.0")
    assert outside.wait(DEADLINE) != 0 and "without a token" in outside.stderr.read()


def dashboard(server) -> str:
    status, _, page = call(server, "GET", "/", token=None)
    assert status == 200
    return page


def test_the_dashboard_offers_the_actions(store, server):
    page = dashboard(server)
    assert 'id="token" type="password"' in page and "sessionStorage" in page
    for action in ("pause", "resume", "retry", "discard", "cancel", "show"):
        assert f'"{action}"' in page
    assert "Authorization: \"Bearer \" + token()" in page and "document.cookie" not in page


def test_the_dashboard_lists_live_workers(store):
    from jobs.observe import workers

    w = workers.new_worker(["t"], 3, interval=5.0)
    workers.register(store, w)
    with StatusServer(store, port=0, min_interval=0, token=TOKEN) as server:
        page = dashboard(server)
    assert "<h2>Live workers</h2>" in page and f"<td>{w.host}/{w.pid}</td>" in page
