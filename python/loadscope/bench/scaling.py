"""Data-parallel training taken apart: the step's parts per rank (rep.step_parts), the
slowest rank's lead, and scaling efficiency across world sizes with the loss split into its
causes. See docs/scaling.md.

Note [where a data-parallel step's time goes]
Each rank's step is: waiting for its batch, copying it to the device, forward, backward's
compute, the part of the gradient all-reduce that backward's compute did not hide (exposed),
the optimizer, and the rest of the call. The exposed all-reduce holds two things: the network
(and the collective's own work), and waiting for a slower rank to reach the rendezvous. All
ranks of an experiment run on one host (emulated nodes included), so their monotonic clocks
are one clock: the slowest rank's lead at a step is the latest rank's end of backward compute
(its last bucket handed over) minus this rank's. That lead, capped at the exposed time, is
`straggler_wait`; the rest is `comm_exposed`.

Scaling efficiency at W ranks against a reference arm at W0 (the smallest world size):
    efficiency = throughput(W) / (W / W0 x throughput(W0))
with its interval from the paired per-round ratios (report.analyze's effects). Its loss is
split by comparing the step's parts with the reference's, scaled to the per-rank batch: with a
per-rank batch b(W), the ideal step at W is the reference's parts x b(W)/b(W0) (the same for
weak scaling, a W0/W share for strong), and the step's excess over it is the sum of each part's
excess: data wait, exposed communication, straggler wait, and compute inflation (forward,
backward, optimizer and the rest: ranks competing for cores and memory bandwidth). Each excess
over the measured step is its share of the efficiency lost."""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional

from . import stats

# The parts of a step, in the order a step runs them (and a stacked plot draws them).
PARTS = ("wait", "h2d", "forward", "backward", "compute", "optimizer", "rest", "straggler_wait", "comm_exposed")
COMPUTE = ("forward", "backward", "compute", "optimizer", "rest")
LABELS = {"wait": "data wait", "h2d": "host-to-device", "forward": "forward", "backward": "backward (compute)",
          "compute": "step compute", "optimizer": "optimizer", "rest": "rest of the step",
          "straggler_wait": "straggler wait", "comm_exposed": "exposed all-reduce"}


def decompose(results: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """One repetition's step, from every rank's step_parts: the mean seconds per step of each
    part (over steps, then ranks), the all-reduce's figures, and the measured step (the e2e
    phase's time over its steps) the parts are compared with. None without step parts."""
    ranks = [r for r in results if r.get("step_parts")]
    if not ranks:
        return None
    _straggler(ranks)
    per_rank = []
    for r in ranks:
        rows = r["step_parts"]
        n = len(rows)
        parts = {p: sum(row.get(p, 0.0) for row in rows) / n for p in PARTS if any(p in row for row in rows)}
        synced = [row for row in rows if row.get("allreduces")]
        samples = sum(row["samples"] for row in rows)
        comm = None
        if synced:
            comm = {"allreduces_per_sample": sum(row["allreduces"] for row in synced) / samples,
                    "bytes_per_step": statistics.fmean(row["comm_bytes"] for row in synced),
                    "busy_per_step": statistics.fmean(row["comm_busy"] for row in synced),
                    # the whole exposed time, the straggler's share included: what backward() waited
                    "exposed_per_step": statistics.fmean(_exposed(row) for row in synced),
                    "exposed_per_sample": sum(_exposed(row) for row in rows) / samples,
                    "synced_steps": len(synced), "steps": n}
            comm["hidden_share"] = 1 - comm["exposed_per_step"] / comm["busy_per_step"] if comm["busy_per_step"] else None
        per_rank.append({"rank": r.get("rank", 0), "parts": parts, "steps": n, "samples": samples,
                         "per_rank_samples": samples / n, "step": r["e2e_seconds"] / n, "comm": comm})
    for r in ranks:
        del r["step_parts"]  # summarized: the raw record keeps the decomposition, not every step
    return dict(mean_decomposition(per_rank) or {}, ranks=per_rank)


def _exposed(row: Dict[str, Any]) -> float:
    return row["comm_exposed"] + row.get("straggler_wait", 0.0)


def _straggler(ranks: List[Dict[str, Any]]) -> None:
    """Splits each synchronised step's exposed all-reduce into the wait for the slowest rank
    (Note [where a data-parallel step's time goes]) and the rest, in place."""
    if len(ranks) < 2:
        return
    n = min(len(r["step_parts"]) for r in ranks)
    for k in range(n):
        rows = [r["step_parts"][k] for r in ranks]
        if not all(row.get("last_ready") is not None for row in rows):
            continue
        latest = max(row["last_ready"] for row in rows)
        for row in rows:
            wait = min(row["comm_exposed"], latest - row["last_ready"])
            row["straggler_wait"] = wait
            row["comm_exposed"] -= wait


def scaling(exp: Any, summary: Dict[str, Any], by_arm: Dict[str, List[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """Scaling efficiency of every arm against the smallest world size's, with its interval and
    its loss split (Note [where a data-parallel step's time goes]). None unless the arms differ
    in world size."""
    worlds = {a.name: a.config.get("world_size", 1) for a in exp.arms}
    if len(set(worlds.values())) < 2:
        return None
    metric = "e2e_throughput" if "e2e_throughput" in summary["per_arm"][exp.arms[0].name] else "throughput"
    ref = min(worlds, key=lambda a: (worlds[a], list(worlds).index(a)))
    decs = {a: [r["decomposition"] for r in rows if r.get("decomposition")] for a, rows in by_arm.items()}
    mean_dec = {a: mean_decomposition(d) for a, d in decs.items()}
    mode = (exp.raw.get("factor") or {}).get("scaling", "weak")
    out: Dict[str, Any] = {"reference": ref, "metric": metric, "scaling": mode, "arms": {}}
    paired = summary.get("paired", True)
    for a, w in worlds.items():
        scale = w / worlds[ref]
        row: Dict[str, Any] = {"world_size": w, "nodes": next(x.config.get("nodes", 1) for x in exp.arms if x.name == a),
                               "ideal": scale, "throughput": summary["per_arm"][a][metric]["median"]}
        if a == ref:
            row.update(efficiency=1.0, efficiency_low=1.0, efficiency_high=1.0)
        else:
            # throughput(a) / throughput(ref): the geometric mean of the per-round ratios (paired
            # rounds), with its interval, whichever arm is the baseline
            xs, ys = [r.get(metric) for r in by_arm[ref]], [r.get(metric) for r in by_arm[a]]
            if paired:
                n = min(len(xs), len(ys))
                pairs = [(x, y) for x, y in zip(xs[:n], ys[:n]) if x and y]
                xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            e = stats.relative_effect(xs, ys, paired=paired, confidence=summary["confidence"])
            effect, lo, hi = e["effect"], e["ci_low"], e["ci_high"]
            if effect is not None:
                row["efficiency"] = (1 + effect) / scale
                if lo is not None and hi is not None:
                    row["efficiency_low"], row["efficiency_high"] = (1 + lo) / scale, (1 + hi) / scale
        d, d0 = mean_dec.get(a), mean_dec.get(ref)
        if d and d0 and a != ref:
            row["loss"] = _loss(d, d0)
        row["decomposition"] = d
        out["arms"][a] = row
    return out


def mean_decomposition(decs: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The mean of several decompositions (the ranks of a repetition, or an arm's repetitions):
    each part, each all-reduce figure, the measured step and the samples per step."""
    if not decs:
        return None
    keys = list(dict.fromkeys(k for d in decs for k in d["parts"]))
    parts = {k: statistics.fmean(d["parts"].get(k, 0.0) for d in decs) for k in keys}
    comms = [d["comm"] for d in decs if d.get("comm")]
    comm = {k: statistics.fmean(c[k] for c in comms if c.get(k) is not None) for k in comms[0]
            if any(c.get(k) is not None for c in comms)} if comms else None
    step = statistics.fmean(d["step"] for d in decs)
    return {"parts": parts, "sum": sum(parts.values()), "step": step, "accounted": sum(parts.values()) / step,
            "comm": comm, "per_rank_samples": statistics.fmean(d["per_rank_samples"] for d in decs)}


def _loss(d: Dict[str, Any], d0: Dict[str, Any]) -> Dict[str, float]:
    """Each cause's share of the efficiency lost: (part - ideal part) / the sum of the parts (the
    measured step less the loop's own work between steps, a fraction of a percent: see
    `accounted`), the ideal being the reference's part scaled to this arm's per-rank batch. So
    the shares add up to 1 - the efficiency the parts give."""
    scale = d["per_rank_samples"] / d0["per_rank_samples"]
    p, p0 = d["parts"], d0["parts"]

    def excess(keys: tuple) -> float:
        return sum(p.get(k, 0.0) - scale * p0.get(k, 0.0) for k in keys) / d["sum"]

    return {"data_wait": excess(("wait", "h2d")), "comm_exposed": excess(("comm_exposed",)),
            "straggler_wait": excess(("straggler_wait",)), "compute_inflation": excess(COMPUTE)}
