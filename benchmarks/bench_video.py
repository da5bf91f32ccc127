#!/usr/bin/env python3
"""Video-clip benchmark of issue 3 (a benchmark, not a test: it asserts nothing).

16-frame clips (stride 2) at 224x224 with RandomResizedCrop + flip, from the demo videos
(H.264, 5 s at 30 fps, 360p/480p/720p, GOP 10/30/60/150 frames), 2 threads, batch 8. Every
arm reads the same clips: one plan per epoch (a start frame per clip, drawn from the seed and
the epoch: bench_arms.clip_plans) handed to loadscope (a manifest with a start column and
VideoClip(start=)), to the DataLoader (through its batch sampler) and to the ceiling, and each
round checks that every arm read exactly the plan (digests):
  1. loadscope vs torch DataLoader(num_workers=2) over torchvision.io.read_video (PyAV), vs the
     FFmpeg decode-only ceiling and vs the decode floor (the ceiling minus the non-reference
     frames never shown and the packets after the clip: the least an exact decoder decodes);
     interleaved rounds after a warm-up; clips/s, CPU seconds per clip and cores kept busy per
     arm, and the plan's decode work;
  2. clips/s by GOP length (seek cost) and by codec: loadscope, ceiling and floor;
  3. clips/s by FFmpeg decoder threads.

    .venv/bin/python benchmarks/bench_video.py [--reps 5] [--out results/bench_video.json]
    .venv/bin/python benchmarks/bench_video.py --data data/realistic --video-profile realistic \
        --videos 48 --repeat 1 --images 64 --skip-sweeps   # every clip from another video
    .venv/bin/python benchmarks/bench_video.py --data data/dataset --video-profile dataset \
        --videos 500 --repeat 1 --images 1 --reps 3 --cold --skip-threads   # issue 14's set

With --cold the loader keeps no video index between clips (LOADSCOPE_VIDEO_INDEX_CACHE_MB=0),
as when every clip of an epoch comes from another of 10^5 videos; the sweeps by GOP (and by
codec, where the set has several) then take every video once per epoch as well.
"""

import argparse
import json
import os
import statistics
import sys

import torch

from loadscope import datasets
from loadscope.bench import arms as bench_arms


def med(xs):
    return statistics.median(xs)


def table(res, plans, reps):
    """Per arm: clips/s, CPU seconds per clip, cores kept busy (medians of the rounds)."""
    lines = [f"| arm | clips/s, median of {reps} (min-max) | CPU s per clip | cores busy |", "|---|---|---|---|"]
    for name, rs in res.items():
        per_s = [r["per_s"] for r in rs]
        lines.append(f"| {name} | {med(per_s):.1f} ({min(per_s):.1f}-{max(per_s):.1f}) | "
                     f"{med(r['cpu_per_item'] for r in rs):.3f} | {med(r['cores'] for r in rs):.2f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--repeat", type=int, default=4, help="clips per video per epoch")
    p.add_argument("--videos", type=int, default=24)
    p.add_argument("--video-profile", default="demo", choices=sorted(datasets.VIDEO_PROFILES),
                   help="realistic: 10 s, GOP 60, 360p and 720p (the demo's are 5 s, every GOP length)")
    p.add_argument("--images", type=int, default=2000, help="images of the dataset (--data) it makes")
    p.add_argument("--skip-sweeps", action="store_true", help="only the arms' comparison (no GOP, no threads sweep)")
    p.add_argument("--skip-threads", action="store_true", help="no decoder-threads sweep")
    p.add_argument("--cold", action="store_true", help="no video index cache in the loader (every video as if new)")
    p.add_argument("--out", default="results/bench_video.json")
    a = p.parse_args()
    if a.cold:  # read when the first video is opened
        os.environ["LOADSCOPE_VIDEO_INDEX_CACHE_MB"] = "0"
    torch.set_num_threads(1)
    datasets.ensure(a.data, images=a.images, videos=a.videos, video_profile=a.video_profile)
    env = bench_arms.machine()
    print(json.dumps(env))
    rows = bench_arms.video_clips(a.data, repeat=a.repeat)
    plans = bench_arms.clip_plans(rows)  # one plan per epoch, the same for every arm
    work = [plans(e).work() for e in range(1 + a.reps)]
    print(f"decode work per epoch (keyframe to last clip frame): {med(w['frames'] for w in work):.0f} frames, "
          f"{med(w['megapixels'] for w in work):.0f} megapixels; {len(rows)} clips", flush=True)

    arms = [bench_arms.video_loadscope_arm(rows, threads=a.threads, plans=plans),
            bench_arms.video_torch_arm(rows, workers=a.threads, plans=plans),
            bench_arms.video_ceiling_arm(rows, threads=a.threads, plans=plans),
            bench_arms.video_ceiling_arm(rows, threads=a.threads, plans=plans, least=True)]
    try:
        res = bench_arms.measured(arms, reps=a.reps, warmup=1)
    finally:
        for arm in arms:
            arm.close()
    same = bench_arms.same_inputs(res)
    ls_name, tv_name, ceil_name, floor_name = (arm.name for arm in arms)
    rate = {n: [r["per_s"] for r in rs] for n, rs in res.items()}
    vs_torch = bench_arms.ratio_summary(rate[ls_name], rate[tv_name])
    vs_ceiling = bench_arms.ratio_summary(rate[ls_name], rate[ceil_name])
    vs_floor = bench_arms.ratio_summary(rate[ls_name], rate[floor_name])
    floor_vs_ceiling = bench_arms.ratio_summary(rate[floor_name], rate[ceil_name])
    # What a loader decoding exactly the floor's frames and converting nothing would reach: the
    # bound on loadscope / DataLoader for exact frames.
    floor_vs_torch = bench_arms.ratio_summary(rate[floor_name], rate[tv_name])
    cpu_ratio = {n: med(r["cpu_per_item"] for r in rs) / med(r["cpu_per_item"] for r in res[ls_name])
                 for n, rs in res.items()}

    groups = [("GOP", gop, [r for r in rows if r["gop"] == gop]) for gop in sorted({r["gop"] for r in rows})]
    codecs = sorted({r["codec"] for r in rows})
    if len(codecs) > 1:
        groups += [("codec", c, [r for r in rows if r["codec"] == c]) for c in codecs]
    by_gop = {}
    for kind, value, sub in groups if not a.skip_sweeps else ():
        sub = sub if a.cold else sub * 4  # cold: each video once an epoch
        sub_plans = bench_arms.clip_plans(sub)
        g_arms = [bench_arms.video_loadscope_arm(sub, threads=a.threads, plans=sub_plans),
                  bench_arms.video_ceiling_arm(sub, threads=a.threads, plans=sub_plans),
                  bench_arms.video_ceiling_arm(sub, threads=a.threads, plans=sub_plans, least=True)]
        try:
            g = bench_arms.measured(g_arms, reps=3, warmup=1)
        finally:
            for arm in g_arms:
                arm.close()
        per_s = [[r["per_s"] for r in g[arm.name]] for arm in g_arms]
        by_gop[f"{kind} {value}"] = {"clips": len(sub), "loadscope": med(per_s[0]), "ceiling": med(per_s[1]),
                                     "floor": med(per_s[2]), "ratio": bench_arms.ratio_summary(per_s[0], per_s[1]),
                                     "ratio_floor": bench_arms.ratio_summary(per_s[0], per_s[2]),
                                     "floor_vs_ceiling": bench_arms.ratio_summary(per_s[2], per_s[1]),
                                     "loadscope_info": [r["info"] for r in g[g_arms[0].name]],
                                     "floor_info": [r["info"] for r in g[g_arms[2].name]],
                                     "same_inputs": bench_arms.same_inputs(g)["identical"]}
        print(f"  {kind} {value}: {by_gop[f'{kind} {value}']}", flush=True)

    thread_arms = [bench_arms.video_loadscope_arm(rows, threads=t, decoder_threads=d, plans=plans)
                   for t, d in ((2, 1), (2, 2), (1, 2), (2, 0))] if not (a.skip_sweeps or a.skip_threads) else []
    try:
        t_res = bench_arms.measured(thread_arms, reps=3, warmup=1)
    finally:
        for arm in thread_arms:
            arm.close()
    by_threads = {k: med(r["per_s"] for r in v) for k, v in t_res.items()}

    report = {"machine": env, "args": vars(a), "threads": a.threads, "reps": a.reps, "clips_per_epoch": len(rows), "rounds": res,
              "same_inputs": same, "decode_work_per_epoch": work, "loadscope_vs_torch": vs_torch,
              "loadscope_vs_ceiling": vs_ceiling, "loadscope_vs_floor": vs_floor, "floor_vs_ceiling": floor_vs_ceiling,
              "floor_vs_torch": floor_vs_torch, "cpu_per_clip_vs_loadscope": cpu_ratio, "by_gop": by_gop,
              "by_decoder_threads": by_threads, "by_decoder_threads_same_inputs": bench_arms.same_inputs(t_res)["identical"]}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)

    print("\n" + table(res, plans, a.reps))
    print(f"\nevery arm read the same clips in every round: {'yes' if same['identical'] else 'NO, rounds ' + str(same['differing_rounds'])}"
          f" ({', '.join(same['arms_checked'])})")
    for label, r in (("loadscope / DataLoader+read_video", vs_torch), ("loadscope / decode-only ceiling", vs_ceiling),
                     ("loadscope / decode floor", vs_floor), ("decode floor / decode-only ceiling", floor_vs_ceiling),
                     ("decode floor / DataLoader+read_video (the bound for exact frames)", floor_vs_torch)):
        print("\n" + bench_arms.format_ratio(label, r))
    for name in (ceil_name, floor_name):
        missing = max(r["info"]["clip_frames_missing"] for r in res[name])
        if missing:
            print(f"\n{name}: up to {missing} clip frames a round not decoded (a seek that lands on an open GOP's "
                  "keyframe loses its leading pictures)")
    print("\nCPU seconds per clip against loadscope's: " + ", ".join(f"{n}: {x:.2f}x" for n, x in cpu_ratio.items()))
    info = [r["info"] for r in res[ls_name] if r["info"]]
    if info:
        print(f"\nloadscope per clip (medians of the rounds): decode p50 {med(i['clip_decode_p50'] for i in info) * 1e3:.0f} ms, "
              f"p99 {med(i['clip_decode_p99'] for i in info) * 1e3:.0f} ms; "
              f"{med(i['frames_decoded'] for i in info):.1f} frames decoded, {med(i['packets'] for i in info):.1f} packets, "
              f"{med(i['bytes'] for i in info) / 2**20:.2f} MiB read, open and index {med(i['open_seconds'] for i in info) * 1e3:.1f} ms")
    print("\n| group | clips | loadscope clips/s | ceiling clips/s | floor clips/s | loadscope / ceiling (range) "
          "| loadscope / floor | floor / ceiling | clip p99 |\n|---|---|---|---|---|---|---|---|---|")
    for name, g in by_gop.items():
        p99 = [i["clip_decode_p99"] for i in g["loadscope_info"] if i]
        print(f"| {name} | {g['clips']} | {g['loadscope']:.1f} | {g['ceiling']:.1f} | {g['floor']:.1f} | {g['ratio']['median']:.2f} "
              f"({g['ratio']['min']:.2f}-{g['ratio']['max']:.2f}) | {g['ratio_floor']['median']:.2f} "
              f"| {g['floor_vs_ceiling']['median']:.2f} | {med(p99) * 1e3:.0f} ms |")
    print("\n| configuration | clips/s (median of 3) |\n|---|---|")
    for name, v in by_threads.items():
        print(f"| {name} | {v:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
