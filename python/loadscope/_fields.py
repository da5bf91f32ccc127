"""Field declarations: what a loader makes of each member of a sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

from ._errors import ConfigError

Size = Union[int, Tuple[int, int]]

CROPS = ("random_resized", "center", "resize")


def _keys(keys: Optional[Union[str, Sequence[str]]], default: str) -> list:
    if keys is None:
        keys = default
    if isinstance(keys, str):
        keys = keys.split(";")
    keys = [k.strip().lower() for k in keys if k.strip()]
    if not keys:
        raise ConfigError("keys: give at least one member name, e.g. 'jpg' or 'jpg;jpeg;png'")
    return keys


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
    keys: Optional[Union[str, Sequence[str]]] = None

    @property
    def hw(self) -> Tuple[int, int]:
        if isinstance(self.size, int):
            return (self.size, self.size)
        h, w = self.size
        return (int(h), int(w))

    def _native(self, name: str, native):
        if self.crop not in CROPS:
            raise ConfigError(f"Image.crop={self.crop!r} is not one of {', '.join(CROPS)}")
        if isinstance(self.size, bool) or not (
            isinstance(self.size, int) or (isinstance(self.size, (tuple, list)) and len(self.size) == 2)
        ):
            raise ConfigError(f"Image.size must be an int or (height, width), got {self.size!r}")
        if self.resize is not None and self.crop != "center":
            raise ConfigError("Image.resize applies only to crop='center'")
        h, w = self.hw
        return native.image_field(
            name=name,
            keys=_keys(self.keys, name),
            height=h,
            width=w,
            crop=self.crop,
            scale=tuple(map(float, self.scale)),
            ratio=tuple(map(float, self.ratio)),
            resize=int(self.resize or 0),
            flip=float(self.flip),
            channels_last=bool(self.channels_last),
            exif=bool(self.exif),
            dct_scaling=(self.crop == "random_resized") if self.dct_scaling is None else bool(self.dct_scaling),
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
