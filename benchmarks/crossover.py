"""Where GPU decoding starts to win: the decode-location experiments as a matrix (docs/gpu.md).

Each cell is one whole A/B run of the harness (warm-up, interleaved repetitions, intervals,
correctness between arms) of CPU decoding in loadscope's threads against GPU decoding, with the
fixed GPU training step of the experiment files running: `decode.toml` (JPEGs: nvJPEG) for
images, `decode-video.toml` (NVDEC) for clips. The cells vary the CPU budget (loader threads)
and the source's size; the table gives each cell's end-to-end samples/s per arm, the GPU arm's
effect with its interval, the step's GPU time (contention) and the GPU's idle share, and, per
workload, the largest thread count at which GPU decoding still wins.

    python benchmarks/crossover.py --out results/gpu/crossover            # needs CUDA
    python benchmarks/crossover.py --threads 2,8 --workloads clips-1080p --repetitions 3 --samples 256

Workloads and the data each reads (made by `python -m loadscope.datasets`; the GPU machine
has no ffmpeg CLI, so scripts/gpu-prefix.sh makes the videos here and gpu-check.sh carries them):
  images        data/demo             ImageNet sizes (shorter side 256-512): --images 1000 --videos 0
  photos-1080p  data/photos-1080p     --images 256 --videos 0 --image-short 1080
  clips-360p    data/video-360p       --images 1 --videos 12 --video-profile 360p
  clips-1080p   data/video-1080p      --images 1 --videos 8 --video-profile 1080p
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPERIMENTS = os.path.join(REPO, "benchmarks", "experiments")

# workload -> (experiment file, where its data is: [dataset] path, and [pipeline] root for clips;
# samples per repetition: about a second of the slowest arm at 16 threads, so that a cell's
# time goes into repetitions rather than into one long one)
WORKLOADS: Dict[str, Tuple[str, str, int]] = {
    "images": ("decode.toml", "data/demo", 2048),
    "photos-1080p": ("decode.toml", "data/photos-1080p", 512),
    "clips-360p": ("decode-video.toml", "data/video-360p", 128),
    "clips-1080p": ("decode-video.toml", "data/video-1080p", 64),
}
THREADS = (2, 4, 8, 16)


def cell(workload: str, threads: int, repetitions: Optional[int] = None, samples: Optional[int] = None):
    """The experiment of one cell: the workload's experiment file with its data and `threads`."""
    from loadscope.bench.experiment import from_dict, load

    if workload not in WORKLOADS:
        raise SystemExit(f"crossover: workload {workload!r}: allowed are {', '.join(WORKLOADS)}")
    name, data, default_samples = WORKLOADS[workload]
    raw = copy.deepcopy(load(os.path.join(EXPERIMENTS, name)).raw)
    raw["name"] = f"crossover-{workload}-t{threads}"
    raw["dataset"]["path"] = data
    if "factory" not in raw["pipeline"]:
        # Data that is not there fails the cell; it is never made in its place (the harness
        # would make ImageNet-size demo images where 1080p photos were meant).
        raw["dataset"]["generate"] = False
    raw["pipeline"]["threads"] = threads
    if "root" in raw["pipeline"]:  # the clips factory reads its videos from root
        raw["pipeline"]["root"] = data
    run = raw.setdefault("run", {})
    run["samples"] = samples or default_samples
    run["warmup_samples"] = min(run.get("warmup_samples", run["samples"] // 4), run["samples"] // 4)
    run["check_samples"] = min(run.get("check_samples", 16), 8)  # 8 videos of 1080p are carried
    if repetitions:
        run["repetitions"] = repetitions
    return from_dict(raw, source=os.path.join(EXPERIMENTS, name))


def row(workload: str, threads: int, summary: Dict[str, Any]) -> Dict[str, Any]:
    """One cell's figures from its summary.json: per arm (decode=cpu, decode=gpu) the end-to-end
    samples/s with its interval, step_ms and gpu_idle_share; the GPU arm's effect and verdict."""
    out: Dict[str, Any] = {"workload": workload, "threads": threads, "status": summary.get("status")}
    for arm, key in (("decode=cpu", "cpu"), ("decode=gpu", "gpu")):
        m = summary.get("per_arm", {}).get(arm, {})
        e2e = m.get("e2e_throughput", {})
        out[key] = {"e2e": e2e.get("mean"), "ci": (e2e.get("ci_low"), e2e.get("ci_high")),
                    "step_ms": m.get("step_ms", {}).get("mean"), "gpu_idle": m.get("gpu_idle_share", {}).get("mean")}
    eff = summary.get("effects", {}).get("decode=gpu", {}).get("e2e_throughput", {})
    out["effect"] = (eff.get("effect"), eff.get("ci_low"), eff.get("ci_high"))
    out["verdict"] = summary.get("verdicts", {}).get("decode=gpu", {}).get("decision")
    return out


def wins(r: Dict[str, Any]) -> Optional[bool]:
    """GPU decoding wins a cell when its effect's whole interval is above zero; loses when the
    whole interval is below; None when the interval spans zero (or the cell did not run)."""
    _, lo, hi = r["effect"]
    if lo is None or hi is None:
        return None
    return True if lo > 0 else False if hi < 0 else None


def crossover(rows: List[Dict[str, Any]], workload: str) -> str:
    """Where GPU decoding stops winning for one workload, in words: the largest CPU budget at
    which it wins, and the next one measured, where it ties or loses."""
    mine = [r for r in rows if r["workload"] == workload]
    cells = sorted((r for r in mine if r["status"] == "ok"), key=lambda r: r["threads"])
    won = [r["threads"] for r in cells if wins(r) is True]
    if not cells:
        return f"{workload}: not run" + (f" ({', '.join(sorted({str(r['status']) for r in mine}))})" if mine else "")
    if not won:
        return f"{workload}: GPU decoding wins at none of {[r['threads'] for r in cells]} threads"
    after = [r for r in cells if r["threads"] > max(won)]
    below = [r["threads"] for r in cells if r["threads"] < max(won) and wins(r) is not True]
    if below:  # not one crossover: say what was measured
        return f"{workload}: mixed: GPU decoding wins at {won} threads, not at {below}"
    if not after:
        return f"{workload}: GPU decoding wins at every budget measured, up to {max(won)} threads"
    nxt = after[0]
    how = "loses" if wins(nxt) is False else "does not win (the interval spans zero)"
    return f"{workload}: GPU decoding wins up to {max(won)} threads; at {nxt['threads']} it {how}"


def table(rows: List[Dict[str, Any]]) -> str:
    def f(x: Optional[float], fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    def ci(a: Dict[str, Any]) -> str:
        lo, hi = a["ci"]
        return f"{f(a['e2e'], '.0f')} [{f(lo, '.0f')}, {f(hi, '.0f')}]"

    lines = ["| workload | threads | CPU decode, samples/s | GPU decode, samples/s | GPU effect [95% CI] | "
             "step ms CPU / GPU | GPU idle CPU / GPU | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e, lo, hi = r["effect"]
        eff = "—" if e is None else f"{e:+.1%} [{f(lo, '+.1%')}, {f(hi, '+.1%')}]"
        c, g = r["cpu"], r["gpu"]
        lines.append(f"| {r['workload']} | {r['threads']} | {ci(c)} | {ci(g)} | {eff} | "
                     f"{f(c['step_ms'], '.2f')} / {f(g['step_ms'], '.2f')} | "
                     f"{f(c['gpu_idle'], '.1%')} / {f(g['gpu_idle'], '.1%')} | {r['verdict'] or r['status']} |")
    lines.append("")
    lines += [f"- {crossover(rows, w)}" for w in dict.fromkeys(r["workload"] for r in rows)]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/gpu/crossover")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"any of {', '.join(WORKLOADS)}")
    p.add_argument("--threads", default=",".join(map(str, THREADS)))
    p.add_argument("--repetitions", type=int)
    p.add_argument("--samples", type=int, help="per repetition, every workload (default: each workload's own)")
    a = p.parse_args(argv)
    from loadscope import bench

    threads = [int(t) for t in a.threads.split(",")]
    plan = [(w, t, cell(w, t, a.repetitions, a.samples)) for t in threads for w in a.workloads.split(",")]
    # Cells already in --out are kept and not run again: a run stopped by its time limit goes on
    # where it stopped, and a second call with other thread counts fills the matrix in.
    done = os.path.join(a.out, "crossover.json")
    try:
        with open(done) as fh:
            rows = json.load(fh)
    except (OSError, ValueError):  # none yet (or cut short: it is written by rename)
        rows = []
    os.makedirs(a.out, exist_ok=True)
    for w, t, exp in plan:  # every cell planned (and its config checked) before any runs
        if any(r["workload"] == w and r["threads"] == t and r["status"] == "ok" for r in rows):
            continue
        rows = [r for r in rows if not (r["workload"] == w and r["threads"] == t)]
        out = os.path.join(a.out, f"{w}-t{t}")
        print(f"crossover: {w} at {t} threads -> {out}", file=sys.stderr, flush=True)
        try:
            summary = bench.run(exp, out, quiet=True)
        except Exception as e:  # one cell's failure (e.g. data missing) leaves the others' figures
            print(f"crossover: {w} at {t} threads failed: {e}", file=sys.stderr)
            summary = {"status": f"failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"}
        rows.append(row(w, t, summary))
        rows.sort(key=lambda r: (list(WORKLOADS).index(r["workload"]), r["threads"]))
        # Written beside and renamed: a run stopped by its time limit leaves whole files.
        for name, text in (("crossover.json", json.dumps(rows, indent=1)), ("crossover.md", table(rows))):
            with open(os.path.join(a.out, name + ".tmp"), "w") as fh:
                fh.write(text)
            os.replace(os.path.join(a.out, name + ".tmp"), os.path.join(a.out, name))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
