"""`loadscope bench run EXPERIMENT.toml` and `loadscope bench report DIR`."""

from __future__ import annotations

import argparse
import sys
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
    a = p.parse_args(argv)

    from . import report, runner
    from .experiment import load

    try:
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
