#!/usr/bin/env python3
"""WebP benchmark of issue 15 (a benchmark, not a test: it asserts nothing).

The demo's real-photo JPEGs re-encoded as lossy WebP (Pillow, quality 90, method 4: what a
web-crawled image set holds), RandomResizedCrop(224) + flip, batch 64, same cores: loadscope
(T threads) against torch DataLoader (T workers) + ImageFolder + PIL + torchvision, and against
two decode-only ceilings (libwebp alone, from memory, T threads: RandomResizedCrop regions with
libwebp's cropping, and whole images), interleaved over --reps rounds after a warm-up epoch;
ratios per round with median, range and 95% CI; CPU per image; a check that every arm read the
same files every round. The region ceiling bounds what any exact WebP loader can reach here.

    .venv/bin/python benchmarks/bench_webp.py [--reps 7] [--out results/bench_webp.json]
"""

import argparse
import json
import os
import statistics
import sys

import torch

from loadscope import datasets
from loadscope.bench import arms as bench_arms


def webp_copy(src: str, dst: str) -> int:
    """Every image under src as a lossy WebP under dst (same tree); made once."""
    from PIL import Image

    n = 0
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(".jpg"):
                continue
            out = os.path.join(dst, os.path.relpath(dirpath, src), name[:-4] + ".webp")
            if not os.path.exists(out):
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with Image.open(os.path.join(dirpath, name)) as im:
                    im.convert("RGB").save(out + ".tmp", format="WEBP", quality=90, method=4)
                os.replace(out + ".tmp", out)
            n += 1
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo", help="the demo dataset (made if missing)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--out", default="results/bench_webp.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    datasets.ensure(a.data)
    root = os.path.join(a.data + "-webp", "folder")
    images = webp_copy(os.path.join(a.data, "folder"), root)
    env = bench_arms.machine()
    print(json.dumps(env))
    print(f"{images} WebP images under {root}")

    arms = [bench_arms.loadscope_arm(root, threads=a.threads), bench_arms.torch_arm(root, workers=a.threads),
            bench_arms.webp_ceiling_arm(root, threads=a.threads, epochs=a.reps + 1),
            bench_arms.webp_ceiling_arm(root, threads=a.threads, epochs=a.reps + 1, crop=False)]
    try:
        rounds = bench_arms.measured(arms, reps=a.reps, warmup=1)
    finally:
        for arm in arms:
            arm.close()
    same = bench_arms.same_inputs(rounds)
    res = {name: [r["per_s"] for r in rs] for name, rs in rounds.items()}
    ls_name, tv_name, region_name, whole_name = (arm.name for arm in arms)
    ratio = bench_arms.ratio_summary(res[ls_name], res[tv_name])
    ratios = {"loadscope / region ceiling": bench_arms.ratio_summary(res[ls_name], res[region_name]),
              "region ceiling / DataLoader + PIL": bench_arms.ratio_summary(res[region_name], res[tv_name]),
              "whole-image ceiling / DataLoader + PIL": bench_arms.ratio_summary(res[whole_name], res[tv_name])}
    report = {"machine": env, "threads": a.threads, "reps": a.reps, "images": images, "images_per_s": res,
              "cpu_per_image": {n: [r["cpu_per_item"] for r in rs] for n, rs in rounds.items()},
              "same_inputs": same, "loadscope_vs_torch": ratio, "ceilings": ratios}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\n| arm | images/s, median of {a.reps} (min-max) | CPU ms per image |\n|---|---|---|")
    for name, xs in res.items():
        cpu = statistics.median(r["cpu_per_item"] for r in rounds[name]) * 1e3
        print(f"| {name} | {statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f}) | {cpu:.2f} |")
    print(f"\nevery arm read the same files in every round: {'yes' if same['identical'] else 'NO'}")
    print(bench_arms.format_ratio("loadscope / DataLoader + PIL (WebP)", ratio))
    for label, r in ratios.items():
        print(bench_arms.format_ratio(label, r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
