"""The A/B benchmark harness: single-factor experiments with warm-up, fixed inputs,
repetitions in fresh processes, confidence intervals, correctness checks between arms, an
environment record and a rollout/rollback verdict. See docs/ab-testing.md.

    exp = loadscope.bench.load("benchmarks/experiments/threads.toml")
    summary = loadscope.bench.run(exp, "results/threads")   # writes report.md and friends

or ``loadscope bench run benchmarks/experiments/threads.toml``."""

from .experiment import Experiment, from_dict, load
from .runner import ExperimentFailed, run

__all__ = ["Experiment", "ExperimentFailed", "from_dict", "load", "run"]
