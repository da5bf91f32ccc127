#!/usr/bin/env python3
"""The two worked examples of docs/telemetry.md: an input-bound run (the training step is
shorter than decoding a batch) and a compute-bound one (a 60 ms step), with their summaries and
traces (JSON for chrome://tracing / ui.perfetto.dev, and a PNG rendering).

    .venv/bin/python benchmarks/telemetry_examples.py [--out docs/img]
"""

import argparse
import os
import sys
import time

import torch

import loadscope as ls
from loadscope import datasets, telemetry


def run(name: str, step_seconds: float, out: str, root: str) -> None:
    fields = {"jpg": ls.Image(224, flip=0.5), "cls": ls.Int()}
    for _ in ls.Loader(ls.Folder(root), fields=fields, batch_size=64, threads=2):
        pass  # warm the page cache with another loader: telemetry accumulates over a loader's life
    loader = ls.Loader(ls.Folder(root), fields=fields, batch_size=64, threads=2, shuffle=True)
    trace = os.path.join(out, f"{name}.trace.json")
    loader.start_trace(trace)
    for _batch in loader:
        time.sleep(step_seconds)  # the "training step"
    loader.stop_trace()
    telemetry.render_trace(trace, os.path.join(out, f"{name}.png"), start=0.0, seconds=0.5)
    print(f"=== {name} (step {step_seconds * 1e3:.0f} ms) ===")
    print(loader.telemetry().summary())
    print()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo")
    p.add_argument("--out", default="docs/img")
    a = p.parse_args()
    torch.set_num_threads(1)
    datasets.ensure(a.data)
    os.makedirs(a.out, exist_ok=True)
    root = os.path.join(a.data, "folder")
    run("input-bound", 0.002, a.out, root)
    run("compute-bound", 0.060, a.out, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
