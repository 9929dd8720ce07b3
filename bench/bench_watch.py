"""How fast a watch in one process hears a commit of another, on the embedded engine, with
the doorbell (inotify on the store's log) and with polling (the fallback), in one run:

    python -m bench.bench_watch [--n 300] [--gaps 0.02 0.005]

A writer process sets a key to its wall clock every GAP seconds; a watcher process waits on
a watch of that key and records how long after the write's start it woke (the write's own
commit included).  Also the CPU an idle process spends with one watch armed."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import struct
import tempfile
import time

from jobs.engine import value_of
from jobs.engine.embedded import EmbeddedDatabase


def _mode(mode: str) -> None:
    if mode == "polling":
        os.environ["JOBS_EMBEDDED_WATCHES"] = "poll"  # (read when the database is opened)


_STAMP = struct.Struct(">dI")  # when the write started, its sequence number


def _watcher(path: str, n: int, mode: str, out) -> None:
    _mode(mode)
    db = EmbeddedDatabase(path)
    lat = []
    tr = db.create_transaction()
    future = tr.watch(b"k")
    tr.commit().wait()
    out.put("ready")
    seq = -1
    while seq < n - 1:  # until the last write is seen (writes between two wakes coalesce)
        future.wait()
        woke = time.time()
        tr = db.create_transaction()
        value = value_of(tr.get(b"k"))
        future = tr.watch(b"k")
        tr.commit().wait()
        written, seq = _STAMP.unpack(value)
        lat.append((woke - written) * 1000)
    out.put(lat)
    db.close()


def latency(directory: str, mode: str, n: int, gap: float) -> list[float]:
    path = os.path.join(directory, f"watch-{mode}-{gap}.sqlite")
    db = EmbeddedDatabase(path)
    out = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=_watcher, args=(path, n, mode, out), daemon=True)
    proc.start()
    assert out.get(timeout=60) == "ready"
    time.sleep(0.5)
    for seq in range(n):
        time.sleep(gap)
        tr = db.create_transaction()
        tr.set(b"k", _STAMP.pack(time.time(), seq))
        tr.commit().wait()
    lat = sorted(out.get(timeout=120))
    proc.join(30)
    db.close()
    return lat


def _idle(path: str, mode: str, secs: float, out) -> None:
    _mode(mode)
    db = EmbeddedDatabase(path)
    tr = db.create_transaction()
    tr.watch(b"idle")
    tr.commit().wait()
    t = time.process_time()
    time.sleep(secs)
    out.put((time.process_time() - t) / secs * 100)
    db.close()


def idle_cpu(directory: str, mode: str, secs: float) -> float:
    out = mp.get_context("spawn").Queue()
    proc = mp.get_context("spawn").Process(target=_idle, args=(os.path.join(directory, f"idle-{mode}.sqlite"),
                                                                 mode, secs, out))
    proc.start()
    value = out.get(timeout=secs + 60)
    proc.join(30)
    return value


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_watch", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=300, help="writes per measurement (300)")
    p.add_argument("--gaps", type=float, nargs="+", default=[0.02, 0.005], help="seconds between writes")
    p.add_argument("--idle", type=float, default=5.0, help="seconds of the idle CPU measurement (5)")
    args = p.parse_args(argv)
    print("| mode | gap between commits | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="jobs-watch-") as d:
        for gap in args.gaps:
            for mode in ("doorbell", "polling"):
                lat = latency(d, mode, args.n, gap)
                q = statistics.quantiles(lat, n=100, method="inclusive")
                print(f"| {mode} | {gap * 1000:g} ms | {q[49]:.2f} | {q[89]:.2f} | {q[98]:.2f} | {lat[-1]:.2f} |")
        print()
        for mode in ("doorbell", "polling"):
            print(f"idle process with one armed watch, {mode}: {idle_cpu(d, mode, args.idle):.2f} % of a core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
