"""The trainer's side and the workers' side of ``loadscope.ray.Workers`` (ray.py): Ray actors
that make a rank's batches from its spec, and the epoch that asks them for batch after batch in
order. Ray is imported only here, and only when a pool is used."""

from __future__ import annotations

import itertools
import os
import pickle
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

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


def placed(pool: Workers, actors: List[Any]) -> List[Dict[str, Any]]:
    """Where each of `actors` runs, once Ray has placed and started every one within the pool's
    wait; else they are ended and the error says what was asked for and what the cluster has free."""
    ray = require_ray()
    refs = [a.where.remote() for a in actors]
    ready, _ = ray.wait(refs, num_returns=len(actors), timeout=pool.wait)
    if len(ready) == len(actors):
        return ray.get(refs)
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
        self._tracing: Optional[int] = None        # max spans while a trace is recorded

    def where(self) -> Dict[str, Any]:
        import ray
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    def telemetry(self) -> List[Dict[str, Any]]:
        """Each of its loaders' counters (a loader per spec it was given): samples, batches,
        CPU, and the stages' latencies."""
        out = []
        for loaders in self._loaders.values():
            for L in loaders:
                d = L.telemetry().to_dict()
                out.append({"samples": d["samples"], "batches": d["batches"], "active_seconds": d["active_seconds"],
                            "cpu_seconds": d["cpu"]["user"] + d["cpu"]["system"], "stages": d["stages"],
                            "failures": d["failures"]})
        return out

    def start_trace(self, max_spans: int) -> None:
        """Records the spans of its loaders, those it makes later included, until stop_trace."""
        self._tracing = max_spans
        for L in self._all():
            L._telemetry.pipeline.take_spans()
            L._telemetry.pipeline.set_tracing(True, max_spans)

    def stop_trace(self) -> List[Any]:
        """Its loaders' spans since start_trace: (thread role, spans) pairs, on its monotonic clock."""
        self._tracing = None
        out: List[Any] = []
        for L in self._all():
            L._telemetry.pipeline.set_tracing(False)
            out += L._telemetry.pipeline.take_spans()
        return out

    def clock(self) -> int:
        return time.monotonic_ns()

    def _all(self) -> List[Any]:
        return [L for loaders in self._loaders.values() for L in loaders]

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
            if self._tracing:
                loader._telemetry.pipeline.set_tracing(True, self._tracing)
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


class PoolState:
    """A pool's actors as the trainer process knows them (shared by the loaders, ranks and
    epochs that use the pool): which live, where they run, what died, and the trainer's side of
    the traffic, for ``loader.telemetry()["workers"]``."""

    def __init__(self, pool: Workers) -> None:
        self.pool = pool
        self.actors: List[Any] = []
        self.alive: List[bool] = []
        self.where: List[Optional[Dict[str, Any]]] = []
        self.dead: List[str] = []
        self.lost = self.remade = 0
        self.received = {"batches": 0, "samples": 0, "bytes": 0}
        self.wait_ns = self.transfer_ns = 0       # waiting for a batch to be made; pulling it here
        self.depth_sum = self.depth_n = 0         # requests outstanding, sampled at each batch
        self.per_actor: Dict[int, Dict[str, int]] = {}
        self.answers: Dict[int, Any] = {}         # each worker's last telemetry, and when it was asked
        self.asked_at = -1e9
        self.tracing: Optional[int] = None         # max spans while the trainer records a trace

    def start(self) -> None:
        if not self.actors:
            actors = start_actors(self.pool, self.pool.n)
            self.add(actors, placed(self.pool, actors))

    def add(self, actors: List[Any], where: Sequence[Optional[Dict[str, Any]]]) -> List[int]:
        if self.tracing:  # a worker started while a trace is recorded is in it too
            for a in actors:
                a.start_trace.remote(self.tracing)
        base = len(self.actors)
        self.actors += actors
        self.alive += [True] * len(actors)
        self.where += where
        return list(range(base, len(self.actors)))

    def start_trace(self, max_spans: int) -> None:
        self.tracing = max_spans  # workers not started yet are told when they are (add)
        live = self.live()
        if live:
            require_ray().wait([self.actors[a].start_trace.remote(max_spans) for a in live], num_returns=len(live),
                               timeout=self.pool.wait)

    def stop_trace(self) -> List[Any]:
        """Every live worker's spans as rows of the trainer's trace ("worker 0: decode 1", ...),
        moved onto this process's clock: each worker's offset is estimated by a round trip (its
        clock read half-way), the shortest of three, which on another machine is right to within
        half that trip."""
        ray = require_ray()
        self.tracing = None
        rows: List[Any] = []
        for a in self.live():
            actor = self.actors[a]
            try:
                spans = ray.get(actor.stop_trace.remote(), timeout=self.pool.wait)  # after its queued batches
                probes = []
                for _ in range(3):
                    t0 = time.monotonic_ns()
                    theirs = ray.get(actor.clock.remote(), timeout=self.pool.wait)
                    t1 = time.monotonic_ns()
                    probes.append((t1 - t0, theirs - (t0 + t1) // 2))
                offset = min(probes)[1]
            except Exception:  # died or did not answer: its rows are missing, the trace is not
                continue
            for role, got in spans:
                rows.append((f"worker {a}: {role}", [(n, start - offset, dur, arg) for n, start, dur, arg in got]))
        return rows

    def live(self) -> List[int]:
        return [a for a in range(len(self.actors)) if self.alive[a]]

    def died(self, a: int, error: BaseException) -> None:
        if self.alive[a]:
            self.alive[a] = False
            self.lost += 1
            self.dead.append(f"worker {a}: {str(error).splitlines()[0][:300]}")

    def section(self) -> Dict[str, Any]:
        """The snapshot's ``workers`` section: the pool, the trainer's side, each worker's own
        counters (asked of it now; a worker that does not answer within the pool's wait is
        listed without them)."""
        ray = require_ray()
        live = self.live()
        # A round trip to every worker: at most once a second (a snapshot may be taken every step).
        if time.monotonic() - self.asked_at >= 1.0:
            self.asked_at = time.monotonic()
            refs = {a: self.actors[a].telemetry.remote() for a in live}
            ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.pool.wait) if refs else ([], [])
            for a, ref in refs.items():
                if ref in ready:
                    try:
                        self.answers[a] = ray.get(ref)
                    except Exception:  # died just now: listed with what it said last
                        pass
        answers = self.answers
        per_worker = []
        nodes: Dict[str, Dict[str, float]] = {}
        for a in range(len(self.actors)):
            where = self.where[a] or {}
            own = answers.get(a, [])
            delivered = self.per_actor.get(a, {"batches": 0, "samples": 0})
            row = {"worker": a, "alive": self.alive[a], "node": where.get("node"), "pid": where.get("pid"),
                   "delivered_batches": delivered["batches"], "delivered_samples": delivered["samples"],
                   "made_samples": sum(x["samples"] for x in own), "cpu_seconds": sum(x["cpu_seconds"] for x in own),
                   "active_seconds": max((x["active_seconds"] for x in own), default=0.0),
                   "stages": own[0]["stages"] if len(own) == 1 else [x["stages"] for x in own]}
            per_worker.append(row)
            node = nodes.setdefault(str(where.get("node")), {"workers": 0, "samples": 0, "cpu_seconds": 0.0})
            node["workers"] += 1
            node["samples"] += row["made_samples"]
            node["cpu_seconds"] += row["cpu_seconds"]
        r = self.received
        return {"n": self.pool.n, "in_flight_limit": self.pool.n * self.pool.in_flight, "alive": len(live),
                "lost": self.lost, "remade_batches": self.remade, "lost_notes": list(self.dead),
                "received_batches": r["batches"], "received_samples": r["samples"], "received_bytes": r["bytes"],
                "bytes_per_sample": r["bytes"] / r["samples"] if r["samples"] else None,
                "wait_seconds": self.wait_ns * 1e-9, "transfer_seconds": self.transfer_ns * 1e-9,
                "in_flight_mean": self.depth_sum / self.depth_n if self.depth_n else None,
                "cpu_seconds_per_sample": (sum(w["cpu_seconds"] for w in per_worker)
                                           / max(1, sum(w["made_samples"] for w in per_worker))),
                "per_worker": per_worker, "per_node": nodes}


def pool_state(pool: Workers) -> PoolState:
    """The pool's state in this process (made on first use; a pickled pool starts afresh)."""
    state = pool._pool.get("state")
    if state is None:
        state = pool._pool["state"] = PoolState(pool)
    return state


_stream_ids = itertools.count(1)


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
        # Several loaders (ranks of one process) and epochs given one pool share its actors.
        self._state = state = pool_state(pool)
        state.start()
        live = state.live() or self._replace_all()
        self._serving = [live[w % len(live)] for w in range(n)]  # stream w is made by this actor
        self._queues: List[List[Any]] = [[] for _ in range(n)]  # refs of requested batches, in order
        self._stream_ids = [0] * n
        self._ended = self._finished = self._failed = False
        self._stats: Dict[str, Any] = {"remade_batches": 0, "workers_lost": 0}
        for w in range(n):
            self._start_stream(w)

    # --- the streams --------------------------------------------------------------------------

    def _start_stream(self, w: int) -> None:
        """(Re)starts stream w on its actor from the first of its batches not handed out."""
        # Unique in this process, so on every actor: loaders, ranks and epochs share actors.
        self._stream_ids[w] = sid = next(_stream_ids)
        actor = self._state.actors[self._serving[w]]
        actor.start.remote(sid, type(self._owner), self._spec, self.epoch, w, self._pool.n, self.delivered)
        self._queues[w] = [actor.next.remote(sid) for _ in range(self._pool.in_flight)]

    def _lost(self, w: int, error: BaseException) -> None:
        """Stream w's actor died: every stream it served moves to a live actor, from the first
        batch not handed out; what it owed is made again."""
        dead = self._serving[w]
        if self._state.alive[dead]:
            self._stats["workers_lost"] += 1
            try:  # gone with its node, or (a batch lost, the actor not) ended here: its CPUs back
                self._ray.kill(self._state.actors[dead])
            except Exception:
                pass
        self._state.died(dead, error)
        for s in range(self._pool.n):
            if self._serving[s] != dead:
                continue
            self._stats["remade_batches"] += len(self._queues[s])
            self._state.remade += len(self._queues[s])
            live = self._state.live() or self._replace_all()
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
                              f"wait={self._pool.wait:g} s; lost: " + "; ".join(self._state.dead))
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)  # all placed by now
        where = [self._ray.get(r) if r in ready else None for r in refs]
        ids = self._state.add(fresh, where)
        return [i for i, r in zip(ids, refs) if r in ready]

    # --- the iteration ------------------------------------------------------------------------

    def __iter__(self) -> "RayEpoch":
        return self

    def __len__(self) -> int:
        return len(self._owner)

    def __next__(self):
        if self._ended:
            raise StopIteration
        enter = time.monotonic_ns()
        state = self._state
        w = self.delivered % self._pool.n
        state.depth_sum += sum(len(q) for q in self._queues)
        state.depth_n += 1
        while True:
            ref = self._queues[w][0]
            try:
                # Made (anywhere), then pulled here: the two waits apart.
                t0 = time.monotonic_ns()
                ready, _ = self._ray.wait([ref], timeout=self._timeout or None, fetch_local=False)
                t1 = time.monotonic_ns()
                if not ready:
                    raise BatchTimeout(f"no batch within timeout={self._timeout:g} s: batch {self.delivered} of this "
                                       f"rank's epoch {self.epoch}, from remote worker {self._serving[w]}")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the object store's buffers are read-only: copied below
                    got = self._ray.get(ref)
                state.wait_ns += t1 - t0
                state.transfer_ns += time.monotonic_ns() - t1
                break
            except self._ray.exceptions.ObjectFetchTimedOutError:
                raise  # slow, not lost (a subclass of ObjectLostError): the worker lives
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.ObjectLostError) as e:
                # The worker died, or its node with the batch it had made (ObjectLostError: a
                # batch is made once, never reconstructed): either way, made again elsewhere.
                self._lost(w, e)
            except self._ray.exceptions.RayTaskError as e:
                self._failed = True
                self.close()
                raise e.cause if isinstance(e.cause, BaseException) else e from None
        self._queues[w].pop(0)
        if got is not None:
            self._pull_ahead()
        if got is None:
            self._finished = True
            self.close()
            raise StopIteration
        index = self._owner._epoch_batch(self.delivered)  # the epoch's batch: what map= draws from
        a = self._serving[w]
        self._queues[w].append(state.actors[a].next.remote(self._stream_ids[w]))
        self.delivered += 1
        self._position.delivered(self.epoch, self.delivered)
        n = len(got["__key__"])
        state.received["batches"] += 1
        state.received["samples"] += n
        state.received["bytes"] += sum(v.numel() * v.element_size() for v in got.values() if isinstance(v, torch.Tensor))
        mine = state.per_actor.setdefault(a, {"batches": 0, "samples": 0})
        mine["batches"] += 1
        mine["samples"] += n
        batch = {k: v.clone() if isinstance(v, torch.Tensor) and self._batches.transfer is None else v
                 for k, v in got.items()}
        out = self._batches.finish(batch)
        if self._batches.map is not None:
            out = self._batches.apply_map(out, self.epoch, index)
        if self._loop is not None:
            now = time.monotonic_ns()
            self._loop.delivered(enter, now, now, index)
        return out

    def _pull_ahead(self) -> None:
        """Starts pulling the batches requested next to this node while the trainer uses this
        one: a batch is only fetched when asked for, and asking one at a time would leave the
        link idle during every step. At most n * in_flight batches: the bound on what the node's
        object store holds for this rank."""
        refs = [r for q in self._queues for r in q]
        if refs:
            self._ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=True)

    def stats(self) -> Dict[str, Any]:
        return dict(self._stats, batches=self.delivered - self._start_delivered)

    def _supersede(self) -> None:
        self.close()

    def close(self) -> None:
        if self._ended:
            return
        self._ended = True
        skipped: List[Any] = []
        stops = [(w, self._state.actors[self._serving[w]].stop.remote(self._stream_ids[w]))
                 for w in range(self._pool.n) if self._state.alive[self._serving[w]]]
        # An epoch run to its end (or failed) gathers the workers' counters (skips, failures);
        # one left early (break, a new iteration) does not wait for the batches still queued.
        if self._finished or self._failed:
            for _, ref in stops:
                try:
                    s = self._ray.get(ref, timeout=self._pool.wait)
                except Exception:  # a worker that died after the last batch: nothing owed
                    continue
                skipped += s.get("skipped", [])
                for k in ("failures", "samples"):
                    self._stats[k] = self._stats.get(k, 0) + s.get(k, 0)
        self._stats["skipped"] = skipped
        gave_nothing = self.delivered == self._start_delivered and not self._finished and not self._failed
        self._position.closed(self.epoch, self._start_delivered, gave_nothing, self.stats())

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass
