#!/usr/bin/env python3
"""Image-loading benchmark of issue 2 (a benchmark, not a test: it asserts nothing).

On the demo dataset, RandomResizedCrop(224) + flip, batch 64, same cores:
  1. throughput of loadscope (T threads), torch DataLoader (T workers) + PIL + torchvision, and
     the decode-only ceiling (TurboJPEG full decode from memory, T threads), interleaved over
     --reps rounds after a warm-up epoch; ratios per round with median, range and 95% CI; CPU
     per image and cores kept busy per arm; and a check that every arm read the same files;
  2. peak PSS over all processes (loader process + DataLoader workers) and throughput of
     loadscope and DataLoader at 2 and 8 threads/workers, each in a fresh process.

    .venv/bin/python benchmarks/bench_images.py [--reps 7] [--out results/bench_images.json]
"""

import argparse
import json
import os
import statistics
import sys

import torch

from loadscope import datasets
from loadscope.bench import arms as bench_arms


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--pss-threads", default="2,8")
    p.add_argument("--out", default="results/bench_images.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    datasets.ensure(a.data)
    root = os.path.join(a.data, "folder")
    env = bench_arms.machine()
    print(json.dumps(env))

    arms = [bench_arms.loadscope_arm(root, threads=a.threads), bench_arms.torch_arm(root, workers=a.threads),
            bench_arms.ceiling_arm(root, threads=a.threads)]
    try:
        rounds = bench_arms.measured(arms, reps=a.reps, warmup=1)
    finally:
        for arm in arms:
            arm.close()
    same = bench_arms.same_inputs(rounds)  # every arm read the same files, every round
    res = {name: [r["per_s"] for r in rs] for name, rs in rounds.items()}
    ls_name, tv_name, ceil_name = (arm.name for arm in arms)
    summary = {name: {"median": statistics.median(x), "min": min(x), "max": max(x),
                      "cpu_ms_per_image": statistics.median(r["cpu_per_item"] for r in rounds[name]) * 1e3,
                      "cores": statistics.median(r["cores"] for r in rounds[name])} for name, x in res.items()}
    vs_torch = bench_arms.ratio_summary(res[ls_name], res[tv_name])
    vs_ceiling = bench_arms.ratio_summary(res[ls_name], res[ceil_name])

    memory = []
    for n in (int(x) for x in a.pss_threads.split(",")):
        for arm in ("loadscope", "torch"):
            r = bench_arms.pss_run(arm, root, n)
            memory.append({"arm": arm, "threads_or_workers": n, **r})
            print(f"  {arm} n={n}: {r['images_per_s']:.0f} img/s, peak PSS {r['peak_pss_mib']:.0f} MiB", flush=True)

    report = {"machine": env, "threads": a.threads, "reps": a.reps, "images_per_s": res, "summary": summary,
              "same_inputs": same,
              "loadscope_vs_torch": vs_torch, "loadscope_vs_ceiling": vs_ceiling, "memory": memory}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)

    print(f"\n| arm | images/s, median of {a.reps} (min-max) | CPU ms per image | cores busy |\n|---|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f}) | {s['cpu_ms_per_image']:.2f} | {s['cores']:.2f} |")
    print(f"\nevery arm read the same files in every round: {'yes' if same['identical'] else 'NO'}")
    for label, r in (("loadscope / DataLoader", vs_torch), ("loadscope / decode-only ceiling", vs_ceiling)):
        print("\n" + bench_arms.format_ratio(label, r))
    print("\n| loader | threads/workers | images/s | peak PSS, all processes (MiB) |\n|---|---|---|---|")
    for m in memory:
        print(f"| {m['arm']} | {m['threads_or_workers']} | {m['images_per_s']:.0f} | {m['peak_pss_mib']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
