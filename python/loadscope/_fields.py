"""Field declarations: what a loader makes of each member of a sample."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

from ._errors import ConfigError

Size = Union[int, Tuple[int, int]]

CROPS = ("random_resized", "center", "resize")

# An Image field named like an image type reads any image member, its own name first: a folder
# of ImageNet's .JPEG files works with fields={"jpg": Image(...)}.
IMAGE_MEMBERS = ("jpg", "jpeg", "png", "ppm", "pgm", "bmp", "tif", "tiff", "webp")


def _keys(keys: Optional[Union[str, Sequence[str]]], default: str) -> list:
    if keys is None:
        keys = default
    if isinstance(keys, str):
        keys = keys.split(";")
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"keys must be a string like 'jpg;png' or a list of strings, got {keys!r}")
    keys = [k.strip().lower() for k in keys if k.strip()]
    if not keys:
        raise ConfigError("keys: give at least one member name, e.g. 'jpg' or 'jpg;jpeg;png'")
    return keys


def _bool(owner: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{owner}.{name} must be True or False, got {value!r}")
    return value


def _int(owner: str, name: str, value, minimum: int) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)  # ints, numpy ints; not floats
    except TypeError:
        raise ConfigError(f"{owner}.{name} must be an int >= {minimum}, got {value!r}") from None
    if v < minimum:
        raise ConfigError(f"{owner}.{name} must be an int >= {minimum}, got {value!r}")
    return v


def _range(owner: str, name: str, value) -> Tuple[float, float]:
    ok = isinstance(value, (tuple, list)) and len(value) == 2
    ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not ok:
        raise ConfigError(f"{owner}.{name} must be a pair (min, max) of numbers, got {value!r}")
    return (float(value[0]), float(value[1]))


class Field:
    """Base of all fields. Every field takes ``keys``: the sample members to read it from,
    first match wins (``"jpg;png"`` or ``["jpg", "png"]``); by default the field's name in
    ``fields=``."""

    keys: Optional[Union[str, Sequence[str]]] = None

    def _native(self, name: str, native):  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True)
class Image(Field):
    """A JPEG or PNG image, decoded and augmented in C++ into ``uint8 [B, 3, H, W]``
    (``[B, H, W, 3]`` with ``channels_last=True``), RGB.

    Args:
        size: output size, an int (square) or ``(height, width)``.
        crop: ``"random_resized"`` (torchvision RandomResizedCrop with ``scale`` and ``ratio``),
            ``"center"`` (Resize of the shorter side to ``resize``, then CenterCrop),
            or ``"resize"`` (the whole image squeezed to ``size``).
        scale, ratio: RandomResizedCrop's area and aspect-ratio ranges.
        resize: shorter side before a center crop; default: the output size.
        flip: probability of a horizontal flip.
        channels_last: lay pixels out as ``[B, H, W, 3]``.
        exif: apply the EXIF orientation, so images come out upright as viewers show them.
        dct_scaling: decode JPEGs at 1/8, 1/4 or 1/2 scale when the crop still covers the
            output at that scale (about 2x faster on large photos; slightly sharper than
            torchvision's resize). ``None`` (default): on for ``random_resized`` (training),
            off for ``center`` and ``resize`` (evaluation, where matching torchvision matters).
        max_pixels: larger images fail with a DecodeError before decoding (decompression
            bombs); Pillow's limit by default.
        keys: the members to read; by default the field's name, and when that name is an image
            type ("jpg", "png", ...) any image member, that one first.
    """

    size: Size = 224
    crop: str = "random_resized"
    scale: Tuple[float, float] = (0.08, 1.0)
    ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    resize: Optional[int] = None
    flip: float = 0.0
    channels_last: bool = False
    exif: bool = True
    dct_scaling: Optional[bool] = None
    max_pixels: int = 178956970
    keys: Optional[Union[str, Sequence[str]]] = None

    def __post_init__(self) -> None:  # every argument checked here, where the mistake is made
        if self.crop not in CROPS:
            raise ConfigError(f"Image.crop={self.crop!r} is not one of {', '.join(CROPS)}")
        if isinstance(self.size, (tuple, list)) and len(self.size) == 2:
            size = (_int("Image", "size", self.size[0], 1), _int("Image", "size", self.size[1], 1))
        elif isinstance(self.size, (tuple, list)):
            raise ConfigError(f"Image.size must be an int or (height, width), got {self.size!r}")
        else:
            size = _int("Image", "size", self.size, 1)
        object.__setattr__(self, "size", size)
        _range("Image", "scale", self.scale)
        _range("Image", "ratio", self.ratio)
        if self.resize is not None:
            if self.crop != "center":
                raise ConfigError("Image.resize applies only to crop='center'")
            _int("Image", "resize", self.resize, 1)
        if isinstance(self.flip, bool) or not isinstance(self.flip, (int, float)) or not 0 <= self.flip <= 1:
            raise ConfigError(f"Image.flip is a probability in [0, 1], got {self.flip!r}")
        _bool("Image", "channels_last", self.channels_last)
        _bool("Image", "exif", self.exif)
        if self.dct_scaling is not None:
            _bool("Image", "dct_scaling", self.dct_scaling)
        _int("Image", "max_pixels", self.max_pixels, 1)

    @property
    def hw(self) -> Tuple[int, int]:
        if isinstance(self.size, int):
            return (self.size, self.size)
        h, w = self.size
        return (int(h), int(w))

    def _native(self, name: str, native):
        keys = _keys(self.keys, name)
        if self.keys is None and name.lower() in IMAGE_MEMBERS:
            keys = [name.lower()] + [k for k in IMAGE_MEMBERS if k != name.lower()]
        h, w = self.hw
        return native.image_field(
            name=name,
            keys=keys,
            height=h,
            width=w,
            crop=self.crop,
            scale=_range("Image", "scale", self.scale),
            ratio=_range("Image", "ratio", self.ratio),
            resize=int(self.resize or 0),
            flip=float(self.flip),
            channels_last=self.channels_last,
            exif=self.exif,
            dct_scaling=(self.crop == "random_resized") if self.dct_scaling is None else self.dct_scaling,
            max_pixels=int(self.max_pixels),
        )


@dataclass(frozen=True)
class Int(Field):
    """An integer (e.g. a class label stored as text ``"3"``), batched as ``int64 [B]``."""

    keys: Optional[Union[str, Sequence[str]]] = None

    def _native(self, name, native):
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="int")


@dataclass(frozen=True)
class Text(Field):
    """UTF-8 text (a caption), batched as a list of ``str``."""

    keys: Optional[Union[str, Sequence[str]]] = None

    def _native(self, name, native):
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="text")


@dataclass(frozen=True)
class Json(Field):
    """A JSON document, validated in C++ and batched as a list of parsed Python objects."""

    keys: Optional[Union[str, Sequence[str]]] = None

    def _native(self, name, native):
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="json")


@dataclass(frozen=True)
class Bytes(Field):
    """The member's raw bytes, batched as a list of ``bytes``."""

    keys: Optional[Union[str, Sequence[str]]] = None

    def _native(self, name, native):
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="bytes")
