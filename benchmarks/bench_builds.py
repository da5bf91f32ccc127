"""Two builds of loadscope head to head on the same cores: each arm a fresh process with the
other build's package on PYTHONPATH, alternated old/new, new/old per round. For a change that
must not cost speed (a refactor: part 22's storage layers were measured with it), where the
peers' ratios are too wide on a noisy day.

    git worktree add /tmp/old <commit> && (cd /tmp/old && cmake ... build the module)
    .venv/bin/python benchmarks/bench_builds.py --old /tmp/old/python --new python --rounds 10

Kinds: ``folder`` (the demo's JPEGs by path, RandomResizedCrop(224) + flip, batch 64, 2
threads: images/s), ``shards`` (the same JPEGs from indexed tar shards), ``video`` (the demo's
videos by path, 4 clips of 16 frames at 112: clips/s), ``read`` (``read_file`` alone per JPEG,
page cache warm, best of 5 passes: microseconds, lower is better).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import glob, sys, time
import loadscope as ls
from loadscope import _native
kind, root = sys.argv[1], sys.argv[2]
if kind == "read":
    paths = sorted(glob.glob(root + "/folder/*/*.jpg"))
    for p in paths: _native.read_bytes(p)
    best = []
    for _ in range(5):
        t = time.perf_counter()
        for p in paths: _native.read_bytes(p)
        best.append(time.perf_counter() - t)
    print(min(best) / len(paths) * 1e6)
    sys.exit()
if kind == "folder":
    src, fields = ls.Folder(root + "/folder"), {"jpg": ls.Image(224, crop="random_resized", flip=0.5)}
elif kind == "shards":
    src = ls.WebDataset(sorted(glob.glob(root + "/shards/*.tar")), index="scan")
    fields = {"jpg": ls.Image(224, crop="random_resized", flip=0.5)}
else:
    src, fields = ls.FileList(root + "/videos.jsonl", cache_dir=None), {"mp4": ls.VideoClip(frames=16, size=112, clips=4)}
L = ls.Loader(src, fields=fields, batch_size=64 if kind != "video" else 8, threads=2, seed=1)
for _ in L: pass  # warm-up epoch: page cache, indexes
t, n = time.perf_counter(), 0
for b in L: n += len(b["__key__"])
print(n / (time.perf_counter() - t))
'''

# two-sided 95% t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 19: 2.093, 29: 2.045}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="the old build's python/ directory (its package and module)")
    p.add_argument("--new", default=str(ROOT / "python"))
    p.add_argument("--data", default=str(ROOT / "data" / "demo"))
    p.add_argument("--kinds", default="folder,shards,video,read")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--out", default=str(ROOT / "results" / "bench_builds.json"))
    a = p.parse_args()
    trees = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    out = {}
    for kind in a.kinds.split(","):
        got = {"old": [], "new": []}
        for r in range(a.rounds):
            for tree in (("old", "new") if r % 2 == 0 else ("new", "old")):
                run = subprocess.run([sys.executable, "-c", CHILD, kind, a.data], capture_output=True, text=True,
                                     check=True, env=dict(os.environ, PYTHONPATH=trees[tree]))
                got[tree].append(float(run.stdout.split()[-1]))
        ratios = [n / o for n, o in zip(got["new"], got["old"])]
        m = statistics.mean(ratios)
        half = T95.get(len(ratios) - 1, 2.0) * statistics.stdev(ratios) / len(ratios) ** 0.5
        unit = "us per file (time)" if kind == "read" else "per s"
        print(f"{kind}: old median {statistics.median(got['old']):.2f}, new median {statistics.median(got['new']):.2f} "
              f"{unit}; new/old mean {m:.3f} [95% CI {m - half:.3f}, {m + half:.3f}] over {a.rounds} paired rounds",
              flush=True)
        out[kind] = {**got, "ratio_mean": m, "ci95": [m - half, m + half]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
