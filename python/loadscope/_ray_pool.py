"""The trainer's side and the workers' side of ``loadscope.ray.Workers`` (ray.py): Ray actors
that make a rank's batches from its spec, and the epoch that asks them for batch after batch in
order. Ray is imported only here, and only when a pool is used."""

from __future__ import annotations

import os
import pickle
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import torch

from ._errors import BatchTimeout, ConfigError
from ._position import Position
from .ray import Workers, WorkersLost

if TYPE_CHECKING:  # pragma: no cover
    from ._loader import Loader


def require_ray():
    """The ray module, or a ConfigError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("workers=ls.ray.Workers(...) needs Ray: pip install 'loadscope[ray]'") from None
    return ray


def start_actors(pool: Workers, count: int) -> List[Any]:
    """`count` new actors of `pool` (Ray places them; they start when a node has room)."""
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=pool.address or os.environ.get("RAY_ADDRESS") or None,
                 include_dashboard=False, log_to_driver=False, configure_logging=False)
    # Ray's own zero-copy path for torch tensors (a uint8 view of each tensor's bytes, never a
    # pickle of its storage) is switched on where batches are serialised: in the workers.
    options = dict(num_cpus=pool.cpus_per_worker, resources=dict(pool.resources or {}), max_restarts=0,
                   runtime_env={"env_vars": {"RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1"}})
    global _worker_class
    if _worker_class is None:
        _worker_class = ray.remote(_Worker)
    return [_worker_class.options(**options).remote() for _ in range(count)]


_worker_class: Any = None


def placed(pool: Workers, actors: List[Any]) -> List[Any]:
    """`actors` once Ray has placed and started every one, within the pool's wait; else they are
    ended and the error says what was asked for and what the cluster has free."""
    ray = require_ray()
    ready, _ = ray.wait([a.where.remote() for a in actors], num_returns=len(actors), timeout=pool.wait)
    if len(ready) == len(actors):
        return actors
    for a in actors:
        ray.kill(a)
    asked = {"CPU": pool.cpus_per_worker, **dict(pool.resources or {})}
    raise WorkersLost(f"{len(actors) - len(ready)} of {len(actors)} workers could not be placed within wait={pool.wait:g} s: each asks for {asked}; the cluster has "
                      f"free {ray.available_resources()}")


class _Worker:
    """One Ray actor: loaders of the specs it is given (one per stream it makes: a stream is a
    rank's share of an epoch, or what a dead worker owed of it) and the streams' iterations."""

    def __init__(self) -> None:
        self._streams: Dict[int, Any] = {}       # stream -> (its iteration, its Position)
        self._loaders: Dict[bytes, List[Any]] = {}  # a spec (pickled: specs are not hashable) -> loaders

    def where(self) -> Dict[str, Any]:
        import ray
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    def start(self, stream: int, loader_cls: Any, spec: Any, epoch: int, worker: int, workers: int,
              start: int) -> int:
        """Starts making batches `start`, ... of the rank's epoch that are worker `worker`'s of
        `workers` (j % workers == worker)."""
        busy = {id(it._owner) for it, _ in self._streams.values()}
        mine = self._loaders.setdefault(pickle.dumps(spec), [])
        free = [L for L in mine if id(L) not in busy]
        loader = free[0] if free else loader_cls(spec)  # a loader runs one epoch at a time
        if not free:
            mine.append(loader)
        position = Position()
        self._streams[stream] = (loader._start_run(epoch, start, worker, workers, position), position)
        return os.getpid()

    def next(self, stream: int) -> Optional[Dict[str, Any]]:
        """The stream's next batch (its entries as the loader makes them, before output=,
        device= and map=, which the trainer applies), or None at its end."""
        it, _ = self._streams[stream]
        try:
            return next(it)
        except StopIteration:
            return None

    def stop(self, stream: int) -> Dict[str, Any]:
        """Ends the stream; its counters (skipped samples, failures)."""
        it, position = self._streams.pop(stream, (None, None))
        if it is None:
            return {}
        it.close()
        return dict(position.last_stats)


class RayEpoch:
    """One epoch of a rank through a pool, as the trainer sees it: batch j is asked of worker
    j % n (at most `in_flight` ahead per worker) and handed out in order."""

    def __init__(self, owner: "Loader", pool: Workers, epoch: int, resume: int, *, position: Any, batches: Any,
                 timeout: float, loop: Any) -> None:
        self._owner, self._pool, self.epoch = owner, pool, epoch
        self._position, self._batches, self._timeout, self._loop = position, batches, timeout, loop
        self.delivered = self._start_delivered = resume
        self._ray = require_ray()
        # Workers make the batch, the trainer its form: output=, device= and map= stay here.
        # A worker's threads: the cores it reserved, unless the spec says (None would be the
        # whole node's cores, which Ray does not reserve for one actor).
        threads = owner.spec.threads if owner.spec.threads is not None else max(1, round(pool.cpus_per_worker))
        self._spec = owner.spec.replace(rank=owner.rank, world_size=owner.world_size, workers="local",
                                        device=None, map=None, output="dict", threads=threads)
        n = pool.n
        # Several loaders (ranks of one process) given one pool share its actors.
        self._actors = pool._pool.setdefault("actors", [])
        if not self._actors:
            self._actors.extend(placed(pool, start_actors(pool, n)))
        self._alive = [True] * len(self._actors)
        self._dead: List[str] = []
        self._serving = list(range(n))   # stream w is made by actor _serving[w]
        self._queues: List[List[Any]] = [[] for _ in range(n)]  # refs of requested batches, in order
        self._stream_ids = [0] * n
        self._next_id = 0
        self._ended = self._finished = self._failed = False
        self._stats: Dict[str, Any] = {"remade_batches": 0, "workers_lost": 0}
        for w in range(n):
            self._start_stream(w)

    # --- the streams --------------------------------------------------------------------------

    def _start_stream(self, w: int) -> None:
        """(Re)starts stream w on its actor from the first of its batches not handed out."""
        self._next_id += 1
        self._stream_ids[w] = self._next_id
        actor = self._actors[self._serving[w]]
        actor.start.remote(self._next_id, type(self._owner), self._spec, self.epoch, w, self._pool.n, self.delivered)
        self._queues[w] = [actor.next.remote(self._next_id) for _ in range(self._pool.in_flight)]

    def _lost(self, w: int, error: BaseException) -> None:
        """Stream w's actor died: every stream it served moves to a live actor, from the first
        batch not handed out; what it owed is made again."""
        dead = self._serving[w]
        if self._alive[dead]:
            self._alive[dead] = False
            self._stats["workers_lost"] += 1
            self._dead.append(f"worker {dead}: {str(error).splitlines()[0][:300]}")
        for s in range(self._pool.n):
            if self._serving[s] != dead:
                continue
            self._stats["remade_batches"] += len(self._queues[s])
            live = [a for a in range(len(self._actors)) if self._alive[a]]
            if not live:
                live = self._replace_all()
            self._serving[s] = live[s % len(live)]
            self._start_stream(s)

    def _replace_all(self) -> List[int]:
        """No worker left: new ones, those Ray places within the pool's wait (the others, if
        placed later, serve later)."""
        fresh = start_actors(self._pool, self._pool.n)
        refs = [a.where.remote() for a in fresh]
        ready, _ = self._ray.wait(refs, num_returns=1, timeout=self._pool.wait)
        if not ready:
            for a in fresh:
                self._ray.kill(a)
            raise WorkersLost(f"every remote worker died and none could be placed again within "
                              f"wait={self._pool.wait:g} s; lost: " + "; ".join(self._dead))
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)  # all placed by now
        base = len(self._actors)
        self._actors.extend(fresh)
        self._alive.extend([True] * len(fresh))
        return [base + i for i, r in enumerate(refs) if r in ready]

    # --- the iteration ------------------------------------------------------------------------

    def __iter__(self) -> "RayEpoch":
        return self

    def __len__(self) -> int:
        return len(self._owner)

    def __next__(self):
        if self._ended:
            raise StopIteration
        enter = time.monotonic_ns()
        w = self.delivered % self._pool.n
        while True:
            ref = self._queues[w][0]
            try:
                wait = self._timeout if self._timeout else None
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the object store's buffers are read-only: copied below
                    got = self._ray.get(ref, timeout=wait)
                break
            except self._ray.exceptions.GetTimeoutError:
                raise BatchTimeout(f"no batch within timeout={self._timeout:g} s: batch {self.delivered} of this "
                                   f"rank's epoch {self.epoch}, from remote worker {self._serving[w]}") from None
            except self._ray.exceptions.RayActorError as e:
                self._lost(w, e)
            except self._ray.exceptions.RayTaskError as e:
                self._failed = True
                self.close()
                raise e.cause if isinstance(e.cause, BaseException) else e from None
        self._queues[w].pop(0)
        if got is None:
            self._finished = True
            self.close()
            raise StopIteration
        index = self._owner._epoch_batch(self.delivered)  # the epoch's batch: what map= draws from
        actor = self._actors[self._serving[w]]
        self._queues[w].append(actor.next.remote(self._stream_ids[w]))
        self.delivered += 1
        self._position.delivered(self.epoch, self.delivered)
        batch = {k: v.clone() if isinstance(v, torch.Tensor) and self._batches.transfer is None else v
                 for k, v in got.items()}
        out = self._batches.finish(batch)
        if self._batches.map is not None:
            out = self._batches.apply_map(out, self.epoch, index)
        if self._loop is not None:
            now = time.monotonic_ns()
            self._loop.delivered(enter, now, now, index)
        return out

    def stats(self) -> Dict[str, Any]:
        return dict(self._stats, batches=self.delivered - self._start_delivered)

    def _supersede(self) -> None:
        self.close()

    def close(self) -> None:
        if self._ended:
            return
        self._ended = True
        skipped: List[Any] = []
        for w in range(self._pool.n):
            a = self._serving[w]
            if not self._alive[a]:
                continue
            try:
                s = self._ray.get(self._actors[a].stop.remote(self._stream_ids[w]), timeout=self._pool.wait)
                skipped += s.get("skipped", [])
                for k in ("failures", "samples"):
                    self._stats[k] = self._stats.get(k, 0) + s.get(k, 0)
            except Exception:  # a worker that died after the last batch: nothing owed
                pass
        self._stats["skipped"] = skipped
        gave_nothing = self.delivered == self._start_delivered and not self._finished and not self._failed
        self._position.closed(self.epoch, self._start_delivered, gave_nothing, self.stats())

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass
