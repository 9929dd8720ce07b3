"""The report of ``python -m bench.fairness``: its table and the one-line summary the
docs/benchmarks.md quotes (what the columns mean: ``bench/fairness.py``)."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
from typing import TYPE_CHECKING

from bench import bench_engine

if TYPE_CHECKING:
    from bench.fairness import Scenario

INF = float("inf")


def _ms(s: float) -> str:
    return f"{s * 1000:,.1f}"


def _p50(values):
    return statistics.median_low(values)


def _delays(sc: Scenario) -> list[float]:
    """B's start delays, sorted; a run not started counts as infinite."""
    return sorted(r.delay_s if r.delay_s is not None else INF for r in sc.runs)


def _delay_cell(v: float, cap: float) -> str:
    return f"> {cap:g} s (not started)" if v == INF else f"{_ms(v)} ms"


def _row(sc: Scenario, cap: float) -> str:
    label = "keys A and B (fair turns)" if sc.keyed else "no keys (type queue, B's id after A's)"
    if not sc.runs:
        return f"| {label} |" + " – |" * 8
    delays, pick, accept = _delays(sc), sc.pick_s, sc.accept_s
    med = _p50(delays)
    if pick is None:
        picks = pick_cell = "–"
    else:
        picks = f"> {cap / pick:,.0f}" if med == INF else f"{med / pick:,.1f}"
        pick_cell = f"{_ms(pick)} ms ({1 / pick:,.0f}/s)"
        if accept is not None:
            pick_cell += f"; an accept call {_ms(accept)} ms"
    counted = [r for r in sc.runs if r.a_meanwhile is not None]
    if counted:
        meanwhile = [r.a_meanwhile for r in counted]
        surely = f"{max(r.a_surely for r in counted):,}"
        meanwhile_cell = f"{_p50(meanwhile):,} / {max(meanwhile):,}"
    else:
        surely = meanwhile_cell = "–"
    return (f"| {label} | {_p50([r.pending_a for r in sc.runs]):,} | {_delay_cell(med, cap)} | "
            f"{_delay_cell(delays[-1], cap)} | {_ms(_p50([r.add_s for r in sc.runs]))} ms | {picks} | "
            f"{pick_cell} | {meanwhile_cell} | {surely} |")


def summary(keyed: Scenario, unkeyed: Scenario, args) -> str:
    """One line for docs/benchmarks.md."""
    pending = f"{_p50([r.pending_a for r in keyed.runs]):,}" if keyed.runs else "?"
    started = [r for r in keyed.runs if r.delay_s is not None]
    if not started:
        head = f"key B's first job did not start within {args.cap:g} s while key A had {pending} pending"
    else:
        picks = _p50([r.a_meanwhile for r in started])
        head = (f"key B's first job started after {picks} pick{'' if picks == 1 else 's'} of A "
                f"({_ms(_p50(_delays(keyed)))} ms from its add, p50 of {len(keyed.runs)}) "
                f"while key A had {pending} pending")
    delays = _delays(unkeyed)
    if not delays:
        return head + "."
    med = _p50(delays)
    if med != INF:
        tail = f"without keys it waited {med:,.1f} s"
    else:
        not_started = [r for r in unkeyed.runs if r.delay_s is None]
        tail = f"without keys it had not started after {args.cap:g} s"
        if len(not_started) < len(unkeyed.runs):
            tail += f" in {len(not_started)} of {len(unkeyed.runs)} runs"
        ahead, pick = _p50([r.pending_a for r in not_started]), unkeyed.pick_s
        if pick is not None:
            tail += f" ({ahead:,} jobs ahead: about {ahead * pick:,.0f} s at the pick rate measured)"
    return f"{head}; {tail}."


def report(scenarios: list[Scenario], args, where: str) -> str:
    keyed, unkeyed = scenarios
    out = [
        f"Machine: {os.cpu_count()} CPUs ({bench_engine._cpu_model()}), {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        f"store: {where}.",
        f"{args.flood:,} pending jobs of key A, {args.workers} worker process"
        f"{'es' if args.workers > 1 else ''} (accept + finish of no-op jobs), then one job of key B, "
        f"{args.repeat} run{'s' if args.repeat > 1 else ''} per scenario (up to {args.lead:g} s of A before "
        f"each); a B job not started within {args.cap:g} s is given up.",
        "B's start delay: from the start of its add call (the add's commit included) until a worker's "
        "accept returned it. A jobs started meanwhile: accepts that returned after B's add committed and "
        "before B's accept returned; surely while B waited: of those, accept calls begun after the add "
        "returned that returned before B's accept call began.",
        "",
        "| scenario | A pending at B's add | B's start delay p50 | max | B's add call p50 | delay in picks "
        "(p50) | time between picks | A jobs started meanwhile p50 / max | surely while B waited, max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    out += [_row(sc, args.cap) for sc in scenarios]
    out += ["", summary(keyed, unkeyed, args)]
    return "\n".join(out)


