"""From raw results to a decision: per-arm statistics, effects against the baseline, the
verdict from the declared criteria, plots, and report.md (what was observed, kept apart from
hypotheses about why)."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from typing import Any, Dict, List, Optional, Tuple

from .._errors import ConfigError
from . import scaling, stats
from .experiment import METRICS, Experiment, load


def _load_raw(out_dir: str) -> List[Dict[str, Any]]:
    path = os.path.join(out_dir, "raw.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _metrics_used(exp: Experiment, rows: List[Dict[str, Any]]) -> List[str]:
    out = []
    for m in METRICS:
        if m == "e2e_throughput" and exp.step["compute"] == "none":
            continue  # the same number as throughput: reported once
        if any(r.get(m) is not None for r in rows):
            out.append(m)
    return out


def _goodness(metric: str, effect: Dict[str, Optional[float]]) -> Dict[str, Optional[float]]:
    """The effect as a gain (positive = better) with its interval, whatever the metric's direction."""
    higher = METRICS[metric][1]
    e, lo, hi = effect["effect"], effect["ci_low"], effect["ci_high"]
    if e is None:
        return {"gain": None, "low": None, "high": None}
    if higher:
        return {"gain": e, "low": lo, "high": hi}
    # lower is better: a 10% drop is a gain of 10%/(1-10%) in throughput terms; report the plain -effect
    return {"gain": -e, "low": None if hi is None else -hi, "high": None if lo is None else -lo}


def analyze(out_dir: str, exp: Experiment, *, correctness: Dict[str, Any], failure: Optional[str] = None) -> Dict[str, Any]:
    rows = [r for r in _load_raw(out_dir) if not r.get("warmup")]
    conf = exp.criteria["confidence"]
    arms = [a.name for a in exp.arms]
    by_arm = {a: sorted((r for r in rows if r["arm"] == a), key=lambda r: r["round"]) for a in arms}
    metrics = _metrics_used(exp, rows)
    per_arm = {a: {m: stats.summarize([r.get(m) for r in by_arm[a]], conf, upper=1.0 if METRICS[m][0] == "fraction" else None)
                   for m in metrics} for a in arms}
    base = arms[0]
    paired = exp.run["order"] == "interleaved"
    effects: Dict[str, Dict[str, Any]] = {}
    for a in arms[1:]:
        effects[a] = {}
        for m in metrics:
            xs = [r.get(m) for r in by_arm[base]]
            ys = [r.get(m) for r in by_arm[a]]
            if paired:
                n = min(len(xs), len(ys))
                pairs = [(x, y) for x, y in zip(xs[:n], ys[:n]) if x is not None and y is not None and x > 0 and y > 0]
                xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            effects[a][m] = stats.relative_effect(xs, ys, paired=paired, confidence=conf)
    summary: Dict[str, Any] = {
        "status": "failed" if failure else "ok", "experiment": exp.name, "factor": exp.factor, "baseline": base,
        "arms": arms, "metrics": {m: {"unit": METRICS[m][0], "higher_is_better": METRICS[m][1], "meaning": METRICS[m][2]}
                                  for m in metrics},
        "confidence": conf, "paired": paired, "repetitions": {a: len(by_arm[a]) for a in arms},
        "per_arm": per_arm, "effects": effects, "correctness": correctness, "failure": failure,
        "criteria": exp.criteria, "step": exp.step, "run": exp.run,
        "global_batch": {a.name: _global_batch(exp, a, by_arm[a.name]) for a in exp.arms},
    }
    summary["resolution"] = {a: {m: _resolvable(effects[a][m]) for m in metrics} for a in arms[1:]}
    summary["machine_load"] = _machine_load(rows)
    summary["storage"] = _storage(by_arm)
    summary["staging"] = _staging(exp, per_arm, summary["storage"], out_dir)
    summary["step_parts"] = {a: scaling.mean_decomposition([r["decomposition"] for r in by_arm[a] if r.get("decomposition")])
                             for a in arms}
    summary["scaling"] = scaling.scaling(exp, summary, by_arm)
    summary["per_node"] = {a: by_arm[a][0]["per_node"] for a in arms if by_arm[a] and by_arm[a][0].get("per_node")}
    summary["verdicts"] = {a: _verdict(exp, a, summary) for a in arms[1:]}
    summary["capacity"] = _capacities(exp, per_arm, by_arm, out_dir)
    summary["remote_bound"] = _remote_bounds(exp, per_arm, by_arm)
    summary["hypotheses"] = _hypotheses(summary, by_arm, out_dir)
    summary["rerun"] = rerun_command(os.path.join(out_dir, "experiment.effective.json"), out_dir)
    return summary


def rerun_command(effective: str, out_dir: str) -> str:
    """The command that runs the same experiment again (its effective JSON, overrides included)."""
    return f"{sys.executable} -m loadscope bench run {effective} --out {out_dir}-rerun"


def _resolvable(effect: Dict[str, Optional[float]]) -> Optional[float]:
    """The smallest relative effect this run could tell from no effect: the half-width of the
    effect's interval on the log scale. None without an interval.

    Note [what a run can resolve]
    A verdict answers "is the gain above min_gain?" by the interval's lower bound. When the
    interval's half-width is wider than min_gain, a true gain of exactly min_gain lands in an
    interval holding 0 about half the time or more: the run cannot answer, whatever it says.
    The report then warns, with about how many repetitions would do (the half-width shrinks as
    1/sqrt(n)), and calls a roll back inconclusive instead of presenting it as a finding."""
    lo, hi = effect.get("ci_low"), effect.get("ci_high")
    if lo is None or hi is None or lo <= -1:
        return None
    return math.exp((math.log1p(hi) - math.log1p(lo)) / 2) - 1


def _repetitions_for(resolvable: float, wanted: float, n: int) -> int:
    """About how many repetitions would resolve `wanted`: the half-width shrinks as 1/sqrt(n)
    (the t multiplier's change with n is left out: a lower bound)."""
    ratio = math.log1p(resolvable) / math.log1p(max(wanted, 1e-6))
    return max(n + 1, math.ceil(n * ratio * ratio))


def _machine_load(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per repetition: what the rest of the machine did while it measured (rep.py)."""
    reps = [{"arm": r["arm"], "round": r["round"], **r["machine"]} for r in rows if r.get("machine")]
    return {"repetitions": reps, "contended": [f"{r['arm']} round {r['round']}" for r in reps if r["contended"]]}


def _global_batch(exp: Experiment, arm: Any, rows: List[Dict[str, Any]]) -> Optional[int]:
    """Samples per optimizer step: declared for a built-in pipeline, observed (the batch size
    of the arm's first repetition) for a user pipeline."""
    g = exp.global_batch(arm.config)
    if g is None:
        sizes = [r["batch_size"] for r in rows if r.get("batch_size")]
        g = sizes[0] * arm.config["world_size"] * exp.step_for(arm.config)["grad_accum"] if sizes else None
    return g


def _dataset_samples(out_dir: str) -> Optional[int]:
    try:
        with open(os.path.join(out_dir, "env.json")) as f:
            return json.load(f)["dataset"]["samples"] or None
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _storage(by_arm: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Per arm: what the measured phase fetched from object storage (all ranks, median over
    repetitions), and how many samples a cache fill read."""
    out: Dict[str, Any] = {}
    def med(rows: List[Dict[str, Any]], key: str) -> Optional[float]:
        xs = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(xs) if xs else None

    for a, rows in by_arm.items():
        fills = [r["staging"]["samples"] for r in rows if (r.get("staging") or {}).get("kind") == "cache"]
        out[a] = {"network_bytes": med(rows, "network_bytes"), "network_requests": med(rows, "network_requests"),
                  "network_bytes_run": med(rows, "network_bytes_run"), "cache_fill_samples": fills[0] if fills else None}
    return out


def _staging(exp: Experiment, per_arm: Dict[str, Any], storage: Dict[str, Any], out_dir: str) -> Dict[str, Any]:
    """For arms that stage the data: the copy's cost and the epochs after which it pays off
    (staging seconds over the time it saves per epoch)."""
    out: Dict[str, Any] = {}
    n = _dataset_samples(out_dir)
    base = exp.arms[0].name
    tb = per_arm[base].get("throughput", {}).get("median")
    for a in exp.arms[1:]:
        cache = a.config.get("storage") == "remote-cache"
        if not cache and a.config.get("staging") != "local" and a.config.get("storage") != "remote-staged":
            continue
        st = per_arm[a.name].get("staging_seconds", {}).get("median")
        ta = per_arm[a.name].get("throughput", {}).get("median")
        filled = storage[a.name]["cache_fill_samples"]
        if st is None or not n or not tb or not ta or (cache and not filled):  # cannot weigh the cost: no adopt
            out[a.name] = {"staging_seconds": st, "break_even_epochs": None, "unknown": True, "cache": cache}
            continue
        saved = n / tb - n / ta
        # A copy is time before training. Filling the cache is the first epoch, which trains:
        # its cost is only what that epoch (from making its loader) takes beyond the baseline's
        # first batch and an epoch at the baseline's speed.
        fb = per_arm[base].get("first_batch", {}).get("median") or 0.0
        cost = max(0.0, st * n / filled - fb - n / tb) if cache else st
        out[a.name] = {"staging_seconds": st, "epoch_seconds_baseline": n / tb, "epoch_seconds_arm": n / ta,
                       "saved_per_epoch": saved, "cost": cost, "cache": cache,
                       # No time saved per epoch: it never pays off, whatever it cost.
                       "break_even_epochs": None if saved <= 0 else cost / saved}
    return out


def _repetitions_to_decide(lo: float, hi: float, bound: float, n: int) -> Optional[int]:
    """About how many repetitions would put an interval [lo, hi] of relative effects on one
    side of `bound`: its half-width (log scale) shrinks as 1/sqrt(n) around its centre. None
    when the centre is on the bound (no number of repetitions decides it)."""
    if lo <= -1 or bound <= -1:
        return None
    centre = (math.log1p(lo) + math.log1p(hi)) / 2
    half = (math.log1p(hi) - math.log1p(lo)) / 2
    gap = abs(centre - math.log1p(bound))
    if gap < 1e-9:
        return None
    return max(n + 1, math.ceil(n * (half / gap) ** 2))


def _verdict(exp: Experiment, arm: str, s: Dict[str, Any]) -> Dict[str, Any]:
    """Adopt when the primary metric's gain is above min_gain at the interval's lower bound,
    no guarded metric regresses beyond its bound (point estimate), the correctness check
    passed, and staging (if any) pays off within max_break_even_epochs.

    Otherwise the run found a reason not to adopt, and the verdict says how sure that is
    (Note [three verdicts]): "roll back" when one reason is a finding (the gain's interval lies
    wholly below min_gain, a guarded metric's regression interval wholly beyond its bound, or
    staging that cannot pay off), "inconclusive" when every reason is only a point estimate
    whose interval still reaches the other side; "invalid" when a repetition failed or the arms
    disagree.

    Note [three verdicts]
    A gate in CI must fail on evidence, not on noise. "No significant difference" from an
    interval of [-3%, +9%] against a required +5% says nothing about whether the arm is worth
    it; failing a build on it (as this harness once did) trains people to ignore the gate. So
    an inconclusive verdict names itself, with about how many repetitions would decide it, and
    the pytest plugin passes it by default (--loadscope-gates=strict fails it too)."""
    c = exp.criteria
    m = c["metric"]
    reasons: List[str] = []
    confident: List[str] = []   # reasons not to adopt that the intervals support
    uncertain: List[str] = []   # reasons not to adopt that rest on a point estimate

    def because(kind: List[str], reason: str) -> None:  # a reason not to adopt, and how sure it is
        kind.append(reason)
        reasons.append(reason)

    decide: List[int] = []      # repetitions that would decide each uncertain one
    if s["failure"]:
        return {"decision": "invalid", "reasons": ["a repetition failed: " + s["failure"].splitlines()[0]]}
    check = s["correctness"]["arms"].get(arm)
    if check is not None and check["ok"] is False:
        return {"decision": "invalid", "reasons": ["correctness check failed: " + check["detail"]]}
    if check is not None and check["ok"] is None:
        reasons.append("correctness was NOT checked (no sample ids): the arms may not deliver the same data")
    g = _goodness(m, s["effects"][arm][m]) if m in s["effects"][arm] else {"gain": None, "low": None, "high": None}
    sig = stats.significant(s["effects"][arm][m]) if m in s["effects"][arm] else None
    pct = lambda x: "n/a" if x is None else f"{x * 100:+.1f}%"  # noqa: E731
    n = s["repetitions"][arm]
    if g["low"] is None:
        because(uncertain, f"{m}: no interval (needs 2 or more repetitions)")
    elif g["low"] > c["min_gain"]:
        reasons.append(f"{m}: gain {pct(g['gain'])}, {conf_txt(s)} [{pct(g['low'])}, {pct(g['high'])}]; the lower bound "
                       f"is above the required {pct(c['min_gain'])}")
    elif g["high"] is not None and g["high"] < c["min_gain"]:
        what = ("worse" if g["high"] < 0 else "no significant difference" if sig is False else "gain too small")
        because(confident, f"{m}: {what}: gain {pct(g['gain'])}, {conf_txt(s)} [{pct(g['low'])}, {pct(g['high'])}]; "
                           f"the whole interval is below the required {pct(c['min_gain'])}")
    else:
        more = _repetitions_to_decide(g["low"], g["high"], c["min_gain"], n) if g["high"] is not None else None
        if more is not None:
            decide.append(more)
        because(uncertain, f"{m}: undecided: gain {pct(g['gain'])}, {conf_txt(s)} [{pct(g['low'])}, "
                           f"{pct(g['high'])}] holds the required {pct(c['min_gain'])}"
                           + (f"; about {more} repetitions (or longer ones) would decide it" if more else ""))
    # Honesty: can this run answer the question it was asked? (Note [what a run can resolve])
    warnings = []
    res = s["resolution"][arm]
    # Where the interval already decides, what the spread could hide is no longer the question:
    # the warning would only contradict the confident line above it.
    decided = g["low"] is not None and (g["low"] > c["min_gain"] or (g["high"] is not None and g["high"] < c["min_gain"]))
    if res.get(m) is not None and res[m] > c["min_gain"] and not decided:
        warnings.append(f"{m}: this run cannot resolve a gain of {pct(c['min_gain'])}: with {n} repetitions and the spread "
                        f"observed, effects within ±{res[m] * 100:.1f}% are indistinguishable from none; about "
                        f"{_repetitions_for(res[m], c['min_gain'], n)} repetitions (or longer ones) would resolve it")
    for gm, bound in c["max_regression"].items():
        if res.get(gm) is not None and res[gm] > bound:
            warnings.append(f"{gm}: the regression bound {pct(bound)} is below what this run resolves "
                            f"(±{res[gm] * 100:.1f}%): a regression of that size could go unseen")
    contended = s["machine_load"]["contended"]
    if contended:
        warnings.append(f"{len(contended)} of {len(s['machine_load']['repetitions'])} repetitions ran on a busy machine "
                        f"(other processes took over a quarter core, or the hypervisor stole over 5%): "
                        f"{', '.join(contended[:4])}{' ...' if len(contended) > 4 else ''}; their figures may be off")
    for gm, bound in c["max_regression"].items():
        if gm not in s["effects"][arm]:
            continue
        eff = s["effects"][arm][gm]
        e = eff["effect"]
        if e is None:
            continue
        higher = METRICS[gm][1]
        regression = -e if higher else e
        if regression > bound:
            # The regression's interval: how much worse at least.
            lo, hi = eff.get("ci_low"), eff.get("ci_high")
            least = None if lo is None or hi is None else (-hi if higher else lo)
            if least is not None and least > bound:
                because(confident, f"{gm}: regresses {pct(regression)} (at least {pct(least)} at the "
                                   f"{conf_txt(s)}; bound {pct(bound)})")
            else:
                more = None
                if lo is not None and hi is not None:
                    worse = (-hi, -lo) if higher else (lo, hi)
                    more = _repetitions_to_decide(worse[0], worse[1], bound, n)
                if more is not None:
                    decide.append(more)
                because(uncertain, f"{gm}: regresses {pct(regression)} (bound {pct(bound)}), but its interval "
                                   "reaches back within the bound"
                                   + (f"; about {more} repetitions would decide it" if more else ""))
        else:
            reasons.append(f"{gm}: {pct(e)} change, within the {pct(bound)} regression bound")
    st = s["staging"].get(arm)
    if st is not None:
        be, what = st["break_even_epochs"], "cache" if st.get("cache") else "staging"
        if st.get("unknown"):
            because(confident, f"{what}: its cost cannot be weighed (samples per epoch or a time unknown)")
        elif be is None:
            because(confident, f"{what}: costs {st['cost']:.2f} s per run and saves no time per epoch: it never "
                               "pays off")
        elif be > c["max_break_even_epochs"]:
            because(confident, f"{what}: costs {st['cost']:.2f} s, pays off after {be:.1f} epochs, more than "
                               f"the {c['max_break_even_epochs']:g} allowed")
        else:
            reasons.append(f"{what}: costs {st['cost']:.2f} s, pays off after {be:.1f} epochs")
    decision = "roll back" if confident else "inconclusive" if uncertain else "adopt"
    out: Dict[str, Any] = {"decision": decision, "significant": sig, "reasons": reasons, "warnings": warnings,
                           "inconclusive": decision == "inconclusive"}
    if decision == "inconclusive":
        out["repetitions_to_decide"] = max(decide) if decide else None
    out["deciding"] = confident if decision == "roll back" else uncertain  # what made it so, for one-line summaries
    return out


def cores_used(row: Dict[str, Any]) -> Tuple[float, float]:
    """Cores kept busy in a repetition's pipeline phase, and its uncertainty: the CPU time read
    over a window a little wider than the phase (Note [the CPU window] in rep.py), so the figure
    never exceeds the cores available, and the phase's own may be lower by at most the cores
    times the margin, relative to the phase."""
    window = row.get("cpu_window") or row["seconds"]
    cores = row["cpu_seconds"] / window
    return cores, cores * max(0.0, window - row["seconds"]) / row["seconds"] + 1e-9


def conf_txt(s: Dict[str, Any]) -> str:
    return f"{s['confidence'] * 100:g}% CI"


def capacity(cpu_ms: Optional[float], step_ms: Optional[float], batch: Optional[int],
             bytes_per_sample: Optional[float], usable: Optional[int]) -> Optional[Dict[str, Any]]:
    """How many cores feeding this training needs (part 23): the CPU per sample x the rate the
    step alone takes samples (batch / step time, as if input never kept it waiting), against the
    cores this node gives; beyond them, a pool of remote workers sized for it and the link that
    pool needs (bytes per sample x that rate). None without those figures."""
    if not cpu_ms or not step_ms or not batch:
        return None
    rate = batch / (step_ms / 1e3)
    cores = cpu_ms / 1e3 * rate
    usable = usable or 1
    each = 4 if cores > 4 else 1  # cores per worker: a few threads each, or single ones for a small need
    return {"step_rate": rate, "cores": cores, "cpu_ms": cpu_ms, "step_ms": step_ms, "batch": batch, "usable": usable,
            "exceeds": cores > usable, "bytes_per_sample": bytes_per_sample,
            "link_gbit_s": bytes_per_sample * rate * 8 / 1e9 if bytes_per_sample else None,
            "workers": max(1, math.ceil(cores / each)), "cpus_per_worker": each}


def capacity_lines(cap: Dict[str, Any], who: str = "") -> Tuple[str, Optional[str]]:
    """The capacity line, and the suggestion when this node cannot feed the step (else None)."""
    line = (f"capacity{who}: the step alone takes {_fmt(cap['step_rate'], 'samples/s')} samples/s (batch {cap['batch']} / "
            f"step time p50 {_fmt(cap['step_ms'], 'ms')} ms); feeding that costs **{_fmt(cap['cores'], 'cores')} cores** "
            f"at {_fmt(cap['cpu_ms'], 'ms')} ms of CPU per sample — "
            + (f"more than the {cap['usable']} usable cores of this node" if cap["exceeds"] else
               f"within the {cap['usable']} usable cores of this node"))
    if not cap["exceeds"]:
        return line, None
    link = (f" and a link of at least {cap['link_gbit_s']:.2g} Gbit/s to them ({cap['bytes_per_sample'] / 1e3:.0f} kB "
            f"per sample x {_fmt(cap['step_rate'], 'samples/s')} samples/s)" if cap["link_gbit_s"] else "")
    return line, (f"this node cannot feed the step at its own rate{who}: {_fmt(cap['cores'], 'cores')} cores at the CPU "
                  f"per sample measured, {cap['usable']} here. Decoding on CPU nodes would: Loader(..., "
                  f"workers=ls.ray.Workers({cap['workers']}, cpus_per_worker={cap['cpus_per_worker']})){link} "
                  "(docs/disaggregation.md). The swap to loadscope first: its CPU per sample is usually lower, "
                  "so fewer cores are needed.")


def remote_bound(cpu_ms: Optional[float], bytes_per_sample: Optional[float], cpu_nodes: int, cores_per_node: float,
                 link_mbit: Optional[float]) -> Optional[Dict[str, Any]]:
    """What a pool of workers on CPU nodes can deliver at most, predicted from what the trainer
    measured doing the work itself (part 23's capacity): the CPU nodes' cores at its CPU per
    sample, and the trainer's link at the bytes a sample ships; the smaller binds."""
    if not cpu_ms or not cpu_nodes or not cores_per_node:
        return None
    cpu_rate = cpu_nodes * cores_per_node / (cpu_ms / 1e3)
    link_rate = link_mbit * 1e6 / 8 / bytes_per_sample if link_mbit and bytes_per_sample else None
    bound = min(cpu_rate, link_rate) if link_rate else cpu_rate
    return {"cpu_ms": cpu_ms, "cpu_nodes": cpu_nodes, "cores_per_node": cores_per_node, "cpu_rate": cpu_rate,
            "link_mbit": link_mbit or None, "bytes_per_sample": bytes_per_sample, "link_rate": link_rate,
            "bound": bound, "binds": "link" if link_rate is not None and link_rate < cpu_rate else "cpu"}


def _remote_bounds(exp: Experiment, per_arm: Dict[str, Any], by_arm: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Each arm whose batches a pool on emulated CPU nodes made: the bound predicted from the
    first arm that made its own (its CPU per sample and bytes per sample), the throughput it
    measured against it, and the trainer's own CPU per sample against that arm's."""
    local = next((a for a in exp.arms if not a.config.get("ray_workers", 0)), None)
    if local is None or "cpu_per_sample" not in per_arm.get(local.name, {}):
        return {}
    ref = per_arm[local.name]
    out = {}
    for a in exp.arms:
        c = a.config
        if not c.get("ray_workers", 0) or not c.get("cpu_nodes"):
            continue
        shipped = next((r["bytes_per_sample"] for r in by_arm[local.name] if r.get("bytes_per_sample")), None)
        # The CPU nodes that hold a worker (ray.Workers spreads them), and the trainer's one link
        # (a pool arm has one training node: experiment._check_placement).
        b = remote_bound(ref["cpu_per_sample"]["median"], shipped,
                         min(c["cpu_nodes"], c["ray_workers"]), c.get("cpu_node_cores") or 0.0, c.get("link_mbit") or 0.0)
        if b is None:
            continue
        got = per_arm[a.name].get("throughput", {}).get("median")
        mine = per_arm[a.name].get("cpu_per_sample", {}).get("median")
        pool = stats.summarize([r.get("other_nodes_cpu_per_sample") for r in by_arm[a.name]])["median"]
        node = stats.summarize([r.get("node_cpu_per_sample") for r in by_arm[a.name]])["median"]
        b.update(reference=local.name, throughput=got, share=got / b["bound"] if got else None,
                 trainer_cpu_ms=mine, trainer_cpu_share=mine / b["cpu_ms"] if mine else None, pool_cpu_ms=pool,
                 node_cpu_ms=node, node_cpu_share=node / b["cpu_ms"] if node else None)
        out[a.name] = b
    return out


def remote_bound_line(arm: str, b: Dict[str, Any]) -> str:
    link = (f"; the link {b['link_mbit']:g} Mbit/s / {b['bytes_per_sample'] / 1e3:.0f} kB a sample = "
            f"{_fmt(b['link_rate'], 'samples/s')}/s" if b["link_rate"] else "")
    got = (f"; measured {_fmt(b['throughput'], 'samples/s')}/s = **{b['share']:.0%} of the bound**"
           if b["share"] is not None else "")
    cpu = (f"; the trainer's own CPU per sample {_fmt(b['trainer_cpu_ms'], 'ms')} ms = {b['trainer_cpu_share']:.0%} of "
           f"{b['reference']}'s" if b["trainer_cpu_share"] is not None else "")
    if b.get("node_cpu_share") is not None:
        cpu += (f"; its node's (Ray's head and object transfer included) {_fmt(b['node_cpu_ms'], 'ms')} ms = "
                f"**{b['node_cpu_share']:.0%}**")
    if b.get("pool_cpu_ms"):
        cpu += f"; the CPU nodes' (workers and raylets) {_fmt(b['pool_cpu_ms'], 'ms')} ms"
    return (f"capacity of the CPU nodes ({arm}), predicted from {b['reference']}: {b['cpu_nodes']} x "
            f"{b['cores_per_node']:g} cores at {_fmt(b['cpu_ms'], 'ms')} ms of CPU per sample = "
            f"{_fmt(b['cpu_rate'], 'samples/s')}/s{link}: bound {_fmt(b['bound'], 'samples/s')}/s ({b['binds']} binds)"
            f"{got}{cpu}")


def _usable(out_dir: str) -> Optional[int]:
    try:
        with open(os.path.join(out_dir, "env.json")) as f:
            return json.load(f)["cpu"]["usable_cpus"]
    except (OSError, KeyError, ValueError):
        return None


def _capacities(exp: Experiment, per_arm: Dict[str, Any], by_arm: Dict[str, List[Dict[str, Any]]],
                out_dir: str) -> Dict[str, Any]:
    if exp.step["compute"] == "none":
        return {}
    out = {}
    for a, rows in by_arm.items():
        med = {m: stats.summarize([r.get(m) for r in rows])["median"] for m in ("cpu_per_sample", "step_time_p50")}
        first = rows[0] if rows else {}
        cap = capacity(med["cpu_per_sample"], med["step_time_p50"], first.get("batch_size"),
                       first.get("bytes_per_sample"), _usable(out_dir))
        if cap is not None:
            out[a] = cap
    return out


def _hypotheses(s: Dict[str, Any], by_arm: Dict[str, List[Dict[str, Any]]], out_dir: str) -> List[str]:
    """Suggestions of why, from the measurements; labelled as hypotheses in the report."""
    out = []
    base = s["baseline"]
    pa = s["per_arm"]
    for arm in s["arms"][1:]:
        e = s["effects"][arm]
        tp, cpu = e.get("throughput", {}).get("effect"), e.get("cpu_per_sample", {}).get("effect")
        cpu_sig = stats.significant(e.get("cpu_per_sample", {})) is True
        if s["factor"] in ("world_size", "nodes", "link_mbit", "ray_workers"):
            continue  # more ranks split the work and add processes: the per-sample CPU and memory rules misread it
        if tp is not None and cpu is not None:
            if cpu < -0.1 and cpu_sig:  # only from a difference the interval shows
                out.append(f"{arm} spends {-cpu:.0%} less CPU per sample than {base}: less work per sample "
                           "(a cheaper decode path, fewer copies or processes), not only more parallelism.")
            elif abs(cpu) <= 0.1 and tp > 0.1 and stats.significant(e.get("throughput", {})) is True:
                out.append(f"{arm} is faster with about the same CPU per sample: it keeps more cores busy "
                           "(more parallelism or less waiting), rather than doing less work.")
        mem = e.get("peak_pss", {}).get("effect")
        if mem is not None and abs(mem) > 0.2:
            out.append(f"peak PSS {mem:+.0%} in {arm}: worker processes each holding a copy of the interpreter, "
                       "torch and the dataset list are the usual cause of a difference this size.")
    usable = _usable(out_dir)
    for a, rows in by_arm.items():
        used = [cores_used(r)[0] for r in rows if r.get("seconds")]
        if usable and used and max(used) > 0.85 * usable:
            out.append(f"{a}'s pipeline alone (flat out, no step) kept {max(used):.1f} of {usable} usable cores busy: "
                       "CPU-bound here, so more threads or workers than cores cannot help; less work per sample can.")
    for arm in s["arms"]:
        share = pa[arm].get("data_wait_share", {}).get("median")
        if share is not None and share > 0.5:
            out.append(f"with the declared step, {arm} leaves the training loop waiting for data "
                       f"{share:.0%} of the time: input-bound; faster input would speed training up.")
    for arm, cap in s.get("capacity", {}).items():
        suggestion = capacity_lines(cap, f" ({arm})")[1]
        if suggestion:
            out.append(suggestion)
    return out


# --- writing --------------------------------------------------------------------------------

def _fmt(v: Optional[float], unit: str) -> str:
    if v is None:
        return "—"
    if unit == "fraction":
        return f"{v:.1%}"
    if unit in ("samples/s", "MiB"):
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def _pct(v: Optional[float]) -> str:
    return "—" if v is None else f"{v * 100:+.1f}%"


def table(summary: Dict[str, Any]) -> str:
    """The per-arm table (median [CI of the mean]) as Markdown."""
    lines = ["| metric | unit | " + " | ".join(summary["arms"]) + " |", "|---|---|" + "---|" * len(summary["arms"])]
    for m, meta in summary["metrics"].items():
        cells = []
        for a in summary["arms"]:
            st = summary["per_arm"][a][m]
            cell = _fmt(st["median"], meta["unit"])
            if st["ci_low"] is not None:
                cell += f" [{_fmt(st['ci_low'], meta['unit'])}, {_fmt(st['ci_high'], meta['unit'])}]"
            cells.append(cell)
        lines.append(f"| {m} | {meta['unit']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def effects_table(summary: Dict[str, Any]) -> str:
    lines = ["| arm vs " + summary["baseline"] + " | metric | effect | " + conf_txt(summary) + " | significant |",
             "|---|---|---|---|---|"]
    for a, per in summary["effects"].items():
        for m, e in per.items():
            sig = stats.significant(e)
            lines.append(f"| {a} | {m} | {_pct(e['effect'])} | [{_pct(e['ci_low'])}, {_pct(e['ci_high'])}] | "
                         f"{'—' if sig is None else ('yes' if sig else 'no')} |")
    return "\n".join(lines)


def plots(out_dir: str, summary: Dict[str, Any]) -> List[str]:
    """Per-arm distributions, throughput over time and memory over time (first measured round)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a Debian package here
        return []
    rows = [r for r in _load_raw(out_dir) if not r.get("warmup")]
    os.makedirs(os.path.join(out_dir, "plots"), exist_ok=True)
    arms, written = summary["arms"], []
    ms = [m for m in ("throughput", "e2e_throughput", "latency_p99", "peak_pss", "cpu_per_sample") if m in summary["metrics"]]
    if not rows or not ms:
        return []
    fig, axes = plt.subplots(1, len(ms), figsize=(3.2 * len(ms), 3.4), squeeze=False)
    for ax, m in zip(axes[0], ms):
        for i, a in enumerate(arms):
            ys = [r[m] for r in rows if r["arm"] == a and r.get(m) is not None]
            ax.scatter([i] * len(ys), ys, s=16, alpha=0.7)
            if ys:
                med = summary["per_arm"][a][m]["median"]
                ax.hlines(med, i - 0.25, i + 0.25, color="black")
        ax.set_xticks(range(len(arms)), arms, rotation=20, ha="right", fontsize=7)
        ax.set_title(f"{m} ({summary['metrics'][m]['unit']})", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("every repetition (dots) and the median (bar)", fontsize=9)
    fig.tight_layout()
    path = os.path.join(out_dir, "plots", "distributions.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    for key, ylabel, name, title in (("timeline", "samples delivered", "throughput_over_time.png",
                                      "pipeline phase, first measured round (rank 0)"),
                                     ("memory_timeline", "PSS of all processes (MiB)", "memory_over_time.png",
                                      "whole repetition, first measured round (rank 0's processes)")):
        fig, ax = plt.subplots(figsize=(6, 3.4))
        for a in arms:
            first = next((r for r in rows if r["arm"] == a and r.get(key)), None)
            if first:
                ts, vs = zip(*first[key])
                ax.plot(ts, vs, label=a, linewidth=1.2)
        ax.set_xlabel("seconds")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, "plots", name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    scaling_png = _scaling_plot(out_dir, summary, plt)
    if scaling_png:
        written.append(scaling_png)
    return written


def _ms(v: Optional[float]) -> str:
    return "–" if v is None else f"{v * 1e3:.2f}"


def step_lines(summary: Dict[str, Any]) -> List[str]:
    """The data-parallel step taken apart per arm, and scaling efficiency across world sizes
    (scaling.py; docs/scaling.md says how to read them)."""
    decs = {a: d for a, d in (summary.get("step_parts") or {}).items() if d}
    if not decs:
        return []
    keys = [k for k in scaling.PARTS if any(k in d["parts"] for d in decs.values())]
    L = ["", "### The training step, taken apart", "",
         "Mean milliseconds per step, over the steps of the end-to-end phase and then the ranks (the arms' "
         "repetitions averaged). `sum` is the parts' total; `measured` is the phase's time over its steps: the "
         "parts account for the share in the last column. The exposed all-reduce is the part of the gradient "
         "all-reduce that backward's compute did not hide, less the straggler wait (waiting for the slowest rank "
         "to finish its backward).", "",
         "| arm | " + " | ".join(scaling.LABELS[k] for k in keys) + " | sum | measured | accounted |",
         "|---|" + "---:|" * (len(keys) + 3)]
    for a, d in decs.items():
        L.append(f"| {a} | " + " | ".join(_ms(d["parts"].get(k)) for k in keys)
                 + f" | {_ms(d['sum'])} | {_ms(d['step'])} | {d['accounted']:.1%} |")
    comm = {a: d["comm"] for a, d in decs.items() if d.get("comm")}
    if comm:
        L += ["", "The gradient all-reduce (timed per bucket by a DDP communication hook; docs/scaling.md):", "",
              "| arm | all-reduces per sample | MB per synchronised step | all-reduce busy (ms per step) | "
              "exposed (ms per step, stragglers' wait included) | hidden under backward | exposed ms per sample |",
              "|---|---:|---:|---:|---:|---:|---:|"]
        for a, c in comm.items():
            hidden = c.get("hidden_share")
            L.append(f"| {a} | {c['allreduces_per_sample']:.4f} | {c['bytes_per_step'] / 1e6:.2f} | {_ms(c['busy_per_step'])} "
                     f"| {_ms(c['exposed_per_step'])} | {'–' if hidden is None else f'{hidden:.0%}'} "
                     f"| {c['exposed_per_sample'] * 1e3:.3f} |")
    sc = summary.get("scaling")
    if sc:
        L += ["", "### Scaling efficiency", "",
              ("Weak scaling (the per-rank batch held: the global batch grows with W). " if sc.get("scaling") != "strong"
               else "Strong scaling (the global batch held: each rank's batch is the baseline's global batch over W). ")
              + f"efficiency = {sc['metric']}(W) / (W / W0 × {sc['metric']}(W0)), against `{sc['reference']}` (W0); "
              f"interval {conf_txt(summary)} from the paired rounds. The loss columns split 1 − efficiency (as the "
              "step's parts give it) into its causes: each part's excess over the reference's, scaled to the per-rank "
              "batch, over the step.", "",
              f"| arm | W | ideal × | {sc['metric']} (median) | efficiency | data wait | exposed all-reduce | straggler wait | "
              "compute inflation |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for a, row in sc["arms"].items():
            eff = row.get("efficiency")
            eff_txt = "–" if eff is None else f"{eff:.1%}" + (
                f" [{row['efficiency_low']:.1%}, {row['efficiency_high']:.1%}]" if row.get("efficiency_low") is not None
                and a != sc["reference"] else "")
            loss = row.get("loss") or {}
            L.append(f"| {a} | {row['world_size']} | {row['ideal']:g} | {row['throughput']:.1f} | {eff_txt} | "
                     + " | ".join(_pct(loss.get(k)) for k in ("data_wait", "comm_exposed", "straggler_wait",
                                                                "compute_inflation")) + " |")
    return L


def _scaling_plot(out_dir: str, summary: Dict[str, Any], plt: Any) -> Optional[str]:
    """Throughput against world size with the ideal line, and each arm's step as stacked parts."""
    decs = {a: d for a, d in (summary.get("step_parts") or {}).items() if d}
    sc = summary.get("scaling")
    if not decs and not sc:
        return None
    fig, axes = plt.subplots(1, 2 if sc else 1, figsize=(10 if sc else 5.5, 3.6), squeeze=False)
    ax_parts = axes[0][-1]
    if sc:
        ax = axes[0][0]
        rows = sorted(sc["arms"].values(), key=lambda r: r["ideal"])
        ref = sc["arms"][sc["reference"]]
        xs = [r["world_size"] for r in rows]
        ax.plot(sorted(set(xs)), [ref["throughput"] * w / ref["world_size"] for w in sorted(set(xs))], "--",
                color="grey", label="ideal (linear)")
        # One line per placement: ranks on one node and ranks spread over two are different curves.
        # The reference (the smallest world) starts every line.
        for n in sorted({r.get("nodes", 1) for r in rows}):
            line = [r for r in rows if r.get("nodes", 1) == n]
            if ref not in line:
                line = [ref] + line
            ax.plot([r["world_size"] for r in line], [r["throughput"] for r in line], "o-",
                    label=f"measured, {n} node{'s' if n > 1 else ''} (median)")
        ax.set_xlabel("world size (ranks)")
        ax.set_ylabel(f"{sc['metric']} (samples/s)")
        ax.set_xticks(sorted(set(xs)))
        ax.legend(fontsize=7)
        ax.set_title("throughput against world size", fontsize=9)
    keys = [k for k in scaling.PARTS if any(k in d["parts"] for d in decs.values())]
    names = list(decs)
    bottom = [0.0] * len(names)
    for k in keys:
        vals = [decs[a]["parts"].get(k, 0.0) * 1e3 for a in names]
        ax_parts.bar(range(len(names)), vals, bottom=bottom, label=scaling.LABELS[k])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax_parts.scatter(range(len(names)), [decs[a]["step"] * 1e3 for a in names], marker="_", s=400, color="black",
                     label="measured step", zorder=3)
    ax_parts.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=7)
    ax_parts.set_ylabel("ms per step (mean over ranks)")
    ax_parts.set_title("the step, taken apart", fontsize=9)
    ax_parts.legend(fontsize=6)
    fig.tight_layout()
    path = os.path.join(out_dir, "plots", "scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _env_lines(out_dir: str) -> List[str]:
    try:
        with open(os.path.join(out_dir, "env.json")) as f:
            e = json.load(f)
    except (OSError, ValueError):
        return ["(no environment record)"]
    c, st, d, v = e["cpu"], e["storage"], e["dataset"], e["versions"]
    git = (e.get("loadscope") or {}).get("git") or {}
    gpu = e["gpu"]
    repo = e.get("training_repo") or {}
    out = [
        f"- loadscope {e['loadscope']['version']}, "
        + (f"commit {git['commit']}" + (" (uncommitted changes)" if git.get("dirty") else "")
           + (f" ({git['note']})" if git.get("note") else "") if git.get("commit")
           else "commit unknown (installed without a record of the commit it was built from)"),
        f"- CPU: {c['model']}, {c['usable_cpus']} usable of {c['logical_cpus']} logical, {c['numa_nodes']} NUMA node(s), "
        f"RAM {c['ram_bytes'] / 2**30:.1f} GiB",
        f"- GPU: {', '.join(gpu.get('devices', [])) if gpu.get('available') else 'none'}",
    ]
    if repo:
        out.append(f"- training repository: {repo.get('path')}, commit {repo.get('commit') or 'n/a'}"
                   + (" (uncommitted changes)" if repo.get("dirty") else ""))
    if st:
        out.append(f"- data: {st.get('path')} on {st.get('fstype')} ({st.get('source')}), block device {st.get('block_device')}, "
                   f"rotational {st.get('rotational')}, NVMe {st.get('nvme')}, network {st.get('network')}")
    if d:
        out.append(f"- dataset: {d['images']} images, {d['bytes'] / 2**20:.0f} MiB in {d['files']} files; width "
                   f"{(d.get('image_width') or {}).get('median')} median ({(d.get('image_width') or {}).get('min')}-{(d.get('image_width') or {}).get('max')}), "
                   f"height {(d.get('image_height') or {}).get('median')} median")
    else:
        out.append("- data: not declared (the experiment has no [dataset] path)")
    for arm, t in (e.get("topology") or {}).items():
        out.append(f"- {arm}: {t['world_size']} rank(s) on {t['nodes']} node(s), {t['ranks_per_node']} per node"
                   + (f"; {t['link']}" if t.get("link") else ""))
    out += [f"- versions: Python {v['python']}, torch {v['torch']}, torchvision {v['torchvision']}, FFmpeg {v.get('ffmpeg')}, "
            f"libjpeg-turbo {v.get('libjpeg-turbo')}, oneTBB {v.get('onetbb')}",
            "- full record: env.json"]
    return out


def _load_lines(summary: Dict[str, Any]) -> List[str]:
    reps = (summary.get("machine_load") or {}).get("repetitions") or []
    if not reps:
        return []
    worst = max(reps, key=lambda r: r["other_cores"])
    out = [f"- machine load while measuring (per repetition in summary.json): other processes "
           f"{min(r['other_cores'] for r in reps):.2f}-{worst['other_cores']:.2f} cores of {worst['cores']}, "
           f"steal up to {max(r['steal_share'] for r in reps):.1%}, load average up to {max(r['load1'] for r in reps):.2f}"]
    contended = summary["machine_load"]["contended"]
    out.append(f"- **contended repetitions**: {', '.join(contended)}" if contended else "- no repetition was contended")
    return out


def write(out_dir: str, summary: Dict[str, Any]) -> None:
    """summary.json, plots and report.md."""
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    if summary.get("status") == "skipped":
        with open(os.path.join(out_dir, "report.md"), "w") as f:
            f.write(f"# Experiment skipped\n\n{summary['reason']}\n")
        return
    pngs = plots(out_dir, summary) if summary.get("per_arm") else []
    with open(os.path.join(out_dir, "experiment.json")) as f:
        exp = json.load(f)
    L = [f"# Experiment `{summary['experiment']}`: {summary['factor']}", ""]
    if exp["declared"].get("description"):
        L += [exp["declared"]["description"].strip(), ""]
    L += ["## Verdict", ""]
    if summary["failure"]:
        L += ["**Invalid**: a repetition failed.", "", "```", summary["failure"][-3000:], "```", ""]
    unchecked = [a for a, c in summary["correctness"].get("arms", {}).items() if c["ok"] is None]
    if unchecked:
        L += [f"**Correctness was NOT checked** for {', '.join(unchecked)}: no sample ids, so nothing shows that the "
              "arms deliver the same data. Give `[pipeline] sample_ids = \"package.module:function\"`.", ""]
    for a, v in summary["verdicts"].items():
        L.append(f"- **{a}: {v['decision']}** (against {summary['baseline']})"
                 + (": the intervals do not decide it either way" + (f"; about {v['repetitions_to_decide']} repetitions "
                    "would" if v.get("repetitions_to_decide") else "") if v["decision"] == "inconclusive" else ""))
        L += [f"  - **warning**: {w}" for w in v.get("warnings", [])]
        L += [f"  - {r}" for r in v["reasons"]]
    st = summary["step"]
    L += ["", "## Setup", "",
          f"- factor: `{summary['factor']}`; arms: " + ", ".join(f"`{a['name']}`" for a in exp["arms"])
          + " (the first is the baseline)",
          "- baseline pipeline: " + ", ".join(f"{k}={v}" for k, v in exp["arms"][0]["config"].items()),
          f"- step: compute={st['compute']}"
          + (f" ({st['compute_ms']:g} ms)" if st['compute'] == 'sleep' else "")
          + (f" (setup {st.get('setup') or 'none'}, function {st.get('function')})" if st['compute'] == 'user' else "")
          + (", gradient accumulation per arm (the factor; each arm measures whole accumulation cycles)"
             if summary["factor"] == "grad_accum" else f", gradient accumulation {st['grad_accum']}") + ", global batch "
          + ", ".join(f"{a} {b}" for a, b in summary["global_batch"].items()),
          f"- run: {summary['run']['repetitions']} repetitions per arm, {summary['run']['order']} order"
          + (", one warm-up round discarded" if summary["run"]["warmup_round"] else "")
          + f"; each repetition a fresh process: {summary['run']['warmup_samples']} warm-up samples, then "
          f"{summary['run']['samples']} measured",
          f"- correctness: {summary['correctness']['mode']}", ""]
    L += ["Environment:", ""] + _env_lines(out_dir) + _load_lines(summary) + [""]
    L += ["## Observed", "",
          f"Median of the repetitions [{conf_txt(summary)} of the geometric mean]. `throughput` is the data pipeline alone; "
          + ("`e2e_throughput` includes the declared training step." if "e2e_throughput" in summary["metrics"]
             else "the step has no compute, so there is no separate end-to-end figure."), "",
          table(summary), "", "Effect of each arm against the baseline "
          + ("(paired by round: the arms of a round ran back to back)" if summary["paired"] else "(unpaired, Welch)")
          + ":", "", effects_table(summary), ""]
    for a, st in summary["staging"].items():
        be = st["break_even_epochs"]
        if st.get("unknown"):
            L.append(f"- staging ({a}): its cost cannot be weighed (samples per epoch or a time unknown)")
            continue
        what = (f"{st['staging_seconds']:.2f} s for the first epoch, which fills the cache: {st['cost']:.2f} s more than "
                "one of the baseline's" if st["cache"] else f"{st['staging_seconds']:.2f} s to copy")
        L.append(f"- staging ({a}): {what}; epoch {st['epoch_seconds_baseline']:.2f} s baseline vs "
                 f"{st['epoch_seconds_arm']:.2f} s this arm; break-even after "
                 + (f"{be:.1f} epochs" if be is not None else "never (no time saved)"))
    net = {a: v for a, v in summary.get("storage", {}).items() if v["network_bytes_run"] is not None}
    if any(v["network_bytes_run"] for v in net.values()):
        L.append("- object storage, measured phase (all ranks, median per repetition; in brackets the whole "
                 "repetition, with staging, cache fill and warm-up): "
                 + ", ".join(f"{a} {v['network_bytes'] / 1e6:.1f} MB in {v['network_requests']:.0f} requests "
                             f"[{v['network_bytes_run'] / 1e6:.1f} MB]" for a, v in net.items()))
    nodes_data = summary.get("per_node") or {}
    if nodes_data:
        L += ["", "Object storage per node (first measured repetition, the whole repetition: cache fill or staging, "
              "warm-up and measured phases; a node's ranks share its cache, which holds each object it fetched once):", "",
              "| arm | node | fetched (MB) | per rank (MB) | requests | its cache holds (MB) | fetched / cache |",
              "|---|---|---:|---|---:|---:|---:|"]
        for a, per in nodes_data.items():
            for n in per:
                cache = n.get("cache_bytes")
                L.append(f"| {a} | node {n['node']} | {n['bytes'] / 1e6:.2f} | "
                         + ", ".join(f"rank {r['rank']} {r['bytes'] / 1e6:.2f}" for r in n["ranks"])
                         + f" | {n['requests']} | {'–' if cache is None else f'{cache / 1e6:.2f}'} | "
                         + ("–" if not cache else f"{n['bytes'] / cache:.3f}") + " |")
    L += step_lines(summary)
    caps = summary.get("capacity") or {}
    if caps:
        L += [""] + [f"- {capacity_lines(cap, f' ({a})')[0]}" for a, cap in caps.items()]
    bounds = summary.get("remote_bound") or {}
    if bounds:
        L += [""] + [f"- {remote_bound_line(a, b)}" for a, b in bounds.items()]
    L += ["", "### Correctness", ""]
    corr = summary["correctness"]
    if corr.get("note"):
        L.append(f"- {corr['note']}")
    for a, c in corr.get("arms", {}).items():
        L.append(f"- {a}: {({True: '**pass**', False: '**FAIL**'}).get(c['ok'], '**NOT CHECKED**')}: {c['detail']}")
    for a, c in corr.get("gradients", {}).items():
        L.append(f"- {a}, gradient accumulation: {({True: '**pass**', False: '**FAIL**'}).get(c['ok'], '**NOT CHECKED**')}"
                 f": {c['detail']}")
    L += ["", "## Hypotheses (not measured conclusions)", ""]
    L += [f"- {h}" for h in summary["hypotheses"]] or ["- none suggested by the measurements"]
    L += ["", "## Files", ""]
    L += [f"- ![{os.path.basename(p)}](plots/{os.path.basename(p)})" for p in pngs]
    traces = sorted(os.listdir(os.path.join(out_dir, "traces"))) if os.path.isdir(os.path.join(out_dir, "traces")) else []
    if traces:
        L.append("- traces (chrome://tracing, ui.perfetto.dev): " + ", ".join(f"traces/{t}" for t in traces))
    L += ["- raw.jsonl (every repetition), matrix.csv (the run order), summary.json, env.json", "",
          "## Rerun", "", "```", summary["rerun"], "```", ""]
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(L))


def regenerate(out_dir: str) -> Dict[str, Any]:
    """`loadscope bench report DIR`: recomputes the summary, plots and report from raw.jsonl
    and experiment.effective.json (edit its [criteria] to re-judge the same measurements).
    The correctness results are kept from the run (the pixels it compared are not kept)."""
    effective = os.path.join(out_dir, "experiment.effective.json")
    if not os.path.isfile(effective) or not os.path.isfile(os.path.join(out_dir, "raw.jsonl")):
        raise ConfigError(f"{out_dir!r} is not the folder of a finished experiment "
                          "(no experiment.effective.json or raw.jsonl)")
    old: Dict[str, Any] = {}
    if os.path.isfile(os.path.join(out_dir, "summary.json")):
        with open(os.path.join(out_dir, "summary.json")) as f:
            old = json.load(f)
    if old.get("status") == "skipped":
        return old
    exp = load(effective)
    correctness = old.get("correctness") or {"mode": exp.correctness_mode, "arms": {},
                                             "note": "not recorded (the run did not finish)"}
    summary = analyze(out_dir, exp, correctness=correctness, failure=old.get("failure"))
    write(out_dir, summary)
    return summary


def console(summary: Dict[str, Any]) -> str:
    """The summary table and the verdicts, for a terminal."""
    if summary.get("status") == "skipped":
        return f"skipped: {summary['reason']}"
    out = [table(summary), ""]
    for a, v in summary["verdicts"].items():
        out.append(f"verdict for {a} (vs {summary['baseline']}): {v['decision'].upper()}"
                   + (f" (about {v['repetitions_to_decide']} repetitions would decide it)"
                      if v.get("repetitions_to_decide") else ""))
        out += [f"  - WARNING: {w}" for w in v.get("warnings", [])]
        out += [f"  - {r}" for r in v["reasons"]]
    return "\n".join(out)
