"""What code written for a DataLoader reads from it: ``loader.sampler`` (as a
``DistributedSampler``) and ``loader.dataset`` (a map-style view of the source)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple


if TYPE_CHECKING:
    from ._loader import Loader


class _Sampler:
    """``Loader.sampler``: what code written for ``DistributedSampler`` reads from
    ``loader.sampler``. ``set_epoch`` forwards to the loader; ``len()`` is the number of
    samples this rank is given per epoch that are not padding, so that a metric summed over
    the real samples of every rank and divided by the sum of ``len(loader.sampler)`` is the
    mean over the whole set (docs/recipes.md#evaluation-under-ddp). ``padding`` is how many
    padded samples this rank gets on top (``__index__ >= len(loader.dataset)``)."""

    def __init__(self, loader: "Loader") -> None:
        self._loader = loader

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)

    def _counts(self) -> Tuple[int, int]:
        _, drawn, real = self._loader._geometry()
        return drawn, real

    def __len__(self) -> int:
        return self._counts()[1]

    @property
    def padding(self) -> int:
        drawn, real = self._counts()
        return drawn - real

    @property
    def rank(self) -> int:
        return self._loader.rank

    @property
    def num_replicas(self) -> int:
        return self._loader.world_size

    def __repr__(self) -> str:
        return (f"loadscope sampler (rank {self.rank} of {self.num_replicas}: {len(self)} samples an epoch"
                f" + {self.padding} padded)")


class _DatasetView:
    """``Loader.dataset``: the source as code written for a DataLoader reads it.
    ``len()`` is the number of samples in the source (padding and drop_last aside);
    ``dataset[i]`` is sample ``i`` of the source made as the loader makes its batches, one
    sample and not batched (what ``Subset(loader.dataset, ...)`` behind another DataLoader needs:
    the classic ImageNet script evaluates the samples its sampler left out that way); other
    attributes are the source's (a ``Folder``'s ``classes``, ``class_to_idx``, ``root``)."""

    def __init__(self, loader: "Loader") -> None:
        self._loader = loader
        self._single: Optional["Loader"] = None

    def __len__(self) -> int:
        return self._loader._epoch_samples()

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"loader.dataset[{i!r}]: an int index")
        if not -n <= i < n:
            raise IndexError(f"loader.dataset[{i}]: the source has {n} samples")
        i %= n
        if self._single is None:
            # Sample i is position i of an unshuffled epoch 0, so its random draws are (seed, 0, i).
            self._single = type(self._loader)(self._loader.spec.one_sample())
        one = self._single
        one.load_state_dict({**one.state_dict(), "epoch": 0, "batches": i})  # position i of epoch 0
        it = one._iterate(0, 1)
        try:
            batch = next(it)
        finally:
            it.close()
        if isinstance(batch, dict):
            return {k: v[0] for k, v in batch.items()}
        return tuple(v[0] for v in batch)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_single":
            raise AttributeError(name)
        return getattr(self._loader.source, name)

    def __repr__(self) -> str:
        return f"loadscope dataset view of {self._loader.source!r}"
