"""Sample lists at the scale of real datasets (issue 18; docs/benchmarks.md).

    .venv/bin/python benchmarks/bench_manifest.py [--rows 10000000] [--files 1000000] [--reps 3]

1. Manifest: a JSON-lines manifest of --rows rows like ImageNet's file list
   ({"path": "train/n01440764/n01440764_10026.JPEG", "cls": 417}), in the page cache. Each
   measurement is a fresh process (after importing loadscope and torch): the time until a
   shuffled Loader over FileList is ready — the first time (no cache file) and from the cache
   file —, the process's RSS growth per row beside the paths' own bytes, and, from the cache
   file, the time to the first batch after resuming half-way through the epoch (fields: the
   inline "cls" only, so that the list, not decoding, is measured). Reference in the same run:
   Python reading the same file with json.loads line by line (what FileList did before, less
   building a tuple per row).
2. Folder: --files empty files in 1000 class folders (ImageNet's layout). Interleaved rounds
   after a warm-up round (the dentry cache warm): a Python walk with os.scandir that only lists
   the tree (the floor for any scanner in Python), loadscope's Folder + Loader, and
   torchvision's ImageFolder; the warm-up round checks Folder's samples against ImageFolder's,
   sample for sample.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PROBE = r"""
import json, os, sys, time
import loadscope as ls
spec = json.loads(sys.argv[1])
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
r0, t0 = rss(), time.perf_counter()
src = ls.FileList(spec["manifest"], cache_dir=spec["cache"])
loader = ls.Loader(src, fields={"cls": ls.Int()}, batch_size=256, shuffle=True, seed=1, threads=2)
ready = time.perf_counter() - t0
grown = rss() - r0
first = None
if spec["resume"]:
    half = len(src) // 256 // 2
    loader.load_state_dict({"format": "loadscope.Loader", "version": 1, "epoch": 0, "batches": half,
                            "epoch_set": True, "batch_size": 256, "seed": 1, "shuffle": True, "drop_last": False,
                            "world_size": 1, "rank": 0, "samples": loader.samples})
    t1 = time.perf_counter()
    next(iter(loader))
    first = time.perf_counter() - t1
print(json.dumps({"ready_s": ready, "rss_growth": grown, "from_cache": src.from_cache, "rows": len(src),
                  "table_bytes_per_row": src.bytes_per_sample, "first_batch_after_resume_s": first}))
"""


def make_manifest(path: str, rows: int) -> int:
    """Writes the manifest; returns the bytes of its paths."""
    path_bytes = 0
    with open(path, "w") as f:
        chunk = []
        for i in range(rows):
            cls = i % 1000
            p = f"train/n{cls:08d}/n{cls:08d}_{i:08d}.JPEG"
            path_bytes += len(p)
            chunk.append(f'{{"path": "{p}", "cls": {cls}}}\n')
            if len(chunk) == 100000:
                f.write("".join(chunk))
                chunk.clear()
        f.write("".join(chunk))
    return path_bytes


def python_json(path: str) -> float:
    t0 = time.perf_counter()
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            json.loads(line)
            n += 1
    return time.perf_counter() - t0


def probe(manifest: str, cache: str, resume: bool) -> dict:
    spec = {"manifest": manifest, "cache": cache, "resume": resume}
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def manifest_bench(rows: int, reps: int, work: str) -> dict:
    m = os.path.join(work, "manifest.jsonl")
    t0 = time.perf_counter()
    path_bytes = make_manifest(m, rows)
    size = os.path.getsize(m)
    print(f"{rows} rows ({size / 1e6:.0f} MB, paths {path_bytes / rows:.1f} bytes per row) written in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    with open(m, "rb") as f:  # into the page cache
        while f.read(64 << 20):
            pass
    cache = os.path.join(work, "cache")
    first, cached = [], []
    for _ in range(reps):
        shutil.rmtree(cache, ignore_errors=True)
        first.append(probe(m, cache, resume=False))
        cached.append(probe(m, cache, resume=True))
        assert not first[-1]["from_cache"] and cached[-1]["from_cache"]
    ref = python_json(m)
    med = statistics.median
    out = {
        "rows": rows, "manifest_bytes": size, "path_bytes_per_row": path_bytes / rows,
        "ready_first_s": med(r["ready_s"] for r in first), "ready_first_runs": [r["ready_s"] for r in first],
        "ready_cached_s": med(r["ready_s"] for r in cached), "ready_cached_runs": [r["ready_s"] for r in cached],
        "rss_bytes_per_row_first": med(r["rss_growth"] for r in first) / rows,
        "rss_bytes_per_row_cached": med(r["rss_growth"] for r in cached) / rows,
        "table_bytes_per_row": first[0]["table_bytes_per_row"],
        "first_batch_after_resume_s": med(r["first_batch_after_resume_s"] for r in cached),
        "python_json_loads_s": ref,
    }
    print(f"  ready, first time:        {out['ready_first_s']:.2f} s (runs {', '.join(f'{x:.2f}' for x in out['ready_first_runs'])})")
    print(f"  ready, from the cache:    {out['ready_cached_s']:.3f} s (runs {', '.join(f'{x:.3f}' for x in out['ready_cached_runs'])})")
    print(f"  RSS growth per row:       {out['rss_bytes_per_row_first']:.1f} bytes first "
          f"({out['rss_bytes_per_row_first'] - path_bytes / rows:.1f} beyond the path's), "
          f"{out['rss_bytes_per_row_cached']:.1f} from the cache (mapped, touched lazily); "
          f"the table holds {out['table_bytes_per_row']:.1f} incl. the path")
    print(f"  first batch, resumed half-way: {out['first_batch_after_resume_s'] * 1e3:.1f} ms")
    print(f"  Python json.loads per line: {ref:.1f} s ({ref / out['ready_first_s']:.1f}x the first-time ready)", flush=True)
    return out


def make_tree(root: str, files: int) -> None:
    per = max(1, files // 1000)
    for c in range(1000):
        d = os.path.join(root, f"n{c:08d}")
        os.makedirs(d)
        for i in range(per):
            os.close(os.open(os.path.join(d, f"n{c:08d}_{i:06d}.JPEG"), os.O_CREAT | os.O_WRONLY, 0o644))


def scandir_walk(root: str) -> int:
    n = 0
    stack = [root]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir():
                    stack.append(e.path)
                else:
                    n += 1
    return n


def folder_bench(files: int, reps: int, work: str) -> dict:
    import loadscope as ls
    from torchvision.datasets import ImageFolder

    root = os.path.join(work, "tree")
    t0 = time.perf_counter()
    make_tree(root, files)
    print(f"{files} files in 1000 folders made in {time.perf_counter() - t0:.0f} s", flush=True)

    def loadscope_folder():
        return ls.Loader(ls.Folder(root), fields={"jpg": ls.Image(224), "cls": ls.Int()}, batch_size=256, shuffle=True)

    def image_folder():
        return ImageFolder(root, loader=lambda p: p)

    arms = {"os.scandir walk": lambda: scandir_walk(root), "loadscope Folder": loadscope_folder,
            "torchvision ImageFolder": image_folder}
    # Warm-up round: fills the dentry cache and checks the samples.
    ref = image_folder().samples
    src = ls.Folder(root)
    got = [(os.fsdecode(k), int(m[-1][2])) for k, m in src._samples]
    assert got == ref, "Folder's samples differ from ImageFolder's"
    assert scandir_walk(root) == len(ref)
    print(f"  Folder == ImageFolder, sample for sample ({len(ref)} samples)", flush=True)
    times: dict = {k: [] for k in arms}
    for r in range(reps):
        for name in (list(arms) if r % 2 == 0 else list(reversed(arms))):
            t0 = time.perf_counter()
            arms[name]()
            times[name].append(time.perf_counter() - t0)
    out = {"files": len(ref), "runs": times}
    for name, xs in times.items():
        out[name] = statistics.median(xs)
    out["folder_over_scandir"] = out["loadscope Folder"] / out["os.scandir walk"]
    out["imagefolder_over_folder"] = out["torchvision ImageFolder"] / out["loadscope Folder"]
    for name in arms:
        print(f"  {name:24s} {out[name]:.2f} s (runs {', '.join(f'{x:.2f}' for x in times[name])})")
    print(f"  Folder / scandir walk: {out['folder_over_scandir']:.2f}x; ImageFolder / Folder: "
          f"{out['imagefolder_over_folder']:.1f}x", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--files", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--skip-folder", action="store_true")
    p.add_argument("--skip-manifest", action="store_true")
    p.add_argument("--out", default="results/bench_manifest.json")
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="ls-manifest-bench-")
    try:
        res = {"machine": {"cpus": os.cpu_count()}}
        if not a.skip_manifest:
            res["manifest"] = manifest_bench(a.rows, a.reps, work)
        if not a.skip_folder:
            res["folder"] = folder_bench(a.files, a.reps, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
