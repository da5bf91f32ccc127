#!/usr/bin/env python3
"""uint8 against float output (issue 17; a benchmark, not a test: it asserts nothing about
speed). Where should ToTensor + Normalize happen?

The demo's real-photo JPEGs, RandomResizedCrop(224) + flip, batch 64, T threads, and a training
step that only touches the batch, so the loop measures input work alone:
  uint8         loadscope's uint8 batches, the step sums them
  uint8+torch   uint8 batches, then x.float().div(255).sub(mean).div(std) in the loop, as users
                write it (this work lands in the loop's "compute")
  float32       Image(dtype="float32", mean, std): the table lookup in the loader's threads
  float16       the same, 2 bytes a value
  bfloat16      the same
Rounds are interleaved after a warm-up epoch per arm; per round the ratio of each arm's samples/s
to uint8+torch; median and range. Also the bytes per batch and the loop's data-wait share.
A CUDA device (when present) adds: uint8 copied then normalised on the GPU, against float32
normalised on the CPU and copied.

    .venv/bin/python benchmarks/bench_float.py [--rounds 5] [--threads 2] [--samples 1024]
"""

import argparse
import statistics
from pathlib import Path

import torch

import loadscope as ls
from loadscope import datasets
from loadscope.bench import arms as bench_arms

REPO = Path(__file__).resolve().parents[1]
MEAN, STD = ls.IMAGENET_MEAN, ls.IMAGENET_STD


def arms(device):
    base = dict(size=224, flip=0.5)
    out = {
        "uint8": (ls.Image(**base), None),
        "uint8+torch": (ls.Image(**base), "cpu"),
        "float32": (ls.Image(**base, dtype="float32", mean=MEAN, std=STD), None),
        "float16": (ls.Image(**base, dtype="float16", mean=MEAN, std=STD), None),
        "bfloat16": (ls.Image(**base, dtype="bfloat16", mean=MEAN, std=STD), None),
    }
    if device:
        out["cuda: uint8 copied, normalised on GPU"] = (ls.Image(**base, dtype="float32", mean=MEAN, std=STD), device)
        out["cuda: float32 on CPU, copied"] = (ls.Image(**base, dtype="float32", mean=MEAN, std=STD), "cpu-then-copy")
    return out


def arm(name, root, field, how, threads, samples, device, info):
    """An arm of `samples` samples; `info[name]` gets the bytes of a batch and the data-wait share."""
    def epoch():
        loader_device = device if how == device else "cpu"
        L = ls.Loader(ls.Folder(root), fields={"jpg": field}, batch_size=64, threads=threads, shuffle=True,
                      device=loader_device)
        m = torch.tensor(MEAN).view(1, 3, 1, 1)
        s = torch.tensor(STD).view(1, 3, 1, 1)
        n, nbytes = 0, 0
        for b in L:
            x = b["jpg"]
            if how == "cpu":
                x = x.float().div(255).sub(m).div(s)
            elif how == "cpu-then-copy":
                x = x.to(device, non_blocking=False)
            nbytes = b["jpg"].numel() * b["jpg"].element_size()
            x.view(-1)[-1].item()  # touch it (synchronises a GPU); a step that costs nothing
            n += x.shape[0]
            if n >= samples:
                break
        info[name] = (nbytes, L.telemetry().to_dict()["loop"]["data_wait_share"])
        return n

    return bench_arms.Arm(name, epoch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=ls.default_threads())
    ap.add_argument("--samples", type=int, default=1024)
    args = ap.parse_args()
    root = REPO / "data" / "demo"
    datasets.ensure(str(root), quiet=True)
    root = root / "folder"
    device = "cuda" if torch.cuda.is_available() else None
    info = {}
    runs = [arm(name, root, field, how, args.threads, args.samples, device, info)
            for name, (field, how) in arms(device).items()]
    rates = bench_arms.interleaved(runs, args.rounds)
    ref = "uint8+torch"
    print(f"{'arm':<40} {'samples/s':>10} {'MiB/batch':>10} {'data wait':>10}  ratio")
    for r in runs:
        nbytes, share = info[r.name]
        print(f"{r.name:<40} {statistics.median(rates[r.name]):>10.0f} {nbytes / 2**20:>10.1f} "
              f"{'' if share is None else f'{share:.0%}':>10}  "
              + bench_arms.format_ratio("vs " + ref, bench_arms.ratio_summary(rates[r.name], rates[ref])))


if __name__ == "__main__":
    main()
