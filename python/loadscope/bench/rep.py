"""One repetition of one arm, in a fresh process: ``python -m loadscope.bench.rep SPEC OUT``.
For world sizes above 1 the runner starts one process per rank with the variables
torch.distributed's env:// initialisation reads (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
plus LOCAL_RANK), as torchrun would; gloo for the collectives.

Phases, in order:
  1. staging (if the arm stages): copy the layout's files to local disk, timed;
  2. pipeline: warm-up samples, then `samples` measured with no training step (the loader alone);
  3. end-to-end (when the step has compute): warm-up, then `samples` with the step's compute;
  4. after measuring (rank 0, first repetition only): the correctness pass (the first
     `check_samples` samples, ids and pixel checksums) and a short trace.
Memory is sampled over phases 1-3 for this process and its children (DataLoader workers)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import traceback
from typing import Any, Dict, Iterator, List, Optional

import torch

from . import pipelines


def _percentile(sorted_xs: List[float], q: float) -> Optional[float]:
    """Nearest-rank percentile of an already sorted list (exact: the lists are small)."""
    if not sorted_xs:
        return None
    return sorted_xs[min(len(sorted_xs) - 1, max(0, math.ceil(q * len(sorted_xs)) - 1))]


def _tree_cpu() -> float:
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class _SmallCNN(torch.nn.Module):
    """compute='model': a small convolutional classifier, forward and backward on the host
    (it competes with the loader for the cores, as a CPU-side training step would)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _Step:
    """The training step an experiment declares: nothing, a fixed sleep (an accelerator's
    compute that leaves the host idle), a small model, or a fixed GPU workload (`matmuls`
    bf16 products of 8192x8192 matrices, timed with CUDA events, so that contention with
    decoding on the GPU shows as a longer step); gradient accumulation; with several ranks, the
    gradient all-reduce a data-parallel step ends with."""

    MATMUL_N = 8192  # one product: 1.1 TFLOP, ~1.4 ms on an H200
    def __init__(self, step: Dict[str, Any], world: int, device: Optional[torch.device]) -> None:
        self.kind, self.ms, self.accum, self.world, self.device = step["compute"], step["compute_ms"], step["grad_accum"], world, device
        self.ms_matmuls = step.get("matmuls", 4)
        self.micro = 0
        if self.kind == "model":
            model = _SmallCNN().to(device or "cpu")
            if world > 1:
                model = torch.nn.parallel.DistributedDataParallel(model)
            self.model = model
            self.opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if self.kind == "matmul":
            n = self.MATMUL_N
            g = torch.Generator(device=device).manual_seed(0)
            self.a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
            self.b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
            self.c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
            self.events: List[tuple] = []

    def gpu_step_seconds(self) -> List[float]:
        """GPU seconds of each matmul step since the last call (call after a synchronize)."""
        out = [s.elapsed_time(e) / 1e3 for s, e in self.events]
        self.events = []
        return out

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        import contextlib

        import torch.distributed as dist

        self.micro += 1
        boundary = self.micro % self.accum == 0
        if self.kind == "sleep":
            time.sleep(self.ms / 1000)
            if boundary and self.world > 1:
                dist.all_reduce(torch.zeros(1))
        elif self.kind == "matmul":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.ms_matmuls):
                torch.mm(self.a, self.b, out=self.c)
            end.record()
            self.events.append((start, end))
            if boundary and self.world > 1:
                dist.all_reduce(torch.zeros(1))
        elif self.kind == "model":
            sync = contextlib.nullcontext() if boundary or self.world == 1 else self.model.no_sync()
            with sync:
                loss = torch.nn.functional.cross_entropy(self.model(x.float() / 255), y % 10)
                (loss / self.accum).backward()
            if boundary:
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)


def _stream(pipe: pipelines.Pipeline) -> Iterator[pipelines.BatchT]:
    e = 0
    while True:
        got = False
        for batch in pipe.epoch(e):
            got = True
            yield batch
        if not got:
            raise RuntimeError("an epoch produced no batches (empty dataset, or more ranks than batches)")
        e += 1


def _thin(points: List[tuple], n: int = 300) -> List[tuple]:
    step = max(1, len(points) // n)
    return points[::step] + ([points[-1]] if points and (len(points) - 1) % step else [])


def _checksum(x: torch.Tensor) -> str:
    return hashlib.blake2b(x.contiguous().cpu().numpy().tobytes(), digest_size=8).hexdigest()


def check_pass(root: str, config: Dict[str, Any], mode: str, n: int, world: int, path: str) -> Dict[str, Any]:
    """The first `n` samples of epoch 0 as the arm delivers them, ranks merged in global batch
    order: ids and pixel checksums (and the pixels, for a tolerance comparison). For modes that
    compare across different augmentations, a fixed center crop replaces the random one."""
    c = dict(config)
    if mode in ("same-samples", "tolerance"):
        c.update(crop="center", flip=0.0)
    bs = c["batch_size"]
    need = math.ceil(n / bs)
    got = []
    for r in range(world):
        pipe = pipelines.make(root, c, r, world)
        try:
            for k, (x, _y, keys) in enumerate(pipe.epoch(0)):
                gi = r + k * world
                if gi >= need:
                    break
                got.append((gi, x.cpu(), keys))
        finally:
            pipe.close()
    got.sort(key=lambda t: t[0])
    images = [img for _, x, _ in got for img in x][:n]
    ids = [pipelines.sample_id(k) for _, _, keys in got for k in keys][:n]
    out = {"mode": mode, "ids": ids, "checksums": [_checksum(x) for x in images]}
    if mode == "tolerance" and images:
        torch.save(torch.stack(images), path + ".pt")
        out["pixels"] = path + ".pt"
    with open(path, "w") as f:
        json.dump(out, f)
    return {"samples": len(ids), "path": path}


def run(spec: Dict[str, Any]) -> Dict[str, Any]:
    import torch.distributed as dist

    from ..telemetry import ProcessTreeSampler

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    config, step_def, plan = spec["config"], spec["step"], spec["run"]
    if world != config["world_size"]:
        raise RuntimeError(f"world_size={config['world_size']} but {world} processes were started")
    if world > 1:
        dist.init_process_group("gloo")
    # The consumer's own torch ops (the model step) use one thread: the loader's threads are
    # the factor under study, and torch's default (all cores) would blur every comparison.
    torch.set_num_threads(1)
    # PSS costs ~3.5 ms per process to read (smaps): every 0.5 s that is under 1% of a core
    # per process, small enough not to tilt the arms (a DataLoader arm has more processes).
    sampler = ProcessTreeSampler(0.5, lambda: None, history=True)
    t_start = time.monotonic()
    root = spec["root"]
    staging = None
    if config["staging"] == "local":
        dest = os.path.join(spec["stage_dir"], f"rank{rank}")
        staging = pipelines.stage(root, config["layout"], dest)
        root = dest
    if world > 1:
        dist.barrier()

    # Counts are global samples; every rank takes the same number of batches, as data-parallel
    # training must (a rank with one step more would wait in its all-reduce forever).
    bs = config["batch_size"]
    batches_for = lambda n: max(1, math.ceil(n / (bs * world)))  # noqa: E731
    t_make = time.monotonic()
    pipe = pipelines.make(root, config, rank, world)
    # Experiments with a GPU arm hand every arm's batches to the GPU, so that the arms differ
    # only in the factor: a CPU batch is copied (pageable, synchronous) inside the wait.
    to_gpu = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if spec.get("cuda") else None
    step = _Step(step_def, world, to_gpu)
    it = _stream(pipe)
    first_batch: Optional[float] = None

    cuda = to_gpu is not None or pipe.device is not None

    def take(batches: int, compute: bool, ids: Optional[List[str]] = None):
        """Draws `batches` batches: (samples, seconds, waits, compute seconds, timeline). The
        phase's clock stops after the GPU has finished its copies (and compute)."""
        nonlocal first_batch
        waits, timeline, done, busy = [], [], 0, 0.0
        if cuda:
            torch.cuda.synchronize()
        t0 = time.monotonic()
        for _ in range(batches):
            a = time.monotonic()
            x, y, keys = next(it)
            if ids is not None:
                ids.extend(pipelines.sample_id(k) for k in keys)
            if to_gpu is not None and not x.is_cuda:
                x, y = x.to(to_gpu), y.to(to_gpu)
            b = time.monotonic()
            if first_batch is None:
                first_batch = b - t_make
            waits.append(b - a)
            if compute:
                step(x, y)
                busy += time.monotonic() - b
            done += len(keys)
            timeline.append((time.monotonic() - t0, done))
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.monotonic() - t0
        sampler.sample()  # memory at the end of every phase (outside its time), whatever the interval
        return done, elapsed, waits, busy, timeline

    if plan["warmup_samples"]:
        take(batches_for(plan["warmup_samples"]), False)
    if world > 1:
        dist.barrier()
    cpu0 = _tree_cpu()
    measured_ids: List[str] = []
    n, secs, waits, _, timeline = take(batches_for(plan["samples"]), False, measured_ids)
    cpu1 = _tree_cpu()
    waits.sort()
    result: Dict[str, Any] = {
        "rank": rank, "world": world, "samples": n, "seconds": secs, "throughput": n / secs,
        "latency_p50": _percentile(waits, 0.5) * 1e3, "latency_p99": _percentile(waits, 0.99) * 1e3,
        "batches": len(waits), "cpu_seconds": cpu1 - cpu0, "cpu_per_sample": (cpu1 - cpu0) / n * 1e3,
        "first_batch": first_batch, "timeline": _thin(timeline), "measured_ids": measured_ids,
        "staging_seconds": staging["seconds"] if staging else None, "staging": staging,
    }
    if step_def["compute"] != "none":
        take(max(1, batches_for(plan["warmup_samples"]) // 4), True)
        if world > 1:
            dist.barrier()
        if step.kind == "matmul":
            step.gpu_step_seconds()  # drop the warm-up's
        n2, secs2, waits2, busy2, timeline2 = take(batches_for(plan["samples"]), True)
        wait2 = sum(waits2)
        result.update(e2e_samples=n2, e2e_seconds=secs2, e2e_throughput=n2 / secs2,
                      data_wait_share=wait2 / (wait2 + busy2) if wait2 + busy2 else None, e2e_timeline=_thin(timeline2))
        if step.kind == "matmul":  # take() synchronised: every event has completed
            gpu = step.gpu_step_seconds()
            # The host's wait in next() includes waiting behind queued GPU work (a pageable
            # copy, nvJPEG), so data_wait_share would mislead: the GPU's own idle share replaces it.
            result.update(step_ms=sum(gpu) / len(gpu) * 1e3, gpu_idle_share=max(0.0, 1.0 - sum(gpu) / secs2),
                          data_wait_share=None)
    else:
        result.update(e2e_throughput=result["throughput"], data_wait_share=None)
    sampler.stop()
    sampler.sample()
    result["peak_pss"] = sampler.peak_total_pss / 2**20
    result["memory_timeline"] = _thin([(t - t_start, pss / 2**20) for t, pss, _rss, _cpu in (sampler.history or [])])
    result["telemetry"] = pipe.telemetry()
    pipe.close()
    del it, pipe

    if rank == 0 and spec.get("check"):
        result["check"] = check_pass(root, config, spec["check"]["mode"], spec["check"]["samples"], world,
                                     spec["check"]["path"])
    if rank == 0 and spec.get("trace") and config["loader"] == "loadscope":
        tp = pipelines.make(root, dict(config, world_size=1), 0, 1)
        tp.loader.start_trace(spec["trace"]["path"])
        for i, _ in enumerate(tp.epoch(0)):
            if i + 1 >= spec["trace"]["batches"]:
                break
        result["trace"] = tp.loader.stop_trace()
        tp.close()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return result


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m loadscope.bench.rep SPEC.json OUT.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec = json.load(f)
    rank = int(os.environ.get("RANK", 0))
    out = argv[1] if rank == 0 else f"{argv[1]}.rank{rank}"
    try:
        result = run(spec)
        code = 0
    except Exception as e:  # the runner reports it with the arm and repetition
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(), "rank": rank}
        code = 1
    with open(out, "w") as f:
        json.dump(result, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
