"""One repetition of one arm, in a fresh process: ``python -m loadscope.bench.rep SPEC OUT``.
For world sizes above 1 the runner starts one process per rank with the variables
torch.distributed's env:// initialisation reads (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
plus LOCAL_RANK), as torchrun would; gloo for the collectives.

Phases, in order:
  1. storage (if the arm stages or caches): copy the layout's files to local disk (from [dataset]
     path, or from its url), or fill a node-local cache from the url, timed;
  2. pipeline: warm-up samples, then `samples` measured with no training step (the loader alone);
  3. end-to-end (when the step has compute): warm-up, then `samples` with the step's compute;
  4. after measuring (rank 0, first repetition only): the correctness pass (the first
     `check_samples` samples, ids and checksums of every per-sample tensor) and a short trace;
  5. restart (`bench baseline` only): the time to the first batch of a new epoch, with the
     pipeline as it is and, for a DataLoader with workers, with persistent_workers flipped.
Memory is sampled over phases 1-3 for this process and its children (DataLoader workers).

A user pipeline (`factory` in the arm's config) is built by the user's function, with the
training repository first on sys.path; the user's step (`[step] function`, with `setup`) runs
in the end-to-end phase. Every repetition seeds Python's, NumPy's and torch's global
generators with 0 first, so what a factory draws from them (a DataLoader's shuffle and its
workers' seeds) repeats across arms and repetitions."""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from typing import Any, Dict, Generator, Iterator, List, Optional, Tuple

import torch

from .. import _native
from ..telemetry import machine_cpu, machine_load, tree_cpu_seconds
from ..telemetry.comm import CommTimer
from . import pipelines


def _tensor_bytes(batch: Any) -> int:
    """The bytes of the tensors a batch holds (a tuple, list or dict of them, nested)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, dict):
        return sum(_tensor_bytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(_tensor_bytes(v) for v in batch)
    return 0


def _percentile(sorted_xs: List[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty list (exact: the lists are small)."""
    return sorted_xs[min(len(sorted_xs) - 1, max(0, math.ceil(q * len(sorted_xs)) - 1))]


def _tree_io() -> Dict[str, int]:
    """Bytes read by this process tree: `read_chars` through read()/pread() (page cache
    included), `read_bytes` from the storage device. /proc/self/io already holds exited,
    waited-for children."""
    import psutil

    me = psutil.Process()
    total = {"read_chars": 0, "read_bytes": 0}
    for p in [me] + me.children(recursive=True):
        try:
            io = p.io_counters()
        except (psutil.Error, AttributeError):
            continue
        total["read_chars"] += io.read_chars
        total["read_bytes"] += io.read_bytes
    return total


class _SmallCNN(torch.nn.Module):
    """compute='model': a small convolutional classifier, forward and backward on the host
    (it competes with the loader for the cores, as a CPU-side training step would). With
    `model_mb`, a fully connected head carries about that many MB of float32 parameters: a
    gradient of known size for the all-reduce (a 25 MB model's backward computes little but
    all-reduces 25 MB, like the large layers of a real model)."""

    def __init__(self, model_mb: float = 0.0) -> None:
        super().__init__()
        layers: List[torch.nn.Module] = [
            torch.nn.Conv2d(3, 16, 5, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
        if model_mb > 0:
            # 32 -> 256 -> k -> 10: (32*256 + 256) + (256*k + k) + (10*k + 10) floats
            k = max(1, round((model_mb * 1e6 / 4 - 32 * 256 - 256 - 10) / (256 + 1 + 10)))
            layers += [torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, k), torch.nn.ReLU(),
                       torch.nn.Linear(k, 10)]
        else:
            layers.append(torch.nn.Linear(32, 10))
        self.net = torch.nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def find_ddp(state: Any, depth: int = 3) -> Optional[Any]:
    """The DistributedDataParallel module in a user step's state (the state itself, or an item
    or attribute of it, a few levels down), or None."""
    ddp = torch.nn.parallel.DistributedDataParallel
    if isinstance(state, ddp):
        return state
    if depth == 0 or state is None or isinstance(state, (str, bytes, int, float, torch.Tensor)):
        return None
    if isinstance(state, dict):
        items = list(state.values())
    elif isinstance(state, (list, tuple)):
        items = list(state)
    else:
        items = list(getattr(state, "__dict__", {}).values())
    for x in items:
        found = find_ddp(x, depth - 1)
        if found is not None:
            return found
    return None


class _GpuTimed:
    """A step whose GPU time is bracketed by CUDA events on the current stream, read back only
    after the runner has synchronised (no host synchronisation per step). Every step has the
    list, so the runner can drop the warm-up's whatever the step is."""

    events: List[tuple]

    def gpu_step_seconds(self) -> List[float]:
        """GPU seconds of each timed step since the last call (call after a synchronize)."""
        out = [s.elapsed_time(e) / 1e3 for s, e in self.events]
        self.events = []
        return out

    def timed(self, fn: Any, *args: Any) -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        self.events.append((start, end))


class _Step(_GpuTimed):
    """The training step an experiment declares: nothing, a fixed sleep (an accelerator's
    compute that leaves the host idle), a small model, or a fixed GPU workload (`matmuls`
    bf16 products of 8192x8192 matrices, timed with CUDA events, so that contention with
    decoding on the GPU shows as a longer step); gradient accumulation; with several ranks, the
    gradient all-reduce a data-parallel step ends with.

    The model step is DDP over the ranks, its all-reduce timed by a CommTimer, and each call
    taken apart (`parts`): forward, backward (the whole call, the exposed all-reduce included),
    the optimizer, and the rest of the call."""

    MATMUL_N = 8192  # one product: 1.1 TFLOP, ~1.4 ms on an H200
    def __init__(self, step: Dict[str, Any], world: int, device: Optional[torch.device]) -> None:
        self.kind, self.ms, self.accum, self.world, self.device = step["compute"], step["compute_ms"], step["grad_accum"], world, device
        self.ms_matmuls = step.get("matmuls", 4)
        self.micro = 0
        self.events = []
        self.comm: Optional[CommTimer] = None
        self.parts: Dict[str, float] = {}
        if self.kind == "model":
            model: torch.nn.Module = _SmallCNN(step.get("model_mb", 0.0)).to(device or "cpu")
            if world > 1:
                model = torch.nn.parallel.DistributedDataParallel(model)
                self.comm = CommTimer(model)
            self.model: Any = model
            self.opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if self.kind == "matmul":
            n = self.MATMUL_N
            g = torch.Generator(device=device).manual_seed(0)
            self.a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
            self.b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
            self.c = torch.empty(n, n, device=device, dtype=torch.bfloat16)

    uses_cuda = property(lambda self: self.kind == "matmul")

    def _matmuls(self) -> None:
        for _ in range(self.ms_matmuls):
            torch.mm(self.a, self.b, out=self.c)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The model step's loss on a built-in pipeline's images and labels."""
        return torch.nn.functional.cross_entropy(self.model(x.float() / 255), y % 10)

    def __call__(self, batch: Any) -> None:
        import contextlib

        import torch.distributed as dist

        self.micro += 1
        boundary = self.micro % self.accum == 0
        if self.kind == "sleep":
            time.sleep(self.ms / 1000)
            if boundary and self.world > 1:
                dist.all_reduce(torch.zeros(1))
        elif self.kind == "matmul":
            self.timed(self._matmuls)
            if boundary and self.world > 1:
                dist.all_reduce(torch.zeros(1))
        elif self.kind == "model":
            sync = contextlib.nullcontext() if boundary or self.world == 1 else self.model.no_sync()
            x, y = batch[0], batch[1]  # a built-in pipeline's (images, labels, keys)
            t0 = time.monotonic()
            with sync:
                loss = self.loss(x, y) / self.accum
                t1 = time.monotonic()
                loss.backward()
            t2 = time.monotonic()
            if boundary:
                self.opt.step()
            t3 = time.monotonic()
            if boundary:
                self.opt.zero_grad(set_to_none=True)
            self.parts = {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "rest": time.monotonic() - t3}


class _UserStep(_GpuTimed):
    """The user's training step: `setup(ctx)` once (the state), then `function(state, batch)` per
    batch. On a GPU each call is bracketed by CUDA events on the current stream, so the GPU's
    own time per step (and its idle share) is known without synchronising every step. A
    DistributedDataParallel model in the state has its all-reduce timed (CommTimer)."""

    def __init__(self, step: Dict[str, Any], rank: int, world: int) -> None:
        from . import user

        local = int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device("cuda", local % max(1, torch.cuda.device_count())) if torch.cuda.is_available() else torch.device("cpu")
        self.ctx = user.StepContext(rank, world, local, step["grad_accum"], device)
        self.fn = user.resolve(step["function"], "[step] function")
        setup = user.resolve(step["setup"], "[step] setup") if step["setup"] else None
        self.state = setup(self.ctx) if setup else None
        # CUDA in use once the setup has put something there (a model, an optimizer's state).
        self.uses_cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.events = []
        ddp = find_ddp(self.state) if world > 1 else None
        self.comm: Optional[CommTimer] = None
        if ddp is not None:
            try:
                self.comm = CommTimer(ddp)
            except RuntimeError as e:  # the user registered a hook of their own: theirs stays
                print(f"loadscope: the all-reduce is not timed: {e}", flush=True)
        self.parts: Dict[str, float] = {}

    def __call__(self, batch: Any) -> None:
        self.ctx.micro_step += 1
        self.ctx.boundary = self.ctx.micro_step % self.ctx.grad_accum == 0
        if self.uses_cuda:
            self.timed(self.fn, self.state, batch)
        else:
            self.fn(self.state, batch)


def accumulation_check(step: "_Step", batches: List[Any], rtol: float = 1e-4) -> Dict[str, Any]:
    """Whether gradients accumulated over `batches` as the step does it (no_sync() on every
    micro-batch but the last, each loss divided by their number) equal one backward over the
    batches joined (DDP averaging over the ranks in both). Every rank runs it (DDP's
    all-reduce is collective); no optimizer step is taken. Micro-batches of unequal size (an
    epoch's last) weigh their samples differently from one large batch: then it is not run."""
    import contextlib

    sizes = {int(b[0].shape[0]) for b in batches}
    if len(sizes) > 1:
        return {"ok": None, "detail": f"micro-batches of unequal sizes {sorted(sizes)}: not comparable"}
    model, k, loss = step.model, len(batches), step.loss

    def grads() -> List[torch.Tensor]:
        return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]

    model.zero_grad(set_to_none=True)
    for i, b in enumerate(batches):
        sync = model.no_sync() if i < k - 1 and step.world > 1 else contextlib.nullcontext()
        with sync:
            (loss(b[0], b[1]) / k).backward()
    accumulated = grads()
    model.zero_grad(set_to_none=True)
    loss(torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])).backward()
    joined = grads()
    model.zero_grad(set_to_none=True)
    if step.comm is not None:
        step.comm.take()  # the check's all-reduces are not the measured steps'
    scale = max(float(g.abs().max()) for g in joined) or 1.0
    diff = max(float((a - b).abs().max()) for a, b in zip(accumulated, joined)) / scale
    return {"ok": diff <= rtol, "max_rel_diff": diff, "micro_batches": k, "batch_size": sizes.pop(),
            "detail": f"gradients accumulated over {k} micro-batches vs one batch of them joined: largest difference "
                      f"{diff:.2e} of the largest gradient (allowed {rtol:g})"}


def step_parts(wait: float, h2d: float, call: float, parts: Dict[str, float], comm: Optional[Any], n: int) -> Dict[str, Any]:
    """One training step taken apart (seconds): the data wait, the host-to-device copy, and the
    step's call: for the built-in model forward, backward's compute, the exposed all-reduce, the
    optimizer and the rest (zero_grad, the loss's bookkeeping, the call itself); for a step
    known only as a whole (the user's, a sleep) `compute`, the call less the exposed all-reduce.
    The parts add up to the iteration (wait + h2d + call) by construction; what the loop does
    between iterations is not in them (the report compares their sum with the measured step)."""
    exposed = comm.exposed if comm is not None else 0.0
    row: Dict[str, Any] = {"samples": n, "wait": wait, "h2d": h2d, "comm_exposed": exposed}
    if parts:
        row.update(forward=parts["forward"], backward=max(0.0, parts["backward"] - exposed), optimizer=parts["optimizer"],
                   rest=max(0.0, call - parts["forward"] - parts["backward"] - parts["optimizer"]))
    else:
        row["compute"] = max(0.0, call - exposed)
    if comm is not None and comm.buckets:
        row.update(allreduces=comm.buckets, comm_bytes=comm.bytes, comm_busy=comm.busy, last_ready=comm.last_ready)
    return row


def _nodes_cpu() -> Optional[Tuple[float, float]]:
    """On emulated nodes (bench/cluster.py): CPU seconds so far of the processes in this
    process's node, and in all of the run's nodes, each node a cpuacct cgroup named after the
    run (…-n0, -n1, ...). Read from /proc (inside a node's namespace /sys has no cgroups); a
    process that ended since the last read takes its time with it. None elsewhere."""
    def acct(pid: str) -> Optional[str]:
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                for line in f:
                    _, controllers, path = line.rstrip("\n").split(":", 2)
                    if "cpuacct" in controllers.split(","):
                        return path
        except OSError:
            pass
        return None

    mine = acct("self") or ""
    name = mine.rsplit("/", 1)[-1]
    if not name.startswith("loadscope-") or "-n" not in name:
        return None
    prefix = mine.rsplit("-n", 1)[0] + "-n"
    tick = os.sysconf("SC_CLK_TCK")
    node = every = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        path = acct(pid)
        if path is None or not path.startswith(prefix):
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        t = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        every += t
        if path == mine:
            node += t
    return node, every


def _seed_everything(seed: int = 0) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass


def make_pipeline(spec: Dict[str, Any], root: str, config: Dict[str, Any], rank: int, world: int,
                  overrides: Optional[Dict[str, Any]] = None) -> pipelines.Pipeline:
    """The arm's pipeline for one rank: the user's factory, or a built-in pipeline."""
    if "factory" in config:
        kwargs = {k: v for k, v in config.items() if k not in spec["harness_keys"]}
        kwargs.update(overrides or {})
        return pipelines.UserPipeline(config, kwargs, rank, world)
    return pipelines.make(root, config, rank, world, shards=spec.get("shards"), cache_dir=spec.get("cache_dir"))


def _storage(spec: Dict[str, Any], config: Dict[str, Any], rank: int, world: int) -> Tuple[str, Optional[Dict[str, Any]]]:
    """Where this arm reads from, after what it does first (timed): the root (a local folder or
    the object-storage prefix) and the staging record, if any. remote-cache fills a node-local
    cache (spec["cache_dir"], shared by the ranks like a node's) by reading this rank's share of
    epoch 0, so the measured phases read a warm cache, as every epoch after the first does."""
    root, storage = spec["root"], config.get("storage", "local")
    if storage in ("remote", "remote-cache"):
        if storage == "remote-cache":
            # One cache per node: on emulated nodes each node's ranks share theirs (GROUP_RANK).
            spec["cache_dir"] = os.path.join(spec["stage_dir"], "cache", f"node{os.environ.get('GROUP_RANK', '0')}")
            # A whole epoch, as in training: the measured window alone would leave the objects
            # that the measured phase's read-ahead touches beyond it cold.
            phase("filling the node-local cache (a first epoch)")
            t0, net0 = time.monotonic(), _native.network_stats()
            fill = make_pipeline(spec, spec["url"], config, rank, world)
            try:
                samples = sum(fill.count(b) for b in fill.epoch(0))
            finally:
                fill.close()
            net1 = _native.network_stats()
            return spec["url"], {"seconds": time.monotonic() - t0, "bytes": net1["bytes"] - net0["bytes"],
                                 "kind": "cache", "samples": samples * world}
        return spec["url"], None
    if storage == "remote-staged" or config.get("staging") == "local":
        dest = os.path.join(spec["stage_dir"], f"rank{rank}")
        phase("staging to local disk")
        staging = pipelines.stage(root, config["layout"], dest, src=spec["url"] if storage == "remote-staged" else None)
        return dest, dict(staging, kind="copy")
    return root, None


def _stream(pipe: pipelines.Pipeline) -> Generator[Any, None, None]:
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


def _check_batches(spec: Dict[str, Any], root: str, config: Dict[str, Any], n: int, world: int, ranks: List[int],
                   overrides: Optional[Dict[str, Any]]) -> List[tuple]:
    """(global batch index, count, ids, per-sample leaves) of the first batches of epoch 0 of
    each rank in `ranks`: at least `n` samples and two batches per rank in all."""
    from . import user

    got = []
    need: Optional[int] = None
    for r in ranks:
        # The global generators as at the start of a repetition: what the measured phases drew
        # from them (main-process augmentation, a persistent worker's seed) differs between arms.
        _seed_everything(0)
        pipe = make_pipeline(spec, root, config, r, world, overrides)
        try:
            for k, batch in enumerate(pipe.epoch(0)):
                gi = pipe.global_batch(k)
                count = pipe.count(batch)
                if need is None:  # global batches to take, from the first batch's size
                    need = max(2 * world, math.ceil(n / max(1, count)))
                if gi >= need:
                    break
                got.append((gi, count, pipe.ids(batch), [(p, user.to_tensor(x)) for p, x in user.leaves(batch, count)]))
        finally:
            pipe.close()
    return got


def check_pass(spec: Dict[str, Any], root: str, config: Dict[str, Any], mode: str, n: int, world: int,
               path: str, rank: int = 0) -> Optional[Dict[str, Any]]:
    """The first samples of epoch 0 as the arm delivers them, ranks merged in global batch
    order: at least `n` samples and two global batches. Records the ids, the structure of the
    per-sample tensors and a checksum per sample over all of them (and the tensors, for a
    tolerance comparison). For modes that compare across different augmentations, a built-in
    pipeline uses a fixed center crop; a user pipeline gets [correctness] overrides.

    A built-in pipeline takes a rank as an argument, so rank 0 reads every rank's share itself.
    A user's factory reads its rank from torch.distributed: with several ranks each takes its
    own share, and rank 0 merges the parts (returns None on the other ranks)."""
    from . import user

    c = dict(config)
    overrides = None
    if "factory" in c:
        overrides = spec.get("check_overrides") or {}
    elif mode in ("same-samples", "tolerance"):
        c.update(crop="center", flip=0.0)
    if "factory" in c and world > 1:
        import torch.distributed as dist

        torch.save(_check_batches(spec, root, c, n, world, [rank], overrides), f"{path}.rank{rank}.pt")
        dist.barrier()
        if rank != 0:
            return None
        got = []
        for r in range(world):
            got += torch.load(f"{path}.rank{r}.pt")
            os.remove(f"{path}.rank{r}.pt")
    else:
        got = _check_batches(spec, root, c, n, world, list(range(world)), overrides)
    got.sort(key=lambda t: t[0])
    total = sum(t[1] for t in got)
    keep = min(n, total) if "factory" not in c else total  # built-in: exactly n (>= two global batches)
    structures = {tuple(user.describe(lv)) for _, _, _, lv in got}
    if len(structures) > 1:
        raise ValueError(f"the arm's batches change structure between batches: {sorted(structures)}")
    structure = list(next(iter(structures))) if structures else []
    have_ids = all(ids is not None for _, _, ids, _ in got)
    ids = [i for _, _, b_ids, _ in got for i in (b_ids or [])][:keep] if have_ids else None
    sums = [user.sample_checksum(lv, i) for _, count, _, lv in got for i in range(count)][:keep]
    how = (f" with the check's factory arguments {overrides}" if overrides else "") if overrides is not None else \
        (" under a fixed center crop" if mode in ("same-samples", "tolerance") else "")
    out = {"mode": mode, "ids": ids, "checksums": sums, "structure": structure, "samples": len(sums), "how": how}
    if mode == "tolerance" and got:
        per_leaf = [torch.cat([lv[j][1] for _, _, _, lv in got])[:keep] for j in range(len(structure))]
        torch.save(per_leaf, path + ".pt")
        out["pixels"] = path + ".pt"
    with open(path, "w") as f:
        json.dump(out, f)
    return {"samples": len(sums), "path": path}


def _restart(pipe: pipelines.Pipeline, epoch: int, flip: bool = True) -> Dict[str, Any]:
    """Time to the first batch of a new epoch, twice each, as a training loop meets it.

    For a torch DataLoader with workers over a map-style dataset: the same DataLoader rebuilt
    twice, with persistent_workers as configured and the other way, each with epochs cut to a
    few batches (every worker's prefetch and two more) that end as real epochs end, so that the
    next epoch starts with idle workers (persistent) or none (not). Breaking out of an epoch
    instead would charge the persistent workers for draining the batches in flight.
    Otherwise: a fresh iterator of the pipeline after one abandoned mid-epoch (`after` says so)."""

    def first_batches(iterable_of_epoch, epochs: List[int], finish: bool) -> List[float]:
        out = []
        for e in epochs:
            t0 = time.monotonic()
            gen = iterable_of_epoch(e)
            next(gen)
            out.append(time.monotonic() - t0)
            if finish:
                for _ in gen:
                    pass
            gen.close()
        return out

    dl = getattr(pipe, "obj", None)
    if dl is not None and iter(dl) is dl:  # a generator or other one-shot iterator: there is no next epoch
        return {"new_epoch_first_batch": [], "after": "nothing: a one-shot iterator has no new epoch"}
    if not (isinstance(dl, torch.utils.data.DataLoader) and dl.num_workers > 0
            and not isinstance(dl.dataset, torch.utils.data.IterableDataset)):
        return {"new_epoch_first_batch": first_batches(pipe.epoch, [epoch, epoch + 1], finish=False),
                "after": "an abandoned epoch"}

    def measure(persistent: bool) -> Dict[str, Any]:
        short = pipelines.rebuild(dl, persistent=persistent, batches=dl.num_workers * (dl.prefetch_factor or 2) + 2)

        def epoch_of(e: int) -> Iterator[Any]:
            pipelines.set_epoch(short, e)
            it = iter(short)
            try:
                yield from it
            finally:
                del it  # a non-persistent iterator shuts its workers down here

        try:
            times = first_batches(epoch_of, [0, 1, 2], finish=True)
        finally:
            it = getattr(short, "_iterator", None)
            if it is not None and hasattr(it, "_shutdown_workers"):
                it._shutdown_workers()
        return {"persistent_workers": persistent, "cold_first_batch": times[0], "new_epoch_first_batch": times[1:]}

    mine = measure(dl.persistent_workers)
    out = {"new_epoch_first_batch": mine["new_epoch_first_batch"], "after": "an epoch that ended",
           "persistent_workers": dl.persistent_workers}
    if flip:
        out["flipped"] = measure(not dl.persistent_workers)
    return out


def run(spec: Dict[str, Any]) -> Dict[str, Any]:
    import torch.distributed as dist

    from ..telemetry import ProcessTreeSampler

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    config, step_def, plan = spec["config"], spec["step"], spec["run"]
    user_pipeline = "factory" in config
    if spec.get("repo") and spec["repo"] not in sys.path:
        sys.path.insert(0, spec["repo"])
    if world != config["world_size"]:
        raise RuntimeError(f"world_size={config['world_size']} but {world} processes were started")
    if world > 1:
        dist.init_process_group("nccl" if user_pipeline and torch.cuda.is_available() else "gloo")
    # The consumer's own torch ops (the model step) use one thread: the loader's threads are
    # the factor under study, and torch's default (all cores) would blur every comparison.
    # The user's step keeps torch's default: it is the user's training as it runs.
    if not (user_pipeline and step_def["compute"] == "user"):
        torch.set_num_threads(1)
    _seed_everything(0)
    # PSS costs ~3.5 ms per process to read (smaps): every 0.5 s that is under 1% of a core
    # per process, small enough not to tilt the arms (a DataLoader arm has more processes).
    sampler = ProcessTreeSampler(0.5, lambda: None, history=True)
    t_start = time.monotonic()
    net_start = _native.network_stats()
    root, staging = _storage(spec, config, rank, world)
    if world > 1:
        dist.barrier()

    # Counts are global samples; every rank takes the same number of batches, as data-parallel
    # training must (a rank with one step more would wait in its all-reduce forever). A user
    # pipeline's batch size is known from its first batch.
    t_make = time.monotonic()
    phase("making the pipeline (the factory)" if user_pipeline else "making the pipeline")
    pipe = make_pipeline(spec, root, config, rank, world)
    # Experiments with a GPU arm hand every arm's batches to the GPU, so that the arms differ
    # only in the factor: a CPU batch is copied (pageable, synchronous) inside the wait.
    to_gpu = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if spec.get("cuda") and not user_pipeline else None
    if step_def["compute"] == "user":
        phase("the step's setup")
    step: Any = _UserStep(step_def, rank, world) if step_def["compute"] == "user" else _Step(step_def, world, to_gpu)
    it = _stream(pipe)
    first_batch: Optional[float] = None
    bytes_per_sample: Optional[float] = None  # what one sample of a batch holds: what a link would carry
    first: List[Any] = []  # the first batch, held until the measured phases draw it
    bs = config.get("batch_size")
    if bs is None:
        first.append(next(it))
        first_batch = time.monotonic() - t_make
        bs = max(1, pipe.count(first[0]))

    def batches_for(n: int) -> int:
        return max(1, math.ceil(n / (bs * world)))

    cuda = to_gpu is not None or pipe.device is not None or step.uses_cuda

    def take(batches: int, compute: bool, ids: Optional[List[str]] = None, step_times: Optional[List[float]] = None,
             cpu: Optional[Dict[str, float]] = None, parts: Optional[List[Dict[str, Any]]] = None):
        """Draws `batches` batches: (samples, seconds, waits, compute seconds, timeline). The
        phase's clock stops after the GPU has finished its copies (and compute). With `cpu`,
        fills in the CPU time of the process tree over the phase and the wall time of the
        window that CPU time was read over (Note [the CPU window]). With `parts`, appends each
        step taken apart (step_parts)."""
        nonlocal first_batch, bytes_per_sample
        waits, timeline, done, busy = [], [], 0, 0.0
        if cuda:
            torch.cuda.synchronize()
        # Note [the CPU window]
        # CPU time is read before the phase's clock starts and after it stops, and the window
        # reported with it encloses both reads: CPU time can then never exceed the cores times
        # that window. Reading it around other work (memory sampling took tens of ms of smaps
        # walking while the workers went on prefetching) once reported 2.2 cores busy of 2.
        w0 = time.monotonic()
        cpu0 = tree_cpu_seconds() if cpu is not None else 0.0
        t0 = time.monotonic()
        for _ in range(batches):
            a = time.monotonic()
            batch = first.pop() if first else next(it)
            n = pipe.count(batch)
            if bytes_per_sample is None and n:
                bytes_per_sample = _tensor_bytes(batch) / n
            if ids is not None:
                got = pipe.ids(batch)
                if got is not None:
                    ids.extend(got)
            a2 = time.monotonic()
            if to_gpu is not None and not batch[0].is_cuda:
                batch = (batch[0].to(to_gpu), batch[1].to(to_gpu), batch[2])
            b = time.monotonic()
            if first_batch is None:
                first_batch = b - t_make
            waits.append(b - a)
            if compute:
                step(batch)
                c = time.monotonic()
                busy += c - b
                if step_times is not None:
                    step_times.append(c - b)
                comm = step.comm.take() if step.comm is not None else None  # drained every step, kept when asked
                if parts is not None:
                    parts.append(step_parts(a2 - a, b - a2, c - b, step.parts, comm, n))
            done += n
            timeline.append((time.monotonic() - t0, done))
        if cuda:
            torch.cuda.synchronize()
        elapsed = time.monotonic() - t0
        if cpu is not None:
            cpu["seconds"] = tree_cpu_seconds() - cpu0
            cpu["window"] = time.monotonic() - w0
        sampler.sample()  # memory at the end of every phase (outside its time), whatever the interval
        return done, elapsed, waits, busy, timeline

    phase("the pipeline phase (next() on the pipeline)")
    if plan["warmup_samples"]:
        take(batches_for(plan["warmup_samples"]), False)
    if world > 1:
        dist.barrier()
    io0, machine0, net0, nodes0 = _tree_io(), machine_cpu(), _native.network_stats(), _nodes_cpu()
    measured_ids: List[str] = []
    cpu: Dict[str, float] = {}
    n, secs, waits, _, timeline = take(batches_for(plan["samples"]), False, measured_ids, cpu=cpu)
    io1, machine1, net1, nodes1 = _tree_io(), machine_cpu(), _native.network_stats(), _nodes_cpu()
    if world > 1:
        # A rank that finished its pipeline phase first would start the step's warm-up (the
        # model's forward and backward) inside the others' measured windows: their "rest of the
        # machine" would count it. It waits here instead, blocked, not spinning.
        dist.barrier()
    waits.sort()
    result: Dict[str, Any] = {
        "rank": rank, "world": world, "samples": n, "seconds": secs, "throughput": n / secs,
        "latency_p50": _percentile(waits, 0.5) * 1e3, "latency_p99": _percentile(waits, 0.99) * 1e3,
        "batches": len(waits), "batch_size": bs, "cpu_seconds": cpu["seconds"], "cpu_per_sample": cpu["seconds"] / n * 1e3,
        "cpu_window": cpu["window"],  # the wall time enclosing the CPU reads: cpu_seconds / it <= the cores
        "read_chars": io1["read_chars"] - io0["read_chars"], "read_bytes": io1["read_bytes"] - io0["read_bytes"],
        # Object storage, this process (its loader's fetch threads): what the measured phase fetched.
        "network_bytes": net1["bytes"] - net0["bytes"], "network_requests": net1["requests"] - net0["requests"],
        "network_bytes_run": net1["bytes"] - net_start["bytes"],  # with staging, cache fill and warm-up
        "network_requests_run": net1["requests"] - net_start["requests"],
        "node": int(os.environ.get("GROUP_RANK", 0)),
        "first_batch": first_batch, "timeline": _thin(timeline), "measured_ids": measured_ids,
        "bytes_per_sample": bytes_per_sample,
        "staging_seconds": staging["seconds"] if staging else None, "staging": staging,
        # The rest of the machine while this repetition measured (other ranks are in "own"
        # only for themselves: their CPU counts as others' here, so read rank 0's with care).
        # This run's own: on emulated nodes every process of its nodes (Ray's included); else
        # its process tree (a Ray the rank started itself is in it).
        "machine": machine_load(machine0, machine1, nodes1[1] - nodes0[1] if nodes0 and nodes1 else cpu["seconds"],
                                secs),
    }
    if nodes0 and nodes1:
        result["machine"]["own_is_nodes"] = True  # every rank's CPU is in it already
        # This rank's whole node (Ray's head and object transfer included), and the run's other
        # nodes (with a pool: the CPU nodes' workers and raylets).
        result["node_cpu_per_sample"] = (nodes1[0] - nodes0[0]) / n * 1e3
        result["other_nodes_cpu_per_sample"] = ((nodes1[1] - nodes1[0]) - (nodes0[1] - nodes0[0])) / n * 1e3
    if step_def["compute"] != "none":
        phase("the end-to-end phase (next() and the step)")
        # Whole optimizer steps: the warm-up ends on a boundary, and with accumulation it holds two
        # synchronised steps (DDP rebuilds its buckets after the first); the measured phase
        # holds whole accumulation cycles, so that its all-reduces per sample are the cycle's.
        accum = step_def["grad_accum"]
        warm = max(1, batches_for(plan["warmup_samples"]) // 4)
        take(accum * max(2 if accum > 1 else 1, math.ceil(warm / accum)), True)
        if world > 1:
            dist.barrier()
        if cuda:
            step.gpu_step_seconds()  # drop the warm-up's
        step_times: List[float] = []
        parts: List[Dict[str, Any]] = []
        n2, secs2, waits2, busy2, timeline2 = take(accum * math.ceil(batches_for(plan["samples"]) / accum), True,
                                                   step_times=step_times, parts=parts)
        result["step_parts"] = parts
        wait2 = sum(waits2)
        step_times.sort()
        result.update(e2e_samples=n2, e2e_seconds=secs2, e2e_throughput=n2 / secs2,
                      data_wait_share=wait2 / (wait2 + busy2) if wait2 + busy2 else None, e2e_timeline=_thin(timeline2),
                      step_time_p50=_percentile(step_times, 0.5) * 1e3, step_time_p99=_percentile(step_times, 0.99) * 1e3,
                      step_time_max=step_times[-1] * 1e3)
        if step.uses_cuda:  # take() synchronised: every event has completed
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
    result["processes"] = sampler.peaks()
    result["telemetry"] = pipe.telemetry()
    if isinstance(pipe, pipelines.UserPipeline):
        result["pipeline"] = pipelines.describe(pipe.obj)
        result["has_ids"] = bool(measured_ids)
    if spec.get("check") and isinstance(step, _Step) and step.kind == "model" and step.accum > 1:
        phase("the gradient accumulation check")
        result["grad_check"] = accumulation_check(step, [next(it) for _ in range(step.accum)])
    it.close()  # ends the epoch in progress (a non-persistent DataLoader's workers stop here)
    if spec.get("restart"):  # "baseline": both ways; "own": as configured (an experiment's metric)
        phase("the new-epoch measurement")
        result["restart"] = _restart(pipe, 1_000, flip=spec["restart"] != "own")
        times = result["restart"]["new_epoch_first_batch"]
        result["new_epoch_first_batch"] = min(times) if times else None
    pipe.close()
    it = pipe = None  # type: ignore[assignment]  # released before the check pass (its own pipelines)
    if spec.get("cache_dir"):
        if world > 1:
            dist.barrier()  # every rank of the node done with its cache
        # What the node's cache holds: each object it fetched, once (the fetch counters of its
        # ranks are compared with this in the report).
        result["cache_bytes"] = sum(os.path.getsize(os.path.join(spec["cache_dir"], f)) for f in os.listdir(spec["cache_dir"])
                                    if not f.endswith((".etag", ".lock")) and ".partial" not in f and not f.startswith("."))

    if spec.get("check") and (rank == 0 or user_pipeline):
        phase("the correctness pass")
        done = check_pass(spec, root, config, spec["check"]["mode"], spec["check"]["samples"], world,
                          spec["check"]["path"], rank)
        if done is not None:
            result["check"] = done
    if rank == 0 and spec.get("trace") and config.get("loader") == "loadscope":
        tp = pipelines.make(root, dict(config, world_size=1), 0, 1, shards=spec.get("shards"),
                            cache_dir=spec.get("cache_dir"))
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


def explain(e: BaseException) -> str:
    """What the runner shows of an exception: for an error in the user's code, the user's own
    frames (the harness's are left out: they only hide it; the whole traceback is in the
    repetition's log); for a returned value the harness cannot use, the message alone; for an
    error inside loadscope, everything."""
    from .._errors import ConfigError

    if isinstance(e, (pipelines.UserCodeError, ConfigError)):
        return f"{type(e).__name__}: {e}\n"
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = traceback.extract_tb(e.__traceback__)
    user = [f for f in frames if not os.path.abspath(f.filename).startswith(package + os.sep)]
    if not user:
        return "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return ("Traceback of your code (most recent call last; loadscope's own frames left out, the whole traceback "
            "is in the repetition's log):\n" + "".join(traceback.format_list(user))
            + "".join(traceback.format_exception_only(type(e), e)))


def _dump_stacks_on_sigusr1() -> None:
    """The runner sends SIGUSR1 to a repetition that ran out of time before it kills it: every
    thread's Python stack goes to the log, which says where it hung."""
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)


def phase(name: str) -> None:
    """Marks the phase in the log (the runner names it when a repetition times out)."""
    print(f"loadscope-phase: {name}", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _dump_stacks_on_sigusr1()
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
        traceback.print_exc()  # the whole of it, into the repetition's log
        result = {"error": f"{type(e).__name__}: {e}", "traceback": explain(e), "rank": rank}
        code = 1
    with open(out, "w") as f:
        json.dump(result, f)
    return code


if __name__ == "__main__":
    sys.exit(main())
