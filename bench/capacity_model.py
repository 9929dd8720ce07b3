"""The capacity model behind ``bench/capacity.py``: counted work per job, and FoundationDB's
published limits, give the jobs/s a cluster of N processes allows and what binds first.

The limits (each a flag, so that a user can put in what their own cluster measured):

* a storage process applies about ``--writes-per-process`` 20,000 writes/s (what a
  one-process cluster took when writes were its bound; FoundationDB's Performance page: 8.2M operations/s, 90% reads, on 384 processes,
  about 21,000 per process), and serves about ``--reads-per-process`` 20,000 read
  operations/s (a point read or a range read: one operation, whatever its rows);
* every write is applied by each of the ``--replication`` storage processes of the key's
  team (3: triple replication), every read served by one of them;
* so one key takes at most one process's writes (``--key-limit``, the same by default),
  and its reads spread over its team;
* ``--storage-share`` of a cluster's processes are storage processes (0.75: the rest are
  logs, proxies, resolvers and the cluster's singletons);
* two transactions that write and read one key with a conflict run one after another: such
  a key takes one of them per ``--commit-latency-ms`` (2.26 ms: a one-write commit on a
  one-process FoundationDB 7.3).

Commit proxies, resolvers and logs are not modelled (they scale with the cluster's
configuration, not with keys); the bytes a job writes, which the logs carry ``replication``
times, are reported beside.
"""

from __future__ import annotations

import collections

from jobs.indexes import counts, rates
from jobs.engine import tuple as fdb_tuple

JOB_ID = "cap-"  # how bench/capacity.py's job ids begin: a key holding one is that job's own


def add_arguments(p) -> None:
    p.add_argument("--processes", type=int, nargs="+", default=[8, 32, 128], help="cluster sizes to model")
    p.add_argument("--storage-share", type=float, default=0.75, help="share of processes that are storage processes")
    p.add_argument("--writes-per-process", type=float, default=20_000.0)
    p.add_argument("--reads-per-process", type=float, default=20_000.0)
    p.add_argument("--replication", type=int, default=3)
    p.add_argument("--key-limit", type=float, help="writes/s one key takes (default: --writes-per-process)")
    p.add_argument("--commit-latency-ms", type=float, default=2.26)


def check_arguments(p, args) -> None:
    if min(args.processes) < 1 or args.replication < 1:
        p.error("--processes and --replication must be at least 1")
    if not 0 < args.storage_share <= 1:
        p.error("--storage-share must be in (0, 1]")
    if min(args.writes_per_process, args.reads_per_process, args.commit_latency_ms) <= 0:
        p.error("--writes-per-process, --reads-per-process and --commit-latency-ms must be above 0")
    if args.key_limit is None:
        args.key_limit = args.writes_per_process
    elif args.key_limit <= 0:
        p.error("--key-limit must be above 0")


# --- counted work --------------------------------------------------------------------------


def per_unit(tallies: list, units: int) -> dict:
    """What ``tallies`` did, per unit (a job, a gather): transactions, reads, writes, bytes,
    conflict ranges, retries."""
    def total(fn):
        return sum(fn(t) for t in tallies) / units

    return {
        "transactions": len(tallies) / units,
        "retries": total(lambda t: t.attempts - 1),
        "point_reads": total(lambda t: len(t.point_reads)),
        "range_reads": total(lambda t: len(t.range_reads)),
        "keys_read": total(lambda t: t.keys_read),
        "bytes_read": total(lambda t: t.bytes_read),
        "read_conflicts": total(lambda t: len(set(t.read_conflicts))),
        "writes": total(lambda t: len(t.mutations())),
        "bytes_written": total(lambda t: t.bytes_written),
        "write_conflicts": total(lambda t: len(set(t.write_conflicts))),
    }


def hot_keys(tallies: list, units: int) -> dict:
    """The keys jobs share, by how often a job writes or reads each (per unit), hottest
    first, and the shared written keys other transactions read with a conflict."""
    writes, reads = collections.Counter(), collections.Counter()
    for t in tallies:
        writes.update(w.key for w in t.mutations() if not w.unique and w.end is None and not _own(w.key))
        reads.update(k for k in set(t.point_reads) if not _own(k))
        reads.update(begin for begin, _end, _rows in t.range_reads)  # its first rows' server
    shared = {k: n / units for k, n in writes.most_common()}
    contended = {}
    for key in shared:
        n = sum(1 for t in tallies if any(b <= key < e for b, e in t.read_conflicts)
                and any(w.key == key for w in t.mutations()))
        if n:
            contended[key] = n / units
    return {
        "writes": [(name(k), r) for k, r in shared.items()],
        "reads": [(name(k), n / units) for k, n in reads.most_common(8)],
        "contended": [(name(k), r) for k, r in contended.items()],
    }


def _own(key: bytes) -> bool:
    """A key of one job (holding its id) or of one commit (holding a versionstamp)."""
    if JOB_ID.encode() in key:
        return True
    try:
        return any(isinstance(item, fdb_tuple.Versionstamp) for item in fdb_tuple.unpack(key))
    except Exception:  # noqa: BLE001 - not a tuple key
        return False


def name(key: bytes, shape: bool = False) -> str:
    """A key as its tuple, with job ids, times and stamps shown as placeholders (``shape``:
    a counter's shard, a rate's minute and bucket too: keys that take turns)."""
    try:
        items = list(fdb_tuple.unpack(key))
    except Exception:  # noqa: BLE001 - not a tuple key
        return key.hex()
    if shape and (counts.is_counter(key) or rates.is_rate(key)):
        if isinstance(items[-1], int) and 0 <= items[-1] < counts.SHARDS:
            items[-1] = f"<shard of {counts.SHARDS}>"
        if rates.is_rate(key):  # (..., "rates", type, minute, wait bucket or None, shard)
            items[-3] = "<minute>"
            if isinstance(items[-2], int):
                items[-2] = "<bucket>"
    shown = []
    for item in items:
        if isinstance(item, str) and item.startswith(JOB_ID):
            item = "<id>"
        elif isinstance(item, float) and item > 1e9:
            item = "<time>"
        elif isinstance(item, fdb_tuple.Versionstamp):
            item = "<stamp>"
        shown.append(item)
    return repr(tuple(shown))


# --- the model -----------------------------------------------------------------------------


def ceilings(work: dict, hot: dict, processes: int, args, type: str | None = None) -> dict:
    """Jobs/s each limit allows on ``processes`` processes (see the module doc): of one type,
    or (``type`` given) of a store with many types like it, where that type's keys take
    their share of the load only."""
    if type is not None:
        hot = {kind: [(k, r) for k, r in found if repr(type) not in k] for kind, found in hot.items()}
    storage = max(1, round(processes * args.storage_share))
    out = {
        "storage writes": storage * args.writes_per_process / (args.replication * work["writes"]),
        "storage reads": storage * args.reads_per_process / max(1e-9, work["point_reads"] + work["range_reads"]),
    }
    if hot["writes"]:
        key, rate = max(hot["writes"], key=lambda kr: kr[1])
        out[f"hottest key written: {key}"] = args.key_limit / rate
    if hot["reads"]:
        key, rate = max(hot["reads"], key=lambda kr: kr[1])
        out[f"hottest key read: {key}"] = args.replication * args.reads_per_process / rate
    for key, rate in hot["contended"]:
        out[f"conflicts on {key}"] = 1000.0 / args.commit_latency_ms / rate
    return out


def touched(tallies: list) -> dict[str, float]:
    """The keys jobs share that transactions write (counters by shape), per transaction."""
    found = collections.Counter(name(w.key, shape=True) for t in tallies for w in t.mutations()
                                if not w.unique and w.end is None and not _own(w.key))
    return {k: n / len(tallies) for k, n in found.most_common()}


def build(by_label: dict, paths: dict, args, jobs_per_path: int, type: str) -> dict:
    """Counts per label and per path (``jobs_per_path`` jobs of ``type`` each), hot keys and
    the model's ceilings (JSON-ready)."""
    labels = {label: per_unit(tallies, len(tallies)) | {"transactions counted": len(tallies),
                                                         "shared keys written": touched(tallies)}
              for label, tallies in by_label.items()}
    result = {"per transaction": labels, "paths": {}, "limits": {
        "writes_per_process": args.writes_per_process, "reads_per_process": args.reads_per_process,
        "replication": args.replication, "key_limit": args.key_limit,
        "storage_share": args.storage_share, "commit_latency_ms": args.commit_latency_ms}}
    for path, names in paths.items():
        tallies = [t for label in names for t in by_label.get(label, [])]
        work, hot = per_unit(tallies, jobs_per_path), hot_keys(tallies, jobs_per_path)
        models = {scope: {n: _bound(ceilings(work, hot, n, args, type), hot) for n in args.processes}
                  for scope, type in (("one type", None), ("one store, many types", type))}
        result["paths"][path] = {"labels": list(names), "per job": work, "hot keys": hot, "model": models}
    return result


def _bound(limits: dict, hot: dict) -> dict:
    """The tightest of ``limits``, and the busiest key written at that many jobs/s."""
    binding = min(limits, key=limits.get)
    key, per_job = max(hot["writes"], key=lambda kr: kr[1], default=(None, 0.0))
    return {"jobs_per_s": limits[binding], "binding": binding, "ceilings": limits,
            "busiest key": key, "busiest key writes_per_s": per_job * limits[binding]}


def report(result: dict) -> str:
    lim = result["limits"]
    out = ["Per transaction (averages):", "",
           "| transaction | counted | point reads | range reads | keys read | read conflicts | writes | bytes written | write conflicts | retries |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, w in result["per transaction"].items():
        out.append(f"| {label} | {w['transactions counted']} | {w['point_reads']:.2f} | {w['range_reads']:.2f} | "
                   f"{w['keys_read']:.1f} | {w['read_conflicts']:.2f} | {w['writes']:.2f} | {w['bytes_written']:.0f} | "
                   f"{w['write_conflicts']:.2f} | {w['retries']:.2f} |")
    out += ["", "Keys shared by jobs that each transaction writes (times per transaction):", ""]
    for label, w in result["per transaction"].items():
        written = ", ".join(f"{k} {r:.2f}" for k, r in w["shared keys written"].items()) or "none"
        out.append(f"- {label}: {written}")
    for path, p in result["paths"].items():
        w = p["per job"]
        out += ["", f"Path '{path}' ({' + '.join(p['labels'])}), per job: {w['transactions']:.2f} transactions, "
                f"{w['point_reads']:.2f} point and {w['range_reads']:.2f} range reads ({w['keys_read']:.1f} keys, "
                f"{w['bytes_read']:.0f} bytes), {w['writes']:.2f} writes ({w['bytes_written']:.0f} bytes), "
                f"{w['read_conflicts']:.2f} read and {w['write_conflicts']:.2f} write conflict ranges.", ""]
        out += [f"- written by jobs in common: {key}: {rate:.3f} writes per job" for key, rate in p["hot keys"]["writes"][:6]]
        out += [f"- read by jobs in common: {key}: {rate:.3f} reads per job" for key, rate in p["hot keys"]["reads"][:4]]
        out += [f"- read with a conflict and written: {key}: {rate:.3f} per job" for key, rate in p["hot keys"]["contended"]]
        out += ["", "| jobs of | processes | jobs/s (model) | bound by | next limit | busiest key written, writes/s |",
                "|---|---:|---:|---|---|---|"]
        for scope, models in p["model"].items():
            for n, m in models.items():
                rest = sorted((v, k) for k, v in m["ceilings"].items() if k != m["binding"])
                nxt = f"{rest[0][1]}: {rest[0][0]:,.0f}" if rest else "-"
                busiest = f"{m['busiest key']}: {m['busiest key writes_per_s']:,.0f}" if m["busiest key"] else "-"
                out.append(f"| {scope} | {n} | {m['jobs_per_s']:,.0f} | {m['binding']} | {nxt} | {busiest} |")
    out += ["", f"Limits: {lim['writes_per_process']:,.0f} writes/s and {lim['reads_per_process']:,.0f} reads/s per storage "
            f"process, replication {lim['replication']}, {lim['key_limit']:,.0f} writes/s per key, "
            f"{lim['storage_share']:.0%} of processes storage, {lim['commit_latency_ms']} ms per conflicting commit."]
    return "\n".join(out)
