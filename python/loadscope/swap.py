"""The swap in one call: a torch ``DataLoader`` over an ``ImageFolder`` (or another
``DatasetFolder``, or a ``Subset`` of one) with torchvision transforms, translated option for
option into a loadscope ``Loader`` that yields batches of the same structure — ``[images,
labels]`` with the same dtype, shape and value range, the same files in the same order with
the same class indices.

    loader = ls.from_dataloader(make_loader(train=True))      # the DataLoader is read, never iterated

What is translated is what the dataset holds, not where it came from: its own ``samples``
list — cut, filtered, reordered or relabelled as it may be, or the indices of a ``Subset``,
``random_split`` or ``SubsetRandomSampler`` — becomes ``ls.Files`` of exactly those ``(path,
class)`` pairs, and ``ls.Folder(root)`` stands for it when the folder's scan lists exactly
the same. The transforms are read against the engine's op table (``loadscope.augmentations()``,
augment/ops.cc): every op the engine has translates from the torchvision transform of the same
name, parameters by name, in the user's order. ``translate(dataloader)`` says what each part
became (``bench baseline`` writes it into the factory it generates). What has no counterpart is
refused by name with a ``ConfigError`` — a transform loadscope does not have, one where
loadscope would run it on other pixels, a ``Dataset`` whose ``__getitem__`` is its own —
rather than approximated silently."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._errors import ConfigError
from ._options import OPTIONS

# Ops of the engine's table (augment/ops.cc) that no torchvision transform of the same name
# stands for, with the reason: the one place a new op says why it is not translated. Every
# other op of the table translates from torchvision's transform of its name (tested: a new
# op with neither fails tests/python/test_swap.py).
UNTRANSLATED: Dict[str, str] = {}

# What a torchvision op transform may hold beyond the table's parameters: attribute -> a check
# that returns why its value has no counterpart (None: it has). Anything else is refused.
_EXTRA: Dict[str, Dict[str, Callable[[Any], Optional[str]]]] = {
    "RandAugment": {
        "interpolation": lambda v: None if "nearest" in str(getattr(v, "value", v)).lower() else
        f"interpolation={v}: loadscope's RandAugment samples its geometry nearest-neighbour "
        "(torchvision's default) only",
        "fill": lambda v: None if v in (None, 0, [0], (0,)) or (isinstance(v, dict) and not v) else
        f"fill={v}: loadscope fills with 0 only",
    },
    "RandomErasing": {"inplace": lambda v: None},  # where the result is written, not what it is
}
# Geometry and conversions: not ops of the table but the Image's own arguments.
_GEOMETRY = ("RandomResizedCrop", "Resize", "CenterCrop")
_TO_FLOAT = ("ToTensor",)
_UINT8 = ("PILToTensor", "ToImage")  # a PIL image or a uint8 tensor: the same pixels wherever they come


@dataclass
class Translation:
    """What ``translate`` found: the source, the ``Image``'s and the ``Loader``'s arguments
    and, per part of the DataLoader, what it became (one line each, for people).
    ``image["ops"]`` is the ops as ``[{"name", "params"}]`` in the user's order."""

    source: Any
    image: Dict[str, Any]
    loader: Dict[str, Any]
    lines: List[str] = field(default_factory=list)
    random: List[str] = field(default_factory=list)  # the random transforms, by name

    def fields(self) -> Dict[str, Any]:
        from . import Image, Int, Op

        image = {k: v for k, v in self.image.items() if k != "ops"}
        if self.image.get("ops"):
            image["ops"] = [Op(o["name"], **o["params"]) for o in self.image["ops"]]
        return {"jpg": Image(**image), "cls": Int()}

    def build(self, **options: Any) -> Any:
        """The Loader, with ``options`` over the translated ones (see ``from_dataloader``)."""
        from . import Loader

        return Loader(self.source, fields=self.fields(), output=("jpg", "cls"), **dict(self.loader, **options))


def _name(t: Any) -> str:
    return type(t).__name__


def _is_torchvision(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.transforms")


def _bilinear(t: Any) -> None:
    mode = getattr(t, "interpolation", "bilinear")
    if "bilinear" not in str(getattr(mode, "value", mode)).lower():
        raise ConfigError(f"{_name(t)}(interpolation={mode}): loadscope resizes with Pillow's bilinear filter "
                          "(InterpolationMode.BILINEAR, torchvision's default) only")


def _size(value: Any) -> Any:
    """A crop's size (an int, [int], (h, w)) as loadscope's (an int for a square)."""
    if isinstance(value, int):
        return value
    value = list(value)
    if len(value) == 1:
        return int(value[0])
    return int(value[0]) if value[0] == value[1] else (int(value[0]), int(value[1]))


def _resize(value: Any) -> Any:
    """Resize's size: an int (or [int]) is the shorter side; a pair, even a square one, is the
    exact (h, w) the image is squeezed to."""
    if isinstance(value, int):
        return value
    value = list(value)
    return int(value[0]) if len(value) == 1 else (int(value[0]), int(value[1]))


def _channels(name: str, value: Any) -> Tuple[float, float, float]:
    """Normalize's mean or std: three numbers, or one (torchvision broadcasts it)."""
    values = [float(value)] if isinstance(value, (int, float)) else [float(v) for v in value]
    if len(values) == 1:
        values *= 3
    if len(values) != 3:
        raise ConfigError(f"Normalize({name}={value!r}): loadscope normalises RGB images: three numbers, or one")
    return (values[0], values[1], values[2])


def _transforms(transform: Any) -> List[Any]:
    if transform is None:
        return []
    if _name(transform) == "Compose" and _is_torchvision(transform):
        out: List[Any] = []
        for t in transform.transforms:
            out += _transforms(t)
        return out
    return [transform]


def _op_table() -> Dict[str, Dict[str, Any]]:
    from . import _native
    return {d["name"]: d for d in _native.augmentations()}


def random_transforms(transform: Any) -> List[str]:
    """The random augmentations of a torchvision transform pipeline, by name: what makes two
    pipelines, or one DataLoader with another number of workers, draw different images."""
    return [_name(t) for t in _transforms(transform) if _name(t).startswith("Random") or _name(t) in (
        "RandAugment", "AutoAugment", "TrivialAugmentWide", "AugMix", "ColorJitter")]


def _param(decl: Dict[str, Any], value: Any, op: str) -> Any:
    """A torchvision attribute as the table's parameter of that name: ranges and RGB values as
    tuples, ColorJitter's None (not jittered) as the identity range."""
    kind, name = decl["kind"], decl["name"]
    if value is None and kind == "range":
        return tuple(decl["default"])
    if kind == "rgb":
        if isinstance(value, str):
            raise ConfigError(f"{op}(value={value!r}): loadscope fills with a number or an RGB triple")
        values = [float(v) for v in value] if isinstance(value, (list, tuple)) else [float(value)]
        return values[0] if len(values) == 1 else tuple(values)
    if kind == "range":
        return tuple(float(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{op}({name}={value!r}): a number")
    return int(value) if kind == "integer" else float(value)


def _as_op(t: Any, decl: Dict[str, Any], p: float) -> Dict[str, Any]:
    """The table's op for a torchvision transform of the same name (its probability times
    ``p``, a RandomApply's around it), parameters read by name; what the transform holds
    beyond them is checked (_EXTRA) or refused."""
    op = decl["name"]
    declared = {d["name"]: d for d in decl["params"]}
    extra = _EXTRA.get(op, {})
    for attr, value in vars(t).items():
        if attr.startswith("_") or attr == "training" or attr in declared:
            continue
        if attr not in extra:
            raise ConfigError(f"transform {_describe(t)}: loadscope's {op} has no {attr} (its parameters: "
                              f"{', '.join(declared)}); leave it at torchvision's default or leave the op out")
        why = extra[attr](value)
        if why:
            raise ConfigError(f"{op}({why})")
    params: Dict[str, Any] = {}
    for name, d in declared.items():
        if hasattr(t, name):
            params[name] = _param(d, getattr(t, name), op)
    if "p" in declared:
        params["p"] = float(params.get("p", 1.0)) * p
    elif p != 1.0:
        raise ConfigError(f"RandomApply([{op}], p={p}): loadscope's {op} has no probability of its own")
    return {"name": op, "params": params}


def _op_text(op: Dict[str, Any]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, tuple):
            return "(" + ", ".join(show(x) for x in v) + ")"
        return repr(v)

    return f"ls.Op({op['name']!r}" + "".join(f", {k}={show(v)}" for k, v in op["params"].items()) + ")"


def _transform(transform: Any) -> Tuple[Dict[str, Any], List[str]]:
    """ls.Image's keyword arguments for a torchvision transform pipeline, and the lines saying
    what became of each part. The image is cropped (and flipped) first, as loadscope does, then
    the ops run in the user's order on the uint8 pixels, then the conversion to float and the
    normalisation, then the ops on the output (RandomErasing)."""
    table = _op_table()
    image: Dict[str, Any] = {"exif": False}  # PIL's open() in ImageFolder does not rotate by EXIF
    ops: List[Dict[str, Any]] = []
    lines: List[str] = []
    resize = None
    after_ops: Optional[str] = None  # the first op seen: a crop after it is refused
    ts = _transforms(transform)
    for i, t in enumerate(ts):
        name = _name(t)
        if not _is_torchvision(t):
            raise ConfigError(f"transform {name} ({type(t).__module__}) is not one of torchvision's: loadscope cannot "
                              "run it in its threads; leave it out of the transforms and apply it to whole batches "
                              "with from_dataloader(..., map=fn) (docs/augmentations.md)")
        p, inner = 1.0, t
        if name == "RandomApply":
            inside = _transforms(t.transforms[0]) if len(t.transforms) == 1 else list(t.transforms)
            if len(inside) != 1 or _name(inside[0]) not in table:
                raise ConfigError(f"RandomApply({', '.join(_name(x) for x in inside)}): loadscope applies one op of "
                                  f"its table with a probability ({', '.join(table)}), nothing else")
            p, inner = float(t.p), inside[0]
        inner_name = _name(inner)
        if inner_name in table:
            decl = table[inner_name]
            if inner_name in UNTRANSLATED:
                raise ConfigError(f"transform {inner_name}: {UNTRANSLATED[inner_name]}")
            op = _as_op(inner, decl, p)
            if decl["stage"] == "pixels" and image.get("dtype", "uint8") != "uint8":
                raise ConfigError(f"transform {inner_name} after the conversion to float: loadscope runs it on the "
                                  "uint8 pixels, before ToTensor (its parameters in 0..255 units); move it before "
                                  "ToTensor")
            if decl["stage"] == "output":
                if "dtype" not in image:
                    raise ConfigError(f"transform {inner_name} before the conversion to a tensor: torchvision erases "
                                      "tensors only; move it after ToTensor (and Normalize)")
            ops.append(op)
            after_ops = after_ops or inner_name
            lines.append(f"{_describe(t)} -> {_op_text(op)}")
            continue
        if name not in (*_GEOMETRY, "RandomHorizontalFlip", *_TO_FLOAT, *_UINT8, "ToDtype", "Normalize"):
            raise ConfigError(f"transform {name}: loadscope has no counterpart (it translates "
                              f"{', '.join((*_GEOMETRY, 'RandomHorizontalFlip', *table, 'RandomApply', *_TO_FLOAT, *_UINT8, 'ToDtype', 'Normalize'))}); "
                              "leave it out of the transforms and apply it to whole batches with "
                              "from_dataloader(..., map=fn), or leave it out")
        if name in _GEOMETRY and after_ops:
            raise ConfigError(f"transform {name} after {after_ops}: loadscope crops and resizes first and runs its ops "
                              "on the result (other pixels than resizing after them); move the crop before the ops, "
                              "as torchvision's recipes have it")
        if name in _GEOMETRY and "crop" in image and not (name == "CenterCrop" and resize is not None):
            raise ConfigError(f"transform {name}: a second crop or resize in the Compose; loadscope.Image crops once")
        if name == "RandomResizedCrop":
            _bilinear(t)
            image.update(crop="random_resized", size=_size(t.size), scale=tuple(t.scale), ratio=tuple(t.ratio))
            what = f"crop='random_resized', size={image['size']!r}, scale={image['scale']}, ratio=" \
                   f"({image['ratio'][0]:.4g}, {image['ratio'][1]:.4g}) (JPEGs decoded at 1/2..1/8 " \
                   "scale where the crop allows: dct_scaling, loadscope's default for random crops; " \
                   "slightly sharper than Pillow's resize)"
        elif name == "Resize":
            _bilinear(t)
            if getattr(t, "max_size", None) is not None:
                raise ConfigError(f"Resize(max_size={t.max_size}): loadscope has no max_size")
            if resize is not None:
                raise ConfigError(f"transform Resize: a second crop or resize in the Compose (after Resize({resize})); "
                                  "loadscope.Image crops once")
            size = _resize(t.size)
            following = _name(ts[i + 1]) if i + 1 < len(ts) else None
            if isinstance(size, int) and following != "CenterCrop":
                raise ConfigError(f"Resize({size}) without a CenterCrop after it: images of other shapes would not "
                                  "batch; loadscope's crops give a fixed size (crop='center' with resize=, "
                                  "'random_resized', or 'resize' to a (height, width))")
            if isinstance(size, tuple) and following == "CenterCrop":
                raise ConfigError(f"Resize({size}) followed by CenterCrop: loadscope's crop='resize' squeezes the "
                                  "image to the output size itself; resize to the crop's size, or resize the shorter "
                                  "side (Resize(int)) before the CenterCrop")
            if isinstance(size, int):
                resize = size
                continue  # the CenterCrop that follows completes it
            image.update(crop="resize", size=size if size[0] != size[1] else size[0])
            what = f"crop='resize', size={image['size']!r}"
        elif name == "CenterCrop":
            if resize is None:
                raise ConfigError("CenterCrop without a Resize before it: loadscope's center crop is torchvision's "
                                  "Resize(r) + CenterCrop(s) (crop='center', resize=r, size=s)")
            image.update(crop="center", size=_size(t.size), resize=resize)
            what = f"crop='center', resize={resize}, size={image['size']!r} (with the Resize before it)"
            resize = None
        elif name == "RandomHorizontalFlip":
            if "flip" in image:
                raise ConfigError("transform RandomHorizontalFlip: a second flip in the Compose; loadscope flips once")
            image["flip"] = float(t.p)
            # A flip commutes with every op of the table: exactly with the pixel-wise and
            # per-channel ones, in distribution with RandAugment's and RandomErasing's symmetric draws.
            what = f"flip={float(t.p):g}" + (f" (with the crop, before {after_ops}: a flip commutes with the ops)"
                                             if after_ops else "")
        elif name in _TO_FLOAT:
            image["dtype"] = "float32"
            what = "dtype='float32' (x / 255)"
        elif name in _UINT8:
            image.setdefault("dtype", "uint8")
            lines.append(f"{_describe(t)} -> uint8 output")
            continue
        elif name == "ToDtype":
            import torch

            dtype = t.dtype if not isinstance(t.dtype, dict) else None
            if dtype == torch.uint8:
                image.setdefault("dtype", "uint8")
                lines.append(f"{_describe(t)} -> uint8 output")
                continue
            if dtype in (torch.float32, torch.float16, torch.bfloat16) and getattr(t, "scale", False):
                image["dtype"] = str(dtype).replace("torch.", "")
            else:
                raise ConfigError(f"ToDtype({t.dtype}, scale={getattr(t, 'scale', False)}): loadscope outputs uint8, "
                                  "or floats scaled to [0, 1] (scale=True)")
            what = f"dtype={image['dtype']!r}"
        else:  # Normalize
            if "mean" in image:
                raise ConfigError("transform Normalize: a second Normalize in the Compose")
            if any(table[o["name"]]["stage"] == "output" for o in ops):
                raise ConfigError(f"Normalize after {ops[-1]['name']}: loadscope runs {ops[-1]['name']} on the "
                                  "normalised output (its value in those units); move it after Normalize")
            image.update(mean=_channels("mean", t.mean), std=_channels("std", t.std))
            what = f"mean={image['mean']}, std={image['std']}"
        lines.append(f"{_describe(t)} -> {what}")
    if resize is not None:
        raise ConfigError(f"Resize({resize}) without a CenterCrop after it")
    if "crop" not in image:
        raise ConfigError("the transforms have no crop or resize to a fixed size (RandomResizedCrop, Resize + "
                          "CenterCrop, Resize((h, w))): loadscope batches images of one size")
    if "dtype" not in image:
        raise ConfigError("the transforms end in a PIL image (no ToTensor or PILToTensor): the DataLoader could not "
                          "batch them either")
    if "mean" in image and image["dtype"] == "uint8":
        raise ConfigError("Normalize after PILToTensor (uint8): torchvision refuses it too; use ToTensor")
    if ops:
        image["ops"] = ops
    return image, lines


def _describe(t: Any) -> str:
    args = {k: v for k, v in vars(t).items() if not k.startswith("_") and k not in ("training", "transforms")}
    inner = f"[{', '.join(_describe(x) for x in t.transforms)}], " if hasattr(t, "transforms") else ""
    shown = ", ".join(f"{k}={getattr(v, 'value', v)!r}" if not isinstance(v, float) else f"{k}={v:.4g}"
                      for k, v in args.items())
    return f"{_name(t)}({inner}{shown})"


def dataset_samples(dataset: Any) -> Optional[Tuple[Any, List[Tuple[str, int]], str]]:
    """What a dataset reads, where it is a torchvision ``DatasetFolder`` (``ImageFolder``) or a
    ``Subset`` of one (``random_split`` gives those), at any depth: ``(the DatasetFolder, its
    (path, class) pairs in the order of the dataset's indices, a description)``; else None."""
    from torch.utils.data import Subset

    try:
        from torchvision.datasets import DatasetFolder
    except ImportError:
        return None
    indices: Optional[List[int]] = None
    ds, how = dataset, []
    while isinstance(ds, Subset):
        idx = [int(i) for i in ds.indices]
        indices = idx if indices is None else [idx[i] for i in indices]
        how.append(f"Subset of {len(idx)}")
        ds = ds.dataset
    if not isinstance(ds, DatasetFolder) or not isinstance(getattr(ds, "samples", None), list):
        return None
    samples = ds.samples if indices is None else [ds.samples[i] for i in indices]
    return ds, samples, " of ".join(how)


def _source(ds: Any, samples: Sequence[Tuple[str, int]], whole: bool, how: str) -> Tuple[Any, str]:
    """The source that lists exactly ``samples``: ``ls.Folder(root)`` when its scan gives the
    same files, order and labels (it pickles as its root and scans instead of holding a list),
    else ``ls.Files(samples)``; and the line saying which."""
    from . import _native
    from ._sources import Files, Folder

    name = type(ds).__name__
    files = Files(samples)
    extensions = getattr(ds, "extensions", None)
    differs = "" if whole else f", {how}"
    if whole and extensions:
        try:
            folder = Folder(ds.root, extensions=tuple(extensions), labels="subfolders")
        except ConfigError as e:
            differs = f" (ls.Folder cannot list it: {e})"
        else:
            first = _native.tables_first_difference(folder._table, files._table, "cls")
            if first < 0:
                return folder, (f"{name}({ds.root!r}) -> ls.Folder({ds.root!r}): the same files, order and class "
                                f"indices ({len(ds)} samples, {len(ds.classes)} classes)")
            differs = (f" (its samples list differs from its folder's from sample {first}: cut, filtered, reordered "
                       "or relabelled)" if first < min(len(samples), len(folder)) else
                       f" (its samples list holds {len(samples)} of the {len(folder)} files its folder has)")
    return files, (f"{name}({ds.root!r}){differs} -> ls.Files: its {len(samples)} (path, class) pairs, in its order")


def translate(dataloader: Any) -> Translation:
    """The Loader that delivers what ``dataloader`` delivers, as a ``Translation`` (raises
    ``ConfigError`` naming what has no counterpart). The DataLoader is not iterated."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, SubsetRandomSampler
    from torch.utils.data.distributed import DistributedSampler

    try:
        from torchvision.datasets import DatasetFolder
        from torchvision.datasets import folder as tv_folder
    except ImportError:
        raise ConfigError("translating a DataLoader needs torchvision (its datasets and transforms are what is "
                          "translated), which this environment lacks") from None

    if not isinstance(dataloader, DataLoader):
        raise ConfigError(f"from_dataloader: a torch.utils.data.DataLoader, got {type(dataloader).__name__}")
    found = dataset_samples(dataloader.dataset)
    if found is None:
        raise ConfigError(f"dataset {type(dataloader.dataset).__name__}: loadscope translates torchvision's "
                          "ImageFolder and DatasetFolder (a file per sample), and Subsets of them; write the "
                          "Loader by hand with ls.Files([(path, label), ...]) or ls.FileList for a list of files "
                          "(docs/getting-started.md)")
    ds, samples, how = found
    name = type(ds).__name__
    if type(ds).__getitem__ is not DatasetFolder.__getitem__:
        raise ConfigError(f"dataset {name} has its own __getitem__: what its samples hold is not known from outside; "
                          "translate the ImageFolder it is built on by hand (output=('jpg', 'cls', '__key__') gives "
                          "file names too)")
    if ds.loader not in (tv_folder.default_loader, tv_folder.pil_loader):
        raise ConfigError(f"dataset {name} opens files with its own loader {getattr(ds.loader, '__name__', ds.loader)}: "
                          "loadscope decodes with libjpeg-turbo, libpng, libwebp, ... as PIL's open() + "
                          "convert('RGB') does")
    if ds.target_transform is not None:
        raise ConfigError(f"dataset {name}: target_transform={ds.target_transform!r} has no counterpart; apply it to "
                          "the labels of each batch (from_dataloader(..., map=fn))")
    image, lines = _transform(ds.transform)

    collate = dataloader.collate_fn
    if collate is not torch.utils.data.default_collate and getattr(collate, "__name__", "") != "default_collate":
        raise ConfigError(f"DataLoader(collate_fn={getattr(collate, '__name__', collate)}): a collate function of "
                          "your own has no counterpart; apply it to each batch with from_dataloader(..., map=fn)")
    if dataloader.batch_size is None:
        raise ConfigError("DataLoader(batch_sampler=...): a batch sampler of your own has no counterpart")
    sampler = dataloader.sampler
    loader: Dict[str, Any] = {"batch_size": int(dataloader.batch_size), "drop_last": bool(dataloader.drop_last)}
    if isinstance(sampler, SequentialSampler):
        loader["shuffle"] = False
        order = "SequentialSampler -> shuffle=False"
    elif isinstance(sampler, RandomSampler) and not sampler.replacement and sampler._num_samples is None:
        loader["shuffle"] = True
        order = "RandomSampler -> shuffle=True (another random order: loadscope's is drawn from (seed, epoch))"
    elif isinstance(sampler, SubsetRandomSampler):
        picked = [int(i) for i in sampler.indices]
        samples = [samples[i] for i in picked]
        how = f"SubsetRandomSampler of {len(picked)}" + (f" of {how}" if how else "")
        loader["shuffle"] = True
        order = (f"SubsetRandomSampler({len(picked)} indices) -> those samples, shuffle=True (another random order: "
                 "loadscope's is drawn from (seed, epoch))")
    elif isinstance(sampler, DistributedSampler):
        W, B, n = int(sampler.num_replicas), int(dataloader.batch_size), len(samples)
        loader.update(shuffle=bool(sampler.shuffle), seed=int(sampler.seed), rank=int(sampler.rank), world_size=W)
        order = (f"DistributedSampler(rank {sampler.rank} of {W}, shuffle={sampler.shuffle}, drop_last="
                 f"{sampler.drop_last}) -> rank, world_size, shuffle")
        if dataloader.drop_last:
            # torch: each rank's share (padded, or cut to n // W) batched with its partial batch
            # dropped; loadscope: whole steps of W x B. At most one batch a rank fewer.
            share = n // W if sampler.drop_last else -(-n // W)
            if share // B != n // (W * B):
                if n // (W * B) == 0:
                    raise ConfigError(f"DataLoader(drop_last=True) over DistributedSampler: {n} samples, {W} ranks, "
                                      f"batches of {B}: torch gives each rank {share // B} batch(es), loadscope's whole "
                                      "steps none; use drop_last=False or a smaller batch")
                order += (f"; drop_last=True: whole steps, {n // (W * B)} batches a rank where torch gives "
                          f"{share // B}")
        elif sampler.drop_last:
            loader["drop_last"] = "uneven"
        order += f", drop_last={loader['drop_last']!r}"
    else:
        raise ConfigError(f"DataLoader(sampler={type(sampler).__name__}): loadscope's order is sequential, shuffled "
                          "(RandomSampler, SubsetRandomSampler) or split between ranks as DistributedSampler does; a "
                          "sampler of your own has no counterpart")
    source, line = _source(ds, samples, not how, how)
    lines.insert(0, line)
    workers = int(dataloader.num_workers)
    factor = dataloader.prefetch_factor if workers and dataloader.prefetch_factor else 2
    loader["threads"] = max(1, workers)
    loader["prefetch"] = max(2, workers * factor)  # batches in flight or ready, as the workers hold
    cuda = bool(dataloader.pin_memory) and torch.cuda.is_available()
    # Erasing boxes are drawn before the GPU normalises a float batch: such batches stay on the CPU.
    table = _op_table()
    erase_on_host = any(table[o["name"]]["stage"] == "output" for o in image.get("ops", ())) and \
        image["dtype"] != "uint8"
    if cuda and not erase_on_host:
        loader["device"] = "cuda"
    lines += [f"DataLoader(batch_size={dataloader.batch_size}, drop_last={dataloader.drop_last}) -> batch_size="
              f"{loader['batch_size']}, drop_last={loader['drop_last']!r}", order,
              f"num_workers={workers}, prefetch_factor={factor if workers else None} -> threads={loader['threads']}, "
              f"prefetch={loader['prefetch']} (threads instead of worker processes)",
              f"pin_memory={dataloader.pin_memory} -> " + ("device='cuda' (pinned batches, copied on a side stream)"
                                                           if "device" in loader else
                                                           "CPU batches (RandomErasing on a float output is done "
                                                           "before the copy)" if cuda else "CPU batches"),
              "default_collate's [images, labels] -> output=('jpg', 'cls')"]
    return Translation(source=source, image=image, loader=loader, lines=lines,
                       random=random_transforms(ds.transform))


# Options the DataLoader decides: given to from_dataloader, they must say what it says.
_DERIVED = ("batch_size", "drop_last", "shuffle", "rank", "world_size")
# Options the translation only chooses a default for (threads instead of workers...): yours to set.
_CHOSEN = ("threads", "prefetch", "device", "seed")


def from_dataloader(dataloader: Any, *, check: bool = True, **options: Any) -> Any:
    """A loadscope ``Loader`` equivalent to ``dataloader`` (see the module's docstring):
    batches ``(images, labels)`` as the DataLoader's ``[images, labels]``, over exactly the
    samples it reads.

    ``options``: any other ``Loader`` option, e.g. ``on_error="skip"``, ``error_budget=``,
    ``map=fn`` (what the transforms cannot say: MixUp, a Lambda), ``threads="auto"``,
    ``device=``, ``telemetry=``. ``threads`` and ``prefetch`` default to what the DataLoader's
    workers hold, ``device`` to ``"cuda"`` with ``pin_memory``; what the DataLoader itself
    decides (batch size, order, ranks) may be given only as it says.

    ``check``: draw a few samples spread over the list through both (the dataset's own
    ``__getitem__`` and the Loader) and compare them: the same label, shape and dtype, and,
    where the transforms draw nothing at random, the same pixels within about a level of 255.
    ``check=False`` skips that comparison only: the samples read are the DataLoader's either way."""
    allowed = [o.name for o in OPTIONS if o.name != "output"]
    for k in options:
        if k not in allowed:
            raise ConfigError(f"from_dataloader({k}=...): not a Loader option; allowed are {', '.join(allowed)} "
                              "(source, fields and output come from the DataLoader)")
    t = translate(dataloader)
    for k in _DERIVED:
        if k in options and options[k] != t.loader.get(k, options[k]):
            raise ConfigError(f"from_dataloader({k}={options[k]!r}): the DataLoader says {k}={t.loader[k]!r}; "
                              "change the DataLoader, or leave it out here")
    loader = t.build(**options)
    if check:
        _check_samples(dataloader, t)
    return loader


def _check_samples(dataloader: Any, t: Translation, count: int = 4) -> None:
    """A few samples spread over the list, read by torchvision (the dataset's loader and its
    transforms) and by a Loader over just those files with the same fields: the same labels,
    dtype and shape, and, where the crop is not random, the same pixels within about a level of
    255 (two decoders and two resamplers: docs/augmentations.md). The ops are left out of both
    sides: they are torchvision's on the same uint8 pixels bit for bit (tests/python/
    test_augment.py), and histogram ops (equalize, autocontrast) would turn a decoder's
    rounding into whole levels. ConfigError naming the sample that differs."""
    import torch
    from torch.utils.data import SubsetRandomSampler

    from . import Image, Int
    from ._loader import Loader
    from ._sources import Files

    found = dataset_samples(dataloader.dataset)
    assert found is not None  # translate() refused it otherwise
    ds, samples, _ = found
    if isinstance(dataloader.sampler, SubsetRandomSampler):
        samples = [samples[int(i)] for i in dataloader.sampler.indices]
    n = len(samples)
    if not n:
        return
    table = _op_table()
    plain = [x for x in _transforms(ds.transform) if _name(x) not in table and _name(x) != "RandomApply"]
    random = [_name(x) for x in plain if _name(x) in ("RandomResizedCrop", "RandomHorizontalFlip")]
    image = {k: v for k, v in t.image.items() if k != "ops"}
    positions = sorted({n * k // count for k in range(count)} | {n - 1})
    pairs = [samples[i] for i in positions]
    small = Loader(Files(pairs), fields={"jpg": Image(**image), "cls": Int()}, output=("jpg", "cls"),
                   batch_size=len(pairs), threads=1, telemetry=False, rank=0, world_size=1)  # not the job's ranks
    images, labels = next(iter(small))
    level = 1.0 if image["dtype"] == "uint8" else 1.0 / 255 / min(image.get("std") or (1.0,))
    for j, (path, label) in enumerate(pairs):
        where = f"check: sample {positions[j]} ({path})"
        key, members = t.source._table.sample(positions[j])  # what the translated source lists there
        cls = next((int(v) for m, _, v in members if m == "cls"), None)
        if os.fsdecode(key) != path or cls != label:
            raise ConfigError(f"{where}: the translated source lists {os.fsdecode(key)!r} with class {cls} there, the "
                              f"dataset {path!r} with class {label}")
        if int(label) != int(labels[j]):
            raise ConfigError(f"{where}: the dataset labels it {int(label)}, loadscope {int(labels[j])}")
        x = ds.loader(path)
        for tf in plain:
            x = tf(x)
        if not isinstance(x, torch.Tensor) or x.dtype != images.dtype or tuple(x.shape) != tuple(images[j].shape):
            got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ConfigError(f"{where}: torchvision's transforms give {got}, loadscope {images.dtype} "
                              f"{tuple(images[j].shape)}")
        if not random:
            diff = (x.double() - images[j].double()).abs().mean().item() / level
            if diff > 1.0:
                raise ConfigError(f"{where}: loadscope's pixels differ from torchvision's by {diff:.2f} levels of 255 "
                                  "on average (two decoders agree within about 1); check=False uses it anyway — and "
                                  "tell us about the file")
