"""`loadscope bench run EXPERIMENT.toml`, `loadscope bench report DIR`,
`loadscope bench baseline FACTORY` (your own pipeline, as it is: a diagnosis) and
`loadscope bench tune EXPERIMENT.toml` (its loader settings chosen by experiments)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import List, Optional

from .._errors import ConfigError


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="loadscope bench", description="single-factor A/B experiments (docs/ab-testing.md)")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run an experiment and write its report")
    r.add_argument("experiment", help="a TOML file, e.g. benchmarks/experiments/threads.toml")
    r.add_argument("--out", help="output folder (default results/experiments/NAME-TIME)")
    for flag in ("repetitions", "samples", "warmup-samples", "check-samples"):
        r.add_argument(f"--{flag}", type=int, help=f"override [run] {flag.replace('-', '_')}")
    r.add_argument("--quiet", action="store_true")
    rep = sub.add_parser("report", help="recompute summary, plots and report.md of a finished experiment")
    rep.add_argument("dir")
    b = sub.add_parser("baseline", help="measure your own pipeline as it is and suggest the next experiment",
                       description="Measures FACTORY's pipeline (and your step) in fresh processes and writes "
                                   "diagnosis.md and next-experiment.toml (docs/getting-started.md).")
    b.add_argument("factory", help="package.module:function returning your DataLoader (or any iterable of batches)")
    b.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword argument for the factory (VALUE as in TOML: 2, true, \"text\"); repeatable")
    b.add_argument("--step", help="package.module:function(state, batch): one training step")
    b.add_argument("--setup", help="package.module:function(ctx) -> state: builds the model and optimizer once")
    b.add_argument("--repo", help="the training repository (put first on the path; its git commit is recorded; "
                                  "the pipeline runs there)")
    b.add_argument("--sample-ids", help="package.module:function(batch) -> one id per sample")
    b.add_argument("--batch-size-of", help="package.module:function(batch) -> samples in the batch")
    b.add_argument("--data", help="where the data is (recorded: filesystem, device, scale)")
    b.add_argument("--grad-accum", type=int, default=1)
    b.add_argument("--world-size", type=int, default=1)
    b.add_argument("--samples", type=int, default=1024)
    b.add_argument("--warmup-samples", type=int, default=256)
    b.add_argument("--repetitions", type=int, default=3)
    b.add_argument("--timeout", type=float, default=900.0, help="seconds per repetition")
    b.add_argument("--out", help="output folder (default results/baseline/TIME)")
    b.add_argument("--quiet", action="store_true")
    t = sub.add_parser("tune", help="choose threads, prefetch (and decoder threads) by experiments, and confirm the choice",
                       description="Runs one experiment per knob (threads, then prefetch, then decoder threads), each "
                                   "with 'auto' among its arms, then the chosen settings against the declared ones; "
                                   "writes recommendation.md (docs/tuning.md).")
    t.add_argument("experiment", help="an experiment file declaring the pipeline, step and run plan (its [factor] is "
                                      "ignored), e.g. benchmarks/experiments/threads.toml")
    t.add_argument("--knobs", help="which keyword of your factory each knob is: KNOB=ARG,... (KNOB: threads, prefetch, "
                                   "decoder_threads; default threads=threads,prefetch=prefetch)")
    for knob in ("threads", "prefetch", "decoder-threads"):
        t.add_argument(f"--{knob}", metavar="V,V,...", help=f"the {knob} values to try (default: the usual ones and auto)")
    for flag in ("repetitions", "samples", "warmup-samples", "check-samples"):
        t.add_argument(f"--{flag}", type=int, help=f"override [run] {flag.replace('-', '_')} in every experiment")
    t.add_argument("--out", help="output folder (default results/tune/NAME-TIME)")
    t.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)

    from . import report, runner
    from .experiment import load

    import signal

    # SIGTERM (`timeout`, a CI job cancelled, a scheduler) ends the run as Ctrl-C does: by an
    # exception, so that every `finally` runs: the ranks are stopped and emulated nodes removed.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        if a.command == "baseline":
            from . import baseline

            res = baseline.run(a.factory, dict(baseline.parse_arg(x) for x in a.arg), step=a.step, setup=a.setup,
                               repo=a.repo, sample_ids=a.sample_ids, batch_size_of=a.batch_size_of,
                               grad_accum=a.grad_accum, world_size=a.world_size, samples=a.samples,
                               warmup_samples=a.warmup_samples, repetitions=a.repetitions, data=a.data, out_dir=a.out,
                               timeout_s=a.timeout, quiet=a.quiet)
            with open(os.path.join(res["out_dir"], "diagnosis.md")) as f:
                print("\n" + f.read(), end="")
            return 0
        if a.command == "tune":
            from . import tune
            from .experiment import load as load_exp

            values = {k: v for k in tune.KNOBS if (v := tune.parse_values(getattr(a, k))) is not None}
            res = tune.run(a.experiment, knobs=tune.parse_knobs(a.knobs, load_exp(a.experiment).user) if a.knobs else None,
                           values=values, out_dir=a.out, quiet=a.quiet, repetitions=a.repetitions, samples=a.samples,
                           warmup_samples=a.warmup_samples, check_samples=a.check_samples)
            with open(os.path.join(res["out_dir"], "recommendation.md")) as f:
                print("\n" + f.read(), end="")
            return 0
        if a.command == "report":
            summary = report.regenerate(a.dir)
            print(report.console(summary))
            print(f"\nreport: {a.dir}/report.md")
            return 0
        exp = load(a.experiment).with_overrides(repetitions=a.repetitions, samples=a.samples,
                                                warmup_samples=a.warmup_samples, check_samples=a.check_samples)
        summary = runner.run(exp, a.out, quiet=a.quiet)
    except ConfigError as e:
        print(f"loadscope bench: {e}", file=sys.stderr)
        return 2
    except runner.ExperimentFailed as e:
        print(f"loadscope bench: experiment failed: {e}", file=sys.stderr)
        return 1
    print()
    print(report.console(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
