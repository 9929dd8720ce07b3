"""The status of a job store over HTTP, for people and for Prometheus (stdlib only):

    /status   the JSON document of ``jobs.observe.status.gather``, as ``jobsctl status --json`` prints it
    /metrics  the same counts as Prometheus gauges (text exposition format 0.0.4; ``metrics.py``)
    /         an HTML dashboard, rendered here and refreshed from /status every 2 s
    /healthz  ``ok`` when a read transaction on the store succeeds, else 503 and the error
    /api/...  an operator's actions (pause, resume, retry, discard, cancel) and one job's
              details, behind a bearer token (``actions.py``)

A gather counts index ranges in several transactions, so it is shared: one runs at a time
and its outcome, failure included, answers every request for ``min_interval`` seconds;
many scrapers cost one gather per interval.  A failed gather is an answer, not a crash:
503 on /status and /, ``jobs_status_up 0`` on /metrics.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from urllib.parse import urlsplit

import orjson

import jobs
from jobs.observe import status
from jobs.engine import run

from . import actions as api
from .dashboard import dashboard_html
from .metrics import metrics_text

log = logging.getLogger("monitor.http")

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"
METRICS = "text/plain; version=0.0.4; charset=utf-8"
ALLOW = "GET, HEAD"  # (and POST under /api)
HEALTH_TIMEOUT_MS = 4000  # an unreachable cluster makes /healthz answer 503, not hang


@dataclass(frozen=True)
class Gathered:
    """The outcome of one gather: ``status``, or ``error`` (what went wrong) when it
    failed; how many ``seconds`` it took and when it ended (``time.monotonic()``)."""

    status: status.Status | None
    error: str | None
    seconds: float
    at: float


class StatusServer:
    """Serves the status of store ``db`` on ``host:port`` (port 0: a free port, see
    ``.port``); ``limit`` running jobs listed per type; a gather younger than
    ``min_interval`` seconds is served again.  ``token``: the bearer token the ``/api``
    routes need (None: read-only, and then only a loopback ``host`` is allowed);
    ``actions``: what they do (default ``actions.JobActions(db)``).  The socket is bound
    here: bad arguments raise ValueError first, then a busy address raises OSError naming
    ``host:port``.  ``start()``/``stop()`` (or ``with``) serve on a daemon thread."""

    def __init__(self, db, host: str = "127.0.0.1", port: int = 8080, *, limit: int = 10,
                 min_interval: float = 1.0, token: str | None = None, actions: api.Actions | None = None):
        if not isinstance(host, str):
            raise ValueError(f"host must be a str, not {host!r}")
        self.token = api.check_token(token)
        if self.token is None and not api.is_loopback(host):
            raise ValueError(f"refusing to serve on {host} without a token: anyone who can reach it could act "
                             "on the store; give a token (jobsctl serve-status --token-file PATH) or serve on 127.0.0.1")
        self.actions = api.JobActions(db) if actions is None else actions
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in 0..65535, not {port!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be an int >= 0, not {limit!r}")
        if isinstance(min_interval, bool) or not isinstance(min_interval, (int, float)) or not min_interval >= 0:
            raise ValueError(f"min_interval must be a number of seconds >= 0, not {min_interval!r}")
        self.db, self.host, self.limit, self.min_interval = db, host, limit, min_interval
        self._gathering = threading.Lock()  # held by the one gather under way
        self._last: Gathered | None = None  # the latest gather's outcome
        self._thread: threading.Thread | None = None
        self._stopped = False
        try:
            self._server = _Server((host, port), self)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve status on {host}:{port}: {exc.strerror or exc}") from exc
        self.port: int = self._server.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> StatusServer:
        """Serve on a daemon thread; returns self.  RuntimeError if started or stopped before."""
        if self._thread is not None or self._stopped:
            raise RuntimeError("a StatusServer starts once")
        self._thread = threading.Thread(target=self._server.serve_forever, name="status-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent.  Requests under way finish on
        their own daemon threads."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._server.shutdown()  # waits for serve_forever to return
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> StatusServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def gathered(self) -> Gathered:
        """The latest gather if it ended less than ``min_interval`` ago, else a new one.
        Requests that queued behind a gather get its outcome instead of starting another."""
        with self._gathering:
            last = self._last
            if last is None or time.monotonic() - last.at >= self.min_interval:
                last = self._last = self._gather()
            return last

    def forget(self) -> None:
        """Drop the latest gather: an action changed the store."""
        with self._gathering:
            self._last = None

    def _gather(self) -> Gathered:
        start = time.monotonic()
        try:
            st, error = status.gather(self.db, limit=self.limit), None
        except Exception as exc:  # noqa: BLE001 - any failure is reported to the client
            log.warning("status gather failed", exc_info=True)
            st, error = None, f"status gather failed: {type(exc).__name__}: {exc}"
        end = time.monotonic()
        return Gathered(st, error, end - start, end)

    def health(self) -> str | None:
        """None if a read transaction on the store succeeds, else what went wrong."""
        try:
            run(self.db, _probe)
        except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
            return f"{type(exc).__name__}: {exc}"
        return None


def _probe(tr) -> None:
    tr.options.set_timeout(HEALTH_TIMEOUT_MS)
    status.probe(tr)


# --- the server ------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a slow client never keeps the process alive

    def __init__(self, address: tuple[str, int], owner: StatusServer):
        self.owner = owner
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer's own server_bind looks the host's name up (getfqdn): a DNS query we
        # do not need, since the name is only used for CGI.
        TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address) -> None:
        """To the log, not stderr; a client that went away is routine."""
        log.debug("request from %s failed", client_address[0], exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "jobs-status"

    def do_GET(self) -> None:
        path = urlsplit(self.path).path  # the query string is ignored
        if path.startswith("/api/"):
            return self._api(self.server.owner)
        route = {"/": self._dashboard, "/status": self._status, "/metrics": self._metrics,
                 "/healthz": self._healthz}.get(path)
        if route is None:
            self._send(404, TEXT, f"not found: {path}; try /, /status, /metrics, /healthz\n")
        else:
            route(self.server.owner)

    do_HEAD = do_GET

    def do_POST(self) -> None:
        if not urlsplit(self.path).path.startswith("/api/"):
            return self._not_allowed()
        self._api(self.server.owner)

    def _api(self, owner: StatusServer) -> None:
        try:
            found = api.route(self.command, self.path)
        except ValueError as exc:
            return self._json(400, {"error": f"bad path {self.path!r}: {exc}"})
        if found is None:
            path, allow = urlsplit(self.path).path, api.allowed(self.path)
            if allow is not None:  # a route, asked with another method
                return self._json(405, {"error": f"method {self.command} not allowed on {path}; use {allow}"},
                                  Allow=allow)
            return self._json(404, {"error": f"no such action: {self.command} {path}"})
        action, args = found
        write = action != "job"
        refused = api.authorised(owner.token, self.headers.get("Authorization"),
                                 api.is_loopback(self.client_address[0]), write)
        if refused is not None:
            reason = "read-only server (no token)" if owner.token is None else "a valid bearer token is needed"
            return self._json(refused, {"error": reason}, **({"WWW-Authenticate": "Bearer"} if refused == 401 else {}))
        origin, host = self.headers.get("Origin"), self.headers.get("Host")
        if write and not api.same_origin(origin, host):
            pages = f"http://{host}" if host else "its own address"
            return self._json(403, {"error": f"the Origin {origin!r} is refused: actions come from this server's "
                                             f"own pages ({pages}) or from clients that send no Origin"})
        self._act(owner, action, args)

    def _act(self, owner: StatusServer, action: str, args: tuple[str, ...]) -> None:
        try:
            out = getattr(owner.actions, action)(*args)
        except jobs.NotFound as exc:
            return self._json(404, {"error": str(exc)})
        except jobs.JobsError as exc:  # the action does not apply to the job as it is
            return self._json(409, {"error": str(exc)})
        except ValueError as exc:
            return self._json(400, {"error": str(exc)})
        if action == "job":
            return self._json(200, out)
        owner.forget()  # the next /status shows what the action changed
        self._json(200, {"done": action, "type": args[0], **({"id": args[1]} if len(args) > 1 else {})})

    def _json(self, code: int, doc, **headers: str) -> None:
        self._send(code, JSON, orjson.dumps(doc), **headers)

    def __getattr__(self, name: str):
        """Every other method (``do_PUT``, ``do_FOO``...): 405 rather than http.server's 501
        (an ``/api`` route's with its own ``Allow``)."""
        if name.startswith("do_"):
            return self._other_method
        raise AttributeError(name)

    def _other_method(self) -> None:
        if urlsplit(self.path).path.startswith("/api/"):
            return self._api(self.server.owner)
        self._not_allowed()

    def _not_allowed(self) -> None:
        self._send(405, TEXT, f"method {self.command} not allowed; use {ALLOW}\n", Allow=ALLOW)

    def _status(self, owner: StatusServer) -> None:
        g = owner.gathered()
        if g.error:
            self._send(503, JSON, orjson.dumps({"error": g.error}))
        else:
            self._send(200, JSON, orjson.dumps(g.status))

    def _metrics(self, owner: StatusServer) -> None:
        self._send(200, METRICS, metrics_text(owner.gathered()))

    def _dashboard(self, owner: StatusServer) -> None:
        g = owner.gathered()
        if g.error:
            self._send(503, TEXT, g.error + "\n")
        else:
            self._send(200, HTML, dashboard_html(g.status))

    def _healthz(self, owner: StatusServer) -> None:
        error = owner.health()
        if error is None:
            self._send(200, TEXT, "ok\n")
        else:
            self._send(503, TEXT, error + "\n")

    def _send(self, code: int, content_type: str, body: str | bytes, **headers: str) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)
