"""`make demo` / `loadscope demo`: the headline A/B experiment (benchmarks/experiments/loader.toml):
torch's DataLoader + PIL + torchvision against loadscope on the demo dataset (generated when
missing), same files, transforms, cores and batch size; each repetition a fresh process, arms
interleaved. Prints the summary table and the verdict and leaves the report on disk."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import datasets
from ._errors import ConfigError


def _experiment_file() -> str:
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        p = base / "benchmarks" / "experiments" / "loader.toml"
        if p.is_file():
            return str(p)
    raise ConfigError("loadscope demo runs the experiment benchmarks/experiments/loader.toml of a source "
                      "checkout; run it from the repository (or use `loadscope bench run FILE.toml`)")


def main(argv=None) -> int:
    from . import bench
    from .bench import report

    p = argparse.ArgumentParser(prog="loadscope demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/demo", help="dataset directory (generated if missing)")
    p.add_argument("--images", type=int, default=2000, help="images in a generated dataset")
    p.add_argument("--threads", type=int, help="loadscope threads = DataLoader workers (default: the experiment's)")
    p.add_argument("--repetitions", type=int, help="measured repetitions per arm (default: the experiment's)")
    p.add_argument("--out", default="results/demo", help="the experiment's folder (report.md and the rest)")
    a = p.parse_args(argv)

    path = _experiment_file()
    exp = bench.load(path)
    raw = dict(exp.raw, dataset=dict(exp.raw.get("dataset", {}), path=a.data, images=a.images))
    if a.threads is not None:
        raw["pipeline"] = dict(raw.get("pipeline", {}), threads=a.threads)
    exp = bench.from_dict(raw, source=path).with_overrides(repetitions=a.repetitions)
    info = datasets.ensure(a.data, images=a.images)
    print(f"dataset: {info['images']} JPEGs in {a.data} ({info['jpeg_bytes'] / 2**20:.0f} MiB); experiment {path}")
    print(f"arms: {', '.join(arm.name for arm in exp.arms)}; {exp.run['repetitions']} repetitions each, "
          f"{exp.run['samples']} samples measured per repetition, fresh process each\n")
    try:
        summary = bench.run(exp, a.out)
    except bench.ExperimentFailed as e:
        print(f"\nthe experiment failed: {e}", file=sys.stderr)
        return 1
    print()
    print(report.console(summary))
    t = summary["effects"][exp.arms[1].name]["throughput"]
    ci = (f" ({summary['confidence']:.0%} CI {1 + t['ci_low']:.2f}x-{1 + t['ci_high']:.2f}x)"
          if t["ci_low"] is not None else "")
    print(f"\nloadscope / DataLoader: {1 + t['effect']:.2f}x{ci}")
    print(f"report: {os.path.join(a.out, 'report.md')} (measured here, now, on these cores; "
          "docs/benchmarks.md has the full benchmarks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
