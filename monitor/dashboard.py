"""The dashboard at ``/``: the status as tables, rendered here (it shows without
JavaScript), refreshed from ``/status`` every 2 s by its script, which also offers the
actions of ``actions.py`` (buttons, with the token the operator pastes in: kept in the
tab's sessionStorage, sent as a bearer token, never in a cookie)."""

from __future__ import annotations

import html
import string
import time

from jobs.observe import status

TYPE_HEADERS = ["type", "timeout", "pending", "due", "oldest due wait", "running", "finished", "failed", "lost",
                "last change", "last hour: started / finished / failed (retried)", "finished and failed per minute",
                "start wait p50 / p99", "actions"]
RUNNING_HEADERS = ["type", "id", "last activity", "actions"]
FAILURE_HEADERS = ["type", "id", "failed at", "last error", "actions"]
WORKER_HEADERS = ["host/pid", "types", "lanes", "jobs held", "started", "last heartbeat"]

# The script renders the cells exactly as _seconds, _ago and dashboard_html below do.
PAGE = string.Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>jobsctl status</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { padding: 0.2em 0.8em; border-bottom: 1px solid #ddd; text-align: left; }
td { font-variant-numeric: tabular-nums; }
#note { color: #666; }
button { margin-right: 0.3em; }
#job { background: #f6f6f6; padding: 0.8em; white-space: pre-wrap; }
svg.minutes { background: #fafafa; vertical-align: middle; }
svg.minutes .finished { fill: #3a7; } svg.minutes .failed { fill: #c33; }
</style></head>
<body>
<h1>jobsctl status</h1>
<p id="note">$note</p>
<form id="auth"><label>Token for actions <input id="token" type="password" autocomplete="off" size="30"></label>
<button type="submit">use</button> <span id="acted"></span></form>
<table><thead><tr>$type_headers</tr></thead><tbody id="types">$type_rows</tbody></table>
<h2>Running jobs, least recently active first</h2>
<table><thead><tr>$running_headers</tr></thead><tbody id="running">$running_rows</tbody></table>
<h2>Recent failures, most recent first</h2>
<table><thead><tr>$failure_headers</tr></thead><tbody id="failures">$failure_rows</tbody></table>
<h2>Live workers</h2>
<table><thead><tr>$worker_headers</tr></thead><tbody id="workers">$worker_rows</tbody></table>
<pre id="job" hidden></pre>
<script>
const secs = v => v === null ? "-" : v.toFixed(1) + " s";
const hour = h => h.started + " / " + h.finished + " / " + h.failed + (h.retried ? " (" + h.retried + " retried)" : "");
const wait = s => s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(1) + " s";
const waits = h => h.wait_p50 === null ? "-" : wait(h.wait_p50) + " / " + wait(h.wait_p99);
const when = t => new Date(t * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC";
const ago = a => a === null ? "-" : "~" + a.age.toFixed(1) + " s ago";
const heldText = w => {  // (as _held: the jobs held, and how many are over their time limit)
  const over = (w.held_jobs || []).filter(j => j.over_time_limit_since !== null && j.over_time_limit_since !== undefined).length;
  return over ? w.held + " (" + over + " over time limit)" : String(w.held);
};
// The last hour per minute as bars (as _minutes_svg draws them): finished, failed on top.
function minutes(rows, now) {
  const ns = "http://www.w3.org/2000/svg", svg = document.createElementNS(ns, "svg");
  const top = Math.max(1, ...rows.map(([, , f, x]) => f + x));
  svg.setAttribute("class", "minutes"); svg.setAttribute("width", $width); svg.setAttribute("height", $height);
  for (const [start, , finished, failed] of rows) {
    const x = $width - $bar * (Math.floor(now / 60) - Math.floor(start / 60) + 1);
    let y = $height;
    for (const [n, kind] of [[finished, "finished"], [failed, "failed"]]) {
      if (x < 0 || !n) continue;
      const h = Math.max(1, Math.round(n / top * $height)), r = document.createElementNS(ns, "rect");
      y -= h;
      Object.entries({x, y, width: $bar - 1, height: h, class: kind}).forEach(([k, v]) => r.setAttribute(k, v));
      r.append(Object.assign(document.createElementNS(ns, "title"), {textContent: n + " " + kind}));
      svg.append(r);
    }
  }
  return svg;
}
// A cell is text, or a list of [label, action, type, id] buttons (id: null for a type's).
function fill(id, rows) {
  document.getElementById(id).replaceChildren(...rows.map(cells => {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = tr.insertCell();
      if (c instanceof Node) { td.append(c); continue; }
      if (!Array.isArray(c)) { td.textContent = c; continue; }
      for (const [label, action, type, job] of c) {
        const b = document.createElement("button");
        b.textContent = label;
        b.dataset.action = action;
        b.onclick = () => act(action, type, job);
        td.append(b);
      }
    }
    return tr;
  }));
}
const token = () => sessionStorage.getItem("jobs-token") || "";
document.getElementById("auth").onsubmit = e => {
  e.preventDefault();
  sessionStorage.setItem("jobs-token", document.getElementById("token").value.trim());
  document.getElementById("acted").textContent = "token set for this tab";
};
const path = (type, job) => "api/" + (job === null ? "types/" + encodeURIComponent(type)
                                                   : "jobs/" + encodeURIComponent(type) + "/" + encodeURIComponent(job));
async function act(action, type, job) {
  const out = document.getElementById("acted");
  try {
    if (action === "show") {
      const r = await fetch(path(type, job), {headers: {Authorization: "Bearer " + token()}, cache: "no-store"});
      const doc = await r.json();
      if (!r.ok) throw new Error(doc.error);
      const box = document.getElementById("job");
      box.textContent = JSON.stringify(doc, null, 2);
      box.hidden = false;
      return;
    }
    const r = await fetch(path(type, job) + "/" + action, {method: "POST", headers: {Authorization: "Bearer " + token()}});
    const doc = await r.json();
    if (!r.ok) throw new Error(doc.error);
    out.textContent = action + " " + type + (job === null ? "" : "/" + job) + ": done";
    refresh();
  } catch (e) {
    out.textContent = action + " failed: " + e.message;
  }
}
async function refresh() {
  const note = document.getElementById("note");
  try {
    const r = await fetch("status", {cache: "no-store"});
    const s = await r.json();
    if (!r.ok) throw new Error(s.error);
    fill("types", s.types.map(t => [t.type + (t.paused ? " (paused)" : ""), secs(t.timeout), t.pending, t.due, secs(t.oldest_due_age),
                                    t.running, t.finished, t.failed, t.lost, ago(t.last_change),
                                    hour(t.last_hour), minutes(t.last_hour.minutes, s.now), waits(t.last_hour),
                                    [t.paused ? ["resume", "resume", t.type, null] : ["pause", "pause", t.type, null]]]));
    fill("running", s.types.flatMap(t => t.running_jobs.map(j => [t.type, j.id, ago(j.last_activity),
                                    [["show", "show", t.type, j.id], ["cancel", "cancel", t.type, j.id]]])));
    fill("failures", s.types.flatMap(t => t.recent_failures.map(f => [t.type, f.id, f.at, f.reason ?? "-"]))
                      .sort((a, b) => b[2] - a[2]).map(([ty, id, at, r]) => [ty, id, when(at), r,
                        [["show", "show", ty, id], ["retry", "retry", ty, id], ["discard", "discard", ty, id]]]));
    fill("workers", (s.workers || []).map(w => [w.host + "/" + w.pid, w.types.join(", "), w.concurrency, heldText(w),
                                                 when(w.started), "~" + (s.now - w.heartbeat).toFixed(1) + " s ago"]));
    note.textContent = "updated " + new Date(s.now * 1000).toLocaleTimeString();
  } catch (e) {
    note.textContent = "refresh failed: " + e.message;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body></html>
""")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _ago(a: status.Activity | None) -> str:
    if a is None:
        return "-"
    return f"~{a.age:.1f} s ago"


def _hour(h) -> str:
    """``started / finished / failed``, and the retried runs when there are any (as the
    script's ``hour``)."""
    return f"{h.started} / {h.finished} / {h.failed}" + (f" ({h.retried} retried)" if h.retried else "")


def _wait(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _waits(h) -> str:
    return "-" if h.wait_p50 is None else f"{_wait(h.wait_p50)} / {_wait(h.wait_p99)}"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


class _Markup(str):
    """A cell that is HTML already (made here from numbers), not text to escape."""


def _cell(c) -> str:
    return c if isinstance(c, _Markup) else html.escape(str(c))


def _rows(rows: list[list]) -> str:
    return "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)


BAR, WIDTH, HEIGHT = 2, 120, 24  # one bar of BAR pixels per minute: the last WIDTH / BAR minutes


def _minutes_svg(minutes: tuple, now: float) -> _Markup:
    """The last hour per minute as bars: finished, and failed on top (the script's
    ``minutes`` draws the same)."""
    top = max([1] + [m[2] + m[3] for m in minutes])
    bars = []
    for start, _started, finished, failed, *_retried in minutes:
        x = WIDTH - BAR * (int(now // 60) - int(start // 60) + 1)
        y = HEIGHT
        for n, kind in ((finished, "finished"), (failed, "failed")):
            if x < 0 or not n:
                continue
            h = max(1, round(n / top * HEIGHT))
            y -= h
            bars.append(f'<rect x="{x}" y="{y}" width="{BAR - 1}" height="{h}" class="{kind}">'
                        f"<title>{n} {kind}</title></rect>")
    return _Markup(f'<svg class="minutes" width="{WIDTH}" height="{HEIGHT}">{"".join(bars)}</svg>')


def held_text(w) -> str:
    """A worker's jobs held, and how many are over their time limit (the page's heldText
    too; ``jobsctl status``'s)."""
    over = w.over_time_limit()
    return f"{w.held} ({over} over time limit)" if over else str(w.held)


def dashboard_html(st: status.Status) -> str:
    """The dashboard with ``st`` in it, so that it shows the status without JavaScript
    (the script adds the actions' buttons)."""
    types = [[t.type + (" (paused)" if t.paused else ""), _seconds(t.timeout), t.pending, t.due, _seconds(t.oldest_due_age), t.running,
              t.finished, t.failed, t.lost, _ago(t.last_change), _hour(t.last_hour),
              _minutes_svg(t.last_hour.minutes, st.now), _waits(t.last_hour), ""]
             for t in st.types]
    running = [[t.type, r.id, _ago(r.last_activity), ""] for t in st.types for r in t.running_jobs]
    recent = sorted(((f.at, t.type, f) for t in st.types for f in t.recent_failures), key=lambda e: -e[0])
    failures = [[type, f.id, _when(f.at), f.reason or "-", ""] for _at, type, f in recent]
    return PAGE.substitute(
        width=WIDTH, height=HEIGHT, bar=BAR,
        note=html.escape("updated " + time.strftime("%H:%M:%S", time.localtime(st.now))),
        type_headers="".join(f"<th>{h}</th>" for h in TYPE_HEADERS),
        running_headers="".join(f"<th>{h}</th>" for h in RUNNING_HEADERS),
        failure_headers="".join(f"<th>{h}</th>" for h in FAILURE_HEADERS),
        type_rows=_rows(types),
        running_rows=_rows(running),
        failure_rows=_rows(failures),
        worker_headers="".join(f"<th>{h}</th>" for h in WORKER_HEADERS),
        worker_rows=_rows([[f"{w.host}/{w.pid}", ", ".join(w.types), w.concurrency, held_text(w), _when(w.started),
                            f"~{st.now - w.heartbeat:.1f} s ago"] for w in st.workers]),
    )


