"""The pipelines an experiment's arms run: loadscope, or torch's DataLoader + PIL + torchvision,
over the same files in the same order, with the same transforms. Every pipeline yields
``(images uint8 [B, 3, H, W], labels int64 [B], keys list[str])`` so that the runner measures
and checks every arm the same way.

Layouts of the demo dataset (loadscope.datasets): ``files`` (the manifest, in sample-key
order), ``shards`` (the tar shards, the same order), ``folder`` (class-per-folder, ImageFolder's
order). Randomness is a function of (seed, epoch, position) in both loaders, so the arms of an
experiment see the same crops whatever their threads, workers or batch size."""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from .._errors import ConfigError
from ..gpu import crop_params

BatchT = Tuple[torch.Tensor, torch.Tensor, List[str]]


def sample_id(key: str) -> str:
    """A sample's identity across layouts: 'folder/cat/0000042.jpg' and 'train-000000.tar:0000042'
    are both '0000042'."""
    base = key.rsplit(":", 1)[-1]
    base = os.path.basename(base)
    return base.split(".", 1)[0]


def join(root: str, *parts: str) -> str:
    """A path under a local root or an object-storage prefix (s3://b/p, https://h/p)."""
    if "://" in root:
        return "/".join([root.rstrip("/"), *parts])
    return os.path.join(root, *parts)


def layout_files(root: str, layout: str, indexes: bool = False) -> List[str]:
    """The files a layout reads (what staging copies); `indexes`: shards' .idx files too."""
    if layout == "shards":
        shards = sorted(glob.glob(os.path.join(root, "shards", "*.tar")))
        return shards + [p + ".idx" for p in shards if indexes and os.path.exists(p + ".idx")]
    if layout == "files":
        with open(os.path.join(root, "manifest.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [os.path.join(root, r["path"]) for r in rows] + [os.path.join(root, "manifest.jsonl")]
    return sorted(glob.glob(os.path.join(root, "folder", "**", "*.jpg"), recursive=True))


def stage(root: str, layout: str, dest: str, src: Optional[str] = None) -> Dict[str, Any]:
    """Copies what `layout` reads under `dest` (same relative paths) with ``loadscope stage``
    (parallel, fsynced, read back and compared), from `src` (an s3:// prefix holding root's
    files) or from root itself; returns the new root, seconds and bytes."""
    from ..stage import stage as stage_files

    files = [os.path.relpath(f, root) for f in layout_files(root, layout, indexes=src is not None)]
    r = stage_files(src or root, dest, files=files)
    return {"root": dest, "seconds": r["seconds"], "bytes": r["bytes"], "files": r["files"],
            "mb_per_s": r["mb_per_s"]}


def upload(root: str, url: str, files: List[str], threads: int = 8) -> Dict[str, Any]:
    """Puts `files` (under root) at the same relative paths under the s3:// prefix `url` where
    an object is missing or has another size; an http(s):// prefix cannot be written, so there
    every file must already be in place. Returns {files, uploaded, bytes, seconds}."""
    from concurrent.futures import ThreadPoolExecutor

    from .. import _native

    t0 = time.monotonic()
    rel = [os.path.relpath(f, root) for f in files]
    if url.startswith("s3://"):
        listed = set(_native.remote_list(url.rstrip("/") + "/"))
    else:
        listed = set()

    def one(r: str) -> Optional[int]:
        dest, src = join(url, *r.split(os.sep)), os.path.join(root, r)
        size = os.path.getsize(src)
        if not url.startswith("s3://") or dest in listed:
            got = _native.remote_probe(dest)
            if got is not None and got[0] == size:
                return None
            if not url.startswith("s3://"):
                raise ConfigError(f"[dataset] url: {_native.redact_url(dest)} is "
                                  + ("missing" if got is None else f"{got[0]} bytes, not {size} like {src}")
                                  + " (an http(s):// prefix cannot be uploaded to: put the files of [dataset] path there)")
        _native.remote_put_file(dest, src)
        return size

    pool = ThreadPoolExecutor(threads)
    try:
        sizes = list(pool.map(one, rel))
    finally:  # on the first failure, the files not started yet are not tried (and not waited for)
        pool.shutdown(wait=True, cancel_futures=True)
    return {"files": len(rel), "uploaded": sum(1 for n in sizes if n is not None), "bytes": sum(n or 0 for n in sizes),
            "seconds": time.monotonic() - t0}


class Pipeline:
    """One arm's loader for one process (one rank). `epoch(e)` yields batches of epoch e."""

    def __init__(self, root: str, config: Dict[str, Any], rank: int = 0, world: int = 1,
                 device: Optional[torch.device] = None, shards: Optional[List[str]] = None,
                 cache_dir: Optional[str] = None) -> None:
        self.root, self.c, self.rank, self.world, self.device = root, config, rank, world, device
        self.shards, self.cache_dir = shards, cache_dir
        self.loader: Any = None  # the loadscope.Loader, for its telemetry and traces

    def epoch(self, e: int) -> Iterator[Any]:
        raise NotImplementedError

    def count(self, batch: Any) -> int:
        """Samples in one of this pipeline's batches."""
        return len(batch[2])

    def global_batch(self, k: int) -> int:
        """Which of the epoch's batches (all ranks' in order) is this rank's k-th."""
        return self.rank + k * self.world

    def ids(self, batch: Any) -> Optional[List[str]]:
        """The ids of a batch's samples (the same sample has the same id in every arm), or None."""
        return [sample_id(k) for k in batch[2]]

    def telemetry(self) -> Dict[str, Any]:
        """loadscope's telemetry of this arm (Loader.telemetry, or telemetry.watch for a DataLoader)."""
        return self.loader.telemetry().to_dict()

    def close(self) -> None:
        pass


class LoadscopePipeline(Pipeline):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        from .. import FileList, Folder, Image, Int, Bytes, Loader, WebDataset

        c = self.c
        source: Any
        if c["layout"] == "files":
            source = FileList(join(self.root, "manifest.jsonl"))
        elif c["layout"] == "shards":
            # Under an object-storage prefix the shards are named by the local dataset's layout.
            names = self.shards if self.shards is not None else \
                [os.path.relpath(p, self.root) for p in layout_files(self.root, "shards")]
            source = WebDataset([join(self.root, n) for n in names], index=c["shard_index"])
        else:
            source = Folder(os.path.join(self.root, "folder"))
        image = Bytes() if c["decode"] == "gpu" else Image(c["size"], crop=c["crop"], flip=c["flip"])
        self.loader = Loader(source, fields={"jpg": image, "cls": Int()}, batch_size=c["batch_size"],
                             threads=c["threads"], prefetch=c["prefetch"], shuffle=c["shuffle"], seed=c["seed"],
                             device=self.device if c["pin_memory"] else "cpu", rank=self.rank, world_size=self.world,
                             partition=c["partition"], cache_dir=self.cache_dir, workers=ray_workers(c) or "local")
        self._gpu = None
        if c["decode"] == "gpu":  # loadscope reads the bytes; nvJPEG decodes them (loadscope.gpu)
            from ..gpu import JpegDecoder

            crop_flip = {"flip": c["flip"]} if c["crop"] == "random_resized" else {}
            self._gpu = JpegDecoder(c["size"], crop=c["crop"], seed=c["seed"], device=self.device, **crop_flip)

    def global_batch(self, k: int) -> int:
        return self.loader._epoch_batch(k)

    def epoch(self, e: int) -> Iterator[BatchT]:
        self.loader.set_epoch(e)
        for b in self.loader:  # rank r of W: batches r, r+W, ... (partition = "interleave")
            images = b["jpg"] if self._gpu is None else self._gpu(b["jpg"], b["__index__"], e, b["__key__"])
            yield images, b["cls"], b["__key__"]


def _decode_tensor(path: str, decoder: str) -> torch.Tensor:
    """A JPEG as uint8 [3, H, W] with a peer's decoder: simplejpeg (libjpeg-turbo through its
    own binding) or torchvision.io.decode_jpeg (libjpeg-turbo in torchvision)."""
    with open(path, "rb") as f:
        data = f.read()
    if decoder == "simplejpeg":
        import simplejpeg

        return torch.from_numpy(simplejpeg.decode_jpeg(data, colorspace="RGB")).permute(2, 0, 1)
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)


# loader -> the decoder of the DataLoader pipeline: PIL (what users write today) or a peer's
# JPEG decoder with torchvision's transforms on tensors (installed for the benchmarks:
# requirements-dev.txt). Every one applies the same crops (seeded by (seed, epoch, position)).
TORCH_DECODERS = {"torch": "pil", "simplejpeg": "simplejpeg", "torchvision": "torchvision"}


class _TorchImages(torch.utils.data.Dataset):
    """What users write today: PIL decode, RandomResizedCrop (or Resize+CenterCrop), flip,
    PILToTensor — or the same transforms on a tensor from a peer's decoder. Indexed by
    position; the crop is seeded by (seed, epoch, position)."""

    def __init__(self, paths: List[str], labels: List[int], c: Dict[str, Any], decoder: str = "pil") -> None:
        self.paths, self.labels, self.c, self.decoder = paths, labels, c, decoder

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, item: Tuple[int, int]) -> Tuple[torch.Tensor, int, str]:
        # (position, epoch): persistent workers hold a copy of the dataset, so the epoch
        # travels with each index rather than as an attribute set in the main process.
        i, epoch = item
        import torchvision.transforms.functional as TF
        from PIL import Image

        c = self.c
        if self.decoder != "pil":
            x = _decode_tensor(self.paths[i], self.decoder)
            top, left, h, w, flip = crop_params(c["crop"], c["seed"], c["flip"], x.shape[1], x.shape[2], epoch, i)
            size = c["size"]
            if c["crop"] == "center":
                x = TF.center_crop(TF.resize(x, size, antialias=True), size)
            else:
                x = TF.resized_crop(x, top, left, h, w, [size, size], antialias=True)
            return (TF.hflip(x) if flip else x).contiguous(), self.labels[i], self.paths[i]
        with Image.open(self.paths[i]) as im:
            im = im.convert("RGB")
        top, left, h, w, flip = crop_params(c["crop"], c["seed"], c["flip"], im.height, im.width, epoch, i)
        size = self.c["size"]
        if self.c["crop"] == "center":  # Resize(shorter side) + CenterCrop, as torchvision
            im = TF.center_crop(TF.resize(im, size), size)
        else:
            im = TF.resized_crop(im, top, left, h, w, [size, size])
        x = TF.pil_to_tensor(TF.hflip(im) if flip else im)
        return x, self.labels[i], self.paths[i]


class _StridedBatches(torch.utils.data.Sampler):
    """Batches of consecutive positions (shuffled by (seed, epoch) when asked); rank r takes
    batches r, r+W, ... — the same split as loadscope's."""

    def __init__(self, n: int, c: Dict[str, Any], rank: int, world: int) -> None:
        self.n, self.c, self.rank, self.world, self.epoch = n, c, rank, world, 0

    def _order(self) -> List[int]:
        if not self.c["shuffle"]:
            return list(range(self.n))
        g = torch.Generator().manual_seed(self.c["seed"] * 1_000_003 + self.epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def __iter__(self):
        order, bs = self._order(), self.c["batch_size"]
        batches = [[(p, self.epoch) for p in order[i:i + bs]] for i in range(0, self.n, bs)]
        return iter(batches[self.rank::self.world])

    def __len__(self) -> int:
        return len(range(self.rank, (self.n + self.c["batch_size"] - 1) // self.c["batch_size"], self.world))


def _collate(items):
    xs, ys, keys = zip(*items)
    return torch.stack(xs), torch.tensor(ys, dtype=torch.int64), list(keys)


class TorchPipeline(Pipeline):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        c = self.c
        if c["layout"] == "files":
            with open(os.path.join(self.root, "manifest.jsonl")) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            paths = [os.path.join(self.root, r["path"]) for r in rows]
            labels = [int(r["cls"]) for r in rows]
        elif c["layout"] == "folder":
            from torchvision.datasets import ImageFolder

            samples = ImageFolder(os.path.join(self.root, "folder")).samples
            paths, labels = [p for p, _ in samples], [y for _, y in samples]
        else:
            raise ConfigError("loader='torch' reads files; use layout 'files' or 'folder'")
        self.dataset = _TorchImages(paths, labels, c, TORCH_DECODERS[c["loader"]])
        self.sampler = _StridedBatches(len(paths), c, self.rank, self.world)
        workers = c["threads"]
        self.dl = torch.utils.data.DataLoader(
            self.dataset, batch_sampler=self.sampler, num_workers=workers, collate_fn=_collate,
            pin_memory=c["pin_memory"], persistent_workers=workers > 0,
            **({"prefetch_factor": c["prefetch"]} if workers > 0 else {}))
        # The telemetry of part 3 for the DataLoader arm: per-worker RSS/PSS/CPU. Its sampler
        # reads PSS (~3.5 ms per process) only when an epoch starts and ends (interval: an hour),
        # so that it costs the arm nothing measurable; the runner samples memory on its own.
        from ..telemetry import watch

        self.watched = watch(self.dl, interval=3600.0)

    def telemetry(self) -> Dict[str, Any]:
        return self.watched.telemetry(sample=True).to_dict()

    def epoch(self, e: int) -> Iterator[BatchT]:
        self.sampler.epoch = e  # the sampler runs in this process and hands the epoch to the workers
        for x, y, keys in self.watched:
            if self.device is not None and self.c["pin_memory"]:
                x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            yield x, y, keys

    def close(self) -> None:
        self.watched.close()
        it = getattr(self.dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()


class UserCodeError(TypeError):
    """The user's callable returned something the harness cannot use: reported as its message
    alone (the harness's own frames would only hide it)."""


def set_epoch(obj: Any, e: int) -> None:
    """What a training loop does at an epoch's start: `obj.set_epoch(e)` where the object has
    one (a loadscope Loader, a webdataset pipeline), else on its sampler, its batch sampler's
    sampler (a DistributedSampler) and its dataset (a loadscope Dataset in DataLoader workers)."""
    if hasattr(obj, "set_epoch"):
        obj.set_epoch(e)
        return
    seen = set()
    for target in (getattr(obj, "sampler", None), getattr(getattr(obj, "batch_sampler", None), "sampler", None),
                   getattr(obj, "dataset", None)):
        if target is not None and id(target) not in seen and callable(getattr(target, "set_epoch", None)):
            seen.add(id(target))
            target.set_epoch(e)


class UserPipeline(Pipeline):
    """An arm made by the user's factory: `factory(**kwargs)` returns any iterable of batches
    (a DataLoader, a loadscope Loader or Dataset, a generator class...). It is measured through
    `telemetry.watch` (per-worker memory and CPU for a DataLoader); batches are read with the
    arm's `sample_ids` / `batch_size_of` callables when given (user.py otherwise)."""

    def __init__(self, config: Dict[str, Any], kwargs: Dict[str, Any], rank: int = 0, world: int = 1) -> None:
        super().__init__("", config, rank, world, None)
        from ..telemetry import watch
        from . import user

        factory = user.resolve(config["factory"], "[pipeline] factory")
        self._ids = user.resolve(config["sample_ids"], "[pipeline] sample_ids") if config.get("sample_ids") else None
        self._size = user.resolve(config["batch_size_of"], "[pipeline] batch_size_of") if config.get("batch_size_of") else None
        self.obj = factory(**kwargs)
        pool = ray_workers(config)
        if pool is not None:  # the factory's Loader, its batches made by the pool (the same bytes)
            from .._loader import Loader as _Loader

            if not isinstance(self.obj, _Loader):
                raise ConfigError(f"ray_workers = {config['ray_workers']}: {config['factory']} returned "
                                  f"{type(self.obj).__name__}, and a pool of workers makes a loadscope Loader's "
                                  "batches: return the Loader itself")
            self.obj = _Loader(self.obj.spec.replace(workers=pool))
        # A loadscope Loader knows which epoch batch each of its batches is: the factory's own,
        # or the one behind a loadscope Dataset (in a DataLoader, whose workers take the rank's
        # batches in turn, so its k-th batch is still the rank's k-th).
        inners = (self.obj, getattr(self.obj, "loader", None), getattr(getattr(self.obj, "dataset", None), "loader", None))
        self._epoch_batch: Optional[Callable[[int], int]] = next(
            (i._epoch_batch for i in inners if i is not None and hasattr(i, "_epoch_batch")), None)
        if not hasattr(self.obj, "__iter__"):
            kind = type(self.obj).__name__
            hint = (": a map-style Dataset yields samples by index; return a DataLoader over it"
                    if hasattr(self.obj, "__getitem__") and hasattr(self.obj, "__len__") else
                    " (did the factory forget to return it?)" if self.obj is None else "")
            raise UserCodeError(f"{config['factory']} returned {'None' if self.obj is None else 'an object of type ' + kind}, "
                                f"not an iterable of batches{hint}")
        # A loadscope Loader, returned as it is or in a thin wrapper that yields the repo's own
        # batch form (an attribute of it): its own telemetry, traces and auto settings.
        from .._loader import Loader

        inner = [v for v in vars(self.obj).values() if isinstance(v, Loader)] if hasattr(self.obj, "__dict__") else []
        self.loader = self.obj if isinstance(self.obj, Loader) else inner[0] if len(inner) == 1 else None
        self.watched = watch(self.obj, interval=3600.0)  # sampled at epoch ends; the runner samples on its own
        self._at = user.positional_ids(self.obj)  # ids by position in the epoch, where its order is known
        self._spans: Dict[int, Tuple[int, int]] = {}  # id(batch) -> (first position, samples), recent batches

    def epoch(self, e: int) -> Iterator[Any]:
        set_epoch(self.obj, e)
        position = 0
        for batch in self.watched:
            if self._at is not None:
                n = self.count(batch)
                if len(self._spans) > 64:  # ids are read right after a batch is drawn: keep a few
                    self._spans.pop(next(iter(self._spans)))
                self._spans[id(batch)] = (position, n)
                position += n
            yield batch

    def global_batch(self, k: int) -> int:
        return self._epoch_batch(k) if self._epoch_batch is not None else super().global_batch(k)

    def count(self, batch: Any) -> int:
        if self._size is None:
            from .user import samples_in

            return samples_in(batch)
        n = self._size(batch)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise UserCodeError(f"{self.c['batch_size_of']} returned {n!r:.60}, not a sample count")
        return n

    def ids(self, batch: Any) -> Optional[List[str]]:
        if self._ids is None:
            from .user import default_ids

            got = default_ids(batch, self.obj)
            span = self._spans.get(id(batch))
            if got is None and span is not None and self._at is not None:
                got = [self._at(i) for i in range(span[0], span[0] + span[1])]
            return got
        got = self._ids(batch)
        if got is None or isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
            raise UserCodeError(f"{self.c['sample_ids']} returned {got!r:.60}, not one id per sample of the batch "
                                "(a list, a tuple or a 1-d tensor)")
        ids = [str(i.item() if hasattr(i, "item") else i) for i in got]
        n = self.count(batch)
        if len(ids) != n:
            raise UserCodeError(f"{self.c['sample_ids']} returned {len(ids)} ids for a batch of {n} samples")
        return ids

    def telemetry(self) -> Dict[str, Any]:
        out = self.watched.telemetry(sample=True).to_dict()
        if self.loader is not None:
            out["loadscope"] = self.loader.telemetry().to_dict()
        return out

    def close(self) -> None:
        self.watched.close()
        it = getattr(self.obj, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()


def describe(obj: Any) -> Dict[str, Any]:
    """What a factory returned: its type and, for a torch DataLoader, the settings that decide
    its speed and memory (the diagnosis reads them)."""
    out: Dict[str, Any] = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    if isinstance(obj, torch.utils.data.DataLoader):
        out.update(dataloader=True, dataset=f"{type(obj.dataset).__module__}.{type(obj.dataset).__qualname__}",
                   num_workers=obj.num_workers, batch_size=obj.batch_size, drop_last=obj.drop_last,
                   pin_memory=obj.pin_memory, prefetch_factor=obj.prefetch_factor if obj.num_workers else None,
                   persistent_workers=obj.persistent_workers,
                   sampler=type(obj.sampler).__name__ if obj.sampler is not None else None,
                   collate_fn=getattr(obj.collate_fn, "__name__", type(obj.collate_fn).__name__),
                   multiprocessing_context=str(obj.multiprocessing_context) if obj.multiprocessing_context else None,
                   ids_by_position=isinstance(getattr(obj.dataset, "samples", None), list))
    else:
        out["dataloader"] = False
    return out


class _FirstOf(torch.utils.data.Sampler):
    """The first `n` items (batches of indices, or indices) of another sampler: a short epoch
    that ends the way a real one does."""

    def __init__(self, inner: Any, n: int) -> None:
        self.inner, self.n = inner, n

    def __iter__(self):
        for i, item in enumerate(self.inner):
            if i >= self.n:
                return
            yield item

    def __len__(self) -> int:
        return min(self.n, len(self.inner))


def rebuild(dl: Any, *, persistent: bool, batches: Optional[int] = None) -> Any:
    """The same torch DataLoader (dataset, sampler, collate function, workers...) as a new object
    with persistent_workers=`persistent`; with `batches`, its epochs end after that many batches
    (map-style datasets only: an iterable dataset has no sampler to shorten)."""
    kw: Dict[str, Any] = dict(dataset=dl.dataset, num_workers=dl.num_workers, collate_fn=dl.collate_fn,
                              pin_memory=dl.pin_memory, timeout=dl.timeout, worker_init_fn=dl.worker_init_fn,
                              multiprocessing_context=dl.multiprocessing_context, generator=dl.generator,
                              prefetch_factor=dl.prefetch_factor, persistent_workers=persistent)
    for opt in ("pin_memory_device", "in_order"):
        if hasattr(dl, opt):
            kw[opt] = getattr(dl, opt)
    short = (lambda s: _FirstOf(s, batches)) if batches else (lambda s: s)  # noqa: E731
    if isinstance(dl.dataset, torch.utils.data.IterableDataset):
        kw.update(batch_size=dl.batch_size, drop_last=dl.drop_last)
    elif dl.batch_sampler is not None:
        kw["batch_sampler"] = short(dl.batch_sampler)
    else:
        kw.update(sampler=short(dl.sampler), batch_size=None)
    return torch.utils.data.DataLoader(**kw)


def ray_workers(config: Dict[str, Any]) -> Any:
    """The arm's pool of Ray workers (its `ray_workers` and `ray_worker_cpus`), or None for 0. The
    cluster is the one the runner started for the repetition (RAY_ADDRESS; bench/cluster.py)."""
    n = config.get("ray_workers", 0)
    if not n:
        return None
    from ..ray import Workers

    return Workers(n, cpus_per_worker=config.get("ray_worker_cpus", 1.0))


def make(root: str, config: Dict[str, Any], rank: int = 0, world: int = 1, shards: Optional[List[str]] = None,
         cache_dir: Optional[str] = None) -> Pipeline:
    """`root`: a local dataset or an object-storage prefix holding one (then `shards`, the
    shards' paths relative to it, and optionally `cache_dir`, a node-local cache)."""
    device = None
    if config["pin_memory"] or config["decode"] == "gpu":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % max(1, torch.cuda.device_count()))
    cls = LoadscopePipeline if config["loader"] == "loadscope" else TorchPipeline
    return cls(root, config, rank, world, device, shards, cache_dir)
