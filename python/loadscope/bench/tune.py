"""`loadscope bench tune EXPERIMENT.toml`: the loader's settings chosen by experiments, one knob
at a time (threads, then prefetch, then decoder threads where the pipeline has them), each a
single-factor experiment of the harness with its statistics and correctness check; then the
chosen settings run against the declared ones as one more experiment (the factor `settings`),
so the recommendation comes with the harness's own verdict. Each knob's experiment also runs
the auto controller (``"auto"``), whose result and settled settings are written beside the
choice (docs/tuning.md).

The rule for a choice: the fewest threads (the least prefetch, ...) whose median of the
experiment's metric is within `min_gain` of the best arm's: a difference the experiment's own
criteria would not act on is not worth the cores or memory."""

from __future__ import annotations

import copy
import inspect
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._errors import ConfigError
from .._options import default_threads
from . import report as report_mod
from . import runner, stats
from .experiment import PIPELINE, RUN, SETTINGS, from_dict

KNOBS = ("threads", "prefetch", "decoder_threads")


def candidates(knob: str, base: Any, cores: int) -> List[Any]:
    """The values a knob's experiment tries: the declared one first (the baseline), the usual
    alternatives, then "auto"."""
    if knob == "threads":
        pool = sorted({1, cores, *(2 ** i for i in range(1, 8) if 2 ** i < cores)})
    elif knob == "prefetch":
        pool = [2, 4, 8]
    else:
        pool = [1, 2, 4]
    return [base] + [v for v in pool if v != base] + (["auto"] if base != "auto" else [])


def parse_values(text: Optional[str]) -> Optional[List[Any]]:
    """'1,2,auto' -> [1, 2, 'auto']."""
    if text is None:
        return None
    out: List[Any] = []
    for part in text.split(","):
        part = part.strip()
        if part == "auto":
            out.append(part)
        elif part.isdigit() and int(part) >= 1:
            out.append(int(part))
        else:
            raise ConfigError(f"{text!r}: values are integers >= 1 or 'auto', separated by commas")
    return out


def parse_knobs(text: Optional[str], user: bool) -> Dict[str, str]:
    """'threads=num_workers,prefetch=prefetch_factor': which keyword of the pipeline each knob
    is. A built-in pipeline's are its own keys (threads, prefetch)."""
    if not text:
        return {"threads": "threads", "prefetch": "prefetch"}
    out: Dict[str, str] = {}
    for part in text.split(","):
        knob, _, key = part.partition("=")
        knob, key = knob.strip(), (key or knob).strip()
        if knob not in KNOBS or not key.isidentifier():
            raise ConfigError(f"--knobs {text!r}: give KNOB=ARGUMENT pairs, KNOB one of {', '.join(KNOBS)} and "
                              f"ARGUMENT the pipeline's keyword for it (e.g. threads=num_workers)")
        if not user and key not in PIPELINE:
            raise ConfigError(f"--knobs: {key!r} is not a key of the built-in pipeline ({', '.join(PIPELINE)})")
        out[knob] = key
    return out


def _declared(exp_raw: Dict[str, Any], key: str, user: bool, factory_defaults: Dict[str, Any]) -> Any:
    pipe = exp_raw.get("pipeline") or {}
    if key in pipe:
        return pipe[key]
    if not user:
        return PIPELINE[key][1]
    value = factory_defaults.get(key, inspect.Parameter.empty)
    if value is inspect.Parameter.empty:
        raise ConfigError(f"[pipeline] gives no {key} and the factory has no default for it: declare it")
    return value


def _factory_defaults(exp: Any) -> Dict[str, Any]:
    from . import user

    with user.on_path(exp.training_repo):
        return user.accepts(user.resolve(exp.baseline["factory"], "[pipeline] factory"))


def _settled(rows: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The auto controller's settings at the end of its last repetition, with its change count."""
    for r in reversed(rows):
        t = r.get("telemetry") or {}
        tuning = t.get("tuning") or (t.get("loadscope") or {}).get("tuning")
        if tuning:
            return {"threads": tuning["threads"], "prefetch": tuning["prefetch"],
                    "decoder_threads": tuning["decoder_threads"], "changes": tuning["changes"],
                    "last": tuning["decisions"][-1]["text"] if tuning["decisions"] else None}
    return None


def choose(summary: Dict[str, Any], values: List[Any], metric: str, tolerance: float) -> Tuple[Any, str]:
    """The least value (fewest threads, shallowest queue) whose median is within `tolerance` of
    the best fixed arm's. "auto" is chosen instead only when it beats every fixed value by more
    than the tolerance and the harness adopts it against the declared value: a fixed setting
    is easier to reason about, and on a shared node it does not move."""
    arms = summary["arms"]
    medians = {v: summary["per_arm"][a][metric]["median"] for v, a in zip(values, arms)}
    fixed = [v for v in values if v != "auto" and medians[v] is not None]
    if not fixed:
        raise ConfigError(f"no arm measured {metric}")
    higher = summary["metrics"][metric]["higher_is_better"]
    best = (max if higher else min)(fixed, key=lambda v: medians[v])
    ok = [v for v in fixed if (medians[v] >= medians[best] * (1 - tolerance) if higher
                               else medians[v] <= medians[best] * (1 + tolerance))]
    pick = min(ok)
    why = (f"the least within {tolerance:.0%} of the best fixed value ({best}: {medians[best]:.4g})"
           if pick != best else f"the best fixed value ({medians[best]:.4g})")
    auto = medians.get("auto")
    adopted = summary["verdicts"].get(arms[values.index("auto")], {}).get("decision") == "adopt" if "auto" in values else False
    if adopted and auto is not None and (auto > medians[best] * (1 + tolerance) if higher
                                         else auto < medians[best] * (1 - tolerance)):
        return "auto", f"auto ({auto:.4g}) beat every fixed value by more than {tolerance:.0%}, and the harness adopts it"
    return pick, why


def run(path: str, *, knobs: Optional[Dict[str, str]] = None, values: Optional[Dict[str, List[Any]]] = None,
        out_dir: Optional[str] = None, quiet: bool = False, **overrides: Any) -> Dict[str, Any]:
    """Tunes the pipeline of the experiment file at `path` (its [factor] and [[arms]] are
    ignored: the knobs are the factors). `overrides`: run plan settings (repetitions, samples,
    warmup_samples, check_samples). Returns the recommendation (also in recommendation.json)."""
    from .experiment import load

    say: Callable[..., None] = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    base_exp = load(path)
    user = base_exp.user
    raw0 = copy.deepcopy(base_exp.raw)
    for k in ("factor", "arms", "gate", "small"):
        raw0.pop(k, None)
    raw0.setdefault("run", {}).update({k: v for k, v in overrides.items() if v is not None})
    knobs = knobs or parse_knobs(None, user)
    defaults = _factory_defaults(base_exp) if user else {}
    if user:
        for knob, key in knobs.items():
            if key not in defaults and key not in (raw0.get("pipeline") or {}):
                raise ConfigError(f"--knobs {knob}={key}: the factory {base_exp.baseline['factory']} takes no {key} "
                                  f"(it takes {', '.join(defaults)})")
    metric = base_exp.criteria["metric"]
    tolerance = base_exp.criteria["min_gain"]
    cores = default_threads()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = os.path.abspath(out_dir or os.path.join("results", "tune", f"{base_exp.name}-{stamp}"))
    os.makedirs(out_dir, exist_ok=True)
    chosen: Dict[str, Any] = {}
    declared: Dict[str, Any] = {}
    stages: List[Dict[str, Any]] = []
    for i, (knob, key) in enumerate(knobs.items()):
        declared[key] = _declared(raw0, key, user, defaults)
        vals = candidates(knob, declared[key], cores)
        if values and knob in values:
            vals = [declared[key]] + [v for v in values[knob] if v != declared[key]]
        raw = copy.deepcopy(raw0)
        raw["name"] = f"{base_exp.name}-tune-{knob}"
        raw["description"] = f"bench tune: {knob} ({key}) with the settings chosen before it"
        raw.setdefault("pipeline", {}).update(chosen)
        raw["pipeline"].pop(key, None)
        raw["factor"] = {"name": key, "values": vals}
        exp = from_dict(raw, source=base_exp.source)
        stage_dir = os.path.join(out_dir, f"{i + 1}-{knob}")
        say(f"\n== bench tune: {knob} ({key}) over {vals} ==")
        summary = runner.run(exp, stage_dir, quiet=quiet)
        rows = [r for r in report_mod._load_raw(stage_dir) if not r.get("warmup")]
        pick, why = choose(summary, vals, metric, tolerance)
        chosen[key] = pick
        arms = summary["arms"]
        stages.append({
            "knob": knob, "key": key, "values": vals, "chosen": pick, "why": why, "report": os.path.join(stage_dir, "report.md"),
            "arms": [{"value": v, "arm": a, **{m: summary["per_arm"][a][m] for m in (metric, "cpu_per_sample", "peak_pss")
                                               if m in summary["per_arm"][a]},
                      "verdict": summary["verdicts"].get(a, {}).get("decision", "baseline")} for v, a in zip(vals, arms)],
            "auto": _settled([r for r in rows if r["arm"] == arms[vals.index("auto")]]) if "auto" in vals else None,
        })
    recommended = {k: v for k, v in chosen.items() if v != declared[k]}
    confirm: Optional[Dict[str, Any]] = None
    if recommended:
        raw = copy.deepcopy(raw0)
        raw["name"] = f"{base_exp.name}-tune-confirm"
        raw["description"] = "bench tune: the recommended settings against the declared ones"
        raw["factor"] = {"name": SETTINGS}
        raw["arms"] = [{"name": "declared"}, {"name": "recommended", SETTINGS: recommended}]
        # Twice the repetitions: two arms only, and telling "as good" from "worse" within
        # min_gain needs a narrower interval than telling a winner.
        raw["run"]["repetitions"] = 2 * raw0["run"].get("repetitions", RUN["repetitions"][1])
        exp = from_dict(raw, source=base_exp.source)
        stage_dir = os.path.join(out_dir, f"{len(stages) + 1}-confirm")
        say(f"\n== bench tune: the recommendation {recommended} against the declared settings ==")
        summary = runner.run(exp, stage_dir, quiet=quiet)
        effect = summary["effects"]["recommended"][metric]
        verdict = summary["verdicts"]["recommended"]
        # Equivalence as two one-sided tests at the experiment's level: the interval of twice
        # that level (90% for 95%) lies within ±min_gain.
        rows = [r for r in report_mod._load_raw(stage_dir) if not r.get("warmup")]
        xs = [r.get(metric) for r in sorted(rows, key=lambda r: r["round"]) if r["arm"] == "declared"]
        ys = [r.get(metric) for r in sorted(rows, key=lambda r: r["round"]) if r["arm"] == "recommended"]
        tost = stats.relative_effect(xs, ys, paired=summary["paired"], confidence=1 - 2 * (1 - summary["confidence"]))
        lo, hi = tost.get("ci_low"), tost.get("ci_high")
        higher = summary["metrics"][metric]["higher_is_better"]
        equivalent = lo is not None and hi is not None and -tolerance <= lo and hi <= tolerance
        not_worse = lo is not None and hi is not None and (lo >= -tolerance if higher else hi <= tolerance)
        confirm = {"report": os.path.join(stage_dir, "report.md"), "verdict": verdict["decision"],
                   "reasons": verdict.get("reasons", []), "effect": effect, "equivalence_interval": [lo, hi],
                   "equivalent": equivalent,
                   "not_worse": not_worse,
                   "outcome": ("adopt" if verdict["decision"] == "adopt" else "equivalent" if equivalent
                               else "not worse" if not_worse else verdict["decision"])}
    result = {"experiment": base_exp.name, "source": base_exp.source, "metric": metric, "tolerance": tolerance,
              "confidence": base_exp.criteria["confidence"],
              "cores": cores, "knobs": knobs, "declared": declared, "chosen": chosen, "recommended": recommended,
              "stages": stages, "confirm": confirm, "out_dir": out_dir}
    with open(os.path.join(out_dir, "recommendation.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    with open(os.path.join(out_dir, "recommendation.md"), "w") as f:
        f.write(markdown(result))
    return result


def _fmt(s: Optional[Dict[str, Any]]) -> str:
    if not s or s.get("median") is None:
        return "n/a"
    lo, hi = s.get("ci_low"), s.get("ci_high")
    return f"{s['median']:.4g}" + (f" [{lo:.4g}, {hi:.4g}]" if lo is not None and hi is not None else "")


def markdown(r: Dict[str, Any]) -> str:
    m = r["metric"]
    lines = [f"# bench tune: {r['experiment']}", "",
             f"Metric: {m} (the experiment's criteria); a value within {r['tolerance']:.0%} of the best counts as "
             f"as good, and the least such value is chosen. {r['cores']} cores.", ""]
    if r["recommended"]:
        lines.append("**Recommended:** " + ", ".join(f"`{k} = {v!r}`" for k, v in r["recommended"].items())
                     + " (declared: " + ", ".join(f"`{k} = {r['declared'][k]!r}`" for k in r["recommended"]) + ")")
    else:
        lines.append("**Recommended: the declared settings** (" + ", ".join(f"`{k} = {v!r}`" for k, v in r["declared"].items())
                     + "): no other value did better by more than the tolerance.")
    c = r["confirm"]
    if c:
        e = c["effect"]
        lo, hi = e.get("ci_low"), e.get("ci_high")
        ci = f" [{lo:+.1%}, {hi:+.1%}]" if lo is not None and hi is not None else ""
        effect = f"{e['effect']:+.1%}" if e.get("effect") is not None else "n/a"
        eq = c.get("equivalence_interval") or [None, None]
        within = (f"; its {1 - 2 * (1 - r['confidence']):.0%} interval [{eq[0]:+.1%}, {eq[1]:+.1%}] "
                  f"{'lies' if c['equivalent'] else 'does not lie'} within ±{r['tolerance']:.0%} (equivalence)"
                  if eq[0] is not None and eq[1] is not None else "")
        meaning = {"adopt": "better by more than the tolerance", "equivalent": "as good, within the tolerance either way",
                   "not worse": "no worse than the tolerance, perhaps better (non-inferior)"}.get(c["outcome"], "")
        lines += ["", f"Run against the declared settings ([report]({c['report']})): {m} {effect}{ci}; the harness "
                      f"says **{c['verdict']}**{within}; outcome: **{c['outcome']}**"
                      + (f" ({meaning})." if meaning else ".")]
    for s in r["stages"]:
        lines += ["", f"## {s['knob']} (`{s['key']}`): chose {s['chosen']!r}, {s['why']}", "",
                  f"[report]({s['report']})", "", f"| value | {m} median [CI] | CPU ms/sample | peak PSS MiB | verdict |",
                  "|---|---|---|---|---|"]
        for a in s["arms"]:
            lines.append(f"| {a['value']} | {_fmt(a.get(m))} | {_fmt(a.get('cpu_per_sample'))} | "
                         f"{_fmt(a.get('peak_pss'))} | {a['verdict']} |")
        if s["auto"]:
            t = s["auto"]
            lines += ["", f"The auto controller settled at threads {t['threads']}, prefetch {t['prefetch']}, decoder "
                          f"threads {t['decoder_threads']} after {t['changes']} changes"
                          + (f"; its last decision: {t['last']}" if t["last"] else "") + "."]
    return "\n".join(lines) + "\n"
