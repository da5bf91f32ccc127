"""An A/B experiment as declared in a TOML file (or a dict): the baseline pipeline, exactly one
factor and its values (the arms), the dataset, the step definition, the run plan and the
rollout/rollback criteria. Everything is validated before anything runs: unknown keys, wrong
types and values, and arms that differ in more than the declared factor are refused with a
message that lists what is allowed. See docs/ab-testing.md.

Two kinds of pipeline: the built-in ones (`loader = "torch" | "loadscope"` over a dataset
folder, every setting in PIPELINE), and the user's own (`factory = "pkg.module:function"`):
then every other [pipeline] key is a keyword argument of that function, and any of them, or
the factory itself, may be the factor (see user.py and docs/ab-testing.md)."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._errors import ConfigError
from .._options import allowed_values

# The pipeline settings every arm has; any of them can be the factor. (allowed, default)
PIPELINE: Dict[str, Tuple[Any, Any]] = {
    # torch: DataLoader + PIL + torchvision; simplejpeg, torchvision: the same DataLoader with a
    # peer's JPEG decoder (torchvision's transforms on tensors), for peer-vs-loadscope experiments.
    "loader": (("loadscope", "torch", "simplejpeg", "torchvision"), "loadscope"),
    "threads": ("int>=0|auto", 2),     # loadscope threads ("auto": docs/tuning.md); DataLoader workers (0: main process)
    "prefetch": ("int>=1|auto", 2),    # batches ready ahead (DataLoader: prefetch_factor per worker)
    "batch_size": ("int>=1", 64),      # per device (per rank)
    "pin_memory": ((False, True), False),
    "decode": (("cpu", "gpu"), "cpu"),
    "layout": (("files", "folder", "shards"), "files"),
    "staging": (("in-place", "local"), "in-place"),
    # Where the data is read from: [dataset] path ("local"), the same files at [dataset] url
    # streamed ("remote"), through a warm node-local cache ("remote-cache"), or copied from the
    # url to local disk first ("remote-staged", timed like staging).
    "storage": (("local", "remote", "remote-cache", "remote-staged"), "local"),
    "shard_index": (("auto", "off"), "auto"),  # tar shards: ranged reads by their .idx, or streamed
    "world_size": ("int>=1", 1),
    # How a loadscope Loader deals the epoch's batches to the ranks (Loader(partition=...)).
    "partition": (allowed_values("partition"), "interleave"),
    # Emulated nodes (bench/nodes.py, root only): the ranks spread evenly over `nodes` network
    # namespaces joined by links of `link_mbit` Mbit/s each way (0: not shaped).
    "nodes": ("int>=1", 1),
    "link_mbit": ("float>=0", 0.0),
    # Batches made by a pool of loadscope workers on Ray (ls.ray.Workers(ray_workers, cpus_per_worker=
    # ray_worker_cpus)), or by the trainer itself (0); on `cpu_nodes` emulated CPU-only nodes
    # beside the training nodes, the Ray cluster started by the runner for each repetition
    # (bench/cluster.py). CPU quotas (cgroup v1 cpu bandwidth, root only) make a node's cores:
    # node_cores for each training node, cpu_node_cores for each CPU node (0: no quota).
    "ray_workers": ("int>=0", 0),
    "ray_worker_cpus": ("float>0", 1.0),
    "cpu_nodes": ("int>=0", 0),
    "node_cores": ("float>=0", 0.0),
    "cpu_node_cores": ("float>=0", 0.0),
    "size": ("int>=1", 224),
    "crop": (("random_resized", "center"), "random_resized"),
    "flip": ("float[0,1]", 0.5),
    "shuffle": ((False, True), False),
    "seed": ("int>=0", 0),
}

# What a factor may do to the data, hence how arms are checked against the baseline:
#   identical     the same samples in the same order, byte for byte (ids and pixel checksums)
#   same-samples  the same samples (order may differ), byte for byte under a fixed center crop
#   tolerance     the same samples under a fixed center crop, pixels within `tolerance`
#   none          the factor changes the data by design; nothing to compare
AUTO_CORRECTNESS = {
    "threads": "identical", "prefetch": "identical", "batch_size": "identical", "pin_memory": "identical",
    "staging": "identical", "world_size": "identical", "layout": "identical", "partition": "identical",
    "storage": "identical", "shard_index": "identical", "nodes": "identical", "link_mbit": "identical",
    "ray_workers": "identical", "ray_worker_cpus": "identical", "cpu_nodes": "identical", "node_cores": "identical",
    "cpu_node_cores": "identical",
    "loader": "tolerance", "decode": "tolerance", "grad_accum": "identical",
    "size": "none", "crop": "none", "flip": "none", "shuffle": "none", "seed": "none",
}
# A bundle of settings as one factor: each arm's value is a table of pipeline keys (a built-in
# pipeline's, or the factory's arguments) over the baseline, e.g. the settings `bench tune`
# recommends against the defaults. Still one factor: the arms differ in that bundle only.
SETTINGS = "settings"
_STRICTNESS = ("identical", "same-samples", "tolerance", "none")
# Factors that deal the same epoch to the ranks differently: each arm's measured window is
# another stretch of it, so the arms' windows are compared with themselves, not each other.
DEALS_THE_EPOCH = ("partition",)
SCALING = ("weak", "strong")  # [factor] scaling of world_size: per-rank batch held, or the global batch
CORRECTNESS_MODES = ("auto", "identical", "same-samples", "tolerance", "none")

# Metrics every run records: (unit, higher is better, meaning). docs/ab-testing.md explains each.
METRICS: Dict[str, Tuple[str, bool, str]] = {
    "throughput": ("samples/s", True, "data pipeline alone: samples per second, no training step"),
    "e2e_throughput": ("samples/s", True, "with the step's compute: samples per second of training"),
    "latency_p50": ("ms", False, "next() per batch in the pipeline phase, median"),
    "latency_p99": ("ms", False, "next() per batch in the pipeline phase, 99th percentile"),
    "data_wait_share": ("fraction", False, "time in next() over next() plus compute, with compute"),
    "first_batch": ("s", False, "from making the loader to its first batch"),
    "new_epoch_first_batch": ("s", False, "first batch of a new epoch after one that ended, the faster of two (a "
                                          "DataLoader with workers: rebuilt with short epochs; else a fresh iterator); "
                                          "measured when a criterion names it"),
    "peak_pss": ("MiB", False, "largest PSS summed over the run's processes (workers included)"),
    "cpu_per_sample": ("ms", False, "CPU time of all the run's processes per sample, pipeline phase"),
    "staging_seconds": ("s", False, "copying the dataset to local disk before loading (remote-cache: filling the cache)"),
    "step_time_p50": ("ms", False, "one training step on the host clock (the call, with any waiting it does), median"),
    "step_time_p99": ("ms", False, "one training step on the host clock, 99th percentile"),
    "step_ms": ("ms", False, "GPU time of one training step (compute='matmul', or your step on a GPU), CUDA events, mean"),
    "allreduces_per_sample": ("count", False, "gradient bucket all-reduces per sample and rank (DDP; fewer with "
                                              "gradient accumulation)"),
    "exposed_comm_per_sample": ("ms", False, "all-reduce time backward() waited for, per sample and rank (stragglers' "
                                             "wait included; DDP)"),
    "gpu_idle_share": ("fraction", False, "share of the e2e phase in which the GPU ran no training step "
                                          "(waiting for input, copying, or decoding it)"),
}

STEP = {"compute": (("none", "sleep", "model", "matmul", "user"), "none"), "compute_ms": ("float>=0", 0.0),
        "grad_accum": ("int>=1", 1), "matmuls": ("int>=1", 4),
        "model_mb": ("float>=0", 0.0),  # compute = "model": MB of float32 parameters beyond the small CNN
        "setup": ("str", ""), "function": ("str", "")}  # the user's step: compute = "user"

# A user pipeline's [pipeline] keys that the harness reads itself; every other key is passed to
# the factory. sample_ids and batch_size_of say how to read an arm's batches, so [[arms]] may
# set them beside the factor (they change no data).
USER_PIPELINE = {"factory": "str", "sample_ids": "str", "batch_size_of": "str", "world_size": "int>=1",
                 "nodes": "int>=1", "link_mbit": "float>=0", "grad_accum": "int>=1",
                 **{k: PIPELINE[k][0] for k in ("ray_workers", "ray_worker_cpus", "cpu_nodes", "node_cores", "cpu_node_cores")}}
# [step] settings that may be the factor (of any pipeline): an arm then carries its own value.
STEP_FACTORS = ("grad_accum",)
USER_READING = ("sample_ids", "batch_size_of")
# Where the ranks run: an arm of the factor world_size may also say on how many nodes
# ("1, 2 and 4 ranks on 1 and 2 nodes"): the ranks' placement is part of the world.
PLACEMENT = ("nodes",)
RUN = {"warmup_samples": ("int>=0", 256), "samples": ("int>=1", 1024), "repetitions": ("int>=1", 5),
       "order": (("interleaved", "blocked"), "interleaved"), "warmup_round": ((False, True), True),
       "check_samples": ("int>=0", 32), "trace_batches": ("int>=0", 8), "timeout_s": ("float>0", 900.0)}
DATASET = {"path": ("str", "data/demo"), "generate": ((False, True), True), "images": ("int>=1", 2000),
           "stage_dir": ("str", ""),
           # The same files under an s3:// or http(s):// prefix, for the storage arms; with
           # upload = true the files the arms read are put there (s3:// only) where missing.
           "url": ("str", ""), "upload": ((False, True), True)}
CRITERIA = {"metric": (tuple(METRICS), "throughput"), "min_gain": ("float", 0.05), "confidence": ("float(0,1)", 0.95),
            "max_regression": ("dict", {"peak_pss": 0.10, "latency_p99": 0.10}),
            "max_break_even_epochs": ("float>0", 10.0)}
CORRECTNESS = {"mode": (CORRECTNESS_MODES, "auto"), "tolerance": ("float>=0", 1.0),
               "overrides": ("dict", {})}  # user pipelines: factory arguments for the check pass only
TOP = ("name", "description", "dataset", "pipeline", "factor", "arms", "step", "run", "criteria", "correctness",
       "training_repo", "gate", "requires", "small")
# [small]: the run plan of the pytest plugin's small run (its defaults: pytest_plugin.SMALL).
SMALL_KEYS = ("repetitions", "samples", "warmup_samples", "check_samples")
REQUIRES = ("cuda",)


def _check(section: str, key: str, value: Any, rule: Any) -> Any:
    """Validates one value against its rule; returns it (ints promoted to float where wanted)."""
    where = f"[{section}] {key} = {value!r}"
    if isinstance(rule, str) and "|" in rule:  # "int>=1|auto": a number or that word
        rule, word = rule.split("|")
        if value == word:
            return value
        if isinstance(value, str):
            raise ConfigError(f"{where}: must be an integer {rule[3:]} or {word!r}")
    if isinstance(rule, tuple):
        if isinstance(value, bool) != isinstance(rule[0], bool) or value not in rule:
            raise ConfigError(f"{where}: allowed are {', '.join(repr(r) for r in rule)}")
        return value
    if rule == "str":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: must be a non-empty string")
        return value
    if rule == "dict":
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: must be a table")
        return value
    if rule.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int) or value < int(rule[3:].lstrip(">=")):
            raise ConfigError(f"{where}: must be an integer {rule[3:]}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: must be a number")
    value = float(value)
    bad = {"float>=0": value < 0, "float>0": value <= 0, "float[0,1]": not 0 <= value <= 1,
           "float(0,1)": not 0 < value < 1, "float": False}[rule]
    if bad:
        raise ConfigError(f"{where}: must be {rule[5:] or 'a number'}")
    return value


def _section(raw: Dict[str, Any], name: str, schema: Dict[str, Tuple[Any, Any]]) -> Dict[str, Any]:
    given = raw.get(name, {})
    if not isinstance(given, dict):
        raise ConfigError(f"[{name}] must be a table")
    unknown = sorted(set(given) - set(schema))
    if unknown:
        raise ConfigError(f"[{name}]: unknown key(s) {', '.join(unknown)}; allowed are {', '.join(schema)}")
    out = {k: copy.deepcopy(default) for k, (_, default) in schema.items()}
    for k, v in given.items():
        out[k] = _check(name, k, v, schema[k][0])
    return out


@dataclass
class Arm:
    name: str
    config: Dict[str, Any]  # the full pipeline settings of this arm


@dataclass
class Experiment:
    name: str
    description: str
    dataset: Dict[str, Any]
    baseline: Dict[str, Any]
    factor: str
    arms: List[Arm]
    step: Dict[str, Any]
    run: Dict[str, Any]
    criteria: Dict[str, Any]
    correctness: Dict[str, Any]
    training_repo: Optional[str] = None
    source: Optional[str] = None  # the TOML file, when loaded from one
    raw: Dict[str, Any] = field(default_factory=dict)
    user: bool = False            # the pipeline is the user's factory, not a built-in one
    gate: bool = False            # the pytest plugin fails the item on roll back or invalid
    requires: List[str] = field(default_factory=list)

    @property
    def correctness_mode(self) -> str:
        mode = self.correctness["mode"]
        if mode != "auto":
            return mode
        if self.user:  # what a user's factor does to the data is unknown; the swap may decode differently
            return {"factory": "tolerance", "world_size": "same-samples"}.get(self.factor, "identical")
        if self.factor == SETTINGS:  # the loosest check any of the bundle's keys needs
            keys = {k for a in self.arms for k, v in a.config.items() if v != self.baseline.get(k)}
            return max((AUTO_CORRECTNESS[k] for k in keys), key=_STRICTNESS.index, default="identical")
        return AUTO_CORRECTNESS[self.factor]

    def step_for(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """The step an arm runs: [step], with the arm's own value where a step setting is the factor."""
        return dict(self.step, **{k: config[k] for k in STEP_FACTORS if k in config})

    def global_batch(self, config: Dict[str, Any]) -> Optional[int]:
        """Samples per optimizer step; None for a user pipeline (its batch size is observed)."""
        if self.user:
            return None
        return config["batch_size"] * config["world_size"] * self.step_for(config)["grad_accum"]

    def factory_kwargs(self, config: Dict[str, Any]) -> Dict[str, Any]:
        """The keyword arguments a user pipeline's factory is called with."""
        return {k: v for k, v in config.items() if k not in USER_PIPELINE}

    def needs_cuda(self) -> List[str]:
        """Arms that cannot run without CUDA, with why."""
        if "cuda" in self.requires:
            return ["the experiment declares requires = ['cuda']"]
        if self.user:
            return ["the step runs matmuls on a GPU"] if self.step["compute"] == "matmul" else []
        return [f"arm {a.name} {why}" for a in self.arms for why in
                (["copies pinned batches to a GPU"] if a.config["pin_memory"] else [])
                + (["decodes JPEGs on a GPU"] if a.config["decode"] == "gpu" else [])
                + (["runs the step's matmuls on a GPU"] if self.step["compute"] == "matmul" else [])]

    def with_overrides(self, **run: Any) -> "Experiment":
        """A copy with run-plan settings replaced (e.g. a small size for tests)."""
        raw = copy.deepcopy(self.raw)
        raw.setdefault("run", {}).update({k: v for k, v in run.items() if v is not None})
        return from_dict(raw, source=self.source)


def _arm_name(factor: str, value: Any, seen: Dict[str, int]) -> str:
    if factor == "factory":  # "factory=make_loader", not the whole import path
        value = str(value).rsplit(":", 1)[-1]
    name = f"{factor}={str(value).lower() if isinstance(value, bool) else value}"
    seen[name] = seen.get(name, 0) + 1
    return name if seen[name] == 1 else f"{name} ({chr(ord('A') + seen[name] - 1)})"


def _is_user(raw: Dict[str, Any]) -> bool:
    """A user pipeline: [pipeline] names a factory, or the factor is the factory itself."""
    pipe = raw.get("pipeline") or {}
    factor = raw.get("factor") or {}
    return (isinstance(pipe, dict) and "factory" in pipe) or (isinstance(factor, dict) and factor.get("name") == "factory")


def _user_baseline(raw: Dict[str, Any]) -> Dict[str, Any]:
    """A user pipeline's [pipeline]: the harness's own keys checked, the rest passed through."""
    given = raw.get("pipeline", {})
    if not isinstance(given, dict):
        raise ConfigError("[pipeline] must be a table")
    out: Dict[str, Any] = {"world_size": 1}
    for k, v in given.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ConfigError(f"[pipeline] {k!r}: keys are the factory's keyword arguments (Python identifiers)")
        out[k] = _check("pipeline", k, v, USER_PIPELINE[k]) if k in USER_PIPELINE else copy.deepcopy(v)
    return out


def _arms(raw: Dict[str, Any], baseline: Dict[str, Any], factor: str, check: Callable[[str, Any], Any],
          reading: Tuple[str, ...] = ()) -> List[Arm]:
    """The arms: the baseline with the factor set to each of [factor] values, or one per [[arms]]
    table. `check(where, value)` validates a factor value; `reading` are the keys an arm may set
    beside the factor (how to read its batches: they change no data)."""
    seen: Dict[str, int] = {}
    arms: List[Arm] = []
    if "values" in raw["factor"]:
        values = raw["factor"]["values"]
        if not isinstance(values, list) or len(values) < 2:
            raise ConfigError(f"[factor] values = {values!r}: a list of two or more values (the first is the baseline)")
        if factor in raw.get("pipeline", {}) and raw["pipeline"][factor] != values[0]:
            raise ConfigError(f"[pipeline] {factor} = {raw['pipeline'][factor]!r} but the factor's first value (the "
                              f"baseline) is {values[0]!r}: leave {factor} out of [pipeline]")
        return [Arm(_arm_name(factor, v, seen), dict(baseline, **{factor: check("factor", v)})) for v in values]
    tables = raw["arms"]
    if not isinstance(tables, list) or len(tables) < 2 or not all(isinstance(t, dict) for t in tables):
        raise ConfigError("experiment: [[arms]] needs two or more tables (the first is the baseline)")
    if factor in raw.get("pipeline", {}):
        raise ConfigError(f"[pipeline] sets {factor}, the factor: give each arm's value in [[arms]] instead")
    for i, t in enumerate(tables):
        label = f"[[arms]] #{i + 1} ({t.get('name', 'unnamed')})"
        extra = sorted(set(t) - {"name", factor, *reading})
        if extra:
            # The point of the harness: one factor changes, everything else is pinned.
            why = [f"{' and '.join(k for k in reading if k in keys)}, which say {what}"
                   for keys, what in ((USER_READING, "how to read their batches"), (PLACEMENT, "where the ranks run"))
                   if any(k in keys for k in reading)]
            also = f" (and in {'; '.join(why)})" if why else ""
            raise ConfigError(f"{label} sets {', '.join(extra)}: the arms may differ only in the declared factor "
                              f"'{factor}'{also}; declare another experiment for {', '.join(extra)}")
        cfg = dict(baseline)
        for k in reading:
            if k in t:
                cfg[k] = _check("arms", k, t[k], "int>=1" if k in PLACEMENT else "str")
        if factor in t:
            cfg[factor] = check("arms", t[factor])
        elif factor not in baseline:
            raise ConfigError(f"{label} gives no {factor}")
        nm = t.get("name") or _arm_name(factor, cfg[factor], seen)
        if not isinstance(nm, str):
            raise ConfigError(f"[[arms]] #{i + 1}: name must be a string")
        arms.append(Arm(nm, cfg))
    return arms


def _settings_arms(raw: Dict[str, Any], baseline: Dict[str, Any], check: Callable[[str, Any], Any]) -> List[Arm]:
    """The arms of the factor `settings`: each value a table of keys over the baseline (the
    first is the baseline's own; {} is the baseline as declared)."""
    if "values" in raw["factor"]:
        values = raw["factor"]["values"]
        names: List[Optional[str]] = [None] * (len(values) if isinstance(values, list) else 0)
    else:
        tables = raw["arms"]
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise ConfigError("experiment: [[arms]] needs two or more tables (the first is the baseline)")
        extra = sorted({k for t in tables for k in t} - {"name", SETTINGS})
        if extra:
            raise ConfigError(f"[[arms]] set {', '.join(extra)}: with the factor 'settings' each arm gives its keys in "
                              "its settings table, e.g. settings = { threads = 4, prefetch = 4 }")
        values = [t.get(SETTINGS, {}) for t in tables]
        names = [t.get("name") for t in tables]
    if not isinstance(values, list) or len(values) < 2 or not all(isinstance(v, dict) for v in values):
        raise ConfigError("[factor] settings: two or more tables of settings (the first is the baseline), e.g. "
                          "values = [{}, { threads = 4, prefetch = 4 }]")
    arms: List[Arm] = []
    seen: Dict[str, int] = {}
    for v, nm in zip(values, names):
        cfg = dict(baseline)
        for k, x in v.items():
            cfg[k] = check(k, x)
        label = nm or "+".join(f"{k}={x}" for k, x in v.items()) or "as declared"
        seen[label] = seen.get(label, 0) + 1
        arms.append(Arm(label if seen[label] == 1 else f"{label} ({chr(ord('A') + seen[label] - 1)})", cfg))
    return arms


def _user_arms(raw: Dict[str, Any], baseline: Dict[str, Any], factor: str) -> List[Arm]:
    if factor == SETTINGS:
        def check(k: str, v: Any) -> Any:
            if k in USER_PIPELINE or not k.isidentifier():
                raise ConfigError(f"[factor] settings: {k!r} is not an argument of the factory")
            return v
        return _settings_arms(raw, baseline, check)
    if factor in USER_READING or not isinstance(factor, str) or not factor.isidentifier():
        raise ConfigError(f"[factor] name = {factor!r}: a keyword argument of the factory, 'factory' (the swap) or "
                          f"'world_size'; {', '.join(USER_READING)} say how to read batches and are not factors")
    rule = USER_PIPELINE.get(factor)  # the harness's own keys are checked; the factory's are its business
    arms = _arms(raw, baseline, factor, (lambda where, v: _check(where, factor, v, rule)) if rule else (lambda where, v: v),
                 USER_READING + (PLACEMENT if factor == "world_size" else ()))
    for a in arms:
        if not a.config.get("factory"):
            raise ConfigError(f"arm {a.name}: no factory: [pipeline] factory = 'package.module:function' "
                              "(or the factor 'factory' with a value per arm)")
    return arms


def _builtin_arms(raw: Dict[str, Any], baseline: Dict[str, Any], factor: str) -> List[Arm]:
    if factor == SETTINGS:
        def check(k: str, v: Any) -> Any:
            if k not in PIPELINE:
                raise ConfigError(f"[factor] settings: unknown key {k!r}; allowed are {', '.join(PIPELINE)}")
            return _check("factor", k, v, PIPELINE[k][0])
        return _settings_arms(raw, baseline, check)
    if factor in STEP_FACTORS:
        return _arms(raw, baseline, factor, lambda where, v: _check(where, factor, v, STEP[factor][0]))
    if factor not in PIPELINE:
        raise ConfigError(f"[factor] name = {factor!r}: allowed are {', '.join(PIPELINE)} (or a keyword argument of "
                          "your own pipeline's factory: [pipeline] factory = 'package.module:function')")
    return _arms(raw, baseline, factor, lambda where, v: _check(where, factor, v, PIPELINE[factor][0]),
                 PLACEMENT if factor == "world_size" else ())


def _resolve_path(path: str, base: Optional[str]) -> str:
    return os.path.abspath(path if os.path.isabs(path) or not base else os.path.join(base, path))


# What marks a repository's root for training_repo = "auto".
REPO_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


def repository_root(start: str) -> Optional[str]:
    """The nearest folder from `start` upwards that holds a repository's marker, or None."""
    here = os.path.abspath(start)
    while True:
        if any(os.path.exists(os.path.join(here, m)) for m in REPO_MARKERS):
            return here
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up


def _factory_files(raw: Dict[str, Any], base: Optional[str]) -> None:
    """A factory named by a file relative to the experiment's folder ("loadscope_factory.py:f",
    as `bench baseline` writes one beside its experiment) is made absolute, in `raw` too: the
    two files move together. A name not found there keeps its meaning (the working directory,
    then the training repository)."""
    def fix(spec: Any) -> Any:
        if isinstance(spec, str) and spec.count(":") == 1 and base:
            module, attr = spec.split(":")
            if module.endswith(".py") and not os.path.isabs(module) and os.path.isfile(os.path.join(base, module)):
                return os.path.abspath(os.path.join(base, module)) + ":" + attr
        return spec

    pipe, factor = raw.get("pipeline"), raw.get("factor")
    if isinstance(pipe, dict) and "factory" in pipe:
        pipe["factory"] = fix(pipe["factory"])
    if isinstance(factor, dict) and factor.get("name") == "factory" and isinstance(factor.get("values"), list):
        factor["values"] = [fix(v) for v in factor["values"]]
    for arm in raw.get("arms") or []:
        if isinstance(arm, dict) and "factory" in arm:
            arm["factory"] = fix(arm["factory"])


def from_dict(raw: Dict[str, Any], source: Optional[str] = None) -> Experiment:
    """Validates `raw` into an Experiment. A relative `training_repo` is relative to the file's
    folder (`source`), else to the current directory; "auto" is the nearest folder above that
    holds .git, pyproject.toml, setup.py or setup.cfg. It is stored absolute (in `raw` too, so
    the experiment.effective.json a run writes reruns from anywhere), as is a factory named by a
    file beside the experiment."""
    unknown = sorted(set(raw) - set(TOP))
    if unknown:
        raise ConfigError(f"experiment: unknown key(s) {', '.join(unknown)}; allowed are {', '.join(TOP)}")
    raw = copy.deepcopy(raw)
    name = raw.get("name")
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"experiment: name = {name!r}: a non-empty name of letters, digits, '-', '_', '.'")
    user = _is_user(raw)
    base_dir = os.path.dirname(source) if source else None
    _factory_files(raw, base_dir)
    factor_t = raw.get("factor")
    if not isinstance(factor_t, dict) or "name" not in factor_t:
        raise ConfigError("experiment: [factor] with name = one of " + ", ".join(PIPELINE)
                          + " (or a keyword argument of your pipeline's factory) is required")
    unknown = sorted(set(factor_t) - {"name", "values", "scaling"})
    if unknown:
        raise ConfigError(f"[factor]: unknown key(s) {', '.join(unknown)}; allowed are name, values, scaling")
    factor = factor_t["name"]
    mode = _check("factor", "scaling", factor_t.get("scaling", "weak"), SCALING)
    if "scaling" in factor_t and factor != "world_size":
        raise ConfigError(f"[factor] scaling applies to the factor world_size (not {factor!r})")
    if mode == "strong" and user:
        raise ConfigError("[factor] scaling = 'strong' divides the global batch over the ranks, and your factory owns "
                          "its batch size: make the per-rank batch size an argument and compare it by hand, or use "
                          "weak scaling")
    if "values" in factor_t and "arms" in raw:
        raise ConfigError("experiment: give the arms either as [factor] values or as [[arms]] tables, not both")
    if "values" not in factor_t and "arms" not in raw:
        raise ConfigError("experiment: [factor] values = [...] (or [[arms]] tables) are required")
    if user:
        baseline = _user_baseline(raw)
        arms = _user_arms(raw, baseline, factor)
    else:
        baseline = _section(raw, "pipeline", PIPELINE)
        arms = _builtin_arms(raw, baseline, factor)
        if mode == "strong":
            _strong(arms)
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ConfigError(f"experiment: arm names must differ, got {names}")

    step = _section(raw, "step", STEP)
    given_step = raw.get("step") or {}
    for k in STEP_FACTORS:
        if factor == k and k in given_step:
            raise ConfigError(f"[step] {k} is the factor: give each arm's value in [factor] values and leave it out of [step]")
        if factor != k and k in (raw.get("pipeline") or {}):
            raise ConfigError(f"[pipeline] {k}: a step setting; give it in [step] (or make it the factor)")
    if step["function"] and "compute" not in given_step:
        step["compute"] = "user"
    if step["compute"] == "user" and not step["function"]:
        raise ConfigError("[step] compute = 'user' needs function = 'package.module:function' (one training step on a batch)")
    if step["function"] and step["compute"] != "user":
        raise ConfigError(f"[step] function is your own step; it cannot be combined with compute = {step['compute']!r}")
    if step["setup"] and not step["function"]:
        raise ConfigError("[step] setup builds the state of your step function: give function = 'package.module:step' too")
    if user and step["compute"] == "model":
        raise ConfigError("[step] compute = 'model' feeds a built-in pipeline's (images, labels) to a small CNN; with "
                          "your own pipeline use your own step: [step] function = 'package.module:step'")
    if step["compute"] == "sleep" and step["compute_ms"] <= 0:
        raise ConfigError("[step] compute = 'sleep' needs compute_ms > 0")
    if "matmuls" in given_step and step["compute"] != "matmul":
        raise ConfigError("[step] matmuls applies to compute = 'matmul' only")
    if factor == "grad_accum" and step["compute"] == "none":
        raise ConfigError("[factor] grad_accum: accumulation changes the training step, and [step] compute = 'none' has "
                          "none: give compute = 'model' (the gradients are then checked too) or your own step")
    if "model_mb" in given_step and step["compute"] != "model":
        raise ConfigError("[step] model_mb sizes the built-in model: it applies to compute = 'model' only")
    run = _section(raw, "run", RUN)
    criteria = _section(raw, "criteria", CRITERIA)
    for k, v in criteria["max_regression"].items():
        if k not in METRICS:
            raise ConfigError(f"[criteria.max_regression] {k}: allowed are {', '.join(METRICS)}")
        _check("criteria.max_regression", k, v, "float>=0")
    for m in [criteria["metric"], *criteria["max_regression"]]:
        if m in ("e2e_throughput", "data_wait_share", "step_time_p50", "step_time_p99") and step["compute"] == "none":
            raise ConfigError(f"[criteria] {m} is measured with a training step: it needs a [step] compute "
                              "other than 'none'")
        if m in ("step_ms", "gpu_idle_share") and step["compute"] not in ("matmul", "user"):
            raise ConfigError(f"[criteria] {m} is measured on the GPU's synthetic step: it needs [step] compute = 'matmul'"
                              " (or your own step on a GPU)")
        if m in ("allreduces_per_sample", "exposed_comm_per_sample") and step["compute"] not in ("model", "user"):
            raise ConfigError(f"[criteria] {m} is measured on a DDP model's all-reduce: it needs [step] compute = "
                              "'model' (or your own step with a DistributedDataParallel model)")
    if criteria["metric"] == "staging_seconds":
        raise ConfigError("[criteria] metric = 'staging_seconds': only staging arms have it; staging is judged by "
                          "max_break_even_epochs (allowed metrics: " + ", ".join(m for m in METRICS if m != "staging_seconds") + ")")
    correctness = _section(raw, "correctness", CORRECTNESS)
    if correctness["overrides"] and not user:
        raise ConfigError("[correctness] overrides are factory arguments for the check pass of your own pipeline; the "
                          "built-in pipelines check under a fixed center crop by themselves")
    for k in correctness["overrides"]:
        if k in USER_PIPELINE:
            raise ConfigError(f"[correctness] overrides: {k} is the harness's, not a factory argument")
    repo = raw.get("training_repo")
    if repo == "auto":
        found = repository_root(base_dir or os.getcwd())
        if found is None:
            raise ConfigError(f"experiment: training_repo = 'auto': no folder above {base_dir or os.getcwd()} holds "
                              f"{', '.join(REPO_MARKERS)}; name the repository's folder (relative to this file's)")
        repo = found
    if repo is not None:
        if not isinstance(repo, str) or not os.path.isdir(_resolve_path(repo, base_dir)):
            raise ConfigError(f"experiment: training_repo = {repo!r}: the path of an existing directory (relative to the "
                              "experiment file's folder; its git commit is recorded)")
        repo = raw["training_repo"] = _resolve_path(repo, base_dir)
    for a in arms:
        _check_placement(a, "" if user else str((raw.get("dataset") or {}).get("url") or ""))
    if any(a.config.get("link_mbit") for a in arms) and \
            all(a.config.get("nodes", 1) + a.config.get("cpu_nodes", 0) == 1 for a in arms):
        raise ConfigError("link_mbit shapes the link between emulated nodes, and no arm has nodes > 1 or cpu_nodes "
                          "(one node's ranks talk over its loopback): give nodes = 2 or more, or cpu_nodes = 1 or more")
    if user:
        given = raw.get("dataset")
        if given is not None:
            if not isinstance(given, dict) or set(given) - {"path"} or not isinstance(given.get("path"), str):
                raise ConfigError("[dataset] of your own pipeline: only path = '...' (the data your factory reads, "
                                  "relative to training_repo: recorded in env.json; the factory gets its own arguments)")
            path = given["path"]
            dataset = {"path": path if os.path.isabs(path) else os.path.join(repo or os.getcwd(), path)}
        else:
            dataset = {"path": None}
    else:
        dataset = _section(raw, "dataset", DATASET)
        url = dataset["url"]
        if url and not url.startswith(("s3://", "http://", "https://")):
            raise ConfigError(f"[dataset] url = {url!r}: an s3://, http:// or https:// prefix holding the files of path")
        for a in arms:
            _check_arm(a, url)
    small = raw.get("small", {})
    if not isinstance(small, dict) or set(small) - set(SMALL_KEYS):
        raise ConfigError(f"[small]: the pytest plugin's small run plan; allowed keys are {', '.join(SMALL_KEYS)}")
    for k, v in small.items():
        _check("small", k, v, RUN[k][0])
    gate = raw.get("gate", False)
    if not isinstance(gate, bool):
        raise ConfigError(f"experiment: gate = {gate!r}: true or false (true: the pytest plugin fails the item on roll back)")
    requires = raw.get("requires", [])
    if not isinstance(requires, list) or any(r not in REQUIRES for r in requires):
        raise ConfigError(f"experiment: requires = {requires!r}: a list of {', '.join(repr(r) for r in REQUIRES)}")
    if factor == "layout" and not user and "folder" in [a.config["layout"] for a in arms]:
        # ImageFolder's order (by class) differs from the key order of files and shards: the
        # arms would read different samples in the measured window, and their checks would differ.
        raise ConfigError("[factor] layout: 'folder' reads the samples in another order (by class), so its arms "
                          "would measure different samples; compare 'files' and 'shards' (the same samples in the "
                          "same order)")
    desc = raw.get("description", "")
    return Experiment(name=name, description=str(desc), dataset=dataset, baseline=arms[0].config, factor=factor,
                      arms=arms, step=step, run=run, criteria=criteria, correctness=correctness, training_repo=repo,
                      source=source, raw=raw, user=user, gate=gate, requires=list(requires))


def _strong(arms: List[Arm]) -> None:
    """Strong scaling: every arm's global batch is the baseline's (batch_size x world_size), so
    each arm's per-rank batch is that over its world size."""
    base = arms[0].config
    total = base["batch_size"] * base["world_size"]
    for a in arms:
        w = a.config["world_size"]
        if total % w:
            raise ConfigError(f"arm {a.name}: strong scaling divides the global batch {total} (the baseline's "
                              f"batch_size x world_size) over {w} ranks, which does not divide it")
        a.config["batch_size"] = total // w


def _check_placement(arm: Arm, url: str = "") -> None:
    """Ranks spread evenly over the emulated nodes; a link joins nodes."""
    c = arm.config
    nodes, world = c.get("nodes", 1), c.get("world_size", 1)
    if nodes > 1 and world % nodes:
        raise ConfigError(f"arm {arm.name}: world_size = {world} ranks do not spread evenly over nodes = {nodes}: "
                          "give a world size that is a multiple of the nodes")
    # cpu_nodes with ray_workers = 0 is the local arm of a ray_workers experiment: they stand idle.
    workers, cpu_nodes = c.get("ray_workers", 0), c.get("cpu_nodes", 0)
    if c.get("cpu_node_cores") and not cpu_nodes:
        raise ConfigError(f"arm {arm.name}: cpu_node_cores = {c['cpu_node_cores']:g} is the CPU quota of each CPU node, "
                          "and cpu_nodes = 0: give cpu_nodes = 1 or more")
    if workers and (world > 1 or nodes > 1):
        # Each rank would make a pool of its own, on CPU nodes sized for one; and ranks on
        # other training nodes than the head's would reach the cluster through its node.
        raise ConfigError(f"arm {arm.name}: ray_workers = {workers} with world_size = {world} and nodes = {nodes}: a "
                          "pool of workers is measured for one rank on one training node (world_size = 1, nodes = 1)")
    if workers and c.get("loader", "loadscope") != "loadscope":
        raise ConfigError(f"arm {arm.name}: ray_workers = {workers} is a pool of loadscope workers on Ray; "
                          f"loader = {c['loader']!r} has its own (use ray_workers = 0)")
    if nodes + cpu_nodes > 1 and c.get("storage", "local") != "local" and not url.startswith("s3://"):
        raise ConfigError(f"arm {arm.name}: storage = {c['storage']!r} with emulated nodes: they reach object "
                          f"storage through a forwarder to an s3:// endpoint on this machine (AWS_ENDPOINT_URL); "
                          f"[dataset] url is {url!r}")


def _check_arm(arm: Arm, url: str = "") -> None:
    """Combinations no pipeline can run, refused before anything starts."""
    c = arm.config
    if c["storage"] != "local":
        if not url:
            raise ConfigError(f"arm {arm.name}: storage={c['storage']!r} reads [dataset] url, which is not set "
                              "(an s3:// or http(s):// prefix with the files of [dataset] path)")
        if c["loader"] != "loadscope":
            raise ConfigError(f"arm {arm.name}: storage={c['storage']!r} is a loadscope pipeline; "
                              f"loader={c['loader']!r} reads local files (storage='local')")
        if c["staging"] != "in-place":
            raise ConfigError(f"arm {arm.name}: staging='local' copies [dataset] path; to copy from the url use "
                              "storage='remote-staged'")
        if c["layout"] == "folder" and c["storage"] != "remote-staged":
            raise ConfigError(f"arm {arm.name}: layout='folder' lists a local directory; storage={c['storage']!r} "
                              "reads the url: use layout 'files' (the manifest) or 'shards'")
        if c["storage"] == "remote-staged" and not url.startswith("s3://"):
            raise ConfigError(f"arm {arm.name}: storage='remote-staged' copies an s3:// prefix (an HTTP server "
                              f"cannot be listed or staged); [dataset] url is {url!r}")
    if c["shard_index"] == "off":
        if c["layout"] != "shards":
            raise ConfigError(f"arm {arm.name}: shard_index='off' streams tar shards; it needs layout='shards'")
        if c["world_size"] > 1:
            raise ConfigError(f"arm {arm.name}: shard_index='off' streams every shard from its start, which one "
                              "rank only can do; use world_size=1 or shard_index='auto'")
    if c["loader"] != "loadscope" and c["layout"] == "shards":
        raise ConfigError(f"arm {arm.name}: loader={c['loader']!r} reads files; use layout 'files' or 'folder'")
    if c["loader"] != "loadscope" and c["partition"] != "interleave":
        raise ConfigError(f"arm {arm.name}: partition={c['partition']!r} is loadscope's; loader={c['loader']!r} "
                          "deals batches as DistributedSampler does (partition='interleave')")
    if c["loader"] != "loadscope" and c["decode"] == "gpu":
        raise ConfigError(f"arm {arm.name}: decode='gpu' is a loadscope pipeline (bytes from the loader, nvJPEG in the consumer)")
    for k in ("threads", "prefetch"):
        if c[k] == "auto" and c["loader"] != "loadscope":
            raise ConfigError(f"arm {arm.name}: {k}='auto' is loadscope's controller (docs/tuning.md); "
                              f"loader={c['loader']!r} needs a number")
    if c["loader"] == "loadscope" and c["threads"] != "auto" and c["threads"] < 1:
        raise ConfigError(f"arm {arm.name}: loadscope needs threads >= 1 (0 is only for a DataLoader's main process)")


def toml_module() -> Any:
    """tomllib (Python 3.11), else the tomli package it came from."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise ConfigError("reading an experiment file needs Python 3.11 (tomllib) or the tomli package; "
                              "or pass a dict to loadscope.bench.experiment.from_dict") from None
    return tomllib


def load(path: str) -> Experiment:
    """Reads an experiment from a TOML file, or from the experiment.effective.json a run wrote
    (the exact experiment that ran, overrides included: what its rerun command uses)."""
    if path.endswith(".json"):
        import json

        try:
            with open(path) as f:
                return from_dict(json.load(f), source=os.path.abspath(path))
        except FileNotFoundError:
            raise ConfigError(f"experiment file {path!r} does not exist") from None
        except ValueError as e:
            raise ConfigError(f"experiment file {path!r}: {e}") from None
    tomllib = toml_module()
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"experiment file {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"experiment file {path!r}: {e}") from None
    return from_dict(raw, source=os.path.abspath(path))
