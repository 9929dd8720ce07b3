"""Fair turns between job keys, measured: how long a lone job of key B waits to start while
key A floods the same type, against the same scenario without keys.

    python -m bench.fairness                  # defaults: 100,000 A jobs, 4 workers, 3 runs
    python -m bench.fairness --flood 300 --workers 2 --repeat 1     # a smoke run
    python -m bench.fairness --store sqlite:/some/disk/fair.sqlite --cap 60

Each scenario fills a type with ``--flood`` pending jobs of key A (bulk adds, 1000 per
transaction), starts ``--workers`` worker processes (a bare loop: ``accept``, then
``finish`` of a no-op job), waits until they run steadily, then ``--repeat`` times: lets
them drain A for ``--lead`` s (less for a small flood; the pick rate is counted there),
adds one job of key B and waits until a worker accepted it, at most ``--cap`` s.

* keyed: A's jobs and B's job carry their keys (``add(..., key="A")``): accept serves the
  keys in turn, and a key coming in takes the lowest turn.
* unkeyed: the same jobs without keys, all at ``scheduled_time=0`` in the type's queue,
  B's id after A's (as time-ordered ids are): B waits behind what is left of A.  A B job
  still pending at the cap is removed (it is reported as not started) before the next run.

Reported per scenario: A's jobs pending when B's job was added; B's start delay (from the
start of its ``add`` call, commit included, until ``accept`` returned it in a worker; p50
and max over the runs), and how much of it the add call took; the mean time between picks
(the inverse of the workers' accepts/s in the lead-ins), so that the delay reads as picks
(a pick of one worker takes one accept call, so a delay of a few picks' time is the
workers' own pace, not waiting), and the median accept call; the A jobs started
meanwhile, counted from the workers' accept times: accepts that returned after B's add
committed and before B's accept returned (accepts already under way when B came
included); and, of those, the ones that surely picked A while B waited in the rotation:
begun after B's add returned, returned before B's accept call began.  Fair turns allow at
most one such pick (the next worker finds B at the lowest turn); the first count may be a
few more on a busy machine, since a worker's timestamps lag its commits.  Times are wall
clock (``time.time()``) in every process of one machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue as queue_mod
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobs  # noqa: E402
from bench import bench_engine, fairness_report  # noqa: E402

FILL_BATCH = 1000  # adds per transaction when filling the flood
A_ID = "a-{:09d}"
B_ID = "b-{:03d}"  # sorts after every A id: in the type's queue, B waits behind A
STEADY_SECS = 1.0  # the workers run this long (after their first accept) before the first run
READY_TIMEOUT = 120.0  # worker processes starting up
JOIN_TIMEOUT = 10.0  # worker processes stopping


# --- the worker processes -------------------------------------------------------------------


def worker(url: str, type: str, stop, ready, out) -> None:
    """Accept and finish no-op jobs of ``type`` until ``stop`` is set; report every accept
    as ``(job id, when the accept call began, when it returned)`` on ``out``."""
    db = jobs.open(url)
    jobs.get_type_timeout(db, type)  # open the store before reporting ready
    ready.put(os.getpid())
    try:
        while not stop.is_set():
            began = time.time()
            job = jobs.accept(db, type, timeout=0.2)
            returned = time.time()
            if job is None:
                continue
            out.put((job.id, began, returned))
            try:
                jobs.finish(db, job)
            except jobs.Halt:  # B's job removed at the cap just as it was accepted
                pass
    finally:
        jobs.store.close(db)


class Collector:
    """The accepts the workers report, gathered by a thread of this process."""

    def __init__(self, out):
        self.out = out
        self.accepts: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self.out.get(timeout=0.05)
            except queue_mod.Empty:
                continue
            except (EOFError, OSError):
                return
            with self.lock:
                self.accepts.append(item)

    def snapshot(self) -> list[tuple[str, float, float]]:
        with self.lock:
            return list(self.accepts)

    def count(self) -> int:
        with self.lock:
            return len(self.accepts)

    def find(self, job_id: str):
        with self.lock:
            for item in reversed(self.accepts):
                if item[0] == job_id:
                    return item
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# --- one scenario ---------------------------------------------------------------------------


@dataclass
class Run:
    pending_a: int  # A's jobs pending when B's job was added
    lead_accepts: int  # A accepts in the lead-in before the add
    lead_secs: float
    accept_s: float | None  # median time of an accept call in the lead-in
    add_s: float  # B's add call (its commit included)
    delay_s: float | None = None  # from the start of B's add to B's accept; None: not started
    a_meanwhile: int | None = None  # A accepts returned between B's add commit and B's accept
    a_surely: int | None = None  # A accepts begun after B's add returned, returned before B's began


@dataclass
class Scenario:
    name: str
    keyed: bool
    flood: int
    fill_s: float = 0.0
    runs: list[Run] = field(default_factory=list)

    def _flooded(self) -> list[Run]:
        """The runs whose lead-in A never ran dry in."""
        return [r for r in self.runs if r.pending_a > 0 and r.lead_accepts]

    @property
    def pick_s(self) -> float | None:
        """Mean time between picks in the lead-ins (None: no such lead-in)."""
        runs = self._flooded()
        n = sum(r.lead_accepts for r in runs)
        return sum(r.lead_secs for r in runs) / n if n else None

    @property
    def accept_s(self) -> float | None:
        """Median time of one accept call in the lead-ins (one worker's part of a pick)."""
        values = [r.accept_s for r in self._flooded() if r.accept_s is not None]
        return statistics.median(values) if values else None


def fill(db, type: str, n: int, key: str | None) -> float:
    """Add ``n`` jobs of ``key`` to ``type``, FILL_BATCH per transaction; seconds taken."""

    @jobs.transactional
    def batch(tr, lo, hi):
        for i in range(lo, hi):
            jobs.add(tr, type, A_ID.format(i), key=key)

    start = time.perf_counter()
    for lo in range(0, n, FILL_BATCH):
        batch(db, lo, min(n, lo + FILL_BATCH))
    return time.perf_counter() - start


def _check_alive(procs) -> None:
    dead = [p for p in procs if not p.is_alive()]
    if dead:
        raise RuntimeError(f"worker process(es) exited early, exit codes {[p.exitcode for p in dead]}")


def _stop_workers(procs, stop) -> None:
    stop.set()
    deadline = time.monotonic() + JOIN_TIMEOUT
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=JOIN_TIMEOUT)


def scenario(url: str, type: str, keyed: bool, args) -> Scenario:
    """One scenario on a store where ``type`` is new: fill, start the workers, measure."""
    result = Scenario("keyed" if keyed else "unkeyed", keyed, args.flood)
    key_a, key_b = ("A", "B") if keyed else (None, None)
    db = jobs.open(url)
    try:
        jobs.set_type_timeout(db, type, 3600)
        result.fill_s = fill(db, type, args.flood, key_a)
        print(f"  {result.name}: {args.flood:,} A jobs added in {result.fill_s:.1f} s", file=sys.stderr, flush=True)

        ctx = multiprocessing.get_context("spawn")
        stop, ready, out = ctx.Event(), ctx.Queue(), ctx.Queue()
        procs = [ctx.Process(target=worker, args=(url, type, stop, ready, out), daemon=True)
                 for _ in range(args.workers)]
        collector = None
        try:
            for p in procs:
                p.start()
            for _ in procs:
                ready.get(timeout=READY_TIMEOUT)
            collector = Collector(out)
            _wait_steady(collector, procs, args)
            for r in range(args.repeat):
                run = _one_run(db, type, key_b, r, collector, procs, args)
                result.runs.append(run)
                shown = f"{run.delay_s * 1000:,.1f} ms" if run.delay_s is not None else f"not started in {args.cap:g} s"
                meanwhile = "" if run.a_meanwhile is None else f", {run.a_meanwhile} A jobs started meanwhile"
                print(f"  {result.name}: run {r + 1}/{args.repeat}: {run.pending_a:,} A pending, "
                      f"B {shown}{meanwhile}", file=sys.stderr, flush=True)
        finally:
            _stop_workers(procs, stop)
            if collector is not None:
                collector.close()
            for q in (ready, out):
                q.cancel_join_thread()
                q.close()
    finally:
        jobs.store.close(db)
    return result


def _share(args) -> int:
    """Accepts that end the warm-up or a lead-in early, so that a small flood lasts."""
    return max(1, args.flood // (4 * args.repeat))


def _wait_steady(collector: Collector, procs, args) -> None:
    """Until the workers have run STEADY_SECS since their first accept, or taken a share of
    the flood (bounded)."""
    deadline = time.monotonic() + READY_TIMEOUT
    first = None
    while time.monotonic() < deadline:
        _check_alive(procs)
        if first is None and collector.count():
            first = time.monotonic()
        if first is not None and (time.monotonic() - first >= STEADY_SECS or collector.count() >= _share(args)):
            return
        time.sleep(0.02)
    raise RuntimeError(f"the workers accepted nothing within {READY_TIMEOUT:g} s")


def _one_run(db, type: str, key_b: str | None, r: int, collector: Collector, procs, args) -> Run:
    lead_start = time.time()
    lead_end, before = time.monotonic() + args.lead, collector.count()
    while time.monotonic() < lead_end and collector.count() - before < _share(args):
        _check_alive(procs)
        time.sleep(0.005)
    pending_a = jobs.pending_count(db, type)
    add_began = time.time()
    b_id = B_ID.format(r)
    jobs.add(db, type, b_id, key=key_b)
    added = time.time()
    lead = [ret - b for _id, b, ret in collector.snapshot() if lead_start <= ret < add_began]

    deadline = time.monotonic() + args.cap
    seen = None
    while seen is None and time.monotonic() < deadline:
        _check_alive(procs)
        time.sleep(0.002)
        seen = collector.find(b_id)
    if seen is None:
        try:
            jobs.remove(db, type, b_id)  # so that the next run's B does not find it ahead
        except jobs.NotFound:
            pass
        grace = time.monotonic() + 1.0  # an accept that returned just before the remove
        while seen is None and time.monotonic() < grace:
            time.sleep(0.01)
            seen = collector.find(b_id)
    run = Run(pending_a, len(lead), add_began - lead_start, statistics.median(lead) if lead else None,
              added - add_began)
    if seen is not None:
        _id, b_began, started = seen
        run.delay_s = started - add_began
        between = [(b, ret) for job_id, b, ret in collector.snapshot()
                   if job_id.startswith("a-") and added < ret < started]
        run.a_meanwhile = len(between)
        run.a_surely = sum(1 for b, ret in between if b > added and ret < b_began)
    return run


# --- running ---------------------------------------------------------------------------------


def run(args, directory: str | None) -> list[Scenario]:
    """Both scenarios: in fresh files of ``directory``, or under new types of ``args.store``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = []
    for keyed in (True, False):
        name = "keyed" if keyed else "unkeyed"
        if directory is not None:
            url, type = "sqlite:" + os.path.join(directory, f"{name}.sqlite"), "fair"
        else:
            url, type = args.store, f"fair-{name}-{stamp}"
        results.append(scenario(url, type, keyed, args))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fairness", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--flood", type=int, default=100_000, help="pending jobs of key A (default 100,000)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="B jobs per scenario, one after the other (default 3)")
    parser.add_argument("--cap", type=float, default=20.0,
                        help="seconds to wait for B's job before giving it up (default 20)")
    parser.add_argument("--lead", type=float, default=1.0,
                        help="seconds the workers drain A before each B job; the pick rate is counted there (1)")
    parser.add_argument("--store", help="store URL, e.g. sqlite:PATH (new types in it, left there; "
                                        "default: fresh SQLite files in a temporary directory)")
    args = parser.parse_args(argv)
    if min(args.flood, args.workers, args.repeat) < 1:
        parser.error("--flood, --workers and --repeat must be at least 1")
    if args.cap <= 0 or args.lead <= 0:
        parser.error("--cap and --lead must be positive")

    directory = None if args.store else tempfile.mkdtemp(prefix="jobs-fairness-")
    where = args.store or f"fresh SQLite files on {bench_engine._filesystem(directory)} ({directory})"
    try:
        scenarios = run(args, directory)
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
    print(fairness_report.report(scenarios, args, where))
    return 0


if __name__ == "__main__":
    sys.exit(main())
