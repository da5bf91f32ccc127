#!/usr/bin/env python3
"""Video-clip benchmark of issue 3 (a benchmark, not a test: it asserts nothing).

16-frame clips (stride 2) at 224x224 with RandomResizedCrop + flip, from the demo videos
(H.264, 5 s at 30 fps, 360p/480p/720p, GOP 10/30/60/150 frames), 2 threads, batch 8:
  1. loadscope vs torch DataLoader(num_workers=2) over torchvision.io.read_video (PyAV) with the
     same sampling, vs the FFmpeg decode-only ceiling; interleaved rounds after a warm-up;
  2. clips/s by GOP length (seek cost), loadscope and ceiling;
  3. clips/s by FFmpeg decoder threads.

    .venv/bin/python benchmarks/bench_video.py [--reps 5] [--out results/bench_video.json]
"""

import argparse
import json
import os
import statistics
import sys

import torch

from loadscope import compare, datasets


def med(xs):
    return statistics.median(xs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--repeat", type=int, default=4, help="clips per video per epoch")
    p.add_argument("--out", default="results/bench_video.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    datasets.ensure(a.data)
    env = compare.machine()
    print(json.dumps(env))
    rows = compare.video_clips(a.data, repeat=a.repeat)

    arms = [compare.video_loadscope_arm(rows, threads=a.threads), compare.video_torch_arm(rows, workers=a.threads),
            compare.video_ceiling_arm(rows, threads=a.threads)]
    try:
        res = compare.interleaved(arms, reps=a.reps, warmup=1)
    finally:
        for arm in arms:
            arm.close()
    ls_name, tv_name, ceil_name = (arm.name for arm in arms)
    vs_torch = compare.ratio_summary(res[ls_name], res[tv_name])
    vs_ceiling = compare.ratio_summary(res[ls_name], res[ceil_name])

    by_gop = {}
    for gop in sorted({r["gop"] for r in rows}):
        sub = compare.video_clips(a.data, repeat=a.repeat * 4, gop=gop)
        g_arms = [compare.video_loadscope_arm(sub, threads=a.threads), compare.video_ceiling_arm(sub, threads=a.threads)]
        g = compare.interleaved(g_arms, reps=3, warmup=1)
        by_gop[gop] = {"clips": len(sub), "loadscope": med(g[g_arms[0].name]), "ceiling": med(g[g_arms[1].name])}
        print(f"  GOP {gop}: {by_gop[gop]}", flush=True)

    thread_arms = [compare.video_loadscope_arm(rows, threads=t, decoder_threads=d) for t, d in ((2, 1), (2, 2), (1, 2), (2, 0))]
    by_threads = {k: med(v) for k, v in compare.interleaved(thread_arms, reps=3, warmup=1).items()}

    report = {"machine": env, "threads": a.threads, "reps": a.reps, "clips_per_epoch": len(rows), "clips_per_s": res,
              "loadscope_vs_torch": vs_torch, "loadscope_vs_ceiling": vs_ceiling, "by_gop": by_gop, "by_decoder_threads": by_threads}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)

    print(f"\n| arm | clips/s, median of {a.reps} (min-max) |\n|---|---|")
    for name, xs in res.items():
        print(f"| {name} | {med(xs):.1f} ({min(xs):.1f}-{max(xs):.1f}) |")
    for label, r in (("loadscope / DataLoader+read_video", vs_torch), ("loadscope / decode-only ceiling", vs_ceiling)):
        print("\n" + compare.format_ratio(label, r))
    print("\n| GOP (frames) | loadscope clips/s | ceiling clips/s | ratio |\n|---|---|---|---|")
    for gop, g in by_gop.items():
        print(f"| {gop} | {g['loadscope']:.1f} | {g['ceiling']:.1f} | {g['loadscope'] / g['ceiling']:.2f} |")
    print("\n| configuration | clips/s (median of 3) |\n|---|---|")
    for name, v in by_threads.items():
        print(f"| {name} | {v:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
