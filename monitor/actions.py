"""What the status server lets an operator do, and who may: the ``/api`` routes.

    POST /api/types/{type}/pause | /resume          pause or resume a type
    POST /api/jobs/{type}/{id}/retry                run a failed job again, now
    POST /api/jobs/{type}/{id}/discard              remove a failed job
    POST /api/jobs/{type}/{id}/cancel               remove a job in any state (a running
                                                    one's worker gets Halt)
    GET  /api/jobs/{type}/{id}                      the job: state, data, run, failure

Path segments are percent-encoded (an id may hold ``/``).  Every ``/api`` request needs
``Authorization: Bearer TOKEN`` when the server has a token (401 without the header, 403
with a wrong one); a server without one is read-only (403 on every POST) and serves the
job route to loopback clients only (it binds nothing else: ``StatusServer``).  Bearer
tokens are never sent by a browser on its own, so another site cannot forge a request
(CSRF); a POST whose ``Origin`` is not this server's is refused all the same (403, naming
the Origin).  Another method on a route is 405, with the route's ``Allow``.

What an action does is an :class:`Actions` object's: :class:`JobActions` uses the job
layer alone; the ``jobs`` command passes processors' (``processors.failures.TaskActions``),
whose retry also resets a task's attempts.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import unquote, urlsplit

import jobs
from jobs import get_run_info
from jobs.errors import JobsError

from .documents import job_document

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


class ActionRefused(JobsError):
    """The action does not apply to the job as it is (e.g. retrying a job that did not fail)."""


class JobActions:
    """The actions on store ``db`` with the job layer alone."""

    def __init__(self, db):
        self.db = db

    def pause(self, type: str) -> None:
        jobs.pause(self.db, type)

    def resume(self, type: str) -> None:
        jobs.resume(self.db, type)

    def cancel(self, type: str, job_id: str) -> None:
        jobs.remove(self.db, type, job_id)

    def _failed(self, tr, type: str, job_id: str) -> jobs.JobInfo:
        info = jobs.get_job(tr, type, job_id)
        if get_run_info(tr, type, job_id).failed is None:
            raise ActionRefused(f"job {type}/{job_id} is {info.state}, not failed: only a failed job is retried "
                                "or discarded (cancel removes a job in any state)")
        return info

    def retry(self, type: str, job_id: str) -> None:
        jobs.transactional(lambda tr: jobs.resubmit(tr, self._failed(tr, type, job_id), scheduled_time=0))(self.db)

    def discard(self, type: str, job_id: str) -> None:
        def body(tr):
            self._failed(tr, type, job_id)
            jobs.remove(tr, type, job_id)

        jobs.transactional(body)(self.db)

    def job(self, type: str, job_id: str) -> dict:
        """The job as the dashboard shows it (``documents.job_document``)."""
        return job_document(self.db, type, job_id)


Actions = JobActions  # the interface: a subclass overrides what it does differently

TYPE_ACTIONS = ("pause", "resume")
JOB_ACTIONS = ("retry", "discard", "cancel")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is this machine only."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str | None) -> str | None:
    """The server's token: None, or a str of at least 16 printable characters."""
    if token is None:
        return None
    if not isinstance(token, str) or len(token) < 16 or not token.isprintable() or token != token.strip():
        raise ValueError("a token must be at least 16 printable characters without spaces around them "
                         "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`)")
    return token


def route(method: str, path: str) -> tuple[str, tuple[str, ...]] | None:
    """``(action, arguments)`` of an ``/api`` path, e.g. ``("retry", (type, id))`` for
    ``POST /api/jobs/T/ID/retry`` (``"job"`` for the GET of a job); None when it names
    none.  ValueError for a path under /api that is malformed."""
    parts = [unquote(p) for p in urlsplit(path).path.split("/")[2:]]  # after "/api"
    if any(not p for p in parts):
        raise ValueError("empty path segment")
    if method == "POST" and len(parts) == 3 and parts[0] == "types" and parts[2] in TYPE_ACTIONS:
        return parts[2], (parts[1],)
    if method == "POST" and len(parts) == 4 and parts[0] == "jobs" and parts[3] in JOB_ACTIONS:
        return parts[3], (parts[1], parts[2])
    if method in ("GET", "HEAD") and len(parts) == 3 and parts[0] == "jobs":
        return "job", (parts[1], parts[2])
    return None


def allowed(path: str) -> str | None:
    """The methods of the ``/api`` route ``path`` names, for a request that used another
    (``"POST"`` for an action, ``"GET, HEAD"`` for a job); None when it names none."""
    for method, allow in (("POST", "POST"), ("GET", "GET, HEAD")):
        try:
            if route(method, path) is not None:
                return allow
        except ValueError:
            return None
    return None


def authorised(token: str | None, header: str | None, client_is_local: bool, write: bool) -> int | None:
    """None when the request may go on, else the HTTP status refusing it: 401 (no
    credentials where a token is needed), 403 (a wrong token, or a write to a server
    without a token)."""
    if token is None:
        return 403 if write or not client_is_local else None
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return 401
    return None if hmac.compare_digest(given.strip().encode(), token.encode()) else 403


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a request's ``Origin`` (if it has one) is the server it was sent to."""
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == (host or "").lower()
