#!/usr/bin/env python3
"""Telemetry overhead (issue 4; a benchmark, not a test): the image benchmark of issue 2
(demo set, RandomResizedCrop(224) + flip, batch 64, 2 threads) with telemetry on and off,
interleaved over --reps rounds after a warm-up, per-round ratio on/off.

    .venv/bin/python benchmarks/bench_telemetry.py [--reps 9]
"""

import argparse
import json
import os
import sys

import torch

from loadscope import datasets
from loadscope.bench import arms as bench_arms
from loadscope._fields import Image
from loadscope._loader import Loader
from loadscope._sources import Folder


def arm(root: str, threads: int, on: bool) -> bench_arms.Arm:
    loader = Loader(Folder(root), fields={"jpg": Image(224, flip=0.5)}, batch_size=64, threads=threads,
                    shuffle=True, seed=0, telemetry=on)

    def epoch() -> int:
        n = sum(b["jpg"].shape[0] for b in loader)
        if on:
            loader.telemetry()  # reading it is part of the cost
        return n

    return bench_arms.Arm(f"telemetry {'on' if on else 'off'}", epoch)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--out", default="results/bench_telemetry.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    datasets.ensure(a.data)
    root = os.path.join(a.data, "folder")
    arms = [arm(root, a.threads, True), arm(root, a.threads, False)]
    res = bench_arms.interleaved(arms, reps=a.reps, warmup=1)
    r = bench_arms.ratio_summary(res["telemetry on"], res["telemetry off"])
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"machine": bench_arms.machine(), "images_per_s": res, "on_over_off": r}, f, indent=1)
    for name, xs in res.items():
        xs = sorted(xs)
        print(f"{name}: median {xs[len(xs) // 2]:.0f} images/s (min {xs[0]:.0f}, max {xs[-1]:.0f})")
    print(bench_arms.format_ratio("on / off", r, digits=3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
