"""How random the batches are under each way of dealing an epoch to the ranks: a shuffle-quality
figure for Loader(partition=...) against a full permutation of the same samples.

Tar shards are shuffled as WebDataset does (the shard order permuted per epoch, then a buffer of
`shuffle_buffer` samples): samples that train together come from few shards. What matters for
training is how mixed a step is, so for each step of all W ranks (W batches) and for each
rank's batch this counts the shards its samples come from, and the share of pairs of its samples
that come from the same shard (1/shards for a full permutation of equal shards: lower is more
mixed). The reference is the same samples shuffled by a full permutation (a file list with
shuffle=True). Nothing is decoded: the order is all that is measured.

    .venv/bin/python benchmarks/bench_partition.py [--data data/demo] [--world 4] [--batch 16]
"""

import argparse
import collections
import glob
import json
import os
import statistics
import sys

import loadscope as ls


def shard_of_key(shards):
    """sample key (file stem) -> shard path, from the shards' member names."""
    import tarfile

    out = {}
    for s in shards:
        with tarfile.open(s) as tf:
            for name in tf.getnames():
                out[name.split("/")[-1].split(".")[0]] = s
    return out


def stem(key: str) -> str:
    return key.rsplit(":", 1)[-1].rsplit("/", 1)[-1].split(".")[0]


def steps(source, world, batch, partition, epochs, **kw):
    """[(epoch, step) -> list of keys of the step's W batches], and each rank's batches."""
    per_rank = []
    for r in range(world):
        L = ls.Loader(source(), fields={"cls": ls.Int()}, batch_size=batch, rank=r, world_size=world, threads=1,
                      shuffle=True, seed=11, partition=partition, **kw)
        batches = []
        for e in range(epochs):
            L.set_epoch(e)
            batches += [[stem(k) for k in b["__key__"]] for b in L]
        per_rank.append(batches)
    return [sum((per_rank[r][j] for r in range(world)), []) for j in range(len(per_rank[0]))], \
        [b for rank in per_rank for b in rank]


def mixing(groups, shard):
    """Mean distinct shards per group and mean share of same-shard pairs."""
    distinct, same = [], []
    for g in groups:
        c = collections.Counter(shard[k] for k in g)
        n = len(g)
        distinct.append(len(c))
        same.append(sum(v * (v - 1) for v in c.values()) / (n * (n - 1)) if n > 1 else 0.0)
    return statistics.mean(distinct), statistics.mean(same)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data/demo")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", default="results/bench_partition.json")
    a = ap.parse_args()
    shards = sorted(glob.glob(os.path.join(a.data, "shards", "*.tar")))
    if not shards:
        print(f"no shards in {a.data}/shards: make data first", file=sys.stderr)
        return 2
    shard = shard_of_key(shards)
    manifest = os.path.join(a.data, "manifest.jsonl")
    rows = []

    def row(name, source, partition, **kw):
        st, bt = steps(source, a.world, a.batch, partition, a.epochs, **kw)
        d_step, p_step = mixing(st, shard)
        d_batch, p_batch = mixing(bt, shard)
        rows.append({"order": name, "partition": partition, "step_shards": d_step, "step_same_pairs": p_step,
                     "batch_shards": d_batch, "batch_same_pairs": p_batch})
        print(f"{name:34s} {partition:10s}  step of {a.world}x{a.batch}: {d_step:5.2f} shards, same-shard pairs "
              f"{p_step:.3f}   one batch: {d_batch:5.2f} shards, {p_batch:.3f}")

    row("full permutation (file list)", lambda: ls.FileList(manifest), "interleave")
    for buf in (1000, 200):
        for part in ("interleave", "contiguous"):
            row(f"shards, shuffle_buffer={buf}", lambda b=buf: ls.WebDataset(shards, shuffle_buffer=b), part)
    print(f"({len(shards)} shards, {len(shard)} samples, {a.epochs} epochs, seed 11)")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"shards": len(shards), "samples": len(shard), "world": a.world, "batch": a.batch, "rows": rows}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
