"""The public loader: ``Loader`` (an iterable of batches) and ``Dataset`` (the same engine as a
``torch.utils.data.IterableDataset``)."""

from __future__ import annotations

import inspect
import logging
import os
import textwrap
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, Union

import torch

from . import _native, _transfer, telemetry
from ._errors import ConfigError
from ._fields import Field, int_arg
from ._sources import Source
from .telemetry import Sink

from ._batches import BatchMaker
from ._epoch import _EpochIterator
from ._position import Position
from ._loader_telemetry import LoaderTelemetry
from ._loader_args import node_cache, resolve_rank, resolve_tuning
from ._options import ALWAYS, MID_EPOCH, OPTIONS, REQUIRED
from ._spec import Spec
from ._views import _DatasetView, _Sampler
from ._ray_pool import RayEpoch, pool_state, require_ray
from .ray import Workers

if TYPE_CHECKING:  # the options' type, generated from their declaration (PEP 692)
    from typing_extensions import Unpack

    from ._option_types import LoaderOptions

log = logging.getLogger("loadscope")

Batch = Any  # a dict of entries, or a tuple of them with output=(...)



class Loader:
    """Loads batches with native threads. Iterate it like a ``torch.utils.data.DataLoader``.

    Args:
        source: ``Folder``, ``Files``, ``FileList``, ``WebDataset`` or ``Mix``; or a ``Spec``
            (``loader.spec`` of another loader), whose options the keywords given here change.
        fields: output name -> field (``Image``, ``VideoClip``, ``Audio``, ``Int``, ``Text``,
            ``Json``, ``Bytes``). Each field reads the sample member of the same name unless it
            says ``keys=``.
{options}
    Every batch is a dict (unless ``output`` says a tuple): images ``uint8 [B, 3, H, W]``, ints ``int64 [B]``, text a list of
    ``str``, JSON a list of objects, bytes a list of ``bytes``; plus ``"__key__"`` (list of
    sample keys) and ``"__index__"`` (``int64 [B]``, each sample's position in the epoch).
    Batches are identical for any ``threads``: randomness is a function of ``(seed, epoch,
    position)``.

    The epoch is the one given to ``set_epoch``; without it, each new iteration advances it by
    one (0, 1, 2, ...), so ``shuffle=True`` reshuffles every epoch as DataLoader does.
    """

    def __init__(self, source: Union[Source, Spec], **options: Unpack[LoaderOptions]) -> None:
        # The signature and the Args above are the declaration's (_options.OPTIONS), set below;
        # for type checkers, LoaderOptions (_option_types.py, generated from it too).
        self.spec: Spec = source.replace(**options) if isinstance(source, Spec) else Spec(source, **options)
        self._build()
        self._position = Position()  # the epoch, the resume point, the open iteration

    def _build(self) -> None:
        """The run of the spec in this process: what it resolves here, and the native parts."""
        spec = self.spec
        # Before the source reads its indexes: the process's settings are the environment's, read
        # again for each loader (LOADSCOPE_CACHE_DIR: the process's node-local cache, or none).
        _native.remote_reload_environment()
        env_cache = node_cache(os.environ.get("LOADSCOPE_CACHE_DIR") or None,
                               os.environ.get("LOADSCOPE_CACHE_LIMIT") or None)
        _native.remote_cache(*(env_cache or ("", 0)))
        # cache_dir is this loader's own: its source's remote objects are read through it (a
        # storage of its own, io/cache.h), whatever other loaders of the process use.
        own_cache = node_cache(spec.cache_dir, spec.cache_limit)
        self.source: Source = spec.source if own_cache is None else spec.source._cached(*own_cache)
        self.fields: Dict[str, Field] = spec.fields
        self.batch_size: int = spec.batch_size
        tuning = resolve_tuning(spec.threads, spec.prefetch, spec.memory_limit, spec.batch_size,
                                any(getattr(f, "decoder_threads", None) == "auto" for f in self.fields.values()))
        self.threads: Union[int, str] = tuning["threads"]  # an int, or "auto"
        self.prefetch: Union[int, str] = tuning["prefetch"]
        self.shuffle: bool = spec.shuffle
        self.seed: int = spec.seed
        self.drop_last: Union[bool, str] = spec.drop_last
        self.on_error: str = spec.on_error
        self.error_budget = spec.error_budget
        self.timeout: float = spec.timeout
        self.workers: Union[str, Workers] = spec.workers
        if isinstance(self.workers, Workers):
            require_ray()  # now, not at the first batch: "pip install 'loadscope[ray]'"
        self.device = _transfer.parse_device(spec.device)
        self._telemetry_on: bool = spec.telemetry
        self.output: Optional[Tuple[str, ...]] = None if spec.output == "dict" else spec.output
        self.map: Optional[Callable[..., Any]] = spec.map
        d = resolve_rank(spec.rank, spec.world_size)
        self.rank: int = d["rank"]
        self.world_size: int = d["world_size"]
        # where they came from: "arguments", "torch.distributed", "environment" or "default"
        self.rank_from: str = d["from"]
        self.partition: str = spec.partition
        # Float images under a CUDA device: uint8 is copied, and normalised on the GPU after.
        on_device = self.device is not None
        specs = [f._native(name, _native, on_device) for name, f in self.fields.items()]
        # The entries the fields declare (C++, pipeline/outputs.h): output= is checked against
        # them before any source is read (a manifest of 10^7 rows takes a while to index).
        self._entries: Tuple[str, ...] = tuple(dict.fromkeys(e for s in specs for e in s.entries)) + ("__key__", "__index__")
        unknown = [k for k in self.output or () if k not in self._entries]
        if unknown:
            raise ConfigError(f"output: {', '.join(map(repr, unknown))} is not an entry of the batch; "
                              f"entries: {', '.join(self._entries)}")
        # Several ranks need the epoch's size before reading it (tar shards: their index).
        self._source = self.source._native(_native, need_size=self.world_size > 1)
        self.samples: Optional[int] = self._source.size if self._source.size >= 0 else None
        self._len_samples: Optional[int] = None  # len() of streamed shards
        _native.epoch_geometry(-1 if self.samples is None else self.samples, self.batch_size, self.world_size,
                               self.drop_last)  # a ConfigError here, not at the first batch
        self._pipeline = _native.Pipeline(self._source, specs, telemetry=self._telemetry_on)
        # The auto controller, shared by the epochs so that each starts where the last settled.
        t = tuning["tuner"]
        self._tuner = _native.Tuner(**t) if t else None
        self._max_threads: int = t["max_threads"] if t else self.threads  # type: ignore[assignment]
        self._start_prefetch: int = t["prefetch"] if t else self.prefetch  # type: ignore[assignment]
        # The parts after the native run: the transfer stage, batch making and map=, telemetry.
        self._transfer = _transfer.CudaTransfer(self.device) if self.device is not None else None
        # The settings as a dict, not a method of the loader: a reference back to it would make a
        # cycle, and a loader in a cycle keeps its native threads until the garbage collector
        # runs (a fork meanwhile copies them mid-work: DataLoader workers hung in a full test run).
        # With a Ray pool, the workers' side: its state, not the loader (no cycle either).
        pool = pool_state(self.workers) if isinstance(self.workers, Workers) else None
        self._telemetry = LoaderTelemetry(self._pipeline, self._telemetry_on, self._transfer, self._config(),
                                          self._tuner, pool)
        self._loop = self._telemetry.loop
        outputs = [(name, name + suffix, kind, tuple(shape), at, key)
                   for i, name in enumerate(self.fields) for suffix, kind, shape, at, key in self._pipeline.outputs(i)]
        self._batches = BatchMaker(outputs, self.fields, self._transfer, self.output, self.map,
                                   self._loop if self._telemetry_on else None)

    def _config(self) -> Dict[str, Any]:
        """The settings a snapshot reports."""
        return {"batch_size": self.batch_size, "threads": self.threads, "prefetch": self.prefetch,
                "max_threads": self._max_threads,
                "shuffle": self.shuffle, "device": str(self.device or "cpu"), "telemetry": self._telemetry_on,
                "fields": list(self.fields), "source": repr(self.source),
                # what the sample list holds per sample (folders and manifests: their columns)
                "source_bytes_per_sample": getattr(self.source, "bytes_per_sample", None)}

    # Loaders travel to spawned DataLoader workers by their spec, not their native state, with
    # this process's rank: a copy takes this loader's share wherever it lands.
    def __getstate__(self):
        p = self._position
        return {"spec": self.spec.replace(rank=self.rank, world_size=self.world_size), "epoch": p.epoch,
                "epoch_set": p.epoch_set, "resume_batches": p.resume}

    def __setstate__(self, state):
        self.spec = state["spec"]
        self._build()
        self._position = Position(state["epoch"], state["epoch_set"], state.get("resume_batches", 0))

    # --- exact resume ---------------------------------------------------------------------

    STATE_VERSION = 1

    # Note [an iteration that gave nothing]
    # Frameworks make iterators they never use: PyTorch Lightning calls iter() on a train loader
    # to check that it is iterable, then makes the epoch's own. An iteration closed before it
    # handed out a batch (and not by an error or an empty epoch) therefore gives its epoch and
    # resume point back: the next iter() starts the same epoch, as a DataLoader's would.
    #
    # Note [state after a loop]
    # A training loop that leaves the loop early (`break` at a fixed number of steps per epoch)
    # and then loops again gets a new epoch, as with DataLoader. A checkpoint taken after the
    # `break` must say the same, or "checkpoint, kill, resume" would first finish the old epoch
    # while the uninterrupted run had moved on. So the position is that of the open iteration
    # only; a closed one (end, break, close(), exception) points at the next epoch's start.

    def state_dict(self) -> Dict[str, Any]:
        """Where this loader stands, to save with a checkpoint: the epoch and how many of its
        batches this rank has been given. ``load_state_dict`` in a new process (any thread
        count) continues with exactly the batches an uninterrupted run would give next.
        Small and versioned (docs/distributed.md); it holds no sample lists, so the new loader
        must be made with the same source, fields, batch size, seed, shuffle and world size."""
        # The consumer's position, by one rule (Note [state after a loop]): while an iteration
        # is open, its epoch and the batches it handed out; once it is closed -- run to its end,
        # left by `break` (the loop drops its iterator), close(), an exception -- the start of
        # the next epoch, which is what the next iter() in this process gives too. Before any
        # iteration: the next epoch (or a loaded, unused resume point).
        epoch, batches = self._position.saved()
        return {"format": "loadscope.Loader", "version": self.STATE_VERSION, "epoch": epoch, "batches": batches,
                "epoch_set": self._position.epoch_set, **self._resume_keys(mid_epoch=True), "rank": self.rank}

    def _resume_keys(self, mid_epoch: bool) -> Dict[str, Any]:
        """What a state must have been saved with (the declaration's `resume`), as this process
        resolved it, and the epoch's size."""
        keys = {o.name: getattr(self, o.name) for o in OPTIONS
                if o.resume == ALWAYS or (mid_epoch and o.resume == MID_EPOCH)}
        return {**keys, "samples": self.samples}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from ``state`` (see ``state_dict``) at the next ``iter()``."""
        if not isinstance(state, Mapping) or state.get("format") != "loadscope.Loader":
            raise ConfigError("load_state_dict: not a loadscope Loader state (made by Loader.state_dict())")
        if state.get("version") != self.STATE_VERSION:
            raise ConfigError(f"load_state_dict: state version {state.get('version')!r}; this loadscope reads "
                              f"version {self.STATE_VERSION}")
        batches = int_arg("state['batches']", state["batches"], 0)
        mine = self._resume_keys(mid_epoch=batches > 0)  # mid-epoch: the epoch cut and dealt the same way
        saved = {"partition": "interleave", **state}  # states saved before partition existed
        differ = [f"{k}: saved {saved.get(k)!r}, here {v!r}" for k, v in mine.items() if saved.get(k) != v]
        if differ:
            world = "world_size" in mine and state.get("world_size") != self.world_size
            raise ConfigError("load_state_dict: this loader differs from the one that saved the state ("
                              + "; ".join(differ) + "). Make it with the same arguments"
                              + ("; a different world size can resume only at an epoch boundary" if world else ""))
        if self.samples is not None and batches > len(self):
            raise ConfigError(f"load_state_dict: state['batches'] = {batches}, but an epoch has {len(self)} batches "
                              "for this rank")
        self._position.load(int_arg("state['epoch']", state["epoch"], 0), bool(state.get("epoch_set", False)),
                            batches)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of the next iteration (order and augmentation depend on it). After
        ``load_state_dict``, setting the saved epoch keeps the resume point; another epoch
        drops it (that epoch starts from its beginning)."""
        epoch = int_arg("epoch", epoch, 0)
        before = self._position.epoch
        dropped = self._position.set_epoch(epoch)
        if dropped is not None:
            log.warning("set_epoch(%d) after load_state_dict of epoch %d: the resume point (batch %d) is dropped",
                        epoch, before, dropped)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration will use."""
        return self._position.epoch

    @property
    def epoch_set(self) -> bool:
        """Whether that epoch was chosen (set_epoch, a loaded state) rather than counted up."""
        return self._position.epoch_set

    @property
    def sampler(self) -> "_Sampler":
        """What code written for ``DistributedSampler`` touches: ``set_epoch(epoch)`` (PyTorch
        Lightning calls it before each epoch, also for iterables that are not DataLoaders)
        forwards to ``set_epoch``; ``len()`` is this rank's samples per epoch, padding left
        out (docs/recipes.md)."""
        return _Sampler(self)

    @property
    def dataset(self) -> "_DatasetView":
        """The source, sized: ``len(loader.dataset)`` is its number of samples, and a
        ``Folder``'s ``classes`` and ``class_to_idx`` are there as on an ImageFolder."""
        return _DatasetView(self)

    def _epoch_samples(self) -> int:
        return self.samples if self.samples is not None else self._size_by_indexing()

    def _size_by_indexing(self) -> int:
        """The size of streamed tar shards, for len(): their headers indexed in memory once, as
        index="auto" does when a size is needed. The loader keeps streaming them (the samples
        and their order are the same), so its state and resume are unchanged."""
        if self._len_samples is None:
            index = getattr(self.source, "index", "off")
            if index == "off":
                raise TypeError("len() of a loader over WebDataset(index='off'): its size is unknown before "
                                "reading; use index='auto' (the default), or `loadscope index` on the shards")
            try:
                self._len_samples = self.source._native(_native, need_size=True).size
            except ConfigError as e:
                raise TypeError(f"len() needs the number of samples, and: {e}") from None
        return self._len_samples

    def _geometry(self) -> Tuple[int, int, int]:
        """(batches of all ranks, samples this rank draws, of which not padding) per epoch."""
        batches, _, _, drawn, real = _native.epoch_geometry(self._epoch_samples(), self.batch_size,
                                                            self.world_size, self.drop_last, self.rank)
        return batches, drawn, real

    def __len__(self) -> int:
        """This rank's batches per epoch. Tar shards without an ``.idx`` are indexed in memory
        the first time (their headers read) unless the source says ``index="off"``."""
        return self._geometry()[0] // self.world_size

    def __iter__(self) -> Iterator[Batch]:
        return self._iterate(0, 1)

    def _epoch_batch(self, j: int) -> int:
        """Which of the epoch's batches (all ranks' in order) is this rank's j-th."""
        if self.partition == "interleave" or self.world_size == 1:  # no size needed (index="off" has none)
            return self.rank + j * self.world_size
        return _native.batch_of_slot(self._epoch_samples(), self.batch_size, self.world_size,
                                     self.drop_last, self.rank + j * self.world_size, self.partition)

    def _iterate(self, worker: int, workers: int) -> "_EpochIterator":
        """One epoch for DataLoader worker `worker` of `workers` (0 of 1 outside DataLoader):
        of this rank's batches (its slots k with k % W == rank; `_epoch_batch` says which of the
        epoch's batches each one is), the worker takes every `workers`-th, so slot k goes to
        worker (k // W) % workers."""
        epoch, resume = self._position.next_epoch()  # one epoch at a time: a new loop ends the old one
        if resume and workers > 1:
            raise ConfigError("resuming mid-epoch inside DataLoader workers is not supported: resume with "
                              "loadscope.Loader, or at an epoch boundary")
        epoch_start_ns = time.monotonic_ns()
        if self._telemetry_on:
            self._loop.epoch_started(epoch_start_ns)
        it: Any
        if isinstance(self.workers, Workers):  # made by a pool on Ray (_ray_pool.py)
            it = RayEpoch(self, self.workers, epoch, resume, position=self._position, batches=self._batches,
                          timeout=self.timeout, loop=self._loop if self._telemetry_on else None)
        else:
            it = self._start_run(epoch, resume, worker, workers, self._position)
        self._position.started(epoch, resume, it)
        return it

    def _start_run(self, epoch: int, resume: int, worker: int, workers: int, position: Position) -> "_EpochIterator":
        """A run of `epoch` from this rank's batch `resume`: the batches j >= resume with
        j % workers == worker (a DataLoader worker's, or a Ray worker's share), reporting to
        `position`."""
        budget = self.error_budget
        pin = self._transfer.pin if self._transfer else 0
        unpin = self._transfer.unpin if self._transfer else 0
        W = self.world_size
        global _warned_fork
        if self._max_threads > 1 and not _warned_fork and _native._is_forked_during_epoch():
            _warned_fork = True
            log.warning("loadscope: this process was forked while an epoch was running in its parent, so its "
                        "loaders decode on one thread (oneTBB cannot start workers after such a fork). Finish or "
                        "close the parent's epoch before forking, e.g. make DataLoader workers before iterating "
                        "in the main process.")
        run = self._pipeline.start(
            threads=self._max_threads, batch_size=self.batch_size, prefetch=self._start_prefetch,
            drop_last=self.drop_last, on_error=self.on_error,
            max_errors=budget if isinstance(budget, int) else -1,
            max_error_rate=budget if isinstance(budget, float) else -1.0,
            seed=self.seed, epoch=epoch, shuffle=self.shuffle,
            batch_offset=worker * W + self.rank, batch_stride=workers * W, row=W, start_batch=resume * W,
            pin=pin, unpin=unpin, partition=self.partition, tuner=self._tuner,
        )
        return _EpochIterator(self, run, epoch, resume, position=position, batches=self._batches,
                            timeout=self.timeout, loop=self._loop if self._telemetry_on else None,
                            # map= on CPU batches runs in a thread ahead; after a CUDA copy, inline
                            map_depth=self._start_prefetch if self.map is not None and self._transfer is None
                            else None)

    # --- telemetry (_loader_telemetry.py) ----------------------------------------------------

    def telemetry(self, *, depth: bool = False) -> "telemetry.Snapshot":
        """Everything measured since the loader was made: see loadscope.telemetry and
        docs/telemetry.md. Cheap enough to call every step (~0.1 ms). depth=True adds the last
        4096 changes of the queue (``queue.depth``; large)."""
        return self._telemetry.snapshot(depth)

    def report_every(self, seconds: float, to: "Sink" = print) -> None:
        """Emits an interval report (counters as deltas, gauges as they are) every `seconds` to a
        callable, a logging.Logger or a JSON-lines file path, from a background thread, and a
        final one from ``stop_reports()`` (or when the loader is garbage-collected)."""
        self._telemetry.report_every(seconds, to)

    def stop_reports(self) -> None:
        self._telemetry.stop_reports()

    def start_trace(self, path: Union[str, "os.PathLike[str]"], *, max_spans: int = 500_000) -> None:
        """Records per-sample, per-batch and training-loop spans until ``stop_trace()``, which
        writes them to `path` as a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev)."""
        self._telemetry.start_trace(path, max_spans)

    def stop_trace(self) -> Optional[str]:
        """Writes the trace started by ``start_trace`` and returns its path."""
        return self._telemetry.stop_trace()

    def stats(self) -> Dict[str, Any]:
        """Counters of the running or last epoch: batches, samples, failures, warnings,
        bytes_read, process_seconds, and the lists ``skipped`` and ``warning_notes``
        (``{"key", "reason", "kind", "position"}``; the first 1000 of each)."""
        it = self._position.active()
        running = it.stats() if it is not None else None
        return running if running is not None else dict(self._position.last_stats)

    def __del__(self) -> None:
        try:
            self.stop_reports()  # the final report
        except Exception:  # pragma: no cover - interpreter teardown
            pass

    def __repr__(self) -> str:
        return f"Loader({self.spec.describe()})"


_warned_fork = False


def _declare_options() -> None:
    """Loader's signature (help(), inspect, IDEs) and the options of its docstring, from the
    declaration: `source`, `fields`, then every option with its default."""
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD), P("source", P.POSITIONAL_OR_KEYWORD, annotation="Union[Source, Spec]"),
              P("fields", P.KEYWORD_ONLY, annotation="Mapping[str, Field]")]
    params += [P(o.name, P.KEYWORD_ONLY, annotation=o.type,
                 **({} if o.default is REQUIRED else {"default": o.default})) for o in OPTIONS]
    Loader.__init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    lines = []
    for o in OPTIONS:
        default = "required" if o.default is REQUIRED else o.default_text or repr(o.default)
        text = textwrap.fill(f"{o.name}: {o.meaning.replace('`', '``')} Allowed: {o.allowed.replace('{cores}', 'N')}; "
                             f"default: {default}.", width=92, initial_indent="        ",
                             subsequent_indent="            ")
        lines.append(text)
    Loader.__doc__ = (Loader.__doc__ or "").replace("{options}", "\n".join(lines))


_declare_options()


class Dataset(torch.utils.data.IterableDataset):
    """The loader as a ``torch.utils.data.IterableDataset`` that yields ready batches:
    ``DataLoader(Dataset(...), batch_size=None)``. Takes the arguments of ``Loader``.

    Inside ``DataLoader(num_workers=N)`` worker ``i`` produces batches ``i, i+N, ...`` of the
    epoch, so the DataLoader yields the same batches in the same order as ``num_workers=0``.
    Call ``set_epoch`` before each epoch there (as with ``DistributedSampler``): the workers
    receive a copy of the dataset, so an epoch counter cannot advance by itself.
    """

    def __init__(self, source: Union[Source, Spec], **loader_args: Unpack[LoaderOptions]) -> None:
        super().__init__()
        spec = source.replace(**loader_args) if isinstance(source, Spec) else Spec(source, **loader_args)
        if spec.device != "cpu":
            # Batches cross DataLoader's worker processes, where CUDA cannot be used after fork.
            raise ConfigError(f"Dataset(device={spec.device!r}): a Dataset yields CPU batches; use "
                              "Loader(device=...) or DataLoader(..., pin_memory=True) and .to(device)")
        if spec.workers != "local":
            # DataLoader's workers split the epoch themselves: a pool behind each would split it again.
            raise ConfigError("Dataset(workers=...): a Dataset's batches are made by DataLoader's workers; use "
                              "Loader(workers=ls.ray.Workers(...)) without a DataLoader")
        self.loader = Loader(spec)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def dataloader(self, **dataloader_args: Any) -> "torch.utils.data.DataLoader":
        """A ``DataLoader`` made the right way for this dataset (``batch_size=None``: the batches
        are already made), e.g. ``dataset.dataloader(num_workers=2, pin_memory=True)``."""
        wrong = sorted(set(dataloader_args) & {"batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"})
        if wrong:
            raise ConfigError(f"Dataset.dataloader({', '.join(wrong)}=...): batching, order and drop_last are "
                              "the Dataset's own arguments (batch_size=, shuffle=, drop_last=)")
        return torch.utils.data.DataLoader(self, batch_size=None, **dataloader_args)

    def __iter__(self) -> Iterator[Batch]:
        _refuse_automatic_batching(sys._getframe(1))
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(self.loader)
        if self.loader.shuffle and not self.loader.epoch_set:
            warnings.warn(
                "loadscope.Dataset in DataLoader workers: call dataset.set_epoch(epoch) every "
                "epoch, otherwise every epoch repeats the same order",
                stacklevel=2,
            )
        return self.loader._iterate(info.id, info.num_workers)


def _refuse_automatic_batching(caller) -> None:
    """A DataLoader with automatic batching (any batch_size but None; its default is 1) would
    collate batches into a batch of batches with transposed keys and no error. DataLoader
    iterates an IterableDataset from its fetcher, whose constructor holds `auto_collation`
    (torch 1.13 to 2.x, in the main process and in workers): read it there."""
    frame = caller
    for _ in range(3):  # the fetcher's __init__ calls iter(dataset) directly
        if frame is None:
            return
        code = frame.f_code
        if code.co_name == "__init__" and code.co_filename.replace("\\", "/").endswith("utils/data/_utils/fetch.py"):
            if frame.f_locals.get("auto_collation"):
                raise ConfigError(
                    "loadscope.Dataset yields whole batches: make the DataLoader with batch_size=None "
                    "(any other batch_size, including DataLoader's default of 1, collates them again into a "
                    "batch of batches), or use dataset.dataloader(num_workers=...)")
            return
        frame = frame.f_back
