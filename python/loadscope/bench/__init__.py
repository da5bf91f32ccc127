"""The A/B benchmark harness: single-factor experiments with warm-up, fixed inputs,
repetitions in fresh processes, confidence intervals, correctness checks between arms, an
environment record and a rollout/rollback verdict. See docs/ab-testing.md.

    exp = loadscope.bench.load("benchmarks/experiments/threads.toml")
    summary = loadscope.bench.run(exp, "results/threads")   # writes report.md and friends

or ``loadscope bench run benchmarks/experiments/threads.toml``. The arms may be the user's own
pipeline (``[pipeline] factory = "mytrain.data:make_loader"``) with the user's own training step
(``[step] setup``/``function``, which gets a StepContext); ``loadscope bench baseline`` measures
such a pipeline as it is (baseline.run)."""

from .experiment import Experiment, from_dict, load
from .runner import ExperimentFailed, run
from .user import StepContext

__all__ = ["Experiment", "ExperimentFailed", "StepContext", "from_dict", "load", "require", "run"]


def require() -> None:
    """What the harness needs beyond torch, checked before it writes anything: psutil (the
    memory, CPU and I/O of every process of a repetition). A ConfigError that says how to get it."""
    from .._errors import ConfigError
    from ..telemetry.watcher import PSUTIL_MISSING

    try:
        import psutil  # noqa: F401
    except ImportError:
        raise ConfigError(PSUTIL_MISSING) from None
