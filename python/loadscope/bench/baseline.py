"""`loadscope bench baseline`: the user's pipeline as it is, measured before anything changes.

    loadscope bench baseline mytrain.data:make_loader --arg root=data/train \
        --setup mytrain.train:build --step mytrain.train:step --repo .

Runs the factory's pipeline (and the step, when given) in fresh processes, the same way an
experiment's arm runs (rep.py), and writes a diagnosis: data pipeline against end-to-end
throughput, data-wait share, step time and its tail, memory per process and in all, CPU per
sample, bytes read, time to the first batch of a new epoch with and without persistent
workers, the environment — observations kept apart from hypotheses — and the experiment to run
next, as a TOML file (`next-experiment.toml`)."""

from __future__ import annotations

import ast
import inspect
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from .._errors import ConfigError
from . import env as envmod
from . import scaling, stats, user
from .experiment import RUN, STEP, USER_PIPELINE, Arm, Experiment, _check, _section, toml_module


def _experiment(factory: str, kwargs: Dict[str, Any], *, setup: Optional[str], step: Optional[str],
                repo: Optional[str], sample_ids: Optional[str], batch_size_of: Optional[str], grad_accum: int,
                world_size: int, run: Dict[str, Any], data: Optional[str]) -> Experiment:
    """A one-arm Experiment (validated like any other) so that the runner's pieces apply."""
    clash = sorted(set(kwargs) & set(USER_PIPELINE))
    if clash:
        raise ConfigError(f"--arg {', '.join(clash)}: the harness's own setting, not a factory argument "
                          "(use --sample-ids, --batch-size-of, --world-size)")
    config: Dict[str, Any] = {"factory": _check("baseline", "factory", factory, "str"),
                              "world_size": _check("baseline", "world_size", world_size, "int>=1"), **kwargs}
    if sample_ids:
        config["sample_ids"] = sample_ids
    if batch_size_of:
        config["batch_size_of"] = batch_size_of
    raw_step: Dict[str, Any] = {"grad_accum": grad_accum}
    if step:
        raw_step.update(function=step, compute="user")
        if setup:
            raw_step["setup"] = setup
    elif setup:
        raw_step["setup"] = setup  # refused below: a setup needs a step
    step_def = _section({"step": raw_step}, "step", STEP)
    if step_def["setup"] and not step_def["function"]:
        raise ConfigError("--setup builds the state of your step: give --step package.module:function too")
    run_def = _section({"run": run}, "run", RUN)
    if repo is not None:
        if not os.path.isdir(repo):
            raise ConfigError(f"--repo {repo!r}: not a directory")
        repo = os.path.abspath(repo)
    dataset = {"path": os.path.abspath(data) if data else None}
    exp = Experiment(name="baseline", description="", dataset=dataset, baseline=config, factor="(none)",
                     arms=[Arm("baseline", config)], step=step_def, run=run_def, criteria={},
                     correctness={"mode": "none", "tolerance": 0.0, "overrides": {}}, training_repo=repo,
                     raw={}, user=True)
    user.validate(exp)
    return exp


def _figure(rows: List[Dict[str, Any]], key: str) -> Dict[str, Any]:
    s = stats.summarize([r.get(key) for r in rows], upper=1.0 if key.endswith("_share") else None)
    return {"median": s["median"], "ci_low": s["ci_low"], "ci_high": s["ci_high"], "n": s["n"]}


# Data wait above this share of the loop is material: input can then hold training back.
INPUT_BOUND = 0.10


def observe(rows: List[Dict[str, Any]], usable_cpus: Optional[int]) -> Dict[str, Any]:
    """The figures of the diagnosis from the repetitions' raw results (medians and intervals)."""
    from .report import cores_used

    for r in rows:  # derived per repetition, so that they get intervals too
        r["cores_used"], r["cores_used_uncertainty"] = cores_used(r) if r.get("seconds") else (None, None)
        r["read_mb_per_s"] = r["read_chars"] / r["seconds"] / 1e6 if r.get("seconds") else None
        r["storage_mb_per_s"] = r["read_bytes"] / r["seconds"] / 1e6 if r.get("seconds") else None
        # What feeding training costs: the pipeline's CPU per sample at the rate the step takes samples.
        r["pipeline_cores_at_training_rate"] = (r["cpu_per_sample"] / 1e3 * r["e2e_throughput"]
                                                if "e2e_seconds" in r and r.get("cpu_per_sample") is not None else None)
        # What the step alone would take if input never kept it waiting (batch / step time), and
        # the cores feeding that costs: the capacity the node must give (part 23).
        step_s = (r.get("step_time_p50") or 0) / 1e3
        r["step_rate"] = r["batch_size"] / step_s if step_s > 0 and r.get("batch_size") else None
        r["cores_at_step_rate"] = (r["cpu_per_sample"] / 1e3 * r["step_rate"]
                                   if r["step_rate"] and r.get("cpu_per_sample") is not None else None)
        rs = r.get("restart") or {}
        r["new_epoch_first_batch"] = min(rs["new_epoch_first_batch"]) if rs.get("new_epoch_first_batch") else None
        fl = rs.get("flipped") or {}
        r["flipped_new_epoch_first_batch"] = min(fl["new_epoch_first_batch"]) if fl.get("new_epoch_first_batch") else None
        r["flipped_cold_first_batch"] = fl.get("cold_first_batch")
        r["peak_rss_total"] = sum(p["rss_peak"] for p in r.get("processes", [])) / 2**20
    keys = ["throughput", "e2e_throughput", "data_wait_share", "step_time_p50", "step_time_p99", "step_time_max",
            "step_ms", "gpu_idle_share", "first_batch", "new_epoch_first_batch", "flipped_cold_first_batch",
            "flipped_new_epoch_first_batch", "cpu_per_sample", "cores_used", "pipeline_cores_at_training_rate",
            "step_rate", "cores_at_step_rate", "read_mb_per_s", "storage_mb_per_s", "peak_pss", "peak_rss_total", "latency_p50", "latency_p99"]
    out: Dict[str, Any] = {k: _figure(rows, k) for k in keys}
    first = rows[0]
    out["cpu_seconds"] = _figure(rows, "cpu_seconds")
    out["cores_used_uncertainty"] = max((r["cores_used_uncertainty"] or 0.0) for r in rows)
    out["restart_after"] = (first.get("restart") or {}).get("after")
    out["processes"] = first.get("processes", [])
    out["pipeline"] = first.get("pipeline", {})
    out["persistent_workers"] = (first.get("restart") or {}).get("persistent_workers")
    out["has_ids"] = first.get("has_ids")
    out["batch_size"] = first.get("batch_size")
    out["bytes_per_sample"] = first.get("bytes_per_sample")
    out["usable_cpus"] = usable_cpus
    mem = ((first.get("telemetry") or {}).get("memory") or {})
    out["main_rss_peak"] = mem.get("rss_peak")
    out["cgroup_peak"] = mem.get("cgroup_peak")
    return out


def _medians(o: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v["median"] for k, v in o.items() if isinstance(v, dict) and "median" in v}


def capacity(o: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """report.capacity from the observations' medians (None without a step)."""
    from .report import capacity as of

    med = _medians(o)
    return of(med.get("cpu_per_sample"), med.get("step_time_p50"), o.get("batch_size"), o.get("bytes_per_sample"),
              o["usable_cpus"])


def bottleneck(o: Dict[str, Any], has_step: bool) -> Dict[str, Any]:
    """What the measurements say holds training back: {kind, lines}. kind is "input" (the loop
    waits for data a material share of the time), "compute" (it hardly waits: the step
    decides the speed) or "pipeline" (no step was given: the pipeline alone was measured)."""
    med = _medians(o)
    usable = o["usable_cpus"] or 1
    wait, e2e, alone = med.get("data_wait_share"), med.get("e2e_throughput"), med.get("throughput")
    cpu_ms, at_rate, flat = med.get("cpu_per_sample"), med.get("pipeline_cores_at_training_rate"), med.get("cores_used")
    lines: List[str] = []
    if has_step and wait is not None:
        kind = "input" if wait >= INPUT_BOUND else "compute"
        lines.append(f"the training loop waited for data {wait:.1%} of the time (time in next() over next() plus the "
                     f"step; material from {INPUT_BOUND:.0%}): "
                     + ("**input-bound** — input that never kept it waiting would make training up to "
                        f"{1 / (1 - wait) - 1:.0%} faster" if kind == "input" else
                        "**compute-bound** — the step decides the speed; a faster pipeline would not speed training up"))
        if e2e and alone:
            lines.append(f"training took {_fmt(e2e, 'samples/s')} samples/s; the pipeline alone delivers {_fmt(alone, 'samples/s')} samples/s "
                         f"({alone / e2e:.2g}x what training takes)")
        if at_rate is not None and cpu_ms is not None:
            lines.append(f"at the rate training takes samples, feeding it costs **{_fmt(at_rate, 'cores')} of {usable} usable cores** "
                         f"({_fmt(cpu_ms, 'ms')} ms of CPU per sample, all the pipeline's processes, x {_fmt(e2e, 'samples/s')} samples/s): "
                         "cores the step and the rest of the job do not get")
    else:
        kind = "pipeline"
        lines.append("no step was given: only the pipeline was measured (give --step to measure training end to end "
                     "and the data wait)")
        if alone and cpu_ms is not None:
            lines.append(f"the pipeline alone delivers {_fmt(alone, 'samples/s')} samples/s at {_fmt(cpu_ms, 'ms')} ms of CPU per sample")
    cap = capacity(o) if has_step else None
    if cap is not None:
        from .report import capacity_lines
        lines.append(capacity_lines(cap)[0])
    if flat is not None:
        # As the Observed table gives it (median [95% interval]): one figure, one way.
        lo, hi = o["cores_used"].get("ci_low"), o["cores_used"].get("ci_high")
        ci = f" [{_fmt(lo, 'cores')}, {_fmt(hi, 'cores')}]" if lo is not None and hi is not None else ""
        lines.append(f"flat out (the pipeline alone, no step), it kept {_fmt(flat, 'cores')}{ci} of {usable} usable "
                     "cores busy"
                     + (" — what the pipeline does alone, not what training leaves it" if kind != "pipeline" else ""))
    return {"kind": kind, "lines": lines}


def hypotheses(o: Dict[str, Any], has_step: bool) -> List[str]:
    """Suggestions of why, from the observations; each is a thing to test, not a finding."""
    out: List[str] = []
    med = _medians(o)
    p = o["pipeline"]
    usable = o["usable_cpus"]
    kind = bottleneck(o, has_step)["kind"]
    cores, at_rate = med.get("cores_used"), med.get("pipeline_cores_at_training_rate")
    if kind == "input":
        out.append("training waits for input: a pipeline that delivers faster at the same CPU (more workers where "
                   "cores are idle) or needs less CPU per sample (the swap) would raise end-to-end throughput — unless "
                   "the step competes with the pipeline for the same cores, which the end-to-end figure shows too.")
    elif kind == "compute" and at_rate is not None and usable:
        out.append(f"training is compute-bound: the pipeline's speed does not matter now, its cost does — {_fmt(at_rate, 'cores')} "
                   f"of {usable} cores at the rate training takes samples; less CPU per sample would free them "
                   "(and a pipeline with headroom keeps up when the step gets faster).")
    if cores is not None and usable and kind in ("input", "pipeline"):
        if cores > 0.85 * usable:
            out.append(f"the pipeline alone kept {_fmt(cores, 'cores')} of {usable} usable cores busy: CPU-bound here; more "
                       "workers cannot help, less CPU work per sample can (decoding and augmenting in native threads, "
                       "a smaller decode via DCT scaling, fewer copies).")
        elif p.get("dataloader") and (p.get("num_workers") or 0) < usable:
            out.append(f"the pipeline alone used {_fmt(cores, 'cores')} of {usable} usable cores with {p.get('num_workers')} "
                       "DataLoader workers: more workers may turn idle cores into throughput.")
        elif cores < 0.5 * usable:
            out.append(f"the pipeline used only {_fmt(cores, 'cores')} of {usable} usable cores: it waits on something other than "
                       "the CPU (storage, a lock, the main process's collation or pinning).")
    cap = capacity(o) if has_step else None
    if cap is not None and cap["exceeds"]:
        from .report import capacity_lines
        out.append(capacity_lines(cap)[1] or "")
    new, flip = med.get("new_epoch_first_batch"), med.get("flipped_new_epoch_first_batch")
    if new is not None and flip is not None and o["persistent_workers"] is False and flip < 0.5 * new:
        out.append(f"each new epoch waits {new:.2f} s for its first batch while the workers start again; with "
                   f"persistent_workers=True it waited {flip:.2f} s.")
    workers = sorted(pr["pss_peak"] / 2**20 for pr in o["processes"] if pr["role"] == "worker")
    at_once = p.get("num_workers") if p.get("dataloader") else len(workers)
    if workers and at_once:
        each = workers[len(workers) // 2]
        total = med.get("peak_pss")
        out.append(f"each of the {at_once} workers held about {each:.0f} MiB of PSS at its peak ({each * at_once:.0f} MiB "
                   "together" + (f", of {total:.0f} MiB in all" if total else "") + "): a worker is a copy of the "
                   "interpreter, torch and the dataset object"
                   + (f"; {len(workers)} worker processes over the run, as the workers start again every epoch"
                      if len(workers) > at_once else "") + ".")
    if o.get("has_ids") is False:
        if p.get("ids_by_position"):
            out.append("the batches carry no sample ids, but the dataset lists its files: with shuffling off (the "
                       "suggested experiment turns it off) the harness names each sample by its position in the epoch, "
                       "so the correctness check between arms works without a sample_ids function.")
        else:
            out.append("no sample ids were found in the batches: experiments can check correctness between arms only "
                       "with a sample_ids function (one id per sample of a batch).")
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


SWAP_FILE = "loadscope_factory.py"
SWAP_NAME = "make_loadscope_loader"


def suggest(exp: Experiment, o: Dict[str, Any], kwargs: Dict[str, Any], out_dir: Optional[str] = None) -> Dict[str, Any]:
    """The next experiment: one factor, chosen from the bottleneck the figures show and from
    what the factory accepts, with what makes its arms comparable. Returns {why, hypothesis,
    expect, factor, values, criteria, pipeline (settings pinned for both arms), mode,
    tolerance, overrides, notes, needs (code the user must write first, or None), swap (what
    the generated factory file is made from, or None)}."""
    arm = exp.arms[0].config
    with user.on_path(exp.training_repo):
        fn = user.resolve(arm["factory"], "factory")
        accepted = user.accepts(fn)
        module = inspect.getmodule(fn)
    p = o["pipeline"]
    notes: List[str] = []
    # What makes the arms comparable, set through the factory's own arguments for both arms:
    # the same samples in the measured phases (shuffling off) and the same seeds.
    pinned: Dict[str, Any] = {}
    if "shuffle" in accepted and kwargs.get("shuffle", accepted["shuffle"]) is not False:
        pinned["shuffle"] = False
        notes.append("shuffle = false: both arms read the same samples in the same order (the baseline's "
                     + ("DataLoader shuffled" if p.get("sampler") == "RandomSampler" else "factory may shuffle") + ")")
    if "seed" in accepted:
        pinned["seed"] = 0
    # Random augmentations differ between two pipelines, and within one DataLoader with another
    # number of workers (each worker has its own seed): the check must compare the arms without
    # them — through a flag of the factory's that turns them off, when it has one by a usual name.
    flag = next((k for k in ("train", "training", "augment", "augmentation", "random") if k in accepted), None)
    overrides = {flag: False} if flag else None
    tr = _translate(exp, fn, dict(kwargs, **pinned), dict(kwargs, **pinned, **overrides) if overrides else None)
    s = _choose(exp, o, kwargs, accepted, module, out_dir, tr)
    s.update(pipeline=pinned, overrides=overrides)
    shuffles = p.get("sampler") == "RandomSampler" and "shuffle" not in accepted
    unchecked = None
    if not flag and (tr["random"] or shuffles) and s["factor"] in ("factory", "num_workers"):
        # Nothing to turn them off with: a check would fail on augmentation, not on the data.
        why = (f"the transforms draw at random ({', '.join(tr['random'])})" if tr["random"] else "") + \
              (" and " if tr["random"] and shuffles else "") + ("the DataLoader shuffles" if shuffles else "")
        unchecked = (f"{why} and {arm['factory']} has no argument to turn that off (train=, shuffle=), so the arms "
                     "cannot be compared sample for sample: correctness is NOT checked. Add such an argument and set "
                     "it in [correctness] overrides to check it")
    elif s.get("swap") and s["swap"]["why"] is None and overrides and not tr["check"]["ok"]:
        # The check pass's pipeline (augmentation off) is often another one: it must translate too.
        shown = ", ".join(f"{k}={v!r}" for k, v in dict(kwargs, **pinned, **overrides).items())
        unchecked = (f"the check pass's pipeline ({shown}) does not translate ({tr['check']['why']}), so the arms "
                     "cannot be compared there: correctness is NOT checked")
    if unchecked:
        s.update(mode="none", overrides=None, unchecked=unchecked)
        notes.append(unchecked)
    s["notes"] = notes
    return s


def _translate(exp: Experiment, fn: Any, arms: Dict[str, Any], check: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """What loadscope.swap makes of the DataLoader the factory returns with the arms' arguments
    and with the check pass's (None: the same): {"arms": {ok, lines, image} or {ok: False, why},
    "check": the same, "random": the random transforms of the arms' dataset}. The factory is
    called as the repetitions call it, in the training repository with its root on the path;
    the DataLoader is made, never iterated."""
    from ..swap import dataset_samples, random_transforms, translate

    here = os.getcwd()
    out: Dict[str, Any] = {"random": []}
    for what, args in (("arms", arms), ("check", check)):
        if args is None:
            out[what] = out["arms"]
            continue
        try:
            os.chdir(exp.training_repo or here)
            with user.on_path(exp.training_repo):
                dl = fn(**args)
                if what == "arms":
                    found = dataset_samples(getattr(dl, "dataset", None))
                    ds = found[0] if found else getattr(dl, "dataset", None)
                    out["random"] = random_transforms(getattr(ds, "transform", None))
                t = translate(dl)
            out[what] = {"ok": True, "lines": t.lines, "image": t.image}
        except Exception as e:  # the user's factory or the translation: either way, its reason
            out[what] = {"ok": False, "why": str(e) if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"}
        finally:
            os.chdir(here)
    return out


def _tolerance(image: Dict[str, Any]) -> float:
    """Two decoders agree within about a level of 255 (docs/augmentations.md): in the output's
    units, which for a normalised float output are 1 / 255 / std."""
    if image.get("dtype", "uint8") == "uint8":
        return 1.0
    return round(1.0 / 255 / min(image.get("std") or (1.0,)), 6)


def _swap_target(exp: Experiment, module: Any, out_dir: Optional[str], tr: Dict[str, Any]) -> Dict[str, Any]:
    """The loadscope arm of a swap: a factory the user's module already has (one taking the
    same arguments), or one written next to the experiment from the DataLoader's translation
    (loadscope.swap), or a stub that fails with what could not be translated."""
    arm = exp.arms[0].config
    name = arm["factory"].split(":")[0]

    def takes_the_arguments(f: Any) -> bool:  # a factory, not some helper with "loadscope" in its name
        try:
            user.check_call(f, "", "", kwargs=exp.factory_kwargs(arm))
            return True
        except ConfigError:
            return False

    existing = sorted(n for n in dir(module) if "loadscope" in n.lower() and not n.startswith("_")
                      and callable(getattr(module, n)) and takes_the_arguments(getattr(module, n)))
    if existing:
        return {"target": f"{name}:{existing[0]}", "needs": None, "swap": None, "translated": True}
    where = os.path.join(out_dir or ".", SWAP_FILE)
    t = tr["arms"]
    return {"target": f"{where}:{SWAP_NAME}", "translated": t["ok"],
            "needs": None if t["ok"] else f"write {SWAP_NAME} in {where}: {t['why']}",
            "swap": {"path": where, "lines": t.get("lines", []), "why": t.get("why")}}


def _choose(exp: Experiment, o: Dict[str, Any], kwargs: Dict[str, Any], accepted: Dict[str, Any],
            module: Any, out_dir: Optional[str], tr: Dict[str, Any]) -> Dict[str, Any]:
    arm = exp.arms[0].config
    current = lambda k: kwargs.get(k, accepted.get(k))  # noqa: E731
    med = _medians(o)
    usable = o["usable_cpus"] or 1
    p = o["pipeline"]
    has_step = exp.step["compute"] != "none"
    b = bottleneck(o, has_step)
    wait: float = med.get("data_wait_share") or 0.0
    cores: float = med.get("cores_used") or 0.0
    at_rate, cpu_ms = med.get("pipeline_cores_at_training_rate"), med.get("cpu_per_sample")
    given = p.get("num_workers") if p.get("dataloader") else current("num_workers")
    workers_arg = "num_workers" in accepted and isinstance(given, int)
    nw: int = given if isinstance(given, int) else 0
    idle = cores <= 0.85 * usable and workers_arg and nw < usable

    target = _swap_target(exp, module, out_dir, tr)

    def swap(metric: str, why: str, hypothesis: str, criteria: Dict[str, Any]) -> Dict[str, Any]:
        # The check compares the arms with its own arguments: in the units of its output.
        return {"why": why, "hypothesis": hypothesis, "expect": "adopt", "factor": "factory",
                "values": [arm["factory"], target["target"]], "mode": "tolerance",
                "tolerance": _tolerance(tr["check"].get("image") or {}), "needs": target["needs"],
                "swap": target["swap"], "criteria": dict(criteria, metric=metric)}

    if b["kind"] == "input":
        potential = 1 / (1 - wait) - 1
        # The gain asked for must be one the figures allow: at most half of what removing the wait gives.
        min_gain = round(min(0.05, potential / 2), 3)
        new, flip = med.get("new_epoch_first_batch"), med.get("flipped_new_epoch_first_batch")
        if (o["persistent_workers"] is False and new is not None and flip is not None and flip < 0.5 * new
                and "persistent_workers" in accepted):
            return {"why": f"a new epoch's first batch took {new:.2f} s, {flip:.2f} s with persistent workers",
                    "hypothesis": "new epochs wait for the DataLoader's workers to start again",
                    "expect": "adopt", "factor": "persistent_workers", "values": [False, True], "needs": None,
                    "criteria": {"metric": "new_epoch_first_batch", "min_gain": 0.05, "max_regression": {"peak_pss": 0.10}}}
        if idle:
            more = min(usable, max(1, 2 * nw))
            return {"why": f"training waits for data {wait:.1%} of the time while the pipeline uses {_fmt(cores, 'cores')} of "
                           f"{usable} cores", "factor": "num_workers", "values": [nw, more], "needs": None,
                    "hypothesis": f"{more - nw} more worker(s) turn idle cores into input, and the wait into training",
                    "expect": "adopt",
                    "criteria": {"metric": "e2e_throughput", "min_gain": min_gain, "max_regression": {"peak_pss": 0.5}}}
        return swap("e2e_throughput", f"training waits for data {wait:.1%} of the time and the pipeline needs "
                                      f"{_fmt(cpu_ms, 'ms')} ms of CPU per sample" if cpu_ms is not None else
                    f"training waits for data {wait:.1%} of the time",
                    "loadscope decodes and augments the same samples with less CPU per sample, in threads: the loop "
                    "waits less and training gets faster end to end",
                    {"min_gain": min_gain, "max_regression": {"peak_pss": 0.25}})
    if b["kind"] == "compute":
        # What feeding training costs is the question: the swap answers it where it can be
        # written (a loadscope factory exists, or the DataLoader translates); else fewer workers.
        if target["translated"] or not (workers_arg and nw > 1):
            return swap("cpu_per_sample", f"training is compute-bound (data wait {wait:.1%}), and feeding it costs "
                                          f"{_fmt(at_rate, 'cores')} of {usable} cores" if at_rate is not None else
                        f"training is compute-bound (data wait {wait:.1%})",
                        "loadscope delivers the same samples for less CPU per sample, freeing cores without slowing "
                        "training (end-to-end throughput is guarded, not asked to rise: the step decides it)",
                        {"min_gain": 0.05, "max_regression": {"e2e_throughput": 0.10, "peak_pss": 0.25}})
        return {"why": f"training is compute-bound (data wait {wait:.1%}): fewer workers may keep the speed and save "
                       "memory and cores", "factor": "num_workers", "values": [nw, max(1, nw // 2)], "needs": None,
                "hypothesis": "half the workers still keep the step fed, with less memory",
                "expect": "adopt",
                "criteria": {"metric": "peak_pss", "min_gain": 0.05, "max_regression": {"e2e_throughput": 0.05}}}
    # The pipeline alone.
    if idle:
        more = min(usable, max(1, 2 * nw))
        return {"why": f"the pipeline used {_fmt(cores, 'cores')} of {usable} cores: another worker may use the idle ones",
                "hypothesis": "more workers turn idle cores into throughput", "expect": "adopt",
                "factor": "num_workers", "values": [nw, more], "needs": None,
                "criteria": {"metric": "throughput", "min_gain": 0.05, "max_regression": {"peak_pss": 0.5}}}
    return swap("throughput", f"the pipeline is CPU-bound ({_fmt(cores, 'cores')} of {usable} cores)" if cores > 0.85 * usable
                else f"the pipeline uses {_fmt(cores, 'cores')} of {usable} cores and a worker more is not an option here",
                "loadscope does the same work with less CPU per sample: more samples per second on the same cores",
                {"min_gain": 0.05, "max_regression": {"peak_pss": 0.25}})


def _swap_source(exp: Experiment, kwargs: Dict[str, Any], swap: Dict[str, Any]) -> str:
    """The generated factory: the user's DataLoader translated by loadscope.swap, with the
    translation as it was for the baseline's arguments, or a stub saying what was not."""
    arm = exp.arms[0].config
    module, fn_name = arm["factory"].split(":")
    with user.on_path(exp.training_repo):
        fn = user.resolve(arm["factory"], "factory")
    # The user's signature, without annotations (their names may not be imported here), when
    # every default is a Python literal; else **kwargs.
    names: List[str] = []
    params = "(**kwargs)"
    try:
        sig = inspect.signature(fn)
        pieces = []
        for p in sig.parameters.values():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise ValueError("not a plain signature")
            if p.default is not p.empty:
                ast.literal_eval(repr(p.default))
            names.append(p.name)
            pieces.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
        params = "(" + ", ".join(pieces) + ")"
    except (TypeError, ValueError, SyntaxError):
        names = []
    call = ", ".join(f"{n}={n}" for n in names) if params != "(**kwargs)" else "**kwargs"
    if module.endswith(".py") or "." in fn_name:  # a file, or Class.method: resolved as the experiment does
        importing = (f"from loadscope.bench.user import resolve\n\n{fn_name.replace('.', '_')} = "
                     f"resolve({arm['factory']!r}, 'the factory')")
        fn_name = fn_name.replace(".", "_")
    else:
        importing = f"from {module} import {fn_name}"
    stamp = time.strftime("%Y-%m-%d %H:%M")
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    if swap["why"] is not None:  # not translatable: a stub that says why
        return (f'"""Written by `loadscope bench baseline` on {stamp}: the loadscope counterpart of {arm["factory"]}\n'
                f"could not be written for you. Write {SWAP_NAME} by hand: a Loader yielding batches of the same\n"
                f'structure (docs/getting-started.md shows one)."""\n\n\n'
                f"def {SWAP_NAME}{params}:\n"
                f"    raise NotImplementedError({json.dumps('loadscope could not translate ' + arm['factory'] + ': ' + swap['why'])})\n")
    lines = "\n".join(f"    {ln}" for ln in swap["lines"])
    return (f'"""Written by `loadscope bench baseline` on {stamp}: {arm["factory"]}\'s pipeline on loadscope, for the\n'
            f"experiment next to this file. It is yours to keep: copy it into your repository and edit it.\n\n"
            f"The DataLoader {fn_name} returns is made (never iterated) and translated option for option by\n"
            f"loadscope.from_dataloader, so every argument (train=False, another size...) translates as it does\n"
            f"there. For the experiment's arguments ({shown or 'the defaults'}) that was:\n\n{lines}\n\n"
            f"Batches are the DataLoader's: (images, labels), same dtype, shape and value range.\n"
            f'"""\n\nimport loadscope as ls\n{importing}\n\n\n'
            f"def {SWAP_NAME}{params}:\n"
            f"    return ls.from_dataloader({fn_name}({call}))\n")


def _where(exp: Experiment, folder: str) -> Tuple[Optional[str], Optional[str]]:
    """training_repo and [dataset] path as the experiment in `folder` writes them: "auto" when
    the repository is the one that folder lies in (the file then works wherever in the
    repository it is copied, experiments/ included), else a path relative to the folder; the
    data relative to the repository (what [dataset] path is relative to) where it lies in it."""
    from .experiment import repository_root

    repo = exp.training_repo
    data = exp.dataset.get("path")
    if repo is None:
        return None, data
    if data and os.path.commonpath([repo, os.path.abspath(data)]) == repo:
        data = os.path.relpath(data, repo)
    if repository_root(folder) == repo:
        return "auto", data
    return os.path.relpath(repo, folder), data


def next_experiment_text(exp: Experiment, kwargs: Dict[str, Any], s: Dict[str, Any], o: Dict[str, Any],
                         folder: Optional[str] = None) -> str:
    arm = exp.arms[0].config
    L = [f"# Suggested by `loadscope bench baseline` on {time.strftime('%Y-%m-%d %H:%M')}: {s['why']}.",
         f"# Hypothesis: {s['hypothesis']} (expected verdict: {s['expect']}).",
         "# Run: loadscope bench run next-experiment.toml"]
    if s["needs"]:
        L.append(f"# First {s['needs']}.")
    L += [f'name = "next-{s["factor"]}"', f"description = {_toml_value(s['why'] + '. Hypothesis: ' + s['hypothesis'])}"]
    repo, data = _where(exp, folder or os.getcwd())
    if repo == "auto":
        L.append('training_repo = "auto"   # the repository this file lies in: it works from experiments/ as it is')
    elif repo:
        L.append(f"training_repo = {_toml_value(repo)}   # relative to this file's folder")
    # Copied into experiments/ (with the factory beside it, if any), pytest fails CI on a
    # confident roll back of the second arm (docs/ab-testing.md#in-your-test-suite).
    L.append("gate = true")
    if data:
        L += ["", "[dataset]", f"path = {_toml_value(data)}"]
    L += ["", "[pipeline]"]
    if s["factor"] != "factory":
        L.append(f"factory = {_toml_value(arm['factory'])}")
    pinned = s.get("pipeline") or {}
    for k, v in kwargs.items():
        if k != s["factor"] and k not in pinned:
            L.append(f"{k} = {_toml_value(v)}")
    for k, v in pinned.items():
        if k != s["factor"]:
            L.append(f"{k} = {_toml_value(v)}   # pinned for both arms: they must read the same samples")
    for k in ("sample_ids", "batch_size_of"):
        if arm.get(k):
            L.append(f"{k} = {_toml_value(arm[k])}")
    if not arm.get("sample_ids") and not o.get("has_ids") and not o["pipeline"].get("ids_by_position"):
        L.append('# sample_ids = "package.module:function"   # one id per sample: without it correctness is NOT checked')
    if arm["world_size"] != 1:
        L.append(f"world_size = {arm['world_size']}")
    L += ["", "[factor]", f"name = {_toml_value(s['factor'])}", f"values = {_toml_value(s['values'])}"]
    if exp.step["compute"] == "user":
        L += ["", "[step]"]
        if exp.step["setup"]:
            L.append(f"setup = {_toml_value(exp.step['setup'])}")
        L += [f"function = {_toml_value(exp.step['function'])}", f"grad_accum = {exp.step['grad_accum']}"]
    L += ["", "[run]", "repetitions = 5", f"warmup_samples = {exp.run['warmup_samples']}", f"samples = {exp.run['samples']}",
          "", "[criteria]"]
    L += [f"{k} = {_toml_value(v)}" for k, v in s["criteria"].items()]
    L += ["", "[correctness]"]
    if s.get("mode") == "none":
        L.append(f'mode = "none"   # {s["unchecked"]}')
    elif s.get("mode"):
        L.append(f"mode = {_toml_value(s['mode'])}   # two decoders: the same samples, pixels within a tolerance")
        if s.get("tolerance") is not None:
            L.append(f"tolerance = {_toml_value(s['tolerance'])}   # mean |difference| per sample: about one level of "
                     "255, in the output's units")
    if s.get("overrides"):
        L.append(f"overrides = {_toml_value(s['overrides'])}   # the check compares the arms without random augmentation")
    elif s.get("mode") != "none":
        L.append("# overrides = { your_augmentation_flag = false }   # random augmentations differ between pipelines and "
                 "between worker counts: the check needs them off")
    return "\n".join(L) + "\n"


def rehearse(path: str, text: str) -> Optional[Tuple[str, str]]:
    """Each arm of the experiment `text` (to be written at `path`) built as `bench run` will
    build it — the factory called with the arm's arguments in the training repository, with its
    root on the path — and one batch drawn; the check pass's too, with its overrides. None when
    all draw a batch, else (the factory that did not, why: the arm and the reason)."""
    from . import pipelines
    from .experiment import from_dict

    exp = from_dict(toml_module().loads(text), source=os.path.abspath(path))
    here = os.getcwd()
    passes = [(a, None) for a in exp.arms]
    if exp.correctness["overrides"]:
        passes += [(a, exp.correctness["overrides"]) for a in exp.arms]
    for arm, overrides in passes:
        what = f"arm {arm.name}" + (f" with the check's arguments {overrides}" if overrides else "")
        pipe = None
        try:
            os.chdir(exp.training_repo or here)
            with user.on_path(exp.training_repo):
                pipe = pipelines.UserPipeline(arm.config, dict(exp.factory_kwargs(arm.config), **(overrides or {})))
                if next(iter(pipe.epoch(0)), None) is None:
                    return arm.config["factory"], f"{what}: its first epoch has no batch"
        except Exception as e:  # the user's code or ours: either way the experiment would fail there
            why = str(e).splitlines()[0] if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
            return arm.config["factory"], f"{what}: {why}"
        finally:
            if pipe is not None:
                pipe.close()
            os.chdir(here)
    return None


def write_next(path: str, exp: Experiment, kwargs: Dict[str, Any], s: Dict[str, Any], o: Dict[str, Any],
               rehearsed: bool = False) -> None:
    """Writes next-experiment.toml (and the swap's factory beside it, when the swap needs one),
    after checking them as `bench run` will: the experiment's schema, and every callable it
    names imported and its signature bound to the arguments it will get (the swap's factory
    was translated for those arguments by suggest). `rehearsed`: and each arm drawing a batch
    (``rehearse``); where one does not, the experiment is withheld (``s["withheld"]``: why, and
    its text for diagnosis.md) and a generated factory that failed becomes a stub raising why."""
    from .experiment import from_dict

    tomllib = toml_module()

    if s.get("swap"):
        s["swap"]["path"] = os.path.join(os.path.dirname(os.path.abspath(path)), SWAP_FILE)
        s["values"][1] = f"{SWAP_FILE}:{SWAP_NAME}"  # beside the experiment: the two move together
        with open(s["swap"]["path"], "w") as f:
            f.write(_swap_source(exp, dict(kwargs, **(s.get("pipeline") or {})), s["swap"]))
    text = next_experiment_text(exp, kwargs, s, o, os.path.dirname(os.path.abspath(path)))
    try:
        user.validate(from_dict(tomllib.loads(text), source=os.path.abspath(path)))
    except ConfigError as e:  # the suggestion is ours: a bug here, not the user's
        raise RuntimeError(f"loadscope bench baseline wrote an experiment that does not validate ({e}):\n{text}") from None
    failed = rehearse(path, text) if rehearsed else None
    if failed is not None:
        factory, why = failed
        s["withheld"] = {"why": why, "text": text}
        if s.get("swap") and s["swap"]["why"] is None and factory.endswith(f"{SWAP_FILE}:{SWAP_NAME}"):
            s["swap"]["why"] = why
            with open(s["swap"]["path"], "w") as f:
                f.write(_swap_source(exp, dict(kwargs, **(s.get("pipeline") or {})), s["swap"]))
        return
    with open(path, "w") as f:
        f.write(text)


def _fmt(v: Optional[float], unit: str) -> str:
    if v is None:
        return "—"
    if unit == "%":
        return f"{v:.1%}"
    if unit == "MiB" or unit == "samples/s" or unit == "MB/s":
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"
    return f"{v:.3g}"


ROWS = [  # (key, what, unit)
    ("throughput", "data pipeline alone (no step)", "samples/s"),
    ("e2e_throughput", "end to end, with the step", "samples/s"),
    ("data_wait_share", "data wait: time in next() over next() plus the step", "%"),
    ("step_time_p50", "step time, median (host clock)", "ms"),
    ("step_time_p99", "step time, 99th percentile", "ms"),
    ("step_time_max", "step time, slowest", "ms"),
    ("step_ms", "GPU time per step (CUDA events)", "ms"),
    ("gpu_idle_share", "GPU idle share, end to end", "%"),
    ("latency_p99", "next() in the pipeline phase, 99th percentile", "ms"),
    ("first_batch", "first batch after calling the factory (building the dataset included): the cold start", "s"),
    ("new_epoch_first_batch", "first batch of a new epoch, persistent_workers as configured", "s"),
    ("flipped_cold_first_batch", "first batch of the same DataLoader rebuilt (dataset already built), "
                                 "persistent_workers the other way", "s"),
    ("flipped_new_epoch_first_batch", "first batch of a new epoch, persistent_workers the other way", "s"),
    ("cpu_per_sample", "CPU time per sample, all processes", "ms"),
    ("cores_used", "cores busy in the pipeline phase (flat out, no step)", "cores"),
    ("pipeline_cores_at_training_rate", "the pipeline's CPU per sample x the rate training takes samples", "cores"),
    ("step_rate", "samples/s the step alone takes (batch / step time p50): what input must keep up with", "samples/s"),
    ("cores_at_step_rate", "the pipeline's CPU per sample x the step's own rate: the cores feeding it needs", "cores"),
    ("read_mb_per_s", "read by the processes (read/pread, page cache included)", "MB/s"),
    ("storage_mb_per_s", "read from the storage device", "MB/s"),
    ("peak_pss", "peak PSS, all processes (host memory actually used)", "MiB"),
    ("peak_rss_total", "peak RSS summed over processes (counts shared pages once per process)", "MiB"),
]


def diagnosis(out_dir: str, exp: Experiment, kwargs: Dict[str, Any], o: Dict[str, Any], s: Dict[str, Any],
              reps: int) -> str:
    from .report import _env_lines, step_lines

    arm = exp.arms[0].config
    p = o["pipeline"]
    has_step = exp.step["compute"] != "none"
    L = [f"# Baseline: `{arm['factory']}`", "", "## What ran", "",
         f"- factory `{arm['factory']}`(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + f") returned a `{p.get('type')}`"]
    if p.get("dataloader"):
        L.append("- DataLoader: " + ", ".join(f"{k}={p.get(k)}" for k in ("num_workers", "batch_size", "pin_memory",
                                                                           "prefetch_factor", "persistent_workers",
                                                                           "drop_last", "sampler")) + f"; dataset `{p.get('dataset')}`")
    L.append(f"- batch size (first batch): {o['batch_size']}")
    L.append(f"- step: `{exp.step['function']}`" + (f" after `{exp.step['setup']}`" if exp.step["setup"] else "")
             + f", gradient accumulation {exp.step['grad_accum']}" if has_step else
             "- step: none (give --step to measure training end to end and the data-wait share)")
    L.append(f"- world size {arm['world_size']}; {reps} repetitions, each a fresh process: {exp.run['warmup_samples']} "
             f"warm-up samples, then {exp.run['samples']} measured with the pipeline alone"
             + (", then the same with the step" if has_step else "")
             + "; then two new epochs' first batches")
    # CPU times come from ns clocks (not /proc's 10 ms ticks); what blurs them is the margin
    # of the window they are read over (Note [the CPU window] in rep.py).
    margin = o.get("cores_used_uncertainty") or 0.0
    coarse = (f" Cores busy are read over a window a little wider than the phase: uncertain by up to ±{margin:.2f} "
              "cores; measure more samples (--samples) to narrow it.") if margin > 0.05 else ""
    short = ""
    if p.get("dataloader") and p.get("num_workers"):
        ready = p["num_workers"] * (p.get("prefetch_factor") or 2) * (o["batch_size"] or 1)
        if exp.run["samples"] < 4 * ready:
            short = (f"\n\n**The measured phase ({exp.run['samples']} samples) is not much longer than what the DataLoader "
                     f"holds ready ({ready} samples: workers x prefetch_factor x batch): its throughput and CPU figures "
                     f"include work done before it began. Measure at least {4 * ready} samples (--samples).**")
    L += ["", "## Observed", "", f"Median over the repetitions [95% interval of the geometric mean].{coarse}{short}", "",
          "| figure | what | value |", "|---|---|---|"]
    for key, what, unit in ROWS:
        f = o[key]
        if f["median"] is None:
            continue
        ci = f" [{_fmt(f['ci_low'], unit)}, {_fmt(f['ci_high'], unit)}]" if f["ci_low"] is not None else ""
        L.append(f"| {key} | {what} | {_fmt(f['median'], unit)} {unit if unit != '%' else ''}{ci} |")
    if o["persistent_workers"] is not None:
        L += ["", f"The DataLoader ran with persistent_workers={o['persistent_workers']}. A new epoch's first batch is "
                  "measured on the same DataLoader rebuilt with epochs of a few batches that end as real ones do, "
                  f"as configured and with persistent_workers={not o['persistent_workers']} ('the other way')."]
    elif o.get("restart_after"):
        L += ["", f"A new epoch's first batch is measured on a fresh iterator after {o['restart_after']}."]
    if o["processes"]:
        L += ["", "Memory per process (first repetition, peaks over the run):", "",
              "| process | pid | peak RSS (MiB) | peak PSS (MiB) | CPU (s) |", "|---|---|---|---|---|"]
        for pr in o["processes"]:
            L.append(f"| {pr['role']} | {pr['pid']} | {pr['rss_peak'] / 2**20:.0f} | {pr['pss_peak'] / 2**20:.0f} | "
                     f"{pr.get('cpu_seconds', 0):.1f} |")
        host = [f"main process VmHWM {o['main_rss_peak'] / 2**20:.0f} MiB" if o.get("main_rss_peak") else None,
                f"cgroup peak {o['cgroup_peak'] / 2**20:.0f} MiB" if o.get("cgroup_peak") else None]
        if any(host):
            L += ["", "Host: " + "; ".join(h for h in host if h) + "."]
    if o.get("step_parts") and (o["step_parts"].get("comm") or arm["world_size"] > 1):
        L += step_lines({"step_parts": {"this training": o["step_parts"]}})
        L += ["", "How this scales with the world size, the nodes and gradient accumulation: docs/scaling.md."]
    L += ["", "## Environment", ""] + _env_lines(out_dir)
    L += ["", "## Bottleneck (from the figures above)", ""] + [f"- {x}" for x in bottleneck(o, has_step)["lines"]]
    L += ["", "## Hypotheses (not measured conclusions)", ""]
    L += [f"- {h}" for h in hypotheses(o, has_step)] or ["- none suggested by the measurements"]
    c = s["criteria"]
    L += ["", "## Next experiment", "", f"{s['why']}. **Hypothesis**: {s['hypothesis']}.", "",
          f"It changes one thing, `{s['factor']}`: {s['values'][0]!r} against {s['values'][1]!r}, judged on "
          f"`{c['metric']}` (adopt when its gain's interval is above {c['min_gain']:+.1%}"
          + (", guarding " + ", ".join(f"`{k}` within {v:.0%}" for k, v in c["max_regression"].items())
             if c.get("max_regression") else "") + f"); if the hypothesis holds, the verdict is **{s['expect']}**. "
          + ("Written to `next-experiment.toml`:" if not s.get("withheld") else
             "**Not written**: before writing it, each of its arms was built as `bench run` builds it and asked for "
             f"a batch, and {s['withheld']['why']}. It would fail when run; once that is fixed, this is the "
             "experiment (save it as `next-experiment.toml`):"), "", "```",
          f"loadscope bench run {os.path.join(out_dir, 'next-experiment.toml')}" if not s.get("withheld") else
          s["withheld"]["text"].rstrip("\n"), "```"]
    L += [f"- {n}" for n in s.get("notes", [])]
    if s.get("swap") and not s["needs"] and not s.get("withheld"):
        L += [f"- the loadscope arm is `{SWAP_FILE}` beside it: your DataLoader translated option for option "
              "(`loadscope.from_dataloader`), with the translation in its docstring — yours to keep"]
    if s["needs"] or (s.get("withheld") and s.get("swap") and s["swap"]["why"]):
        L += ["", f"**Before it can run**: {s['needs'] or 'write ' + SWAP_NAME + ': ' + s['swap']['why']}. "
                  f"`{SWAP_FILE}` beside it is a stub that fails with that message."]
    return "\n".join(L) + "\n"


def run(factory: str, kwargs: Optional[Dict[str, Any]] = None, *, step: Optional[str] = None,
        setup: Optional[str] = None, repo: Optional[str] = None, sample_ids: Optional[str] = None,
        batch_size_of: Optional[str] = None, grad_accum: int = 1, world_size: int = 1, samples: int = 1024,
        warmup_samples: int = 256, repetitions: int = 3, data: Optional[str] = None, out_dir: Optional[str] = None,
        timeout_s: float = 900.0, quiet: bool = False) -> Dict[str, Any]:
    """Measures the user's pipeline as it is and writes diagnosis.md, baseline.json, env.json,
    raw.jsonl and next-experiment.toml into `out_dir`. Returns baseline.json's content."""
    from .env import require
    from .runner import ExperimentFailed, _merge_ranks, make_results_dir, repetition

    require()  # before anything is written
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    kwargs = dict(kwargs or {})
    if repetitions < 1:
        raise ConfigError(f"--repetitions {repetitions}: 1 or more (3 or more give intervals)")
    exp = _experiment(factory, kwargs, setup=setup, step=step, repo=repo, sample_ids=sample_ids,
                      batch_size_of=batch_size_of, grad_accum=grad_accum, world_size=world_size,
                      run={"samples": samples, "warmup_samples": warmup_samples, "repetitions": repetitions,
                           "timeout_s": float(timeout_s)}, data=data)
    out_dir = os.path.abspath(out_dir or os.path.join("results", "baseline", time.strftime("%Y%m%d-%H%M%S")))
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not os.path.isfile(os.path.join(out_dir, "baseline.json")):
        raise ConfigError(f"--out {out_dir!r} is not empty and holds no baseline: choose a new folder")
    make_results_dir(out_dir)
    for sub in ("specs", "runs", "logs"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    say(f"baseline of {factory}: recording the environment ...")
    root = exp.dataset["path"]
    environment = envmod.record(root, user.data_files(root) if root else [], exp.training_repo)
    with open(os.path.join(out_dir, "env.json"), "w") as f:
        json.dump(environment, f, indent=1)
    config = exp.arms[0].config
    rows: List[Dict[str, Any]] = []
    say(f"baseline: {repetitions} repetitions, each a fresh process: {warmup_samples} warm-up samples, then {samples} "
        "measured with the pipeline alone" + (", then with the step" if exp.step["compute"] != "none" else "")
        + "; the first one tells how long the rest will take")
    with open(os.path.join(out_dir, "raw.jsonl"), "w") as raw:
        for i in range(repetitions):
            tag = f"{i:03d}"
            started = time.monotonic()
            spec = {"config": config, "step": exp.step, "run": exp.run, "root": None, "stage_dir": None, "cuda": False,
                    "repo": exp.training_repo, "harness_keys": sorted(USER_PIPELINE), "check_overrides": {},
                    "restart": "baseline"}
            results, why = repetition(spec, os.path.join(out_dir, "specs", f"{tag}.json"),
                                      os.path.join(out_dir, "runs", f"{tag}.json"),
                                      os.path.join(out_dir, "logs", f"{tag}.log"), world_size, timeout_s,
                                      exp.training_repo)
            if why is not None:
                raise ExperimentFailed(f"baseline repetition {tag} failed {why}")
            decomposition = scaling.decompose(results)
            merged = _merge_ranks(results)
            merged["decomposition"] = decomposition
            merged.pop("measured_ids", None)
            merged["repetition"] = i
            raw.write(json.dumps(merged) + "\n")
            rows.append(merged)
            say(f"  {tag} {merged['throughput']:8.1f} samples/s"
                + (f"  end to end {merged['e2e_throughput']:8.1f}" if exp.step["compute"] != "none" else "")
                + f"  peak PSS {merged['peak_pss']:6.0f} MiB")
            if i == 0 and repetitions > 1:
                say(_time_left(time.monotonic() - started, repetitions, samples, warmup_samples))
    o = observe(rows, environment["cpu"]["usable_cpus"])
    o["step_parts"] = scaling.mean_decomposition([r["decomposition"] for r in rows if r.get("decomposition")])
    s = suggest(exp, o, kwargs, out_dir)
    say("baseline: building each arm of the next experiment and drawing a batch from it ...")
    write_next(os.path.join(out_dir, "next-experiment.toml"), exp, kwargs, s, o, rehearsed=True)
    text = diagnosis(out_dir, exp, kwargs, o, s, repetitions)
    with open(os.path.join(out_dir, "diagnosis.md"), "w") as f:
        f.write(text)
    has_step = exp.step["compute"] != "none"
    result = {"factory": factory, "kwargs": kwargs, "step": exp.step, "observed": o,
              "bottleneck": bottleneck(o, has_step), "hypotheses": hypotheses(o, has_step), "next": s, "out_dir": out_dir}
    with open(os.path.join(out_dir, "baseline.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    return result


def _time_left(first: float, repetitions: int, samples: int, warmup: int, budget: float = 300.0) -> str:
    """What the first repetition's time says about the rest, and, when the whole would take
    longer than `budget` seconds, sizes that fit it (a repetition's time is roughly linear in
    its samples; the process start is part of it, so this errs on the short side)."""
    total = first * repetitions
    line = (f"  the first repetition took {first:.0f} s: the other {repetitions - 1} take about "
            f"{first * (repetitions - 1) / 60:.1f} min")
    if total > budget:
        scale = budget / total
        fewer = max(64, int(samples * scale) // 64 * 64)
        line += (f"; for about {budget / 60:.0f} min in all, stop (Ctrl-C) and run again with --samples {fewer} "
                 f"--warmup-samples {max(32, int(warmup * scale) // 32 * 32)} (fewer samples widen the intervals)")
    return line


def parse_arg(text: str) -> tuple:
    """`--arg KEY=VALUE`: VALUE read as a TOML value (2, 0.5, true, "text", [1, 2]); anything
    that is not one is a string."""
    if "=" not in text:
        raise ConfigError(f"--arg {text!r}: KEY=VALUE")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key.isidentifier():
        raise ConfigError(f"--arg {text!r}: {key!r} is not a keyword argument name")
    try:
        return key, toml_module().loads(f"v = {value}")["v"]  # tomllib, or tomli before Python 3.11
    except Exception:
        return key, value


