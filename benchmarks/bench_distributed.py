"""Resume and layout benchmarks of docs/benchmarks.md (issue: data-parallel, resume, layouts).

    .venv/bin/python benchmarks/bench_distributed.py [--sizes 10000 100000] [--rounds 5]

1. Time to first batch after a mid-epoch resume, at each size, for a file list, plain tar
   shards (streamed: skipping reads the skipped samples) and indexed tar shards (skipping reads
   nothing): a fresh process per measurement, shuffled epoch, resumed half-way; the time to
   make the loader (reading the list or the indexes), to the first batch (the telemetry's
   first_batch_last_epoch) and the bytes the process read (/proc/self/io rchar), against a
   start from the beginning. Small synthetic samples (a 32x32 JPEG and a label) so that the
   skipping, not decoding, is what is measured; the files are in the page cache.
2. Throughput on the demo data (data/demo) from the class folder, plain tar shards and
   indexed tar shards: RandomResizedCrop(224)+flip, batch 64, 2 threads, rounds interleaved,
   median and the per-round ratio to the folder with a 95% t interval.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

PROBE = r"""
import json, sys, time
import loadscope as ls
spec = json.loads(sys.argv[1])
def rchar():
    for line in open("/proc/self/io"):
        if line.startswith("rchar"):
            return int(line.split()[1])
r0, t0 = rchar(), time.perf_counter()  # after importing loadscope and torch
if spec["layout"] == "list":
    src = ls.FileList(spec["manifest"])
else:
    src = ls.WebDataset(spec["shards"], index="auto" if spec["layout"] == "indexed" else "off")
loader = ls.Loader(src, fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=64, shuffle=True, seed=1,
                   threads=2)
made = time.perf_counter() - t0
if spec["resume"]:
    loader.load_state_dict(dict(spec["state"], samples=loader.samples))
t1 = time.perf_counter()
next(iter(loader))
first = time.perf_counter() - t1
tel = loader.telemetry().to_dict()["loop"]["first_batch_last_epoch"]
print(json.dumps({"make_s": made, "first_batch_s": first, "telemetry_first_batch_s": tel,
                  "read_mb": (rchar() - r0) / 1e6}))
"""


def synthetic(root: str, n: int) -> dict:
    from PIL import Image

    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=90)
    jpg = buf.getvalue()
    files = os.path.join(root, "files")
    os.makedirs(files)
    with open(os.path.join(root, "manifest.jsonl"), "w") as m:
        for i in range(n):
            p = os.path.join(files, f"{i:07d}.jpg")
            with open(p, "wb") as f:
                f.write(jpg)
            m.write(json.dumps({"path": p, "cls": i % 10}) + "\n")
    shards = []
    per = 1000
    for s in range(0, n, per):
        path = os.path.join(root, f"shard-{s // per:05d}.tar")
        with tarfile.open(path, "w") as tf:
            for i in range(s, min(n, s + per)):
                for name, data in ((f"{i:07d}.jpg", jpg), (f"{i:07d}.cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        shards.append(path)
    indexed = []
    for p in shards:
        q = p.replace("shard-", "ishard-")
        shutil.copyfile(p, q)
        indexed.append(q)
    from loadscope import shards as sh

    sh.index(indexed)
    return {"manifest": os.path.join(root, "manifest.jsonl"), "tar": shards, "indexed": indexed}


def resume_bench(sizes, reps: int) -> list:
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="ls-resume-") as root:
            t0 = time.perf_counter()
            data = synthetic(root, n)
            print(f"{n} samples made in {time.perf_counter() - t0:.1f} s", flush=True)
            half = n // 64 // 2
            state = {"format": "loadscope.Loader", "version": 1, "epoch": 0, "batches": half, "epoch_set": True,
                     "batch_size": 64, "seed": 1, "shuffle": True, "drop_last": False, "world_size": 1, "rank": 0}
            for layout in ("list", "tar", "indexed"):
                for resume in (False, True):
                    spec = {"layout": layout, "manifest": data["manifest"], "resume": resume, "state": state,
                            "shards": data["tar"] if layout == "tar" else data["indexed"]}
                    got = []
                    for _ in range(reps):
                        out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec)], capture_output=True,
                                             text=True, check=True)
                        got.append(json.loads(out.stdout))
                    med = {k: statistics.median(g[k] for g in got) for k in got[0]}
                    rows.append({"samples": n, "layout": layout, "resume_at_batch": half if resume else 0, **med})
                    print(f"  {layout:8s} {'resume' if resume else 'start '}: make {med['make_s'] * 1e3:7.1f} ms, "
                          f"first batch {med['first_batch_s'] * 1e3:7.1f} ms (telemetry "
                          f"{med['telemetry_first_batch_s'] * 1e3:.1f}), read {med['read_mb']:.1f} MB", flush=True)
    return rows


def throughput_bench(root: str, rounds: int) -> dict:
    import glob

    import loadscope as ls
    from loadscope import shards as sh
    from loadscope.bench import stats

    tmp = tempfile.mkdtemp(prefix="ls-layouts-")
    try:
        plain = sorted(glob.glob(os.path.join(root, "shards", "*.tar")))
        indexed = []
        for p in plain:
            q = os.path.join(tmp, os.path.basename(p))
            shutil.copyfile(p, q)
            indexed.append(q)
        sh.index(indexed)
        makers = {
            "folder": lambda: ls.Folder(os.path.join(root, "folder")),
            "tar": lambda: ls.WebDataset(plain, index="off"),
            "indexed tar": lambda: ls.WebDataset(indexed),
        }
        res = {k: [] for k in makers}
        for r in range(rounds + 1):  # round 0 warms the page cache and is dropped
            order = list(makers) if r % 2 == 0 else list(reversed(makers))
            for name in order:
                loader = ls.Loader(makers[name](), fields={"jpg": ls.Image(224, flip=0.5), "cls": ls.Int()},
                                   batch_size=64, threads=2, shuffle=True, seed=r)
                t0 = time.perf_counter()
                n = sum(len(b["cls"]) for b in loader)
                if r:
                    res[name].append(n / (time.perf_counter() - t0))
        out = {}
        for name, xs in res.items():
            ratios = [x / f for x, f in zip(xs, res["folder"])]
            s = stats.summarize(ratios, 0.95)
            out[name] = {"median": statistics.median(xs), "rounds": xs, "ratio_to_folder": statistics.median(ratios),
                         "ratio_ci": [s["ci_low"], s["ci_high"]]}
            ci = f"[{s['ci_low']:.3f}, {s['ci_high']:.3f}]" if s["ci_low"] is not None else "(one round: no interval)"
            print(f"  {name:12s} {out[name]['median']:7.0f} samples/s, x{out[name]['ratio_to_folder']:.3f} of the folder "
                  f"{ci}", flush=True)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--data", default="data/demo")
    p.add_argument("--out", default="results/bench_distributed.json")
    a = p.parse_args()
    print("time to first batch, from the start and resumed half-way:")
    resume = resume_bench(a.sizes, a.reps)
    print(f"throughput by layout on {a.data}:")
    layouts = throughput_bench(a.data, a.rounds)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"resume": resume, "layouts": layouts, "machine": " ".join(os.uname()), "cpus": os.cpu_count(),
                   "date": time.strftime("%Y-%m-%d")}, f, indent=1)
    print(f"written {a.out}")


if __name__ == "__main__":
    main()
