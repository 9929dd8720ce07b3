"""What the ``jobs`` command prints for people: tables, times, jobs, runs and the status
(``--json`` prints the commands' documents instead)."""

from __future__ import annotations

import sys
import time
from datetime import datetime

import orjson

from jobs import checks
from jobs.observe import status as status_mod
from monitor.dashboard import held_text

def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): a failure reason, or a
    name another program stored, must not break a line or a column."""
    return checks.CONTROL_CHARACTERS.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def table(headers: list[str], rows: list[list]) -> str:
    cells = [headers, *[[printable(str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def duration(seconds: float) -> str:
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def when(t: float, now: float) -> str:
    if t == 0:
        return "asap"
    try:
        stamp = datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # (stored by another program: jobs.add refuses it)
        return f"{t:.15g} (seconds since the epoch, not a date)"
    return f"{stamp} (in {duration(t - now)})" if t > now else f"{stamp} ({duration(now - t)} ago)"


def kept_for(period: float | None) -> str:
    return "forever" if period is None else duration(period)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}s"


def short(data: dict, width: int = 60) -> str:
    text = orjson.dumps(data).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def ago(a: status_mod.Activity | None) -> str:
    if a is None:
        return "-"
    return f"~{duration(a.age)} ago"


def human_job(doc: dict) -> str:
    now = time.time()
    head = [["type", printable(doc["type"])], ["id", printable(doc["id"])], ["state", doc["state"]],
            ["scheduled", when(doc["scheduled_time"], now)]]
    if doc.get("priority"):
        head.append(["priority", str(doc["priority"])])
    if doc.get("key") is not None:
        head.append(["key", printable(doc["key"])])
    return "\n".join(f"{k:<10} {v}" for k, v in head + human_run(doc, now)) + f"\ndata       {indented(doc['data'])}"


def indented(data) -> str:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


def human_run(doc: dict, now: float) -> list[list[str]]:
    """``jobsctl show``'s lines on the run: when it was enqueued, started, last active and
    finished (as far as known), worker, lost workers, failure, attempts, last error (with
    its traceback as text: in the data it is one escaped string)."""
    lines = [[name.replace("_", " "), when(at, now)] for name, at in doc.get("times", {}).items()]
    if doc.get("worker"):
        lines.append(["worker", printable(doc["worker"])])
    if doc.get("lost"):
        lost = doc["lost"]
        lines.append(["lost", printable(f"{lost['count']} worker(s); last {lost['worker'] or 'unknown'}, "
                                         f"{when(lost['at'], now)}")])
    if doc.get("failed"):
        lines.append(["failed", printable(f"{when(doc['failed']['at'], now)}: {doc['failed']['reason'] or '-'}")])
    task = doc["data"].get("_task") if isinstance(doc["data"].get("_task"), dict) else {}
    if "attempts" in task:
        lines.append(["attempts", str(task["attempts"])])
    error = task.get("last_error")
    if isinstance(error, dict):
        lines.append(["error", printable(f"{error.get('type')}: {error.get('message')}")])
        if error.get("traceback"):  # as text, each line under the first
            tb = [printable(line) for line in str(error["traceback"]).rstrip().splitlines()]
            lines.append(["traceback", ("\n" + " " * 11).join(tb)])
    carried = task.get("trace")  # the submitter's W3C trace context (processors/tracing.py)
    parent = carried.get("traceparent") if isinstance(carried, dict) else None
    if isinstance(parent, str) and parent.count("-") == 3:
        lines.append(["trace", printable(parent.split("-")[1])])
    return lines


def human_jobs(docs: list[dict]) -> str:
    now = time.time()
    rows = [[d["type"], d["id"], d["state"], when(d["scheduled_time"], now), short(d["data"])] for d in docs]
    return table(["TYPE", "ID", "STATE", "SCHEDULED", "DATA"], rows) if rows else "(no jobs)"


def human_status(st: status_mod.Status) -> str:
    if not st.types:
        return "\n\n".join(["(no job types)", *live_workers(st)])
    rows = [[t.type, seconds(t.timeout), t.pending, t.due,
             "-" if t.oldest_due_age is None else duration(t.oldest_due_age),
             t.running, t.finished, t.failed, t.lost, ago(t.last_change)] for t in st.types]
    out = [table(["TYPE", "TIMEOUT", "PENDING", "DUE", "LONGEST WAIT", "RUNNING", "FINISHED", "FAILED",
                   "LOST", "LAST CHANGE"], rows)]
    bands = [f"{printable(t.type)}: " + ", ".join(f"{b.priority}: {b.pending} ({b.due} due)" for b in t.bands)
             for t in st.types if any(b.priority for b in t.bands)]
    if bands:
        out.append("pending per priority (lower runs first): " + "; ".join(bands))
    paused = [[t.type, "-" if t.paused_since is None else when(t.paused_since, st.now)] for t in st.types if t.paused]
    if paused:
        out.append("paused types: no worker takes their jobs ('jobsctl resume TYPE'):\n"
                   + table(["TYPE", "PAUSED SINCE"], paused))
    over = over_time_limit(st)
    running = [[t.type, r.id + (" (over its time limit)" if (t.type, r.id) in over else ""), ago(r.last_activity)]
               for t in st.types for r in t.running_jobs]
    if running:
        out.append("running jobs, least recently active first:\n"
                   + table(["TYPE", "ID", "LAST ACTIVITY"], running))
    failures = [[t.type, f.id, when(f.at, st.now), f.reason or "-"] for t in st.types for f in t.recent_failures]
    if failures:
        out.append("recent failures, per type ('jobsctl list --failed' lists them all):\n"
                   + table(["TYPE", "ID", "FAILED", "LAST ERROR"], failures))
    if st.schedules:
        out.append("cron schedules ('jobsctl schedules' tells more):\n" + table(
            ["TYPE", "CRON", "NEXT TICK"], [[s.type, f"{s.expression} ({s.tz})", tick(s.next, st.now)]
                                            for s in st.schedules]))
    out += controls(st) + live_workers(st)
    kept = [printable(f"{t.type}: finished {kept_for(t.retention.finished)}, failed {kept_for(t.retention.failed)}")
            for t in st.types if t.retention != status_mod.KEEP_FOREVER]
    if kept:
        out.append("retention (older finished jobs are pruned; other types keep them forever):\n" + "\n".join(kept))
    return "\n\n".join(out)


def limits_used(t: status_mod.TypeStatus) -> str:
    """``running 3/10, started 40/100 per 60s; per key: running 2, rate 5/1s``: the type's
    limits, with how much of them is in use."""
    lim, whole, per_key = t.limits, [], []
    if lim.concurrency is not None:
        whole.append(f"running {t.running_slots}/{lim.concurrency}")
    if lim.rate is not None:
        whole.append(f"started {t.started_in_period}/{lim.rate.count} per {lim.rate.seconds:g}s")
    if lim.key_concurrency is not None:
        per_key.append(f"running {lim.key_concurrency}")
    if lim.key_rate is not None:
        per_key.append(f"rate {lim.key_rate}")
    return "; ".join(([", ".join(whole)] if whole else []) + (["per key: " + ", ".join(per_key)] if per_key else []))


def controls(st: status_mod.Status) -> list[str]:
    """``jobsctl status``'s sections on limits and job keys (none when no type has any)."""
    out = []
    limited = [printable(f"{t.type}: {limits_used(t)}") for t in st.types if t.limits is not None]
    if limited:
        out.append("limits (only jobs started while a limit is set count against it; 'jobsctl limits' lists them):\n"
                   + "\n".join(limited))
    keyed = [printable(f"{t.type}: {k.turns} in turn, {k.asleep} asleep, {k.full} at their limit")
             for t in st.types if (k := t.keys).total]
    if keyed:
        out.append("job keys with pending jobs (each key takes its turn):\n" + "\n".join(keyed))
    busy = [printable(f"{t.type}: {last_hour(t.last_hour)}") for t in st.types if t.last_hour.started or
            t.last_hour.finished or t.last_hour.failed or t.last_hour.retried]
    if busy:
        out.append("last hour (wait: from due to started, within 25%):\n" + "\n".join(busy))
    return out


def last_hour(r) -> str:
    """``120 started, 115 finished, 2 failed, 3 retried; wait p50 12 ms, p99 1.2 s``: runs
    started, and ended as succeeded, failed for good, or failed to run again (shown when
    there are any)."""
    text = f"{r.started} started, {r.finished} finished, {r.failed} failed"
    if r.retried:
        text += f", {r.retried} retried"
    if r.wait_p50 is not None:
        text += f"; wait p50 {wait(r.wait_p50)}, p99 {wait(r.wait_p99)}"
    return text


def wait(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else duration(seconds)


def over_time_limit(st: status_mod.Status) -> set[tuple[str, str]]:
    """``(type, id)`` of the held jobs the live workers said are over their handler's time
    limit (a handler blocked where it cannot be interrupted)."""
    return {(j.type, j.id) for w in st.workers for j in w.held_jobs if j.over_time_limit_since is not None}


def live_workers(st: status_mod.Status) -> list[str]:
    """``jobsctl status``'s section on the live workers (none when there are none)."""
    if not st.workers:
        return []
    rows = [[f"{w.host}/{w.pid}", ",".join(w.types), w.concurrency, held_text(w), f"{duration(st.now - w.heartbeat)} ago"]
            for w in st.workers]
    return [f"live workers ({len(st.workers)}; 'jobsctl workers' tells more):\n"
            + table(["HOST/PID", "TYPES", "LANES", "HELD", "LAST HEARTBEAT"], rows)]


def tick(t: float | None, now: float) -> str:
    """A cron tick; one in the past is due and waits for a processor of its type."""
    return "never" if t is None else when(t, now) + (" (due)" if t <= now else "")


def human_schedules(docs: list[dict]) -> str:
    now = time.time()
    rows = [[d["type"], d["expression"], d["tz"], when(d["last"], now), tick(d["next"], now)] for d in docs]
    return table(["TYPE", "CRON", "TZ", "LAST TICK (OR SET)", "NEXT TICK"], rows) if rows else "(no cron schedules)"


def human_failed(docs: list[dict]) -> str:
    now = time.time()
    rows = [[d["type"], d["id"], when(d["at"], now), d["reason"] or "-"] for d in docs]
    return table(["TYPE", "ID", "FAILED", "LAST ERROR"], rows) if rows else "(no failed jobs)"


def warn(line: str) -> None:
    """``jobsctl: warning: ...`` on stderr: the command went on (exit status 0), but what it
    was given looks wrong; said in --json mode too (stdout holds the document)."""
    print(f"jobsctl: warning: {line}", file=sys.stderr, flush=True)


def say(args, line: str, err: bool = False) -> None:
    """Progress for people; nothing in --json mode (stdout holds one document)."""
    if not args.json:
        print(line, file=sys.stderr if err else sys.stdout, flush=True)


def human_found(found: dict | None) -> str:
    """What ``remove --unreadable`` found naming the job, after "removed TYPE/ID"."""
    if found is None:
        return ""
    n = found["queue_entries"]
    parts = [f"{n} queue entr{'y' if n == 1 else 'ies'}",
             f"running, {found['slots']} running slot(s)" if found["running"] else "not running",
             f"{found['finished']} in the finished index" if found["finished"] else "not in the finished index"]
    return f" (its row could not be read; it had {', '.join(parts)})"


# command -> text for people from the command's JSON document
HUMAN = {
    "add": human_job,
    "show": human_job,
    "remove": lambda d: printable(f"removed {d['removed']['type']}/{d['removed']['id']}" + human_found(d.get("found"))),
    "list": lambda docs: human_failed(docs) if docs and docs[0].get("failed") is True else human_jobs(docs),
    "retry": lambda d: printable(f"retried {d['retried']} failed job(s) of {d['type']}"),
    "discard": lambda d: printable(f"discarded {d['discarded']['type']}/{d['discarded']['id']}"),
    "types": lambda docs: table(["TYPE", "TIMEOUT"], [[d["type"], seconds(d["timeout"])] for d in docs])
    if docs else "(no job types)",
    "set-timeout": lambda d: f"{d['type']}: timeout {seconds(d['timeout'])}",
    "status": human_status,
    "schedules": lambda d: (printable(f"cleared the schedule of {d['cleared']}") if isinstance(d, dict)
                            else human_schedules(d)),
    "migrate": lambda d: "\n".join([printable(f"{name}: migrated from version {v['from']} to {v['to']}")
                                     for name, v in d["layouts"].items() if v["from"] != v["to"]]
                                    or ["nothing to migrate: every layout is at this release's version"]),
    "pause": lambda d: printable(f"paused {d['type']}: no worker takes its jobs until 'jobsctl resume {d['type']}'"),
    "resume": lambda d: printable(f"resumed {d['type']}: workers take its jobs again" if d.get("was_paused", True)
                                  else f"{d['type']} was not paused: nothing to resume (workers take its jobs)"),
    "monitor": lambda d: printable(
        f"stopped; re-enqueued {d['reenqueued']} job(s)" + (f", pruned {d['pruned']}" if d["pruned"] else "")
        + (f", {d['failed_passes']} pass(es) failed" if d["failed_passes"] else "")
        + (f"; rows that cannot be read: {', '.join(d['unreadable'])}" if d["unreadable"] else "")),
    "gc": lambda d: "\n".join([*(printable(loc) for loc in d["deleted"]),
                                f"deleted {len(d['deleted'])} location(s) trashed more than {d['grace']:g}s ago; "
                                f"{d['left']} left in the trash"]),
    "worker": lambda d: "stopped; " + (", ".join(f"{k} {v}" for k, v in sorted(d["stats"].items())) or "no jobs"),
}


