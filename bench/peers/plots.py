"""PNG plots of a comparison's results.json (runs in the peers' venv, for matplotlib):

    python -m bench.peers.plots bench/results/results.json bench/results

burndown.png (jobs/s by queue and worker count), latency.png (p50/p99 of the steady
workload), scale.png (ours: µs per op against jobs pending).  Bars are medians, whiskers
the min–max of the runs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _vals(results, peer, workload, key, **match):
    return [r[key] for r in results if r["peer"] == peer and r["workload"] == workload and r.get("ok")
            and r.get(key) is not None and all(r["params"].get(k) == v for k, v in match.items())]


def _bar(ax, x, vals, width, label, color=None):
    med = [statistics.median(v) if v else 0 for v in vals]
    lo = [m - min(v) if v else 0 for m, v in zip(med, vals)]
    hi = [max(v) - m if v else 0 for m, v in zip(med, vals)]
    bars = ax.bar(x, med, width, yerr=[lo, hi], capsize=3, label=label, color=color)
    for b, m, v in zip(bars, med, vals):
        ax.annotate("failed" if not v else f"{m:,.0f}" if m >= 10 else f"{m:.1f}",
                    (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")


def main(data_path: str, outdir: str) -> int:
    with open(data_path) as f:
        data = json.load(f)
    results, titles, args = data["results"], data["titles"], data["args"]
    peers = args["peers"]
    labels = [titles[p].replace(" (", "\n(") for p in peers]
    note = f"{data['machine']['cores']} CPUs, {data['machine']['cpu']}; {data['started']}"
    x = list(range(len(peers)))
    if "burndown" in args["workloads"]:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        ws = args["workers"]
        width = 0.8 / len(ws)
        for i, w in enumerate(ws):
            vals = [_vals(results, p, "burndown", "jobs_per_s", workers=w) for p in peers]
            _bar(ax, [xx + (i - (len(ws) - 1) / 2) * width for xx in x], vals, width, f"W = {w} workers")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_ylabel("jobs/s")
        ax.set_title(f"Burn-down of {args['jobs']:,} no-op jobs (higher is better)\n{note}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "burndown.png"), dpi=110)
        plt.close(fig)
    if "steady" in args["workloads"]:
        fig, ax = plt.subplots(figsize=(10, 4.8))
        series = [(rate, key) for rate in args["rates"] for key in ("p50_ms", "p99_ms")]
        width = 0.8 / len(series)
        for i, (rate, key) in enumerate(series):
            vals = [_vals(results, p, "steady", key, rate=rate) for p in peers]
            _bar(ax, [xx + (i - (len(series) - 1) / 2) * width for xx in x], vals, width,
                 f"{key.replace('_ms', '')} at {rate:g} jobs/s")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_ylabel("ms, enqueue to handler start")
        ax.set_yscale("log")
        ax.set_title(f"Latency, 4 idle workers, producer at a fixed rate (lower is better; log scale)\n{note}",
                     fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "latency.png"), dpi=110)
        plt.close(fig)
    scale = data.get("scale")
    if scale and scale.get("ok"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for key, label in (("add_us", "add"), ("take_us", "accept + finish")):
            med = [statistics.median(v) for v in scale[key]]
            ax.errorbar(scale["sizes"], med, yerr=[[m - min(v) for m, v in zip(med, scale[key])],
                                                   [max(v) - m for m, v in zip(med, scale[key])]],
                        marker="o", capsize=3, label=label)
        ax.set_xscale("log")
        ax.set_ylim(bottom=0)
        ax.set_xlabel("jobs pending")
        ax.set_ylabel("µs per operation")
        ax.set_title(f"Ours: cost per operation against queue size\n{note}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, "scale.png"), dpi=110)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
