"""Soak: many epochs over the demo data in one process; throughput and memory over time.
Not a test (docs/reliability.md quotes it): it reports, it asserts nothing.

    .venv/bin/python benchmarks/soak.py [--epochs 100] [--data data/demo] [--out results/soak.json]

Each epoch: RandomResizedCrop(224)+flip, batch 64, 2 threads, shuffled, on_error="skip"; after
it, RSS (/proc/self/statm) and the engine's own memory (pooled blocks, scratch). The RSS slope
is a least-squares fit over the epochs after the first 10 (warm-up: allocator pools, caches).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time

import loadscope as ls


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def slope(xs, ys) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--data", default="data/demo")
    p.add_argument("--out", default="results/soak.json")
    a = p.parse_args()
    L = ls.Loader(ls.FileList(os.path.join(a.data, "manifest.jsonl")),
                  fields={"jpg": ls.Image(224, flip=0.5), "cls": ls.Int()}, batch_size=64, threads=2, shuffle=True,
                  on_error="skip")
    rows = []
    t_start = time.time()
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        n = 0
        for b in L:
            n += len(b["cls"])
        secs = time.perf_counter() - t0
        del b
        gc.collect()
        mem = L.telemetry().to_dict()["memory"]
        rows.append({"epoch": epoch, "samples": n, "seconds": secs, "samples_per_s": n / secs, "rss_mib": rss_mib(),
                     "engine_mib": mem["engine"]["total"] / 2**20, "failures": L.stats()["failures"]})
        if epoch % 10 == 0 or epoch == a.epochs - 1:
            r = rows[-1]
            print(f"epoch {epoch:4d}: {r['samples_per_s']:6.0f} samples/s, RSS {r['rss_mib']:6.1f} MiB, "
                  f"engine after the epoch {r['engine_mib']:.2f} MiB (its blocks are freed between epochs)", flush=True)
    later = rows[10:] or rows
    sps = [r["samples_per_s"] for r in rows]
    summary = {
        "epochs": a.epochs, "samples": sum(r["samples"] for r in rows), "hours": (time.time() - t_start) / 3600,
        "samples_per_s": {"min": min(sps), "median": statistics.median(sps), "max": max(sps)},
        "rss_mib": {"epoch_1": rows[0]["rss_mib"], "epoch_10": rows[min(9, len(rows) - 1)]["rss_mib"],
                    "last": rows[-1]["rss_mib"], "max": max(r["rss_mib"] for r in rows)},
        "rss_slope_mib_per_100_epochs": 100 * slope([r["epoch"] for r in later], [r["rss_mib"] for r in later]),
        "failures": sum(r["failures"] for r in rows),
    }
    print(json.dumps(summary, indent=1))
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"summary": summary, "epochs": rows, "date": time.strftime("%Y-%m-%d")}, f, indent=1)


if __name__ == "__main__":
    main()
