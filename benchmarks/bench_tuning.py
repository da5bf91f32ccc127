"""threads="auto" against a sweep of fixed thread counts, with consumers of fixed speed.

A consumer sleeps `step` per batch (no CPU), from 0 (faster than the loader can ever be) to
several times the loader's best batch time (much slower). For every step the arms are fixed
threads 1, 2, 4 (prefetch 2) and threads="auto" with prefetch="auto", each a fresh Loader:
`--warmup` batches, then `--batches` measured. Rounds interleave the arms (the machine is
shared and noisy); the figures are medians over rounds.

Per arm: throughput (batches/s), cores used (the process's CPU time over the wall time:
the consumer sleeps, so this is the loader's), and for auto the changes it made after the
warm-up per 1000 batches and where it settled. For the slowest consumer, from a trace of the
measured batches: how many samples were being made at once on average, and the share of time
in which two or more were (the loader holding two cores at once). Written to docs/benchmarks.md by hand with the
command and the machine.

    .venv/bin/python benchmarks/bench_tuning.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import loadscope as ls
from loadscope import datasets


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def concurrency(trace_path: str, t0_us: float, t1_us: float):
    """From a loader trace: the mean number of samples being made at once over [t0, t1] (the
    cores the loader's threads held on average), and the share of that time in which two or
    more were (the loader held two cores at once: a training step's threads lost one)."""
    import json as _json

    events = _json.load(open(trace_path))["traceEvents"]
    edges = []
    for e in events:
        if e.get("ph") == "X" and e.get("name") == "sample":
            a, b = max(e["ts"], t0_us), min(e["ts"] + e["dur"], t1_us)
            if b > a:
                edges += [(a, 1), (b, -1)]
    edges.sort()
    busy = two = 0.0
    n, last = 0, t0_us
    for at, d in edges:
        busy += n * (at - last)
        two += (at - last) if n >= 2 else 0.0
        n, last = n + d, at
    span = t1_us - t0_us
    return busy / span, two / span


def one(root: str, threads, step: float, warmup: int, batches: int, seed: int, trace: bool = False):
    prefetch = "auto" if threads == "auto" else 2
    loader = ls.Loader(ls.Folder(os.path.join(root, "folder")),
                       fields={"jpg": ls.Image(size=224, crop="random_resized", flip=0.5), "cls": ls.Int()},
                       batch_size=64, threads=threads, prefetch=prefetch, shuffle=True, seed=seed)
    n = 0
    t0 = c0 = None
    changes0 = 0
    epoch = 0
    while n < warmup + batches:
        loader.set_epoch(epoch)
        for _ in loader:
            if step:
                time.sleep(step)
            n += 1
            if n == warmup:
                if trace:
                    loader.start_trace("/tmp/bench_tuning.trace.json")
                    u0 = (time.monotonic_ns() - loader._pipeline.telemetry_created_ns()) / 1e3
                t0, c0 = time.perf_counter(), cpu_seconds()
                changes0 = loader._tuner.changes if loader._tuner is not None else 0
            if n == warmup + batches:
                break
        epoch += 1
    wall = time.perf_counter() - t0
    out = {"rate": batches / wall, "cores": (cpu_seconds() - c0) / wall}
    if trace:
        u1 = (time.monotonic_ns() - loader._pipeline.telemetry_created_ns()) / 1e3
        out["at_once"], out["two_plus"] = concurrency(loader.stop_trace(), u0, u1)
    if loader._tuner is not None:
        t = loader._tuner
        out.update(changes_per_1000=(t.changes - changes0) * 1000 / batches, threads=t.threads, prefetch=t.prefetch,
                   last=(t.decisions()[-1]["text"] if t.decisions() else None))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data/demo")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--batches", type=int, default=120)
    p.add_argument("--steps", default="0,0.5,1,2,5", help="consumer step as multiples of the best batch time")
    p.add_argument("--out", default="results/bench_tuning.json")
    a = p.parse_args()
    datasets.ensure(a.data)
    cores = ls.default_threads()
    fixed = sorted({1, 2, 4, cores})
    arms = [*fixed, "auto"]
    # The loader's best batch time: the fastest fixed setting with no consumer work.
    best = min(1 / one(a.data, t, 0.0, 20, 60, 0)["rate"] for t in fixed)
    steps = [float(x) * best for x in a.steps.split(",")]
    print(f"{cores} cores; best batch time {best * 1e3:.1f} ms; steps {[round(s * 1e3, 1) for s in steps]} ms")
    results = {s: {arm: [] for arm in arms} for s in steps}
    for r in range(a.rounds):
        for s in steps:
            order = arms if r % 2 == 0 else arms[::-1]
            for arm in order:
                results[s][arm].append(one(a.data, arm, s, a.warmup, a.batches, r, trace=s == steps[-1]))
    rows = []
    for s in steps:
        med = {arm: {k: statistics.median(x[k] for x in results[s][arm]) for k in ("rate", "cores")} for arm in arms}
        best_arm = max(fixed, key=lambda t: med[t]["rate"])
        auto = results[s]["auto"]
        row = {"step_ms": s * 1e3, "best_fixed": best_arm, "best_rate": med[best_arm]["rate"],
               "auto_rate": med["auto"]["rate"], "ratio": med["auto"]["rate"] / med[best_arm]["rate"],
               "auto_cores": med["auto"]["cores"], "best_cores": med[best_arm]["cores"],
               "all_cores_cores": med[cores]["cores"],
               "changes_per_1000": statistics.median(x["changes_per_1000"] for x in auto),
               "settled": [(x["threads"], x["prefetch"]) for x in auto], "last": auto[-1]["last"],
               "fixed": {str(t): med[t] for t in fixed}}
        rows.append(row)
        print(f"step {s * 1e3:6.1f} ms: best fixed threads={best_arm} {med[best_arm]['rate']:.1f} b/s "
              f"{med[best_arm]['cores']:.2f} cores | auto {med['auto']['rate']:.1f} b/s ({row['ratio']:.3f}x) "
              f"{med['auto']['cores']:.2f} cores, threads={cores}: {med[cores]['cores']:.2f} cores | "
              f"changes/1000 after warm-up {row['changes_per_1000']:.1f}, settled {row['settled']}")
        if s == steps[-1]:  # the slowest consumer: how many cores the loader held at once
            row["at_once"] = {str(t): statistics.median(x["at_once"] for x in results[s][t]) for t in arms}
            row["two_plus"] = {str(t): statistics.median(x["two_plus"] for x in results[s][t]) for t in arms}
            print("    samples made at once on average / share of time with two or more: " + ", ".join(
                f"threads={t}: {row['at_once'][str(t)]:.2f} / {row['two_plus'][str(t)]:.1%}" for t in arms))
        for t in fixed:
            print(f"    threads={t}: {med[t]['rate']:.1f} b/s, {med[t]['cores']:.2f} cores")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"cores": cores, "best_batch_seconds": best, "rows": rows}, f, indent=1)
    print(f"written: {a.out}")


if __name__ == "__main__":
    main()
