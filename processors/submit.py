"""``submit(db, type, params)``: enqueue a task and get a future of its result.

Client-only: submitting starts no worker machinery (no accept loop, no monitor); the
future follows the job through one subscription (one notifier watch per type per process,
however many futures).  A processor somewhere runs the job; its handler's result resolves
the future, or ``TaskFailed`` once the job finished after its last attempt.
"""

from __future__ import annotations

import hashlib
import time
import uuid

import anyio
import orjson

import jobs
import jobs.aio
from jobs import LayoutError, StoreError, checks, prefixes
from jobs.engine import run, value_of
from jobs.layouts import Layout

from . import behaviors, tracing
from .errors import TaskFailed


# ("processors", "submissions", type, job_id) -> nonce of the last submit that enqueued the
# job under an explicit or unique id (16 bytes; one key per such id).
# ("processors", "submissions", None, "layout") -> (LAYOUT.version,) tuple-packed
LAYOUT = Layout("submissions", prefixes.SUBMISSIONS, 1, error=StoreError, newer=LayoutError)
SUBMISSIONS = LAYOUT.space

# The type timeout (heartbeat timeout) submit() declares for a type that has none yet (no
# processor of the type ever started): the job layer takes no job of a type without one.
# A processor's ``@handler(type, timeout=...)`` replaces it as the processor starts.
DEFAULT_TYPE_TIMEOUT = 60.0


def task_id(type: str, params: dict | None) -> str:
    """A deterministic job id for ``params`` of ``type``: the same task always gets the
    same id, so a unique task can't be enqueued twice (key order does not matter)."""
    checks.name(type, "type")
    canonical = orjson.dumps(params or {}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(type.encode() + b"\0" + canonical).hexdigest()[:32]


def submit(db, type: str, params: dict | None = None, *, job_id: str | None = None, unique: bool = False,
           at: float = 0, priority: int = 0, key: str | None = None) -> "TaskFuture":
    """Enqueue a task of ``type`` with ``params`` (a JSON object) to run at ``at`` (seconds
    since the epoch; 0: now) with ``priority`` (lower first, as ``jobs.add``) under the job
    key ``key`` (a tenant: keys take turns and have their own limits, as ``jobs.add``), and
    return its TaskFuture; retries keep the priority and the key.

    ``job_id``: the id to use (default: a random one); ``unique=True`` derives it from the
    params (:func:`task_id`).  With an explicit or unique id, a task of that id that is
    still pending or running is joined, not enqueued again; a finished one runs again with
    the new params.  A type no processor has declared yet (it has no type timeout) gets
    ``DEFAULT_TYPE_TIMEOUT``, in the transaction of the add: a task can be submitted before
    any worker of its type ever ran, and runs once one starts (whose handler's
    ``timeout=`` then replaces it).  JobDataError for params that are not a JSON object."""
    if job_id is not None and unique:
        raise ValueError("submit() takes job_id or unique=True, not both")
    checks.priority(priority)
    if key is not None:
        checks.name(key, "key", new=True)
    params = {} if params is None else params
    if isinstance(params, dict) and behaviors.TASK_KEY in params:
        raise ValueError(f"params may not use the reserved key {behaviors.TASK_KEY!r}")
    if unique:
        job_id = task_id(type, params)
    given = job_id is not None
    job_id = uuid.uuid4().hex if job_id is None else job_id
    with tracing.enqueuing(type, job_id, key) as traced:  # (the submit span, if tracing)
        if not _enqueue(db, type, job_id, traced.carry(params), given, at=at, priority=priority, key=key):
            traced.joined()
    return TaskFuture(db, type, job_id)


def _enqueue(db, type: str, job_id: str, data, given: bool, *, at: float, priority: int, key: str | None) -> bool:
    """Add the job with ``data`` unless a run of it is pending or running (``given``: an
    explicit or unique id); False when it joined that run instead."""
    mark = SUBMISSIONS.pack((type, job_id))
    nonce = uuid.uuid4().bytes

    def body(tr) -> bool:
        # A retry after commit_unknown_result (1021) must not enqueue a second run, even if
        # the first already ran and finished meanwhile: the submission's nonce, written
        # with the add, tells whether an earlier attempt committed.
        if given:
            LAYOUT.check(tr)
            if value_of(tr.get(mark)) == nonce:
                return True
        try:
            state = jobs.get_job_state(tr, type, job_id)
        except jobs.NotFound:
            state = None
        if state is not None and (not given or state in ("pending", "running")):
            return not given  # a fresh random id exists only if our add committed; else join the task
        jobs.add(tr, type, job_id, data, scheduled_time=at, priority=priority, key=key,
                 type_timeout=DEFAULT_TYPE_TIMEOUT)
        if given:
            LAYOUT.ensure(tr)
            tr.set(mark, nonce)
        return True

    return run(db, body)


async def asubmit(db, type: str, params: dict | None = None, **kwargs) -> "TaskFuture":
    """Async :func:`submit` (the enqueueing runs in a worker thread)."""
    return await anyio.to_thread.run_sync(lambda: submit(db, type, params, **kwargs))


class TaskFuture:
    """The outcome of one submitted task: ``result(timeout)`` blocks, ``await future``
    waits in anyio code.  Both return the handler's result (the finished job's data) or
    raise TaskFailed (error after the last attempt) or NotFound (the job was removed)."""

    def __init__(self, db, type: str, job_id: str):
        self.db, self.type, self.job_id = db, type, job_id
        self._sub = jobs.subscribe(db, type, job_id)

    def done(self) -> bool:
        """The task ended (its outcome is known), or this future stopped following it."""
        return not self._sub.active

    def _outcome(self, state: str, data: dict | None) -> dict:
        if state == "not_found":
            raise jobs.NotFound(f"task {self.type}/{self.job_id} was removed before it finished")
        if state != "finished":  # the subscription ended early: cancel(), or a closed store
            raise jobs.JobsError(f"task {self.type}/{self.job_id} is no longer followed (last seen {state})")
        error = behaviors.failed(data or {})
        if error is not None:
            raise TaskFailed(self.type, self.job_id, error)
        return data

    def _left(self, deadline: float | None, timeout) -> float | None:
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"task {self.type}/{self.job_id} did not finish within {timeout} s")
        return left

    def _deadline(self, timeout) -> float | None:
        return None if timeout is None else time.monotonic() + checks.seconds(timeout, "timeout")

    def result(self, timeout: float | None = None) -> dict:
        """Block until the task ends (``timeout`` seconds at most: TimeoutError)."""
        deadline = self._deadline(timeout)
        while self._sub.active:
            jobs.wait(self._sub, self._left(deadline, timeout), state="finished")
        return self._outcome(self._sub.state, self._sub.data)

    async def aresult(self, timeout: float | None = None) -> dict:
        """Async :meth:`result` (cancellable)."""
        deadline = self._deadline(timeout)
        while self._sub.active:
            await jobs.aio.wait(self._sub, self._left(deadline, timeout), state="finished")
        return self._outcome(self._sub.state, self._sub.data)

    def __await__(self):
        return self.aresult().__await__()

    def cancel(self) -> None:
        """Stop following the task (the task itself still runs)."""
        jobs.unsubscribe(self._sub)

    def __repr__(self) -> str:
        return f"<TaskFuture {self.type}/{self.job_id} {self._sub.state}>"
