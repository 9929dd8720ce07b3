"""What a job operation costs when it runs now and then, against back to back.

A worker at a steady trickle of jobs, or one of several processes taking turns on two
cores, runs each transaction after a pause, and on a shared machine the processor's
caches have been filled by others meanwhile: the same operation then costs several times
the CPU it costs in a loop.  This measures it, for a bare SQLite transaction and for the
job layer's operations, in one process:

    python -m bench.cold [--n 300] [--gaps 0,1,5,20] [--wait both] [--ops sqlite-add,add,accept+finish]

Before each step the process waits its gap (milliseconds), sleeping or spinning on the
clock (``--wait``: a spin keeps this thread on its core, so what is left is not the cost
of waking up); then the step's CPU time is taken (``time.thread_time``: this thread's,
user and system).  The gaps take turns step by step, so that a machine whose speed drifts
during the run weighs on all of them alike.  Reported: the median and the 90th percentile
of a step's CPU in microseconds per gap, and the median's ratio to the back-to-back one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import jobs

from .instructions import TYPE, BareAdd, prepare_store
from .peers.harness import percentile

WARMUP = 50  # steps run first, not counted (imports, caches, the store's first pages)


def _bare_add(directory: str, _steps: int):
    add = BareAdd(directory)
    return add, add.close


def _add(directory: str, _steps: int):
    db = jobs.open(prepare_store(os.path.join(directory, "store.sqlite"), 0))
    return (lambda i: jobs.add(db, TYPE, f"c{i:09d}")), db.close


def _accept_finish(directory: str, steps: int):
    db = jobs.open(prepare_store(os.path.join(directory, "store.sqlite"), steps))
    return (lambda _i: jobs.finish(db, jobs.accept(db, TYPE, timeout=0))), db.close


# name -> (make(directory, steps) -> (step(i), close()), what a step is)
OPS = {
    "sqlite-add": (_bare_add, "the SQLite statements of an add, bare (bench.instructions' sqlite-add)"),
    "add": (_add, "jobs.add, one per transaction"),
    "accept+finish": (_accept_finish, "jobs.accept then jobs.finish, a transaction each"),
}


def _pause(seconds: float, spin: bool) -> None:
    if not seconds:
        return
    if not spin:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(op: str, gaps: list[float], n: int, spin: bool, directory: str) -> dict[float, list[float]]:
    """CPU seconds of each of ``n`` steps of ``op`` after each gap (seconds)."""
    step, close = OPS[op][0](directory, WARMUP + n * len(gaps))
    try:
        for i in range(WARMUP):
            step(i)
        cpu: dict[float, list[float]] = {gap: [] for gap in gaps}
        i = WARMUP
        for _ in range(n):
            for gap in gaps:
                _pause(gap, spin)
                begun = time.thread_time()
                step(i)
                cpu[gap].append(time.thread_time() - begun)
                i += 1
        return cpu
    finally:
        close()


def summary(cpu: list[float]) -> tuple[float, float]:
    """The median and the 90th percentile of a step's CPU seconds."""
    ordered = sorted(cpu)
    return percentile(ordered, 50), percentile(ordered, 90)


def report(rows: list[tuple[str, str, float, float, float]]) -> str:
    """The table of ``(op, wait, gap, p50, p90)`` rows, with each p50's ratio to the same
    operation's and wait's back-to-back one (a dash without a gap of 0)."""
    out = ["| operation | wait | gap | CPU p50 | CPU p90 | p50 / back to back |",
           "|---|---|---|---|---|---|"]
    base = {(op, wait): p50 for op, wait, gap, p50, _p90 in rows if gap == 0}
    for op, wait, gap, p50, p90 in rows:
        ratio = f"{p50 / base[(op, wait)]:.2f}x" if (op, wait) in base else "-"
        out.append(f"| {op} | {wait} | {gap * 1000:g} ms | {p50 * 1e6:,.0f} us | {p90 * 1e6:,.0f} us | {ratio} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cold")
    p.add_argument("--n", type=int, default=300, help="steps measured per gap (default 300)")
    p.add_argument("--gaps", default="0,1,5,20", help="milliseconds waited before a step, comma-separated")
    p.add_argument("--wait", choices=("sleep", "spin", "both"), default="both")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of: {', '.join(OPS)} (default: all)")
    p.add_argument("--dir", default=None)
    args = p.parse_args(argv)
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        p.error(f"unknown operation(s) {', '.join(map(repr, unknown))}; known: {', '.join(OPS)}")
    try:
        gaps = [float(g) / 1000 for g in args.gaps.split(",") if g.strip()]
    except ValueError:
        p.error(f"--gaps takes milliseconds separated by commas, not {args.gaps!r}")
    if not gaps or any(g < 0 for g in gaps):
        p.error("--gaps needs at least one gap, none negative")
    if args.n < 1:
        p.error("--n must be at least 1")
    waits = ["sleep", "spin"] if args.wait == "both" else [args.wait]
    root = args.dir or tempfile.mkdtemp(prefix="bench-cold-")
    rows = []
    for op in ops:
        for wait in waits:
            directory = tempfile.mkdtemp(prefix=f"{op}-{wait}-", dir=root)
            cpu = measure(op, gaps, args.n, wait == "spin", directory)
            rows.extend((op, wait, gap, *summary(cpu[gap])) for gap in gaps)
    print(report(rows))
    print(json.dumps({"n": args.n, "cpu_us_p50": {f"{op} {wait} {gap * 1000:g}ms": round(p50 * 1e6, 1)
                                                  for op, wait, gap, p50, _p90 in rows}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
