"""The A/B benchmark harness: single-factor experiments with warm-up, fixed inputs,
repetitions in fresh processes, confidence intervals, correctness checks between arms, an
environment record and a rollout/rollback verdict. See docs/ab-testing.md.

    exp = loadscope.bench.load("benchmarks/experiments/threads.toml")
    summary = loadscope.bench.run(exp, "results/threads")   # writes report.md and friends

or ``loadscope bench run benchmarks/experiments/threads.toml``. The arms may be the user's own
pipeline (``[pipeline] factory = "mytrain.data:make_loader"``) with the user's own training step
(``[step] setup``/``function``, which gets a StepContext); ``loadscope bench baseline`` measures
such a pipeline as it is (baseline.run)."""

from .env import require
from .experiment import Experiment, from_dict, load
from .runner import ExperimentFailed, run
from .user import StepContext

__all__ = ["Experiment", "ExperimentFailed", "StepContext", "from_dict", "load", "require", "run"]

