"""Per-sample augmentations: ``Op``, one operation of the C++ table (augment/ops.cc) by name,
and the torchvision-style constructors ``RandAugment``, ``ColorJitter`` and ``RandomErasing``
that make one. The table declares each op's parameters, bounds and defaults once; every check
here beyond type conversion is the C++ one (``_native.augmentation``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _native
from ._errors import ConfigError


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _range(owner: str, name: str, value) -> Tuple[float, float]:
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(_number(v) for v in value)
    if not ok:
        raise ConfigError(f"{owner}.{name} must be a pair (min, max) of numbers, got {value!r}")
    return (float(value[0]), float(value[1]))


def _probability(owner: str, name: str, value) -> float:
    if not _number(value) or not 0 <= value <= 1:
        raise ConfigError(f"{owner}.{name} is a probability in [0, 1], got {value!r}")
    return float(value)


def _triple(owner: str, name: str, value, default: float) -> Tuple[float, float, float]:
    """A per-channel statistic: None (the default), one number for all channels, or three."""
    if value is None:
        return (default,) * 3
    values = [value] * 3 if _number(value) else value
    ok = isinstance(values, (tuple, list)) and len(values) == 3
    ok = ok and all(_number(v) and math.isfinite(v) for v in values)
    if not ok:
        units = ("in [0, 1] units, e.g. loadscope.IMAGENET_" + name.upper()) if name in ("mean", "std") \
            else "in the output's units (0..255 for uint8; after mean/std for a float dtype); 'random' is not supported"
        raise ConfigError(f"{owner}.{name} must be a number or three (R, G, B) {units}, got {value!r}")
    return tuple(float(v) for v in values)  # type: ignore[return-value]


def augmentations() -> List[Dict[str, Any]]:
    """Every op ``Op`` accepts, from the C++ table: ``[{'name', 'doc', 'stage', 'params': [{'name',
    'kind', 'min', 'max', 'min_open', 'default', 'doc'}, ...]}, ...]``. ``stage`` 'pixels' ops run
    on the uint8 image after the crop, 'output' ops after the ``dtype`` conversion; a list gives
    every 'pixels' op first."""
    return _native.augmentations()


class Op:
    """One per-sample augmentation, by its name in the table (``loadscope.augmentations()``):
    ``Op("RandomGrayscale", p=0.2)``, ``Op("ColorJitter", p=0.8, brightness=(0.6, 1.4))``.
    Parameters not given take the table's defaults; ranges are ``(min, max)`` pairs, and an RGB
    value one number or three. The C++ side checks them here, where the mistake is made.
    ``Image(ops=[...])`` runs a list of them in its order; every draw is a function of
    (seed, epoch, position)."""

    __slots__ = ("_call",)

    def __init__(self, name: str, **params: Any) -> None:
        if not isinstance(name, str):
            raise ConfigError(f"Op: the name is a string (one of {', '.join(a['name'] for a in augmentations())}), "
                              f"got {name!r}")
        values: Dict[str, List[float]] = {}
        for key, value in params.items():
            seq = list(value) if isinstance(value, (tuple, list)) else [value]
            if not seq or not all(_number(v) for v in seq):
                raise ConfigError(f"{name}.{key} must be a number or a tuple of numbers, got {value!r}")
            values[key] = [float(v) for v in seq]
        self._call = _native.augmentation(name, values)

    @property
    def name(self) -> str:
        return self._call.name

    @property
    def params(self) -> Dict[str, Any]:
        """Every parameter, defaults included, as the op runs with them."""
        return self._call.params

    @property
    def stage(self) -> str:
        """'pixels' (uint8, before the dtype conversion) or 'output' (after it)."""
        return self._call.stage

    def op(self) -> "Op":
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Op) and (self.name, self.params) == (other.name, other.params)

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.params.items())))

    def __repr__(self) -> str:
        return f"Op({self.name!r}, " + ", ".join(f"{k}={v!r}" for k, v in self.params.items()) + ")"


def _jitter_range(name: str, value, center: float) -> Tuple[float, float]:
    """torchvision's ColorJitter._check_input: a number x means [center - x, center + x] (clipped
    at 0 for factors), a pair is the range itself; the bounds are the table's."""
    if _number(value):
        if value < 0:
            raise ConfigError(f"ColorJitter.{name}={value!r}: a number must be >= 0")
        lo, hi = center - float(value), center + float(value)
        return (max(lo, 0.0), hi) if center else (lo, hi)
    return _range("ColorJitter", name, value)


@dataclass(frozen=True)
class ColorJitter:
    """torchvision's ``ColorJitter`` per sample, in C++: brightness, contrast, saturation (a
    number x means factors in [max(0, 1 - x), 1 + x], or a (min, max) pair) and hue (x means
    [-x, x], at most 0.5), applied in a random order with factors drawn from (seed, epoch,
    position); ``p``: the probability it is applied at all (``RandomApply([ColorJitter], p)``).
    The ops are torchvision's on uint8 tensors, bit for bit (tested)."""

    brightness: Union[float, Tuple[float, float]] = 0.0
    contrast: Union[float, Tuple[float, float]] = 0.0
    saturation: Union[float, Tuple[float, float]] = 0.0
    hue: Union[float, Tuple[float, float]] = 0.0
    p: float = 1.0

    def __post_init__(self) -> None:
        self.op()

    def op(self) -> Op:
        ranges = {n: _jitter_range(n, getattr(self, n), 1.0) for n in ("brightness", "contrast", "saturation")}
        return Op("ColorJitter", p=self.p, hue=_jitter_range("hue", self.hue, 0.0), **ranges)


@dataclass(frozen=True)
class RandomErasing:
    """torchvision's ``RandomErasing`` per sample: with probability ``p`` a box of ``scale`` of
    the area and aspect ratio in ``ratio`` (log-uniform) is filled with ``value``, in the
    output's units (after ``dtype``/``mean``/``std``: 0 is the mean colour of a normalised
    image, as torchvision's recipe has it; 0..255 for uint8). One number or three (R, G, B)."""

    p: float = 0.5
    scale: Tuple[float, float] = (0.02, 0.33)
    ratio: Tuple[float, float] = (0.3, 3.3)
    value: Union[float, Tuple[float, float, float]] = 0.0

    def __post_init__(self) -> None:
        self.op()

    def op(self) -> Op:
        return Op("RandomErasing", p=self.p, scale=self.scale, ratio=self.ratio,
                  value=_triple("RandomErasing", "value", self.value, 0.0))


@dataclass(frozen=True)
class RandAugment:
    """torchvision's ``RandAugment`` per sample, in C++: ``num_ops`` ops drawn from its 14
    (identity, shear x/y, translate x/y, rotate, brightness, color, contrast, sharpness,
    posterize, solarize, autocontrast, equalize) at bin ``magnitude`` of
    ``num_magnitude_bins``, signed ops negated half the time; nearest-neighbour geometry with
    zero fill. Each op equals torchvision's on uint8 tensors (tested op by op)."""

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31

    def __post_init__(self) -> None:
        self.op()

    def op(self) -> Op:
        return Op("RandAugment", num_ops=self.num_ops, magnitude=self.magnitude,
                  num_magnitude_bins=self.num_magnitude_bins)


AnyOp = Union[Op, ColorJitter, RandomErasing, RandAugment]


def as_ops(owner: str, ops) -> Tuple[Op, ...]:
    """A list of augmentations (``Op`` or the constructors above) as Ops, or ConfigError."""
    if not isinstance(ops, (list, tuple)):
        raise ConfigError(f"{owner}.ops must be a list of loadscope.Op (or RandAugment, ColorJitter, "
                          f"RandomErasing), got {ops!r}")
    out = []
    for op in ops:
        if not isinstance(op, (Op, ColorJitter, RandomErasing, RandAugment)):
            hint = (" (a torchvision transform cannot run in the loader's C++ threads: use loadscope.Op with the "
                    "same name, see docs/augmentations.md)" if type(op).__module__.startswith("torchvision") else "")
            raise ConfigError(f"{owner}.ops: {op!r} is not a loadscope.Op (or RandAugment, ColorJitter, "
                              f"RandomErasing){hint}")
        out.append(op.op())
    order = _native.augmentation_order([op._call for op in out])
    if order:
        raise ConfigError(f"{owner}.ops: {order}")
    return tuple(out)


def keyword_ops(randaugment: Optional[RandAugment], color: Optional[ColorJitter], grayscale: float,
                erasing: Optional[RandomErasing]) -> Tuple[Op, ...]:
    """Image(...)'s keyword augmentations as the list they stand for, in the order of
    torchvision's and timm's recipes (Note [augmentation draws] in augment/ops.h)."""
    out = [randaugment.op()] if randaugment is not None else []
    out += [color.op()] if color is not None else []
    out += [Op("RandomGrayscale", p=grayscale)] if grayscale else []
    out += [erasing.op()] if erasing is not None else []
    return tuple(out)
