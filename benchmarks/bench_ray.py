"""Batches made locally against batches made by a Ray pool (loadscope.ray.Workers), on one
machine: the same spec, rounds interleaved after a warm-up epoch of each. Per arm: samples/s,
and the trainer process's own CPU per sample (user + system time of this process only: the
Ray workers are other processes), which is what disaggregation takes off the trainer node.

On one machine the pool's workers share the trainer's cores, so throughput cannot rise here;
what this measures is what the trainer still pays per sample (receiving, copying, handing out)
against decoding it itself, and the pool's overhead. The emulated two-node topology with CPU
quotas and a shaped link is the harness's (docs/disaggregation.md).

    .venv/bin/python benchmarks/bench_ray.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import loadscope as ls

ROOT = Path(__file__).resolve().parents[1]


def spec(kind: str, root: Path) -> ls.Spec:
    if kind == "images":
        image = ls.Image(224, crop="random_resized", flip=0.5)
        return ls.Spec(ls.Folder(root / "folder"), fields={"jpg": image, "cls": ls.Int()}, batch_size=64,
                       shuffle=True, seed=1)
    clip = ls.VideoClip(112, frames=16, stride=2, position="random")
    files = ls.FileList(root / "videos.jsonl", cache_dir=None)
    return ls.Spec(files, fields={"mp4": clip, "cls": ls.Int()}, batch_size=8, shuffle=True, seed=1)


def epoch(loader: ls.Loader, e: int):
    loader.set_epoch(e)
    t0, c0 = time.perf_counter(), os.times()
    n = 0
    nbytes = 0
    for b in loader:
        n += len(b["__key__"])
        nbytes += sum(v.numel() * v.element_size() for v in b.values() if hasattr(v, "numel"))
    c1 = os.times()
    wall = time.perf_counter() - t0
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return n / wall, cpu / n, nbytes / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT / "data" / "demo"))
    p.add_argument("--kinds", default="images,video")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "results" / "bench_ray.json"))
    a = p.parse_args()
    import ray
    ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
    results = {}
    for kind in a.kinds.split(","):
        s = spec(kind, Path(a.data))
        arms = {"local (2 threads)": ls.Loader(s, threads=2),
                f"Ray pool ({a.workers} workers x 1 CPU)": ls.Loader(s, workers=ls.ray.Workers(a.workers))}
        for L in arms.values():  # warm-up: page cache, indexes, the workers started
            epoch(L, 0)
        rows = {name: [] for name in arms}
        for r in range(a.rounds):
            for name in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
                rows[name].append(epoch(arms[name], r + 1))
        results[kind] = rows
        print(f"\n{kind}: {len(arms)} arms, {a.rounds} rounds, {sys.argv[0]}")
        print("| arm | samples/s, median (min-max) | trainer CPU ms per sample | bytes per sample |")
        print("|---|---|---|---|")
        for name, rs in rows.items():
            rates = [x[0] for x in rs]
            print(f"| {name} | {statistics.median(rates):.1f} ({min(rates):.1f}-{max(rates):.1f}) | "
                  f"{statistics.median(x[1] for x in rs) * 1e3:.2f} | {statistics.median(x[2] for x in rs):.0f} |")
        local, remote = (rows[n] for n in arms)
        share = [rm[1] / lo[1] for lo, rm in zip(local, remote)]
        print(f"trainer CPU per sample, pool / local: median {statistics.median(share):.3f} "
              f"(range {min(share):.3f}-{max(share):.3f})")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=1))
    ray.shutdown()


if __name__ == "__main__":
    main()
