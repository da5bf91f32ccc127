#!/usr/bin/env python3
"""Peak memory of a loader reading 1 GB tar shards from a server, against the in-flight budget
(issue 13: "peak RSS with 1 GB shards stays within the configured in-flight budget + the usual
figures"). A benchmark: it asserts nothing.

One shard of about --shard-mb MB (the demo's real-photo JPEGs repeated under new keys, indexed)
is served by nginx (scripts/http-server.sh, the tests' server). Each arm is a fresh process
(its own peak RSS, VmHWM) that reads --samples samples, Image(224) RandomResizedCrop, batch 64,
2 threads, LOADSCOPE_REMOTE_INFLIGHT = --budget-mb:
  small-local      the demo's ten 7 MB shards from local disk: the usual figure
  big-local        the 1 GB shard from local disk (read by ranges through its index)
  big-indexed      the 1 GB shard over HTTP by its index, one rank (4 MiB blocks ahead)
  big-rank0of2     the same as rank 0 of 2 (spans of the rank's own members)
  big-streamed     the same streamed front to back (index="off": 8 MiB chunks, one ahead)
Peak RSS above small-local is what the shard's size and the network path cost.

    .venv/bin/python benchmarks/bench_remote_memory.py [--shard-mb 1024] [--samples 3000] [--budget-mb 64]
"""

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))


def child(mode: str, shards: list, samples: int) -> None:
    import loadscope as ls
    from loadscope import _native

    kw = {"rank": 0, "world_size": 2} if mode == "big-rank0of2" else {}
    src = ls.WebDataset(shards, index="off" if mode == "big-streamed" else "auto")
    L = ls.Loader(src, fields={"jpg": ls.Image(224), "cls": ls.Int()}, batch_size=64, threads=2, seed=0, **kw)
    n = 0
    for b in L:
        n += len(b["cls"])
        if n >= samples:
            break
    status = Path("/proc/self/status").read_text()
    hwm = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    print(json.dumps({"samples": n, "peak_rss_mib": hwm / 1024, "network_mb": _native.network_stats()["bytes"] / 1e6}))


def big_shard(out: Path, jpegs: list, target_bytes: int) -> Path:
    """One tar of the demo JPEGs repeated under new keys until target_bytes, with its index."""
    path = out / "big-000000.tar"
    blobs = [p.read_bytes() for p in jpegs]
    with tarfile.open(path, "w") as t:
        i = written = 0
        while written < target_bytes:
            for name, data in ((f"{i:08d}.jpg", blobs[i % len(blobs)]), (f"{i:08d}.cls", str(i % 10).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
                written += len(data) + 1024
            i += 1
    subprocess.run([sys.executable, "-m", "loadscope", "index", str(path)], check=True, capture_output=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shard-mb", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--budget-mb", type=int, default=64)
    ap.add_argument("--data", default=str(REPO / "data" / "demo"))
    ap.add_argument("--out", default=str(REPO / "results" / "bench_remote_memory.json"))
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1:], a.samples)

    from loadscope import datasets
    from servers import start_server, stop_server

    datasets.ensure(a.data, quiet=True)
    small = sorted(str(p) for p in Path(a.data, "shards").glob("*.tar"))
    tmp = Path(tempfile.mkdtemp(prefix="bench_remote_memory-"))
    (tmp / "www").mkdir()
    (tmp / "http").mkdir()
    try:
        big = big_shard(tmp / "www", sorted(Path(a.data, "folder").rglob("*.jpg")), a.shard_mb << 20)
        http = start_server("http-server.sh", tmp / "http", str(tmp / "www"))
        url = f"{http['LOADSCOPE_HTTP_URL']}/{big.name}"
        arms = {"small-local": small, "big-local": [str(big)], "big-indexed": [url], "big-rank0of2": [url],
                "big-streamed": [url]}
        env = dict(os.environ, LOADSCOPE_REMOTE_INFLIGHT=str(a.budget_mb << 20))
        out = {"shard_bytes": big.stat().st_size, "budget_mib": a.budget_mb, "samples": a.samples, "arms": {}}
        for mode, shards in arms.items():
            r = subprocess.run([sys.executable, __file__, "--samples", str(a.samples), "--child", mode, *shards],
                               env=env, capture_output=True, text=True, check=True)
            out["arms"][mode] = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"{mode:13s} peak RSS {out['arms'][mode]['peak_rss_mib']:7.1f} MiB, "
                  f"{out['arms'][mode]['network_mb']:7.1f} MB fetched", flush=True)
        base = out["arms"]["small-local"]["peak_rss_mib"]
        for m in out["arms"].values():
            m["above_small_local_mib"] = m["peak_rss_mib"] - base
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
        print(json.dumps(out, indent=1))
    finally:
        try:
            stop_server("http-server.sh", tmp / "http")
        except Exception as e:  # noqa: BLE001 - report, then remove the files
            print(f"stopping nginx: {e}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
