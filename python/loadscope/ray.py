"""Batches made on other machines: a pool of loadscope workers on Ray (``pip install
loadscope[ray]``), for when the trainer node's own cores cannot feed its GPUs.

    import loadscope as ls
    loader = ls.Loader(ls.WebDataset("s3://clips/train-{0000..1023}.tar"),
                       fields={"mp4": ls.VideoClip(frames=16, size=224)}, batch_size=32,
                       workers=ls.ray.Workers(8, cpus_per_worker=4))
    for batch in loader:   # the same batches, byte for byte, as without workers=
        ...

Each worker is a Ray actor that holds the loader's spec (never re-derived: the Spec pickled)
and makes every n-th of this rank's batches, as a DataLoader worker would, so batch j comes
from worker j % n and the trainer hands them out in order. Every random choice is a function of
(seed, epoch, position), so a worker anywhere makes exactly the batch the trainer would have.
A worker that dies takes nothing with it: the batches it owed are made again by another, from
the first one the trainer has not handed out (counted: ``loader.stats()["remade_batches"]``).
With no worker left, and none placed again within ``wait`` seconds, the next batch raises
``WorkersLost`` naming what died. docs/disaggregation.md has the why and the measurements.

Why Ray Core actors and not Ray Data: the order of the batches is the loader's (batch j is a
function of j), so there is nothing for Ray Data's scheduler to decide, and its blocks would
re-split what the engine already cut; an actor per worker keeps one warm pipeline (threads,
open shards, indexes) per epoch, bounded back-pressure is the number of requests the trainer
leaves outstanding per worker, and a failure names exactly the batches to make again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ._errors import ConfigError, LoadscopeError

__all__ = ["Workers", "WorkersLost"]


class WorkersLost(LoadscopeError):
    """Every remote worker of a loader died and none could be placed again in time."""


@dataclass(frozen=True)
class Workers:
    """A pool of ``n`` loadscope workers on Ray.

    Args:
        n: workers (Ray actors); each makes every n-th batch of the rank that uses it.
        cpus_per_worker: Ray CPUs each reserves; also its loader's threads (unless the spec
            gives ``threads``).
        resources: other Ray resources each reserves (``{"cpunode": 1}`` keeps them on nodes
            that offer it).
        in_flight: batches requested ahead from each worker: the trainer holds at most
            ``n * in_flight`` batches it has not handed out (the memory bound).
        wait: seconds the trainer waits for a worker to be placed, or replaced after all died,
            before raising ``WorkersLost``.
        address: the Ray cluster (``"ray://..."``, ``"host:port"``); default ``RAY_ADDRESS``,
            else a running local one, else Ray starts one in this process.
    """

    n: int
    cpus_per_worker: float = 1
    resources: Optional[Mapping[str, float]] = None
    in_flight: int = 2
    wait: float = 60.0
    address: Optional[str] = None
    _pool: Dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ConfigError(f"Workers(n={self.n!r}): an int >= 1")
        if isinstance(self.cpus_per_worker, bool) or not isinstance(self.cpus_per_worker, (int, float)) \
                or not math.isfinite(self.cpus_per_worker) or self.cpus_per_worker <= 0:
            raise ConfigError(f"Workers(cpus_per_worker={self.cpus_per_worker!r}): a number > 0")
        if self.resources is not None and (not isinstance(self.resources, Mapping) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                for k, v in self.resources.items())):
            raise ConfigError(f"Workers(resources={self.resources!r}): a dict of resource name to amount > 0")
        if isinstance(self.in_flight, bool) or not isinstance(self.in_flight, int) or self.in_flight < 1:
            raise ConfigError(f"Workers(in_flight={self.in_flight!r}): an int >= 1")
        if isinstance(self.wait, bool) or not isinstance(self.wait, (int, float)) or not self.wait > 0:
            raise ConfigError(f"Workers(wait={self.wait!r}): seconds > 0")

    def __reduce__(self):  # a copy (a spawned process) makes its own actors
        return (Workers, (self.n, self.cpus_per_worker, dict(self.resources) if self.resources else None,
                          self.in_flight, self.wait, self.address))

    def actors(self) -> List[Any]:
        """The Ray actors this pool has started so far (a worker to kill in a test, or to ask
        where it runs: ``actor.where.remote()``)."""
        state = self._pool.get("state")
        return list(state.actors) if state is not None else []

