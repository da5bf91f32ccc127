"""The gradient all-reduce of a DistributedDataParallel model, timed bucket by bucket.

    timer = loadscope.telemetry.CommTimer(ddp_model)   # before the first backward
    ...
    loss.backward()                                    # DDP all-reduces the gradients' buckets
    step = timer.take()                                # this backward's buckets: see StepComm

Note [how the all-reduce is timed]
DDP hands each gradient bucket to a communication hook as soon as the bucket's last gradient is
computed, and backward() returns only when every bucket's future has completed. CommTimer
registers a hook that does what DDP's default does (divide by the world size, all-reduce, on
the model's process group) and adds two clock reads: when the bucket was handed over (`ready`)
and when its future completed (`end`, in the future's callback). From those:
  - busy: the union of the buckets' [ready, end] intervals: time with an all-reduce in flight;
  - exposed: from the last bucket's `ready` (the end of backward's compute: the last bucket
    holds the first layers' gradients, computed last) to the last `end`: the time backward()
    spent waiting for the network, which overlap did not hide;
  - hidden: busy minus exposed.
An all-reduce is a rendezvous: a bucket's time includes waiting for the slowest rank to hand
over the same bucket. Across ranks (one host: one monotonic clock) that share is known
(`straggler_wait`, bench/scaling.py) and reported apart from the network's time.

Why a hook rather than the alternatives: torch.profiler records every op of every rank, costs
time on every op and leaves a trace per rank to parse; DDP's logging data
(`_get_ddp_logging_data`) samples its compute/communication times every few iterations only and
has no per-bucket bytes. The hook sees every bucket of every step, on gloo and NCCL alike, for
the price of two clock reads and one Python callback per bucket. What it changes: DDP's
built-in all-reduce runs in C++ without the GIL; the hook's callback takes the GIL for a few
microseconds per bucket. On a GPU (NCCL) the host clock sees when the collective was enqueued
and when its future completed, which is the GPU's completion as the host observes it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple


@dataclass
class StepComm:
    """One backward's all-reduce, on the timer's clock (seconds; `ready`/`end` absolute)."""

    buckets: int = 0
    bytes: int = 0
    busy: float = 0.0
    exposed: float = 0.0
    first_ready: Optional[float] = None
    last_ready: Optional[float] = None
    last_end: Optional[float] = None

    @property
    def hidden(self) -> float:
        return max(0.0, self.busy - self.exposed)


def summarize(intervals: List[Tuple[float, float, int]]) -> StepComm:
    """StepComm of one backward's buckets: (ready, end, bytes) each."""
    if not intervals:
        return StepComm()
    busy, cur_start, cur_end = 0.0, None, None
    for ready, end, _ in sorted(intervals):
        if cur_end is None or ready > cur_end:
            if cur_end is not None:
                busy += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = ready, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start  # type: ignore[operator]
    last_ready = max(r for r, _, _ in intervals)
    last_end = max(e for _, e, _ in intervals)
    return StepComm(buckets=len(intervals), bytes=sum(b for _, _, b in intervals), busy=busy,
                    exposed=max(0.0, last_end - last_ready), first_ready=min(r for r, _, _ in intervals),
                    last_ready=last_ready, last_end=last_end)


class CommTimer:
    """Times every bucket all-reduce of `ddp` (a torch.nn.parallel.DistributedDataParallel),
    through a communication hook registered now (DDP allows one hook, registered before the
    first backward). `take()` returns what the backward passes since the last call
    all-reduced; a backward under `no_sync()` all-reduces nothing."""

    def __init__(self, ddp: Any, clock: Callable[[], float] = time.monotonic) -> None:
        import torch.distributed as dist

        if not hasattr(ddp, "register_comm_hook"):
            raise TypeError(f"CommTimer times a DistributedDataParallel model; got {type(ddp).__name__}")
        self.clock = clock
        self.group = getattr(ddp, "process_group", None)
        self.world = dist.get_world_size(self.group)
        self._lock = threading.Lock()  # futures complete on the backend's threads
        self._done: List[Tuple[float, float, int]] = []
        self.total_buckets = 0
        ddp.register_comm_hook(self, _timed_allreduce)

    def _record(self, ready: float, end: float, nbytes: int) -> None:
        with self._lock:
            self._done.append((ready, end, nbytes))
            self.total_buckets += 1

    def take(self) -> StepComm:
        """The buckets completed since the last call, summarized (call after backward())."""
        with self._lock:
            got, self._done = self._done, []
        return summarize(got)


def _timed_allreduce(state, bucket):  # type: ignore[no-untyped-def]
    """DDP's default hook (allreduce_hook: divide, all-reduce, return the buffer), timed. (No
    annotations: DDP accepts a hook's `bucket` annotated as dist.GradBucket or not at all, and
    this module's annotations are strings.)"""
    import torch.distributed as dist

    ready = state.clock()
    tensor = bucket.buffer()
    nbytes = tensor.numel() * tensor.element_size()
    tensor.div_(state.world)
    fut = dist.all_reduce(tensor, group=state.group, async_op=True).get_future()

    def done(f: Any) -> Any:
        state._record(ready, state.clock(), nbytes)
        return f.value()[0]

    return fut.then(done)
