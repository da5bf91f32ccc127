"""`make demo` / `loadscope demo`: generates the demo dataset when missing, then loads the same
files with loadscope and with torch's DataLoader + PIL + torchvision (same transforms, same
cores, same batch size), interleaved, and prints both throughputs and their ratio."""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

from . import compare, datasets
from ._loader import default_threads


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="loadscope demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo", help="dataset directory (generated if missing)")
    p.add_argument("--images", type=int, default=2000, help="images in a generated dataset")
    p.add_argument("--threads", type=int, default=default_threads(), help="loadscope threads = DataLoader workers")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--reps", type=int, default=3, help="measured epochs per arm (after one warm-up)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)  # the DataLoader's main process only collates

    info = datasets.ensure(a.data, images=a.images)
    root = os.path.join(a.data, "folder")
    print(f"dataset: {info['images']} JPEGs in {root} ({info['jpeg_bytes'] / 2**20:.0f} MiB), "
          f"RandomResizedCrop(224) + flip 0.5, batch {a.batch_size}, {a.threads} threads/workers")
    ls_arm = compare.loadscope_arm(root, threads=a.threads, batch_size=a.batch_size)
    tv_arm = compare.torch_arm(root, workers=a.threads, batch_size=a.batch_size)
    try:
        res = compare.interleaved([ls_arm, tv_arm], reps=a.reps, warmup=1)
    finally:
        tv_arm.close()
    width = max(len(n) for n in res)
    print(f"\n{'loader':<{width}}  images/s (median of {a.reps}, min-max)")
    for name, xs in res.items():
        print(f"{name:<{width}}  {statistics.median(xs):8.0f}  ({min(xs):.0f}-{max(xs):.0f})")
    r = compare.ratio_summary(res[ls_arm.name], res[tv_arm.name])
    print(f"\nloadscope / DataLoader: {r['median']:.2f}x (per-round ratios {r['min']:.2f}-{r['max']:.2f})")
    print("Measured here, now, on these cores; see docs/benchmarks.md for the full benchmark.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
