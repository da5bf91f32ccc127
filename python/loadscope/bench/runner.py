"""Runs an experiment: records the environment, plans the matrix (arms x repetitions, in
interleaved or blocked order), runs every repetition in a fresh process, checks the arms'
outputs against the baseline, and hands the raw results to the report.

Output folder: env.json, experiment.json, matrix.csv, raw.jsonl, summary.json, report.md,
plots/*.png, traces/*.trace.json, check/*.json, logs/*.log."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from .. import _native
from .._errors import ConfigError
from . import env as envmod
from . import cluster, nodes, pipelines, report, scaling
from .report import rerun_command
from .experiment import DEALS_THE_EPOCH, PIPELINE, USER_PIPELINE, Experiment


class ExperimentFailed(RuntimeError):
    """A repetition failed, or an arm's output differs from the baseline's."""


def plan(exp: Experiment) -> List[Dict[str, Any]]:
    """The run order. Interleaved: round r runs every arm once, starting at arm r mod k
    (A B, B A, ...), so drift and position-in-round fall on every arm alike. Blocked: every
    repetition of A, then of B. A warm-up round (discarded) comes first when asked."""
    k, reps = len(exp.arms), exp.run["repetitions"]
    order: List[Dict[str, Any]] = []
    if exp.run["warmup_round"]:
        order += [{"round": -1, "arm": i, "warmup": True} for i in range(k)]
    if exp.run["order"] == "interleaved":
        for r in range(reps):
            order += [{"round": r, "arm": (r + j) % k, "warmup": False} for j in range(k)]
    else:
        order += [{"round": r, "arm": i, "warmup": False} for i in range(k) for r in range(reps)]
    for i, row in enumerate(order):
        row["run"] = i
    return order


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_members(pgid: int) -> List[int]:
    """Live processes of a process group (zombies left for init to reap run no more: not counted)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(name))
    return out


def _kill_group(pgid: int, wait: float = 10.0) -> None:
    """Kills every process left in a repetition's process group (its DataLoader workers
    included) and waits until they are gone: SIGKILL is delivered asynchronously, and the next
    repetition must not share the cores with the last one's workers."""
    import signal

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + wait
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _dump_stacks(procs: List[subprocess.Popen]) -> None:
    """Asks every live rank for its threads' Python stacks (faulthandler on SIGUSR1, rep.py):
    they go to its log at once; a second is ample before the ranks are killed."""
    import signal

    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGUSR1)
            except ProcessLookupError:
                pass
    time.sleep(1.0)


def _last_phase(log_path: str) -> Optional[str]:
    try:
        with open(log_path, errors="replace") as f:
            marks = [line.split(":", 1)[1].strip() for line in f if line.startswith("loadscope-phase:")]
    except OSError:
        return None
    return marks[-1] if marks else None


def _rank_environ(repo: Optional[str]) -> Dict[str, str]:
    """A rank's environment (and its Ray workers'): the user's, with the repository first on
    PYTHONPATH, and this loadscope where it is a source checkout."""
    from .user import environ_for

    env = environ_for(repo)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if repo and os.path.basename(here) not in ("site-packages", "dist-packages"):
        # A source checkout: the rank imports this loadscope whatever its working directory.
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], here])
    return env


def _launch(spec_path: str, out_path: str, world: int, log_path: str, timeout: float,
            repo: Optional[str] = None, net: Optional[cluster.Cluster] = None) -> int:
    """Starts one repetition: one process, or `world` ranks with torchrun's environment
    (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rendezvous on localhost), which is
    all torch.distributed's env:// initialisation reads. (torchrun itself is not used: the
    torch 1.13 of Debian 12 cannot start it under Python 3.11, whose Flag enums no longer
    iterate over the zero member that torchrun's stdout redirection looks up.) If one rank
    fails or the time runs out, every rank is stopped: nothing is left hanging. Each rank is
    the leader of its own process group, and whatever is left in the group when it ends (the
    DataLoader workers of a rank that failed or was killed) is killed with it.

    With a training repository, the ranks run in it (its relative paths mean what they mean
    there) with it first on PYTHONPATH. With emulated nodes (`net`), the ranks are spread over
    them in order (node k runs ranks k*per_node ...), each started inside its node's network
    namespace and CPU quota, with torchrun's LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK for its
    node (and RAY_ADDRESS, where the arm's Ray cluster runs: bench/cluster.py)."""

    cmd = [sys.executable, "-m", "loadscope.bench.rep", spec_path, out_path]
    port = _free_port()
    procs, logs = [], []
    for rank in range(world):
        env = _rank_environ(repo)
        per_node = world // net.nodes if net else world
        node = rank // per_node
        if world > 1:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank % per_node), WORLD_SIZE=str(world),
                       LOCAL_WORLD_SIZE=str(per_node), GROUP_RANK=str(node), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port))
        if net:
            env.update(net.environ(node))
        log = open(log_path if rank == 0 else f"{log_path}.rank{rank}", "w")
        logs.append(log)
        procs.append(subprocess.Popen(net.command(node, cmd) if net else cmd, stdout=log, stderr=subprocess.STDOUT,
                                      env=env, cwd=repo or None, start_new_session=True))
    deadline = time.monotonic() + timeout
    code = 0
    try:
        pending = list(procs)
        while pending:
            for p in list(pending):
                rc = p.poll()
                if rc is not None:
                    pending.remove(p)
                    if rc != 0 and code == 0:
                        code = rc
            if code != 0 or time.monotonic() > deadline:
                if code == 0:
                    code = -1
                    _dump_stacks(procs)
                    where = _last_phase(log_path)
                    logs[0].write(f"\nloadscope: timed out after {timeout:g} s" + (f", in {where}" if where else "")
                                  + " (every thread's stack is above)\n")
                    logs[0].flush()
                break
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            _kill_group(p.pid)
        for log in logs:
            log.close()
    return code


def repetition(spec: Dict[str, Any], spec_path: str, out_path: str, log_path: str, world: int, timeout: float,
               repo: Optional[str]) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """Runs one repetition (all its ranks; on emulated nodes made for it and removed after
    it) and reads what each rank wrote: (results, None), or (partial results, why it failed:
    the user's traceback, or the log's end)."""
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    quotas: List[Dict[str, Any]] = []
    if cluster.needed(spec["config"]):
        store = spec.get("url") if spec["config"].get("storage", "local") != "local" else None
        endpoint = (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")) if store else None
        with cluster.Cluster(spec["config"], _rank_environ(repo), endpoint) as net:
            code = _launch(spec_path, out_path, world, log_path, timeout, repo, net)
            quotas = net.quota_stats()
    else:
        code = _launch(spec_path, out_path, world, log_path, timeout, repo)
    results = []
    for r in range(world):
        p = out_path if r == 0 else f"{out_path}.rank{r}"
        if os.path.exists(p):
            with open(p) as f:
                results.append(json.load(f))
    if quotas and results:
        results[0]["quotas"] = quotas
    errors = [r for r in results if "error" in r]
    if code == 0 and not errors and len(results) == world:
        return results, None
    with open(log_path) as f:
        tail = f.read()[-3000:]
    return results, f"(exit {code}):\n" + (errors[0]["traceback"] if errors else tail)


def per_node(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Object storage per node: what its ranks fetched over the repetition (staging, cache fill
    and warm-up included), per rank and in all, and what its cache holds (each object once)."""
    out: Dict[int, Dict[str, Any]] = {}
    for r in results:
        n = out.setdefault(r.get("node", 0), {"node": r.get("node", 0), "ranks": [], "bytes": 0, "requests": 0,
                                              "cache_bytes": None})
        n["ranks"].append({"rank": r["rank"], "bytes": r.get("network_bytes_run") or 0,
                           "requests": r.get("network_requests_run") or 0})
        n["bytes"] += r.get("network_bytes_run") or 0
        n["requests"] += r.get("network_requests_run") or 0
        if r.get("cache_bytes") is not None:
            n["cache_bytes"] = r["cache_bytes"]
    return [out[k] for k in sorted(out)]


def _merge_ranks(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One repetition's figures from its ranks: throughput is the global samples over the
    slowest rank's time; memory and CPU add up; latencies are the worst rank's."""
    if len(results) == 1:
        return results[0]
    r0 = dict(results[0])
    slowest = max(r["seconds"] for r in results)
    total = sum(r["samples"] for r in results)
    r0.update(samples=total, seconds=slowest, throughput=total / slowest,
              latency_p50=max(r["latency_p50"] for r in results), latency_p99=max(r["latency_p99"] for r in results),
              cpu_seconds=sum(r["cpu_seconds"] for r in results), peak_pss=sum(r["peak_pss"] for r in results),
              cpu_window=max(r.get("cpu_window") or r["seconds"] for r in results),
              first_batch=max(r["first_batch"] for r in results), ranks=results)
    r0["cpu_per_sample"] = r0["cpu_seconds"] / total * 1e3
    r0["network_bytes"] = sum(r.get("network_bytes") or 0 for r in results)
    r0["network_requests"] = sum(r.get("network_requests") or 0 for r in results)
    r0["network_bytes_run"] = sum(r.get("network_bytes_run") or 0 for r in results)
    if results[0].get("machine") and not results[0]["machine"].get("own_is_nodes"):
        # The other ranks are this run, not other processes (on emulated nodes, rank 0 counted
        # every process of the run's nodes as its own already).
        m = dict(results[0]["machine"])
        m["other_cores"] = max(0.0, m["other_cores"] - sum(r["cpu_seconds"] for r in results[1:])
                               / max(results[0]["seconds"], 1e-9))
        m["contended"] = m["other_cores"] > 0.25 + m.get("resolution", 0.0) or m["steal_share"] > 0.05
        r0["machine"] = m
    if any(r.get("network_bytes_run") for r in results):
        r0["per_node"] = per_node(results)
    if "e2e_seconds" in r0:
        e2e_total = sum(r["e2e_samples"] for r in results)
        r0.update(e2e_samples=e2e_total, e2e_seconds=max(r["e2e_seconds"] for r in results))  # global, like samples
        r0["e2e_throughput"] = e2e_total / r0["e2e_seconds"]
        shares = [r["data_wait_share"] for r in results if r.get("data_wait_share") is not None]
        r0["data_wait_share"] = max(shares) if shares else None
    if any(r.get("staging_seconds") is not None for r in results):
        r0["staging_seconds"] = max(r["staging_seconds"] or 0 for r in results)
        # What every rank's staging or cache fill fetched: one rank of a node fetches an object
        # for all of them (its cache), so rank 0's own figure may be nothing.
        r0["staging"] = dict(r0["staging"] or {}, bytes=sum((r.get("staging") or {}).get("bytes", 0) for r in results))
    return r0


def compare_checks(mode: str, base: Dict[str, Any], arm: Dict[str, Any], tolerance: float) -> Dict[str, Any]:
    """The arm's correctness pass against the baseline's. Returns {ok, detail, ...}; ok is None
    (and `checked` False) when there are no sample ids to compare by."""
    if base.get("ids") is None or arm.get("ids") is None:
        who = " and ".join(w for w, c in (("the baseline", base), ("the arm", arm)) if c.get("ids") is None)
        return {"ok": None, "checked": False,
                "detail": f"correctness NOT checked: {who} gave no sample ids (give [pipeline] sample_ids = "
                          "'package.module:function' returning one id per sample of a batch)"}
    sa, sb = base.get("structure"), arm.get("structure")
    if sa is not None and sb is not None and sa != sb:
        return {"ok": False, "detail": f"the batches differ in structure: baseline {sa} vs arm {sb} (every arm must "
                                       "yield batches of the same shape: the step is shared)"}
    n = min(len(base["ids"]), len(arm["ids"]))  # the common prefix (arms may take whole batches of other sizes)
    bi, ai = base["ids"][:n], arm["ids"][:n]
    if bi != ai and mode == "identical":
        first = next(i for i, (a, b) in enumerate(zip(bi, ai)) if a != b)
        return {"ok": False, "detail": f"sample order differs at position {first}: baseline "
                f"{bi[first:first + 3]} vs arm {ai[first:first + 3]}"}
    if set(bi) != set(ai):
        missing = sorted(set(bi) - set(ai))[:5]
        extra = sorted(set(ai) - set(bi))[:5]
        return {"ok": False, "detail": f"different samples: missing {missing}, extra {extra}"}
    if mode in ("identical", "same-samples"):
        b = dict(zip(bi, base["checksums"][:n]))
        bad = [i for i, c in zip(ai, arm["checksums"][:n]) if b[i] != c]
        if bad:
            return {"ok": False, "detail": f"{len(bad)} of {len(b)} samples differ in their tensors, first {bad[:5]}"}
        return {"ok": True, "detail": f"{len(b)} samples identical (ids and checksums of every per-sample tensor)"}
    la, lb = torch.load(base["pixels"]), torch.load(arm["pixels"])
    la, lb = ([la] if isinstance(la, torch.Tensor) else la), ([lb] if isinstance(lb, torch.Tensor) else lb)
    order = {k: i for i, k in enumerate(ai)}
    pick = [order[k] for k in bi]
    per_sample = torch.zeros(n)
    unequal: List[str] = []
    for ta, tb in zip(la, lb):
        ta, tb = ta[:n], tb[:n][pick]
        if ta.dtype.is_floating_point or ta.dtype == torch.uint8:  # pixels: decoders may differ slightly
            per_sample = torch.maximum(per_sample, (ta.double() - tb.double()).abs().flatten(1).mean(1).float()
                                       if ta.dim() > 1 else (ta.double() - tb.double()).abs().float())
        else:  # labels, indices, masks: exactly equal
            differ = (ta != tb).flatten(1).any(1) if ta.dim() > 1 else ta != tb
            unequal += [bi[i] for i in differ.nonzero().flatten().tolist()]
    worst = int(per_sample.argmax()) if n else 0
    pa, pb = la[0][:n].double(), lb[0][:n][pick].double()
    out: Dict[str, Any] = {"mean_abs_diff": float(per_sample.mean()) if n else 0.0, "worst_mean_abs_diff": float(per_sample[worst]) if n else 0.0,
           "worst_sample": bi[worst] if n else None, "max_abs_diff": float((pa - pb).abs().max()) if n else 0.0,
           "tolerance": tolerance}
    out["ok"] = out["worst_mean_abs_diff"] <= tolerance and not unequal
    how = base.get("how", " under a fixed center crop")
    out["detail"] = (f"{n} samples{how}: "
                     f"worst mean |diff| {out['worst_mean_abs_diff']:.2f} ({out['worst_sample']}), tolerance {tolerance}")
    if unequal:
        out["detail"] += f"; {len(unequal)} samples differ in an integer tensor (labels?), which must be equal: {unequal[:5]}"
    return out


def _check_samples(exp: Experiment) -> int:
    """Samples the correctness pass compares: at least two global batches of every arm, so that
    the check crosses batch and rank boundaries (where threads or ranks would reorder)."""
    if exp.run["check_samples"] == 0:
        return 0
    if exp.user:  # batch sizes unknown until a batch is seen: the pass itself takes two or more batches
        return exp.run["check_samples"]
    return max([exp.run["check_samples"]] + [2 * a.config["batch_size"] * a.config["world_size"] for a in exp.arms])


def _check_measured_ids(raw_path: str, base: str, arm: str, check: Dict[str, Any], per_arm: bool = False) -> None:
    """The measured phases must have read the same samples in every repetition of both arms
    (compared where the counts agree: batch sizes round the count to whole batches). With
    `per_arm` (a factor that deals the epoch to the ranks differently, so that each rank's
    measured window is another stretch of the same epoch), in every repetition of each arm."""
    with open(raw_path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    seen = {(r["arm"], r["measured_ids"]["count"], r["measured_ids"]["digest"]) for r in rows
            if r["arm"] in (base, arm) and r.get("measured_ids")}
    if not seen:
        check["detail"] += "; which samples the measured phases read is not known (no ids)"
        return
    groups: Dict[Tuple[Optional[str], int], set] = {}
    for name, count, digest in seen:
        groups.setdefault((name if per_arm else None, count), set()).add(digest)
    bad = [(count, digests) for (_, count), digests in groups.items() if len(digests) > 1]
    if bad:
        check["ok"] = False
        check["detail"] += f"; but the measured phases read different samples ({len(bad[0][1])} different sets of {bad[0][0]})"
        sizes = sorted({r.get("batch_size") for r in rows if r["arm"] in (base, arm) and r.get("batch_size")})
        if len(sizes) > 1:
            check["detail"] += (f": the arms' batches hold {' and '.join(map(str, sizes))} samples, so [run] warmup_samples "
                                "and samples must be multiples of every one of them (each phase takes whole batches)")
    elif per_arm:
        check["detail"] += ("; each arm's measured phases read the same samples in every repetition; the arms' windows are "
                            "different stretches of the same epoch, by design")
    else:
        check["detail"] += "; the measured phases read the same samples in every repetition"


def make_results_dir(out_dir: str) -> None:
    """Makes `out_dir`. A folder named `results` that this makes on the way gets a .gitignore of
    `*`, as pytest's cache does: reports are outputs, not sources (an existing folder is left
    as it is)."""
    path, made = os.path.abspath(out_dir), []
    while not os.path.isdir(path):
        made.append(path)
        path = os.path.dirname(path)
    os.makedirs(out_dir, exist_ok=True)
    for d in made:
        if os.path.basename(d) == "results":
            with open(os.path.join(d, ".gitignore"), "w") as f:
                f.write("# Written by loadscope: experiment reports and baselines are outputs, not sources.\n*\n")


def _prepare_out_dir(out_dir: str) -> None:
    """A new folder, or one an earlier run of an experiment wrote (its outputs are replaced, so
    no stale trace or check file is listed); anything else is refused rather than mixed into."""
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        if not os.path.isfile(os.path.join(out_dir, "experiment.json")):
            raise ConfigError(f"--out {out_dir!r} is not empty and holds no experiment: choose a new folder")
        for sub in ("specs", "runs", "logs", "check", "traces", "plots"):
            shutil.rmtree(os.path.join(out_dir, sub), ignore_errors=True)
        for name in ("raw.jsonl", "summary.json", "report.md", "env.json", "matrix.csv"):
            if os.path.exists(os.path.join(out_dir, name)):
                os.remove(os.path.join(out_dir, name))
    make_results_dir(out_dir)


def run(exp: Experiment, out_dir: Optional[str] = None, *, quiet: bool = False) -> Dict[str, Any]:
    """Runs `exp` and writes its folder; returns the summary (see report.analyze). Raises
    ExperimentFailed when a repetition fails or a correctness check does not pass (the folder
    and its report are written first, saying why)."""
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = os.path.abspath(out_dir or os.path.join("results", "experiments", f"{exp.name}-{stamp}"))
    root = os.path.abspath(exp.dataset["path"]) if exp.dataset["path"] else None
    missing_cuda = exp.needs_cuda() if not torch.cuda.is_available() else []
    from .env import require

    require()
    for a in exp.arms:  # before anything is written: emulated nodes need root, ip and tc; workers need Ray
        cluster.require(a.config)
    if any(a.config.get("nodes", 1) + a.config.get("cpu_nodes", 0) > 1 for a in exp.arms):
        if any(a.config.get("nodes", 1) + a.config.get("cpu_nodes", 0) > 1 and a.config.get("storage", "local") != "local"
               for a in exp.arms):
            nodes.loopback_endpoint(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or
                                    "(AWS_ENDPOINT_URL is not set: AWS itself)")
    if exp.user:  # the user's callables exist and take the arms' arguments, before anything runs
        from . import user

        user.validate(exp)
    _prepare_out_dir(out_dir)
    effective = os.path.join(out_dir, "experiment.effective.json")
    with open(effective, "w") as f:  # the exact experiment, overrides included: what the rerun command runs
        json.dump(exp.raw, f, indent=1)
    with open(os.path.join(out_dir, "experiment.json"), "w") as f:
        json.dump({"name": exp.name, "source": exp.source, "declared": exp.raw, "factor": exp.factor,
                   "arms": [{"name": a.name, "config": a.config} for a in exp.arms], "step": exp.step,
                   "run": exp.run, "criteria": exp.criteria, "correctness_mode": exp.correctness_mode,
                   "check_samples": _check_samples(exp), "rerun": rerun_command(effective, out_dir)}, f, indent=1)
    if missing_cuda:
        summary = {"status": "skipped", "reason": "needs CUDA, which this machine does not have: " + "; ".join(missing_cuda)}
        report.write(out_dir, summary)
        say(f"{exp.name}: skipped ({summary['reason']})")
        return summary

    files: List[str] = []
    if exp.user:
        files = user.data_files(root) if root else []
    elif root is None:  # pragma: no cover - from_dict gives every built-in experiment a path
        raise ConfigError("[dataset] path is required")
    elif not os.path.isfile(os.path.join(root, "dataset.json")) and exp.dataset["generate"]:
        # Only into a missing or empty directory (generate() refuses anything else): an
        # existing dataset is used as it is, never regenerated or resized here.
        say(f"generating the demo dataset in {root} ...")
        from .. import datasets  # here: the generator needs NumPy, a user pipeline's experiment does not

        datasets.generate(root, images=exp.dataset["images"], quiet=quiet)
    needed = {"files": "manifest.jsonl", "folder": "folder", "shards": "shards"}
    for lay in sorted({a.config["layout"] for a in exp.arms} if root and not exp.user else ()):
        assert root is not None
        if not os.path.exists(os.path.join(root, needed[lay])):
            raise ConfigError(f"[dataset] path = {exp.dataset['path']!r}: no {needed[lay]} there for layout '{lay}' "
                              "(the layout `python -m loadscope.datasets` writes; or generate = true for an empty path)")
    if root and not exp.user:
        layouts = sorted({a.config["layout"] for a in exp.arms})
        files = sorted({p for lay in layouts for p in pipelines.layout_files(root, lay)})
    url = None if exp.user else (exp.dataset["url"].rstrip("/") or None)
    shards: Optional[List[str]] = None
    if url and any(a.config["storage"] != "local" for a in exp.arms):
        assert root is not None
        remote_files = sorted({p for lay in layouts for p in pipelines.layout_files(root, lay, indexes=True)})
        _native.remote_reload_environment()  # the AWS_* variables as they are now
        if exp.dataset["upload"]:
            say(f"{exp.name}: putting the dataset's files at {_native.redact_url(url)} where missing ...")
            up = pipelines.upload(root, url, remote_files)
            say(f"  {up['uploaded']} of {up['files']} files uploaded ({up['bytes'] / 1e6:.1f} MB, {up['seconds']:.1f} s)")
        elif _native.remote_probe(pipelines.join(url, os.path.relpath(remote_files[0], root))) is None:
            raise ConfigError(f"[dataset] url = {_native.redact_url(url)!r}: "
                              f"{os.path.relpath(remote_files[0], root)} is not there (upload = true puts the files there)")
        shards = [os.path.relpath(p, root) for p in pipelines.layout_files(root, "shards")]
    say(f"{exp.name}: recording the environment ...")
    stage_parent = exp.dataset.get("stage_dir") or tempfile.gettempdir()
    staging = any(a.config.get("staging") == "local" or a.config.get("storage") in ("remote-cache", "remote-staged")
                  for a in exp.arms)
    environment = envmod.record(root, files, exp.training_repo, stage_parent if staging else None)
    # Where each arm's ranks ran: on one node (the host), or spread over emulated ones.
    environment["topology"] = {a.name: cluster.topology(a.config) for a in exp.arms
                               if a.config.get("world_size", 1) > 1 or cluster.needed(a.config)}
    with open(os.path.join(out_dir, "env.json"), "w") as f:
        json.dump(environment, f, indent=1)
    epoch = (environment["dataset"] or {}).get("samples")
    window = exp.run["warmup_samples"] + exp.run["samples"]
    if not exp.user and len({a.config["world_size"] for a in exp.arms}) > 1 and epoch and window > epoch:
        # Past an epoch's end, ranks with uneven batch counts start the next epoch at different
        # points: the arms would measure different samples (the check would say so, late).
        raise ConfigError(f"[run] warmup_samples + samples = {window} exceeds the epoch ({epoch} samples): arms with "
                          "different world sizes read the same samples only within one epoch; make the window smaller")

    order = plan(exp)
    with open(os.path.join(out_dir, "matrix.csv"), "w", newline="") as f:
        w = csv.writer(f)
        # A user pipeline's settings are its factory's arguments: the union over the arms.
        keys = list(PIPELINE) if not exp.user else list(dict.fromkeys(k for a in exp.arms for k in a.config))
        step_cols = ["compute", "compute_ms", "grad_accum"] + (["setup", "function"] if exp.user else ["global_batch"])
        w.writerow(["run", "round", "warmup", "arm", *keys, *step_cols])
        for row in order:
            c = exp.arms[row["arm"]].config
            cells = [json.dumps(c[k]) if isinstance(c.get(k), (list, dict)) else c.get(k, "") for k in keys]
            steps = [exp.step["compute"], exp.step["compute_ms"], exp.step_for(c)["grad_accum"]] + \
                ([exp.step["setup"], exp.step["function"]] if exp.user else [exp.global_batch(c)])
            w.writerow([row["run"], row["round"], row["warmup"], exp.arms[row["arm"]].name, *cells, *steps])

    for sub in ("specs", "runs", "logs", "check", "traces"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    mode = exp.correctness_mode
    os.makedirs(stage_parent, exist_ok=True)
    stage_root = tempfile.mkdtemp(prefix=f"loadscope-stage-{exp.name}-", dir=stage_parent)
    check_n = _check_samples(exp)
    raw_path = os.path.join(out_dir, "raw.jsonl")
    checks: Dict[int, Dict[str, Any]] = {}
    grad_checks: Dict[str, Dict[str, Any]] = {}
    failure: Optional[str] = None
    try:
        with open(raw_path, "w") as raw:
            for row in order:
                arm = exp.arms[row["arm"]]
                first_measured = not row["warmup"] and row["round"] == 0
                tag = f"{row['run']:03d}"
                spec = {"config": arm.config, "step": exp.step_for(arm.config), "run": exp.run, "root": root, "url": url, "shards": shards,
                        "stage_dir": os.path.join(stage_root, tag), "cuda": bool(exp.needs_cuda()),
                        "repo": exp.training_repo, "harness_keys": sorted(USER_PIPELINE),
                        "check_overrides": exp.correctness["overrides"],
                        "restart": "own" if "new_epoch_first_batch" in [exp.criteria["metric"], *exp.criteria["max_regression"]]
                        else None}
                slug = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in arm.name)
                if first_measured and mode != "none" and check_n > 0:
                    spec["check"] = {"mode": mode, "samples": check_n,
                                     "path": os.path.join(out_dir, "check", f"{slug}.json")}
                if first_measured and exp.run["trace_batches"] > 0:
                    spec["trace"] = {"batches": exp.run["trace_batches"],
                                     "path": os.path.join(out_dir, "traces", f"{slug}.trace.json")}
                t0 = time.monotonic()
                results, why = repetition(spec, os.path.join(out_dir, "specs", f"{tag}.json"),
                                          os.path.join(out_dir, "runs", f"{tag}.json"),
                                          os.path.join(out_dir, "logs", f"{tag}.log"), arm.config["world_size"],
                                          exp.run["timeout_s"], exp.training_repo)
                shutil.rmtree(spec["stage_dir"], ignore_errors=True)
                if why is not None:
                    where = "warm-up round" if row["warmup"] else f"round {row['round']}"
                    failure = f"run {tag} ({arm.name}, {where}) failed {why}"
                    break
                decomposition = scaling.decompose(results)  # before the ranks merge: it reads each rank's steps
                merged = _merge_ranks(results)
                merged["decomposition"] = decomposition
                comm = (decomposition or {}).get("comm")
                if comm:
                    merged.update(allreduces_per_sample=comm["allreduces_per_sample"],
                                  exposed_comm_per_sample=comm["exposed_per_sample"] * 1e3)
                if "check" in spec:
                    grads = [r["grad_check"] for r in results if r.get("grad_check")]
                    if grads:  # the rank that agreed least speaks for the arm
                        grad_checks[arm.name] = max(grads, key=lambda g: (g["ok"] is False, g.get("max_rel_diff") or 0))
                ids = sorted(i for r in results for i in r.pop("measured_ids", []))
                for r in merged.get("ranks", []):
                    r.pop("measured_ids", None)
                merged.pop("measured_ids", None)
                # Which samples the measured phase read (all ranks), as a digest: arms must agree.
                merged["measured_ids"] = {"count": len(ids), "digest": hashlib.blake2b(
                    "\n".join(ids).encode(), digest_size=8).hexdigest()} if ids else None
                merged.update(run=row["run"], round=row["round"], arm=arm.name, warmup=row["warmup"],
                              wall_seconds=time.monotonic() - t0)
                raw.write(json.dumps(merged) + "\n")
                raw.flush()
                if "check" in spec:
                    checks[row["arm"]] = spec["check"]
                say(f"  {tag} {'warm-up ' if row['warmup'] else ''}{arm.name:<28} "
                    f"{merged['throughput']:8.1f} samples/s  peak PSS {merged['peak_pss']:6.0f} MiB")
    finally:
        shutil.rmtree(stage_root, ignore_errors=True)

    correctness: Dict[str, Any] = {"mode": mode, "arms": {}, "check_samples": check_n}
    if failure is None and mode != "none" and check_n > 0:
        with open(checks[0]["path"]) as f:
            base = json.load(f)
        for i, arm in enumerate(exp.arms[1:], start=1):
            with open(checks[i]["path"]) as f:
                got = json.load(f)
            correctness["arms"][arm.name] = compare_checks(mode, base, got, exp.correctness["tolerance"])
            _check_measured_ids(raw_path, exp.arms[0].name, arm.name, correctness["arms"][arm.name],
                                per_arm=exp.factor in DEALS_THE_EPOCH)
        for p in os.listdir(os.path.join(out_dir, "check")):  # the pixels served the comparison; keep ids and checksums
            if p.endswith(".pt"):
                os.remove(os.path.join(out_dir, "check", p))
    elif mode == "none":
        correctness["note"] = f"the factor '{exp.factor}' changes the data by design: no comparison"
    if grad_checks:
        correctness["gradients"] = grad_checks
    summary = report.analyze(out_dir, exp, correctness=correctness, failure=failure)
    report.write(out_dir, summary)
    if failure:
        raise ExperimentFailed(failure)
    bad = {k: v["detail"] for k, v in correctness["arms"].items() if v["ok"] is False}
    bad.update({f"{k} (gradient accumulation)": v["detail"] for k, v in grad_checks.items() if v["ok"] is False})
    if bad:
        raise ExperimentFailed("correctness check failed: " + "; ".join(f"{k}: {v}" for k, v in bad.items())
                               + f" (see {os.path.join(out_dir, 'report.md')})")
    return summary
