#!/usr/bin/env python3
"""Decoder reuse between videos (Note [decoder reuse]; a benchmark, not a test): clips/s of one
loader over videos set up alike (the realistic set's 1280x720 H.264 files: one size, rate and
encoder, so one extradata) with each thread's decoder kept between videos, against a new decoder
per clip (LOADSCOPE_VIDEO_DECODER_REUSE=0). Every round is a fresh process, the two arms
alternate, the index cache is off (every clip opens and indexes its video as if new), and both
read the same clips (seeded). 16 frames, stride 2, RandomResizedCrop 224 + flip, batch 8.

    .venv/bin/python benchmarks/bench_video_reuse.py [--data data/realistic] [--rounds 5] [--threads 2]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from loadscope.bench import arms as bench_arms

ROUND = r"""
import json, os, sys, time
import loadscope as ls
manifest, threads, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
loader = ls.Loader(ls.FileList(manifest), fields={"mp4": ls.VideoClip(224, frames=16, stride=2, flip=0.5)},
                   batch_size=8, threads=threads, shuffle=True, seed=0)
for b in loader:  # warm-up epoch
    pass
start, n = time.perf_counter(), 0
for _ in range(epochs):
    for b in loader:
        n += b["mp4"].shape[0]
print(json.dumps({"clips_per_s": n / (time.perf_counter() - start)}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/realistic")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=4, help="each video listed N times per epoch")
    a = p.parse_args()
    with open(os.path.join(a.data, "videos.jsonl")) as f:
        paths = [os.path.join(a.data, json.loads(line)["path"]) for line in f]
    wide = [x for x in paths if json.load(open(os.path.splitext(x)[0] + ".json"))["width"] == 1280]
    if not wide:
        sys.exit(f"{a.data}: no 1280x720 videos (make them: python -m loadscope.datasets --out {a.data} "
                 "--images 1 --videos 24 --video-profile realistic)")
    manifest = os.path.join(tempfile.mkdtemp(), "videos.jsonl")
    with open(manifest, "w") as f:
        f.writelines(json.dumps({"path": os.path.abspath(x)}) + "\n" for x in wide * a.repeat)
    res = {"kept": [], "new": []}
    for r in range(a.rounds):
        for arm in (("kept", "new") if r % 2 == 0 else ("new", "kept")):
            env = dict(os.environ, LOADSCOPE_VIDEO_INDEX_CACHE_MB="0",
                       LOADSCOPE_VIDEO_DECODER_REUSE="1" if arm == "kept" else "0")
            out = subprocess.run([sys.executable, "-c", ROUND, manifest, str(a.threads), "2"], env=env,
                                 capture_output=True, text=True, check=True)
            res[arm].append(json.loads(out.stdout.strip().splitlines()[-1])["clips_per_s"])
            print(f"round {r} {arm}: {res[arm][-1]:.1f} clips/s", flush=True)
    ratio = bench_arms.ratio_summary(res["kept"], res["new"])
    print(f"{len(wide)} videos x {a.repeat}, {a.threads} threads; clips/s median kept "
          f"{statistics.median(res['kept']):.1f}, new {statistics.median(res['new']):.1f}")
    print(bench_arms.format_ratio("kept / new decoder per clip", ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
