#!/usr/bin/env python3
"""Memory per engine thread with 4K video (issue 14; a benchmark, it asserts nothing).

Makes a 4 s 3840x2160 H.264 video (2 B-frames, grain), then in a fresh process per thread count
loads 8 clips of 16 frames at 224 (2 per batch) and prints the growth of the peak RSS (VmHWM)
over the RSS before the loader was made.

    .venv/bin/python benchmarks/bench_video_memory.py [--threads 1 2] [--dir /tmp/loadscope-4k]
"""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys
import torch  # noqa: F401  (loaded before the baseline, as in training)
import loadscope as ls

def status(key):
    return int(open("/proc/self/status").read().split(key + ":")[1].split()[0]) * 1024

manifest, threads = sys.argv[1], int(sys.argv[2])
before = status("VmRSS")
L = ls.Loader(ls.FileList(manifest), fields={"mp4": ls.VideoClip(224, frames=16, stride=2)}, batch_size=2,
              threads=threads)
for _ in L:
    pass
print(json.dumps({"threads": threads, "growth_mib": (status("VmHWM") - before) / 2**20}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dir", default="/tmp/loadscope-4k")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    video = os.path.join(a.dir, "4k.mp4")
    if not os.path.exists(video):
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=s=3840x2160:r=30:d=4",
                        "-vf", "noise=alls=8:allf=t", "-c:v", "libx264", "-preset", "ultrafast", "-bf", "2",
                        "-g", "60", video], check=True)
    manifest = os.path.join(a.dir, "clips.jsonl")
    with open(manifest, "w") as f:
        f.write((json.dumps({"path": video}) + "\n") * 8)
    for t in a.threads:
        out = subprocess.run([sys.executable, "-c", CHILD, manifest, str(t)], check=True, capture_output=True, text=True)
        print(out.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
