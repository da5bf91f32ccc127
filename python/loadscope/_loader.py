"""The public loader: ``Loader`` (an iterable of batches) and ``Dataset`` (the same engine as a
``torch.utils.data.IterableDataset``)."""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _native, _transfer, telemetry
from ._errors import ConfigError
from ._fields import Field, Image, int_arg
from ._sources import Source
from .telemetry import Sink

from ._batches import BatchMaker
from ._epoch import _EpochIterator
from ._loader_telemetry import LoaderTelemetry
from ._loader_args import (ON_ERROR, _bool_arg, _cache_args, _drop_last_arg, _map_arg, _native_drop_last, _output_arg,
                           _partition_arg, resolve_rank, resolve_tuning)
from ._views import _DatasetView, _Sampler

log = logging.getLogger("loadscope")

Batch = Any  # a dict of entries, or a tuple of them with output=(...)



class Loader:
    """Loads batches with native threads. Iterate it like a ``torch.utils.data.DataLoader``.

    Args:
        source: ``Folder``, ``Files``, ``FileList``, ``WebDataset`` or ``Mix``.
        fields: output name -> field (``Image``, ``VideoClip``, ``Audio``, ``Int``, ``Text``,
            ``Json``, ``Bytes``). Each field reads the sample member of the same name unless it
            says ``keys=``.
        batch_size: samples per batch.
        threads: decoding threads (default: the cores this process may use), or ``"auto"``:
            the least that keep the training loop's data wait near zero, found while it runs
            and changed without stopping the epoch (docs/tuning.md). Batches are the same.
        shuffle: a new order every epoch, drawn from ``(seed, epoch)``.
        seed: seeds the order and every random augmentation.
        drop_last: ``False`` (default): keep every sample (a short last batch; with several
            ranks the last step is padded, see ``rank``); ``True``: drop the last, partial
            batch (several ranks: whole steps only); ``"uneven"``: with several ranks, drop only
            the at most W-1 samples that do not split evenly, as
            ``DistributedSampler(drop_last=True)`` does (each rank's last batch may be short).
        prefetch: batches decoded ahead (memory: prefetch x batch bytes), or ``"auto"``:
            deeper when batches come in bursts, shallower over ``memory_limit``.
        memory_limit: the resident memory (bytes, or "16GiB") that ``"auto"`` settings may grow
            into; default half of what the process's cgroup (else the machine) allows.
        on_error: ``"raise"``: a bad sample raises a ``SampleError`` naming it when its batch is
            reached; ``"skip"``: it is left out of its batch, counted and listed in ``stats()``.
        error_budget: under ``"skip"``, raise ``ErrorBudgetExceeded`` when more samples fail than
            this: an int is a count per epoch, a float a fraction of the samples seen (at least
            100 are assumed seen, so one early failure does not trip it); ``None``: no limit.
        device: ``"cpu"`` (default) or ``"cuda"``/``"cuda:N"``: batches are built in page-locked
            memory and copied to the GPU on a side stream, timed with CUDA events (see
            loadscope._transfer; a ConfigError where CUDA is not available).
        telemetry: measure everything (``telemetry()``, ``report_every``, traces); ``False``
            turns every clock read off.
        cache_dir, cache_limit: keep remote objects (s3://, http(s)://) whole in this local
            directory, at most ``cache_limit`` bytes (an int, or "500GB", "1TiB"; None: no
            limit), shared by every process of the node, so that later epochs read nothing from
            the network (docs/remote.md#a-node-local-cache). Process-wide; the environment's
            LOADSCOPE_CACHE_DIR / LOADSCOPE_CACHE_LIMIT when not given.
        rank, world_size: this process's share of each epoch under data-parallel training.
            Default (None): from ``torch.distributed`` when it is initialised, else from the
            ``RANK`` and ``WORLD_SIZE`` that torchrun sets, else 0 of 1. Rank r takes batches
            r, r+W, r+2W, ... of the epoch; every rank gets the same number of batches (the
            epoch is padded with its first samples, at most W-1 of them, or cut to whole
            steps with ``drop_last``): docs/distributed.md.
        partition: how the epoch's batches are dealt to the ranks. ``"interleave"`` (default):
            rank r takes batches r, r+W, r+2W, ...; ``"contiguous"``: rank r takes the r-th
            contiguous block of them, so that with tar shards each rank (and each node) reads
            its own shards, and reading ahead fetches nothing another rank needs. The same
            samples with the same random draws either way, the same counts per rank
            (docs/distributed.md#which-batches-a-rank-takes).

        map: a callable applied to every batch (in the form ``output`` gives) before the
            training loop sees it, for what has no native op (``torchvision.transforms.v2``'s
            MixUp/CutMix, a tokenizer, ...). On CPU batches it runs in a background thread, up
            to ``prefetch`` batches ahead, so it is input work, not the loop's; with a CUDA
            ``device`` it runs right after the copy (GPU work is asynchronous). Its time is
            the telemetry's ``map`` stage. An exception in it is raised from ``next()``.
        output: ``"dict"`` (default): each batch is a dict; or a tuple of entry names, e.g.
            ``("jpg", "cls")``: each batch is a tuple of those entries in that order, so that
            ``for images, labels in loader:`` works as with an ImageFolder DataLoader.

    Every batch is a dict (unless ``output`` says a tuple): images ``uint8 [B, 3, H, W]``, ints ``int64 [B]``, text a list of
    ``str``, JSON a list of objects, bytes a list of ``bytes``; plus ``"__key__"`` (list of
    sample keys) and ``"__index__"`` (``int64 [B]``, each sample's position in the epoch).
    Batches are identical for any ``threads``: randomness is a function of ``(seed, epoch,
    position)``.

    The epoch is the one given to ``set_epoch``; without it, each new iteration advances it by
    one (0, 1, 2, ...), so ``shuffle=True`` reshuffles every epoch as DataLoader does.
    """

    def __init__(
        self,
        source: Source,
        *,
        fields: Mapping[str, Field],
        batch_size: int,
        threads: Union[int, str, None] = None,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: Union[bool, str] = False,
        prefetch: Union[int, str] = 2,
        memory_limit: Union[int, str, None] = None,
        on_error: str = "raise",
        error_budget: Union[int, float, None] = 0.05,
        device: Any = "cpu",
        telemetry: bool = True,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        partition: str = "interleave",
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        cache_limit: Union[int, str, None] = None,
        output: Union[str, Sequence[str]] = "dict",
        map: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        if not isinstance(source, Source):
            raise ConfigError(
                f"source must be a loadscope Folder, FileList or WebDataset, got {type(source).__name__}"
            )
        if not isinstance(fields, Mapping) or not fields:
            raise ConfigError("fields must be a non-empty dict of name -> loadscope field (Image, VideoClip, Audio, Int, Text, Json, Bytes)")
        for name, f in fields.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"fields: names must be non-empty strings, got {name!r}")
            if not isinstance(f, Field) or type(f) is Field:
                raise ConfigError(
                    f"fields[{name!r}] must be one of Image, VideoClip, Audio, Int, Text, Json, Bytes, got {type(f).__name__}"
                )
            if name.startswith("__"):
                raise ConfigError(f"fields[{name!r}]: names starting with '__' are reserved")
        if on_error not in ON_ERROR:
            # (`map` is an argument here: the builtin is not)
            raise ConfigError(f"on_error={on_error!r}: allowed are {', '.join(repr(o) for o in ON_ERROR)}")
        if error_budget is not None:
            if isinstance(error_budget, bool) or not isinstance(error_budget, (int, float)):
                raise ConfigError(f"error_budget must be an int count, a float fraction or None, got {error_budget!r}")
            if isinstance(error_budget, float) and not 0.0 <= error_budget < 1.0:
                raise ConfigError(f"error_budget={error_budget}: a fraction must be in [0, 1)")
            if isinstance(error_budget, int) and error_budget < 0:
                raise ConfigError(f"error_budget={error_budget}: a count must be >= 0")
        self._args = dict(
            source=source, fields=dict(fields), batch_size=int_arg("batch_size", batch_size, 1),
            tuning=resolve_tuning(threads, prefetch, memory_limit, int_arg("batch_size", batch_size, 1),
                                  any(getattr(f, "decoder_threads", None) == "auto" for f in fields.values())),
            shuffle=_bool_arg("shuffle", shuffle), seed=int_arg("seed", seed, 0, 2**64 - 1),
            drop_last=_drop_last_arg(drop_last),
            on_error=on_error, error_budget=error_budget,
            device=device, telemetry=_bool_arg("telemetry", telemetry),
            distributed=resolve_rank(rank, world_size), partition=_partition_arg(partition),
            cache=_cache_args(cache_dir, cache_limit),
            output=_output_arg(output),
            map=_map_arg(map),
        )
        self._build()
        self._epoch = 0
        self._epoch_set = False
        self._resume_batches = 0  # load_state_dict: batches of self._epoch already consumed
        self._progress: Optional[Dict[str, Any]] = None  # {epoch, batches, closed} of the last iteration
        self._active: Optional[weakref.ref] = None
        self._last_stats: Dict[str, Any] = {}

    def _build(self) -> None:
        a = self._args
        # Before the source reads its indexes. One cache per process: the last loader made sets
        # it (without cache_dir: the environment's, or none).
        _native.remote_reload_environment()
        cache = a["cache"] or _cache_args(os.environ.get("LOADSCOPE_CACHE_DIR") or None,
                                          os.environ.get("LOADSCOPE_CACHE_LIMIT") or None)
        _native.remote_cache(*(cache or ("", 0)))
        self.source: Source = a["source"]
        self.fields: Dict[str, Field] = a["fields"]
        self.batch_size: int = a["batch_size"]
        tuning = a["tuning"]
        self.threads: Union[int, str] = tuning["threads"]  # an int, or "auto"
        self.prefetch: Union[int, str] = tuning["prefetch"]
        self.shuffle: bool = a["shuffle"]
        self.seed: int = a["seed"]
        self.drop_last: Union[bool, str] = a["drop_last"]
        self.on_error: str = a["on_error"]
        self.error_budget = a["error_budget"]
        self.device = _transfer.parse_device(a["device"])
        self._telemetry_on: bool = a["telemetry"]
        self.output: Optional[Tuple[str, ...]] = a["output"]
        self.map: Optional[Callable[..., Any]] = a["map"]
        d = a["distributed"]
        self.rank: int = d["rank"]
        self.world_size: int = d["world_size"]
        self.partition: str = a["partition"]
        # Float images under a CUDA device: uint8 is copied, and normalised on the GPU after.
        on_device = self.device is not None
        specs = [f._native(name, _native, on_device) if isinstance(f, Image) else f._native(name, _native)
                 for name, f in self.fields.items()]
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
                               _native_drop_last(self.drop_last))  # a ConfigError here, not at the first batch
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
        self._telemetry = LoaderTelemetry(self._pipeline, self._telemetry_on, self._transfer, self._config(),
                                          self._tuner)
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

    # Loaders travel to spawned DataLoader workers by their arguments, not their native state.
    def __getstate__(self):
        return {"args": self._args, "epoch": self._epoch, "epoch_set": self._epoch_set,
                "resume_batches": self._resume_batches}

    def __setstate__(self, state):
        self._args = state["args"]
        self._build()
        self._epoch = state["epoch"]
        self._epoch_set = state["epoch_set"]
        self._resume_batches = state.get("resume_batches", 0)
        self._progress = None
        self._active = None
        self._last_stats = {}

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
        p = self._progress
        if p is not None and not p["closed"]:
            epoch, batches = p["epoch"], p["batches"]
        else:
            epoch, batches = self._epoch, self._resume_batches
        return {"format": "loadscope.Loader", "version": self.STATE_VERSION, "epoch": epoch, "batches": batches,
                "epoch_set": self._epoch_set, "batch_size": self.batch_size, "seed": self.seed,
                "shuffle": self.shuffle, "drop_last": self.drop_last, "world_size": self.world_size,
                "partition": self.partition, "rank": self.rank, "samples": self.samples}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from ``state`` (see ``state_dict``) at the next ``iter()``."""
        if not isinstance(state, Mapping) or state.get("format") != "loadscope.Loader":
            raise ConfigError("load_state_dict: not a loadscope Loader state (made by Loader.state_dict())")
        if state.get("version") != self.STATE_VERSION:
            raise ConfigError(f"load_state_dict: state version {state.get('version')!r}; this loadscope reads "
                              f"version {self.STATE_VERSION}")
        batches = int_arg("state['batches']", state["batches"], 0)
        mine = {"batch_size": self.batch_size, "seed": self.seed, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "samples": self.samples}
        if batches:  # mid-epoch: the epoch must be cut and dealt the same way
            mine["world_size"] = self.world_size
            mine["partition"] = self.partition
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
        self._epoch = int_arg("state['epoch']", state["epoch"], 0)
        self._epoch_set = bool(state.get("epoch_set", False))
        self._resume_batches = batches
        self._progress = None
        active = self._active() if self._active is not None else None
        if active is not None:
            active._supersede()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of the next iteration (order and augmentation depend on it). After
        ``load_state_dict``, setting the saved epoch keeps the resume point; another epoch
        drops it (that epoch starts from its beginning)."""
        epoch = int_arg("epoch", epoch, 0)
        if self._resume_batches and epoch != self._epoch:
            log.warning("set_epoch(%d) after load_state_dict of epoch %d: the resume point (batch %d) is dropped",
                        epoch, self._epoch, self._resume_batches)
            self._resume_batches = 0
        self._epoch = epoch
        self._epoch_set = True

    @property
    def epoch(self) -> int:
        """The epoch the next iteration will use."""
        return self._epoch

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

    def __len__(self) -> int:
        """This rank's batches per epoch. Tar shards without an ``.idx`` are indexed in memory
        the first time (their headers read) unless the source says ``index="off"``."""
        batches, _, _, _, _ = _native.epoch_geometry(self._epoch_samples(), self.batch_size, self.world_size,
                                                     _native_drop_last(self.drop_last))
        return batches // self.world_size

    def __iter__(self) -> Iterator[Batch]:
        return self._iterate(0, 1)

    def _epoch_batch(self, j: int) -> int:
        """Which of the epoch's batches (all ranks' in order) is this rank's j-th."""
        if self.partition == "interleave" or self.world_size == 1:  # no size needed (index="off" has none)
            return self.rank + j * self.world_size
        return _native.batch_of_slot(self._epoch_samples(), self.batch_size, self.world_size,
                                     _native_drop_last(self.drop_last), self.rank + j * self.world_size, self.partition)

    def _iterate(self, worker: int, workers: int) -> "_EpochIterator":
        """One epoch for DataLoader worker `worker` of `workers` (0 of 1 outside DataLoader):
        of this rank's batches (its slots k with k % W == rank; `_epoch_batch` says which of the
        epoch's batches each one is), the worker takes every `workers`-th, so slot k goes to
        worker (k // W) % workers."""
        if self._active is not None:
            previous = self._active()
            if previous is not None:
                previous._supersede()  # one epoch at a time: a new loop ends the old one
        epoch = self._epoch
        a = self._args
        budget = a["error_budget"]
        epoch_start_ns = time.monotonic_ns()
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
        resume, self._resume_batches = self._resume_batches, 0
        if resume and workers > 1:
            raise ConfigError("resuming mid-epoch inside DataLoader workers is not supported: resume with "
                              "loadscope.Loader, or at an epoch boundary")
        run = self._pipeline.start(
            threads=self._max_threads, batch_size=self.batch_size, prefetch=self._start_prefetch,
            drop_last=_native_drop_last(self.drop_last), on_error=self.on_error,
            max_errors=budget if isinstance(budget, int) else -1,
            max_error_rate=budget if isinstance(budget, float) else -1.0,
            seed=self.seed, epoch=epoch, shuffle=self.shuffle,
            batch_offset=worker * W + self.rank, batch_stride=workers * W, row=W, start_batch=resume * W,
            pin=pin, unpin=unpin, partition=self.partition, tuner=self._tuner,
        )
        if self._telemetry_on:
            self._loop.epoch_started(epoch_start_ns)
        self._epoch = epoch + 1
        self._progress = {"epoch": epoch, "batches": resume, "closed": False}
        it = _EpochIterator(self, run, epoch, delivered=resume)
        self._active = weakref.ref(it)
        return it

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
        it = self._active() if self._active is not None else None
        if it is not None and it._run is not None:
            return it._run.stats()
        return dict(self._last_stats)

    def __del__(self) -> None:
        try:
            self.stop_reports()  # the final report
        except Exception:  # pragma: no cover - interpreter teardown
            pass

    def __repr__(self) -> str:
        return (
            f"Loader({self.source!r}, fields={list(self.fields)}, batch_size={self.batch_size}, "
            f"threads={self.threads}, shuffle={self.shuffle}, seed={self.seed})"
        )


_warned_fork = False


class Dataset(torch.utils.data.IterableDataset):
    """The loader as a ``torch.utils.data.IterableDataset`` that yields ready batches:
    ``DataLoader(Dataset(...), batch_size=None)``. Takes the arguments of ``Loader``.

    Inside ``DataLoader(num_workers=N)`` worker ``i`` produces batches ``i, i+N, ...`` of the
    epoch, so the DataLoader yields the same batches in the same order as ``num_workers=0``.
    Call ``set_epoch`` before each epoch there (as with ``DistributedSampler``): the workers
    receive a copy of the dataset, so an epoch counter cannot advance by itself.
    """

    def __init__(self, source: Source, **loader_args: Any) -> None:
        super().__init__()
        device = loader_args.get("device", "cpu")
        if device is not None and str(device) != "cpu":
            # Batches cross DataLoader's worker processes, where CUDA cannot be used after fork.
            raise ConfigError(f"Dataset(device={device!r}): a Dataset yields CPU batches; use "
                              "Loader(device=...) or DataLoader(..., pin_memory=True) and .to(device)")
        self.loader = Loader(source, **loader_args)

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
        if self.loader.shuffle and not self.loader._epoch_set:
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
