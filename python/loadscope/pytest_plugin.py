"""pytest plugin (registered by the `pytest11` entry point: nothing to configure).

In a training repository, ``pytest experiments/`` collects every experiment TOML there as a
test item and runs it — small by default (3 repetitions of at most 128 measured samples),
at its declared size with ``--loadscope-full`` — writing its report folder under
``results/loadscope/`` (``--loadscope-out DIR``) and printing each verdict at the end of the
session. An item fails when the experiment cannot run (an error in the experiment or in the
user's code) or is invalid (the correctness check between arms failed), and, for an
experiment marked ``gate = true``, when an arm is a confident roll back (the gain's interval
lies below what the criteria ask, or a guarded metric regresses beyond its bound at the
interval): a data-pipeline regression fails CI. An INCONCLUSIVE verdict (the intervals decide
neither way) passes, reported as INCONCLUSIVE with the repetitions that would decide it
(``--loadscope-gates=strict`` fails it too). Files under the harness's own output folders
(``results/``, ``--loadscope-out``) are never collected: a baseline's ``next-experiment.toml``
is a suggestion, not a test.

A TOML file is an experiment when it lies in a folder named ``experiments`` (a broken one
there fails as an item) or when it has a ``name`` and a ``[factor]`` table. An experiment's
``[small]`` table (repetitions, samples, warmup_samples, check_samples) replaces the small
run's plan for it: a gate must be decided on enough samples.

For experiments written in Python, the ``loadscope_experiment`` fixture runs one (a dict, a
path or a loaded Experiment) the same way and returns its summary:

    def test_workers(loadscope_experiment):
        s = loadscope_experiment({"name": "workers", "pipeline": {"factory": "mytrain.data:make_loader"},
                                  "factor": {"name": "num_workers", "values": [0, 2]}}, gate=True)
        assert s["correctness"]["arms"]["num_workers=2"]["ok"]

Nothing here imports torch or the extension until an experiment runs."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import pytest

# The small run: enough repetitions for an interval, few samples. The declared size is the
# benchmark; this is the check that the experiment still runs, agrees between arms and decides.
# The warm-up stays as declared: it is what lines the arms up on the same samples when their
# batch sizes differ (a multiple of every arm's batch).
SMALL = {"repetitions": 3, "samples": 128, "check_samples": 32}


def pytest_addoption(parser: Any) -> None:
    g = parser.getgroup("loadscope", "loadscope experiments")
    g.addoption("--loadscope-full", action="store_true", help="run experiment TOMLs at their declared size")
    g.addoption("--loadscope-gates", choices=("enforce", "strict", "report"), default="enforce",
                help="enforce (default): a gated experiment fails its test on a confident roll back, and an "
                     "INCONCLUSIVE one passes, reported as such; strict: INCONCLUSIVE fails too; report: every "
                     "verdict is printed and the test passes (a smoke run that must not turn a speed measurement "
                     "into a pass/fail)")
    g.addoption("--loadscope-out", default=None, metavar="DIR",
                help="where experiment reports go (default: <rootdir>/results/loadscope)")


def _looks_like_experiment(path: Any) -> bool:
    if path.parent.name == "experiments":
        return True
    try:
        from .bench.experiment import toml_module  # tomllib, or tomli before Python 3.11

        with open(path, "rb") as f:
            raw = toml_module().load(f)
    except Exception:
        return False
    return isinstance(raw, dict) and "name" in raw and isinstance(raw.get("factor"), dict)


def _is_own_output(path: Any, config: Any) -> bool:
    """A folder the harness wrote: the --loadscope-out folder, <rootdir>/results, or any folder
    holding a run's or a baseline's record (env.json beside experiment.json or baseline.json)."""
    out = config.getoption("loadscope_out")
    if out and os.path.abspath(str(path)) == os.path.abspath(out):
        return True
    if path.parent == config.rootpath and path.name == "results":
        return True
    return (path / "env.json").is_file() and ((path / "experiment.json").is_file() or (path / "baseline.json").is_file())


def pytest_ignore_collect(collection_path: Any, config: Any) -> Optional[bool]:
    if collection_path.is_dir() and _is_own_output(collection_path, config):
        return True
    return None


def pytest_collect_file(file_path: Any, parent: Any) -> Optional["ExperimentFile"]:
    if file_path.suffix == ".toml" and _looks_like_experiment(file_path):
        return ExperimentFile.from_parent(parent, path=file_path)
    return None


class ExperimentFailure(Exception):
    """An experiment item's failure: shown as its message, without a traceback of the plugin."""


def _small(exp: Any) -> Any:
    """The experiment at its small size: its own [small] table where it has one (a gated
    experiment may need more samples to decide reliably), else SMALL, never above the declared."""
    declared = exp.run
    plan = {k: min(v, declared[k]) for k, v in SMALL.items()}
    plan.update(exp.raw.get("small", {}))
    return exp.with_overrides(**plan, warmup_round=False, trace_batches=min(1, declared["trace_batches"]))


def _out_dir(config: Any, name: str) -> str:
    base = config.getoption("loadscope_out") or os.path.join(str(config.rootpath), "results", "loadscope")
    return os.path.join(base, name)


def run_experiment(config: Any, exp: Any, *, gate: Optional[bool] = None, full: Optional[bool] = None) -> Dict[str, Any]:
    """Runs `exp` (small unless full) into its report folder; records its verdict lines for the
    session's summary; raises ExperimentFailure when it cannot run or its gate fails, and
    skips when it needs CUDA that is not there."""
    from . import ConfigError
    from .bench import runner

    full = config.getoption("loadscope_full") if full is None else full
    gate = exp.gate if gate is None else gate
    if not full:
        exp = _small(exp)
    out = _out_dir(config, exp.name)
    lines: List[str] = config.stash.setdefault(_VERDICTS, [])
    try:
        summary = runner.run(exp, out, quiet=True)
    except ConfigError as e:
        lines.append(f"{exp.name}: ERROR (the experiment is not valid): {str(e).splitlines()[0]}")
        raise ExperimentFailure(f"experiment {exp.name}: {e}") from None
    except runner.ExperimentFailed as e:
        # Invalid whether gated or not: arms that deliver different data have no verdict, and a
        # broken experiment must not go green in CI.
        correctness = str(e).startswith("correctness check failed")
        lines.append(f"{exp.name}: {'INVALID (correctness)' if correctness else 'FAILED'}: report {out}/report.md")
        raise ExperimentFailure(f"experiment {exp.name}: {e}\nreport: {out}/report.md") from None
    if summary.get("status") == "skipped":
        lines.append(f"{exp.name}: skipped: {summary['reason']}")
        pytest.skip(summary["reason"])
    size = "full" if full else "small"
    rejected, undecided = [], []
    for arm, v in summary["verdicts"].items():
        more = v.get("repetitions_to_decide")
        # No estimate when the interval is too wide to scale (its low end at -100%): say so.
        hint = (f" (about {more} repetitions would decide it)" if more else
                " (too noisy to estimate how many repetitions would decide it)" if v["decision"] == "inconclusive" else "")
        lines.append(f"{exp.name} ({size}): {arm} vs {summary['baseline']}: {v['decision'].upper()}" + hint
                     + (f" — {(v.get('deciding') or v['reasons'])[0]}" if v["reasons"] else ""))
        if v["decision"] == "inconclusive":
            undecided.append(f"{arm}: INCONCLUSIVE: " + "; ".join(v["reasons"]))
        elif v["decision"] != "adopt":
            rejected.append(f"{arm}: {v['decision']}: " + "; ".join(v["reasons"]))
    lines.append(f"{exp.name}: report {out}/report.md")
    mode = config.getoption("loadscope_gates")
    failing = rejected + (undecided if mode == "strict" else [])
    if gate and failing and mode == "report":
        lines.append(f"{exp.name}: gate not enforced (--loadscope-gates=report): " + " | ".join(failing))
    elif gate and failing:
        raise ExperimentFailure(f"experiment {exp.name} (gate = true, {size} run): " + " | ".join(failing)
                                + f"\nreport: {out}/report.md")
    return summary


def _mark_inconclusive(node: Any, summary: Dict[str, Any]) -> None:
    """Shows a passing test whose experiment has an inconclusive verdict as INCONCLUSIVE."""
    if any(v["decision"] == "inconclusive" for v in summary.get("verdicts", {}).values()):
        node.user_properties.append(("loadscope", "inconclusive"))


_VERDICTS = pytest.StashKey[List[str]]()


class ExperimentFile(pytest.File):
    def collect(self):  # type: ignore[override]
        yield ExperimentItem.from_parent(self, name=self.path.stem)


class ExperimentItem(pytest.Item):
    def runtest(self) -> None:
        from .bench import load

        try:
            exp = load(str(self.path))
        except Exception as e:  # a broken TOML, an unknown key, ...: the message lists what is allowed
            raise ExperimentFailure(f"{self.path}: {e}") from None
        _mark_inconclusive(self, run_experiment(self.config, exp))

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, ExperimentFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):  # type: ignore[override]
        return self.path, None, f"loadscope experiment {self.name}"


@pytest.fixture
def loadscope_experiment(request: Any):
    """Runs an experiment given as a dict, a TOML path or an Experiment; returns its summary.
    Small unless --loadscope-full (or full=True); gate=True fails the test unless every arm is
    adopted and correct."""
    from .bench import Experiment, from_dict, load

    def run(experiment: Any, *, gate: Optional[bool] = None, full: Optional[bool] = None) -> Dict[str, Any]:
        if isinstance(experiment, dict):
            exp = from_dict(experiment)
        elif isinstance(experiment, Experiment):
            exp = experiment
        else:
            exp = load(os.fspath(experiment))
        try:
            summary = run_experiment(request.config, exp, gate=gate, full=full)
        except ExperimentFailure as e:
            pytest.fail(str(e), pytrace=False)
        _mark_inconclusive(request.node, summary)
        return summary

    return run


def pytest_report_teststatus(report: Any, config: Any) -> Optional[tuple]:
    """A passing test with an INCONCLUSIVE experiment is counted and shown as such ("1 passed,
    1 inconclusive"; -v: INCONCLUSIVE), not as a plain pass."""
    if report.when == "call" and report.passed and ("loadscope", "inconclusive") in report.user_properties:
        return "inconclusive", "I", "INCONCLUSIVE"
    return None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: Any, config: Any) -> None:
    lines = config.stash.get(_VERDICTS, [])
    if lines:
        terminalreporter.section("loadscope experiments")
        for line in lines:
            terminalreporter.write_line(line)
