"""The swap in one call: a torch ``DataLoader`` over an ``ImageFolder`` (or another
``DatasetFolder``) with torchvision transforms, translated option for option into a loadscope
``Loader`` that yields batches of the same structure — ``[images, labels]`` with the same
dtype, shape and value range, the same files in the same order with the same class indices.

    loader = ls.from_dataloader(make_loader(train=True))      # the DataLoader is read, never iterated

``translate(dataloader)`` says what each part became (``bench baseline`` writes it into the
factory it generates). What has no counterpart is refused by name with a ``ConfigError`` —
a transform loadscope does not have, one out of the order loadscope applies them in, a
``Dataset`` whose ``__getitem__`` is its own — rather than approximated silently.

Recognised: ``RandomResizedCrop``, ``Resize`` (+ ``CenterCrop``), ``RandomHorizontalFlip``,
``RandAugment``, ``ColorJitter`` (also inside ``RandomApply``), ``RandomGrayscale``,
``ToTensor`` / ``PILToTensor`` (v2: ``ToImage``, ``ToDtype``), ``Normalize``,
``RandomErasing``; from ``torchvision.transforms`` and ``torchvision.transforms.v2``. Every
one of them is a built-in operation of ``loadscope.Image`` (docs/augmentations.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple, Union

from ._errors import ConfigError

# Every transform translated: (its stage in the order loadscope.Image applies its operations,
# pipeline/image_field.cc; what loadscope.Image holds once of it). A pipeline that runs them in
# another order would draw other images, and a second one of a kind would be lost: both
# refused, by name. A flip commutes with the crops: the same stage.
_ROLES = {"RandomResizedCrop": (0, "crop"), "Resize": (0, "crop"), "CenterCrop": (0, "crop"),
          "RandomHorizontalFlip": (0, "flip"), "RandAugment": (1, "randaugment"), "ColorJitter": (2, "color"),
          "RandomApply": (2, "color"), "RandomGrayscale": (3, "grayscale"), "ToTensor": (4, "float"),
          "ToDtype": (4, "float"), "Normalize": (5, "normalize"), "RandomErasing": (6, "erasing")}
# Conversions to uint8 (a PIL image or a uint8 tensor: the same pixels wherever they come).
_UINT8 = ("PILToTensor", "ToImage")


@dataclass
class Translation:
    """What ``translate`` found: the ``Loader``'s arguments and, per part of the DataLoader,
    what it became (one line each, for people)."""

    source: Dict[str, Any]
    image: Dict[str, Any]
    loader: Dict[str, Any]
    lines: List[str] = field(default_factory=list)

    def build(self, threads: Union[int, str, None] = None) -> Any:
        from . import ColorJitter, Folder, Image, Int, Loader, RandAugment, RandomErasing

        image = dict(self.image)
        for key, cls in (("color", ColorJitter), ("randaugment", RandAugment), ("erasing", RandomErasing)):
            if key in image:
                image[key] = cls(**image[key])
        source = Folder(self.source["root"], extensions=self.source["extensions"], labels="subfolders")
        kw = dict(self.loader)
        if threads is not None:
            kw["threads"] = threads
        return Loader(source, fields={"jpg": Image(**image), "cls": Int()}, output=("jpg", "cls"), **kw)


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


def _jitter(value: Any) -> Any:
    """ColorJitter's stored (min, max), or None (not jittered), as loadscope's argument."""
    return 0.0 if value is None else (float(value[0]), float(value[1]))


def _transforms(transform: Any) -> List[Any]:
    if transform is None:
        return []
    if _name(transform) == "Compose" and _is_torchvision(transform):
        out: List[Any] = []
        for t in transform.transforms:
            out += _transforms(t)
        return out
    return [transform]


def random_transforms(transform: Any) -> List[str]:
    """The random augmentations of a torchvision transform pipeline, by name: what makes two
    pipelines, or one DataLoader with another number of workers, draw different images."""
    return [_name(t) for t in _transforms(transform) if _name(t).startswith("Random") or _name(t) in (
        "RandAugment", "AutoAugment", "TrivialAugmentWide", "AugMix", "ColorJitter")]


def _transform(transform: Any) -> Tuple[Dict[str, Any], List[str]]:
    """ls.Image's keyword arguments for a torchvision transform pipeline, and the lines saying
    what became of each part."""
    image: Dict[str, Any] = {"exif": False}  # PIL's open() in ImageFolder does not rotate by EXIF
    lines: List[str] = []
    stage, resize = -1, None
    seen: set = set()
    ts = _transforms(transform)
    for i, t in enumerate(ts):
        name = _name(t)
        if not _is_torchvision(t):
            raise ConfigError(f"transform {name} ({type(t).__module__}) is not one of torchvision's: loadscope cannot "
                              "run it in its threads; apply it to the batch with Loader(map=...) instead "
                              "(docs/augmentations.md)")
        if name not in (*_ROLES, *_UINT8):
            raise ConfigError(f"transform {name}: loadscope has no counterpart (it translates "
                              f"{', '.join((*_ROLES, *_UINT8))}); apply it with Loader(map=...) to whole batches, "
                              "or leave it out")
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
            image["flip"] = float(t.p)
            what = f"flip={float(t.p):g}"  # a flip commutes with the crops
        elif name == "RandAugment":
            mode = getattr(t, "interpolation", "nearest")
            if "nearest" not in str(getattr(mode, "value", mode)).lower():
                raise ConfigError(f"RandAugment(interpolation={mode}): loadscope's RandAugment samples its geometry "
                                  "nearest-neighbour (torchvision's default) only")
            if getattr(t, "fill", None) not in (None, 0, [0], (0,)):
                raise ConfigError(f"RandAugment(fill={t.fill}): loadscope fills with 0 only")
            image["randaugment"] = {"num_ops": int(t.num_ops), "magnitude": int(t.magnitude),
                                    "num_magnitude_bins": int(t.num_magnitude_bins)}
            what = "randaugment=ls.RandAugment(" + ", ".join(
                f"{k}={v}" for k, v in image["randaugment"].items()) + ")"
        elif name in ("ColorJitter", "RandomApply"):
            p = 1.0
            jitter = t
            if name == "RandomApply":
                inner = _transforms(t.transforms[0]) if len(t.transforms) == 1 else list(t.transforms)
                if len(inner) != 1 or _name(inner[0]) != "ColorJitter":
                    raise ConfigError(f"RandomApply({', '.join(_name(x) for x in inner)}): loadscope applies a "
                                      "ColorJitter with a probability (ColorJitter(..., p=)), nothing else")
                p, jitter = float(t.p), inner[0]
            image["color"] = {k: _jitter(getattr(jitter, k)) for k in ("brightness", "contrast", "saturation", "hue")}
            image["color"]["p"] = p
            what = "color=ls.ColorJitter(" + ", ".join(f"{k}={v}" for k, v in image["color"].items()) + ")"
        elif name == "RandomGrayscale":
            image["grayscale"] = float(t.p)
            what = f"grayscale={float(t.p):g}"
        elif name == "ToTensor":
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
        elif name == "Normalize":
            image.update(mean=_channels("mean", t.mean), std=_channels("std", t.std))
            what = f"mean={image['mean']}, std={image['std']}"
        elif name == "RandomErasing":
            value = t.value
            if isinstance(value, str):
                raise ConfigError(f"RandomErasing(value={value!r}): loadscope fills with a number or an RGB triple")
            value = [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            image["erasing"] = {"p": float(t.p), "scale": tuple(t.scale), "ratio": tuple(t.ratio),
                                "value": tuple(value) if isinstance(value, list) else value}
            what = "erasing=ls.RandomErasing(" + ", ".join(
                f"{k}={v}" for k, v in image["erasing"].items()) + ")"
        stage_of, kind = _ROLES[name]
        if kind in seen:
            raise ConfigError(f"transform {name}: a second {kind} in the Compose; loadscope.Image applies each "
                              "operation once")
        seen.add(kind)
        if stage_of < stage:
            raise ConfigError(f"transform {name} comes after a later stage of loadscope's fixed order (crop and flip, "
                              "RandAugment, ColorJitter, RandomGrayscale, to tensor, Normalize, RandomErasing): "
                              "it would draw other images; reorder the Compose")
        stage = max(stage, stage_of)
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
    return image, lines


def _describe(t: Any) -> str:
    args = {k: v for k, v in vars(t).items() if not k.startswith("_") and k not in ("training", "transforms")}
    inner = f"[{', '.join(_describe(x) for x in t.transforms)}], " if hasattr(t, "transforms") else ""
    shown = ", ".join(f"{k}={getattr(v, 'value', v)!r}" if not isinstance(v, float) else f"{k}={v:.4g}"
                      for k, v in args.items())
    return f"{_name(t)}({inner}{shown})"


def translate(dataloader: Any) -> Translation:
    """The Loader that delivers what ``dataloader`` delivers, as a ``Translation`` (raises
    ``ConfigError`` naming what has no counterpart). The DataLoader is not iterated."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler
    from torch.utils.data.distributed import DistributedSampler

    try:
        from torchvision.datasets import DatasetFolder
        from torchvision.datasets import folder as tv_folder
    except ImportError:
        raise ConfigError("translating a DataLoader needs torchvision (its datasets and transforms are what is "
                          "translated), which this environment lacks") from None

    if not isinstance(dataloader, DataLoader):
        raise ConfigError(f"from_dataloader: a torch.utils.data.DataLoader, got {type(dataloader).__name__}")
    ds = dataloader.dataset
    if not isinstance(ds, DatasetFolder):
        raise ConfigError(f"dataset {type(ds).__name__}: loadscope translates torchvision's ImageFolder and "
                          "DatasetFolder (a file per sample in class folders); write the Loader by hand with "
                          "ls.FileList for a list of files (docs/getting-started.md)")
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
                          "the labels of each batch")
    extensions = getattr(ds, "extensions", None)
    if not extensions:
        raise ConfigError(f"dataset {name} selects its files with is_valid_file: loadscope's Folder selects by "
                          "extension")
    image, lines = _transform(ds.transform)
    lines.insert(0, f"{name}({ds.root!r}) -> ls.Folder({ds.root!r}): the same files, order and class indices "
                    f"({len(ds)} samples, {len(ds.classes)} classes)")

    collate = dataloader.collate_fn
    if collate is not torch.utils.data.default_collate and getattr(collate, "__name__", "") != "default_collate":
        raise ConfigError(f"DataLoader(collate_fn={getattr(collate, '__name__', collate)}): a collate function of "
                          "your own has no counterpart; apply it to each batch with Loader(map=...)")
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
    elif isinstance(sampler, DistributedSampler):
        W, B, n = int(sampler.num_replicas), int(dataloader.batch_size), len(ds)
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
                          "or split between ranks as DistributedSampler does; a sampler of your own has no counterpart")
    workers = int(dataloader.num_workers)
    factor = dataloader.prefetch_factor if workers and dataloader.prefetch_factor else 2
    loader["threads"] = max(1, workers)
    loader["prefetch"] = max(2, workers * factor)  # batches in flight or ready, as the workers hold
    cuda = bool(dataloader.pin_memory) and torch.cuda.is_available()
    # Erasing boxes are drawn before the GPU normalises a float batch: such batches stay on the CPU.
    erase_on_host = "erasing" in image and image["dtype"] != "uint8"
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
    return Translation(source={"root": ds.root, "extensions": tuple(extensions)}, image=image, loader=loader,
                       lines=lines)


def from_dataloader(dataloader: Any, *, threads: Union[int, str, None] = None, check: bool = True) -> Any:
    """A loadscope ``Loader`` equivalent to ``dataloader`` (see the module's docstring):
    batches ``(images, labels)`` as the DataLoader's ``[images, labels]``. ``threads``: the
    decoding threads (default: the DataLoader's ``num_workers``, at least 1; ``"auto"``: see
    docs/tuning.md). ``check``: verify
    that the Loader lists the dataset's files and classes (the class names, the counts, and
    100 files spread over the list)."""
    t = translate(dataloader)
    loader = t.build(threads)
    if check:
        _check_same_files(dataloader.dataset, loader.source)
    return loader


def _check_same_files(ds: Any, folder: Any) -> None:
    """The same files in the same order with the same labels: the class lists, the counts, and
    100 samples spread over the list (path and label each)."""
    import os

    name = type(ds).__name__
    if list(folder.classes) != list(ds.classes) or len(folder) != len(ds):
        raise ConfigError(f"ls.Folder({folder.root!r}) lists {len(folder)} files in {len(folder.classes)} classes where "
                          f"{name} has {len(ds)} in {len(ds.classes)}: they would read different samples")
    if dict(ds.class_to_idx) != folder.class_to_idx:
        raise ConfigError(f"{name}.class_to_idx is not the classes' sorted order ({ds.class_to_idx}): loadscope's "
                          "labels are; the two would label samples differently")
    n = len(ds)
    for i in sorted({n * k // 100 for k in range(100)} | {n - 1}) if n else []:
        key, _ = folder._table.sample(i)
        path, label = ds.samples[i]
        if os.path.realpath(os.fsdecode(key)) != os.path.realpath(path):
            raise ConfigError(f"sample {i}: ls.Folder lists {os.fsdecode(key)!r}, {name} {path!r}: the "
                              "two would read different samples")
        top = os.path.relpath(path, ds.root).split(os.sep)[0]
        if folder.class_to_idx.get(top) != label:
            raise ConfigError(f"sample {i} ({path}): {name} labels it {label}, its folder {top!r} is class "
                              f"{folder.class_to_idx.get(top)}: the two would label samples differently")
