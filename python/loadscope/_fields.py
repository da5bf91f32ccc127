"""Field declarations: what a loader makes of each member of a sample."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

from . import _native
from ._augment import AnyOp, ColorJitter, Op, RandAugment, RandomErasing, _probability, _range, _triple, as_ops, \
    keyword_ops
from ._errors import ConfigError

Size = Union[int, Tuple[int, int]]

CROPS = ("random_resized", "center", "resize")

# The member names come from the format table the decoders use (decode/formats.h): an Image
# field named like an image type reads any image member, its own name first, so a folder of
# ImageNet's .JPEG files works with fields={"jpg": Image(...)}.
_FORMATS = _native.formats()
IMAGE_MEMBERS = tuple(e for _, exts in _FORMATS["image"] for e in exts)
# Likewise a VideoClip field named like a video container (or "video") reads any video member.
VIDEO_MEMBERS = tuple(_FORMATS["video"])
POSITIONS = ("random", "uniform", "center")
DTYPES = ("uint8", "float32", "float16", "bfloat16")
# torchvision's ImageNet statistics (in [0, 1] units), for Image(mean=..., std=...).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SHORT = ("pad", "fail")


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


# The engine's ranges of integer options (pipeline/field.h), the one source of truth.
BOUNDS = _native.option_bounds()


def int_arg(what: str, value: Any, minimum: int, maximum: Optional[int] = None) -> int:
    """value as an int (numpy ints too; not bools or floats) in [minimum, maximum]."""
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        v = None
    if v is None or v < minimum or (maximum is not None and v > maximum):
        bound = f"an int >= {minimum}" if maximum is None else f"an int in [{minimum}, {maximum}]"
        raise ConfigError(f"{what} must be {bound}, got {value!r}")
    return v


def _int(owner: str, name: str, value, minimum: Optional[int] = None) -> int:
    """A field's integer option: in the engine's range for `name` (BOUNDS), or >= minimum for
    options the engine has no range for."""
    lo, hi = BOUNDS[name] if minimum is None else (minimum, None)
    return int_arg(f"{owner}.{name}", value, lo, None if hi is None or hi >= 2**63 - 1 else hi)


def _dtype(owner: str, value) -> str:
    name = str(value).replace("torch.", "") if value is not None else ""
    if name not in DTYPES:
        raise ConfigError(f"{owner}.dtype={value!r}: allowed are {', '.join(DTYPES)} (or the torch dtypes)")
    return name


def normalize(x, dtype: str, mean: Sequence[float], std: Sequence[float], channels_last: bool):
    """uint8 images -> (x / 255 - mean) / std in `dtype`, with torch ops: what Image(dtype=...)
    does in C++, done here on the GPU after the copy when the Loader has a device (4x fewer
    bytes to copy than float32)."""
    import torch

    shape = (1, 1, 1, 3) if channels_last else (1, 3, 1, 1)
    m = torch.tensor(mean, dtype=torch.float32, device=x.device).view(shape)
    s = torch.tensor(std, dtype=torch.float32, device=x.device).view(shape)
    return x.to(torch.float32).div_(255).sub_(m).div_(s).to(getattr(torch, dtype))


class Field:
    """Base of all fields. Every field takes ``keys``: the sample members to read it from,
    first match wins (``"jpg;png"`` or ``["jpg", "png"]``); by default the field's name in
    ``fields=``. ``optional=True``: a sample without the member gets zeros (empty strings) and
    ``"<name>.present"`` tells which samples had it — for datasets that mix images and videos."""

    keys: Optional[Union[str, Sequence[str]]] = None
    optional: bool = False

    def _native(self, name: str, native, on_device: bool = False):  # pragma: no cover - overridden
        """The native field. on_device: batches go to a CUDA device, where float outputs are made
        after the copy (only images have such work to move)."""
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
        dtype: ``"uint8"`` (default: 0..255), or ``"float32"``, ``"float16"``, ``"bfloat16"``
            (or the torch dtypes): ``(x / 255 - mean) / std``, torchvision's ToTensor +
            Normalize. Done in the loader's threads, so it counts as input work; with a CUDA
            ``device`` it is done on the GPU after the copy instead (a quarter of the bytes).
        mean, std: per channel (R, G, B) in [0, 1] units, or one number; default 0 and 1
            (only x / 255). ``loadscope.IMAGENET_MEAN`` / ``IMAGENET_STD`` are torchvision's.
        randaugment: a ``RandAugment`` applied per sample after the crop and flip.
        color: a ``ColorJitter`` applied per sample after the crop and flip (and RandAugment).
        grayscale: probability of torchvision's ``RandomGrayscale`` (after ``color``).
        erasing: a ``RandomErasing`` applied last, after the ``dtype`` conversion.
        ops: the per-sample augmentations as a list in your order instead of the four
            keywords above (which stand for ``[randaugment, color, RandomGrayscale, erasing]``):
            ``loadscope.Op("Name", ...)`` for any op of ``loadscope.augmentations()``, or the
            constructors ``RandAugment``, ``ColorJitter``, ``RandomErasing``. Ops on the output
            dtype (RandomErasing) come after every op on the uint8 pixels.
        Every draw is a function of (seed, epoch, position): the same for any thread count.
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
    max_pixels: int = _native.DEFAULT_MAX_PIXELS
    keys: Optional[Union[str, Sequence[str]]] = None
    optional: bool = False
    dtype: Any = "uint8"
    mean: Optional[Union[float, Sequence[float]]] = None
    std: Optional[Union[float, Sequence[float]]] = None
    color: Optional[ColorJitter] = None
    grayscale: float = 0.0
    erasing: Optional[RandomErasing] = None
    randaugment: Optional[RandAugment] = None
    ops: Optional[Sequence[AnyOp]] = None

    def __post_init__(self) -> None:  # every argument checked here, where the mistake is made
        n = type(self).__name__
        _bool(n, "optional", self.optional)
        if self.ops is not None:
            if self.color is not None or self.grayscale or self.erasing is not None or self.randaugment is not None:
                raise ConfigError(f"{n}: give the augmentations either as ops=[...] or as the keywords randaugment, "
                                  "color, grayscale and erasing, not both")
            object.__setattr__(self, "ops", as_ops(n, self.ops))
        for arg, cls in (("color", ColorJitter), ("randaugment", RandAugment), ("erasing", RandomErasing)):
            value = getattr(self, arg)
            if value is not None and not isinstance(value, cls):
                hint = (" (a torchvision transform cannot run in the loader's C++ threads; applied to a whole batch "
                        "it would draw once for all samples: see docs/augmentations.md)"
                        if type(value).__module__.startswith("torchvision") else "")
                raise ConfigError(f"{n}.{arg} must be a loadscope.{cls.__name__}(...), got {value!r}{hint}")
        _probability(n, "grayscale", self.grayscale)
        dtype = _dtype(n, self.dtype)
        object.__setattr__(self, "dtype", dtype)
        if dtype == "uint8" and (self.mean is not None or self.std is not None):
            raise ConfigError(f"{n}: mean and std normalise a float output; give dtype='float32' (or float16, "
                              "bfloat16) too")
        mean = _triple(n, "mean", self.mean, 0.0)
        if any(m > 1.0 for m in mean):
            raise ConfigError(f"{n}.mean={self.mean!r} looks like 0-255 units; mean and std are in [0, 1] units as "
                              "torchvision's Normalize takes them (divide by 255), e.g. loadscope.IMAGENET_MEAN")
        object.__setattr__(self, "mean", mean)
        std = _triple(n, "std", self.std, 1.0)
        if any(v == 0 for v in std):
            raise ConfigError(f"{n}.std must be non-zero, got {self.std!r}")
        object.__setattr__(self, "std", std)
        if self.crop not in CROPS:
            raise ConfigError(f"{n}.crop={self.crop!r} is not one of {', '.join(CROPS)}")
        if isinstance(self.size, (tuple, list)) and len(self.size) == 2:
            size: Union[int, Tuple[int, int]] = (_int(n, "size", self.size[0]), _int(n, "size", self.size[1]))
        elif isinstance(self.size, (tuple, list)):
            raise ConfigError(f"{n}.size must be an int or (height, width), got {self.size!r}")
        else:
            size = _int(n, "size", self.size)
        object.__setattr__(self, "size", size)
        _range(n, "scale", self.scale)
        _range(n, "ratio", self.ratio)
        if self.resize is not None:
            if self.crop != "center":
                raise ConfigError(f"{n}.resize applies only to crop='center'")
            _int(n, "resize", self.resize, 1)
        if isinstance(self.flip, bool) or not isinstance(self.flip, (int, float)) or not 0 <= self.flip <= 1:
            raise ConfigError(f"{n}.flip is a probability in [0, 1], got {self.flip!r}")
        _bool(n, "channels_last", self.channels_last)
        _bool(n, "exif", self.exif)
        if self.dct_scaling is not None:
            _bool(n, "dct_scaling", self.dct_scaling)
        _int(n, "max_pixels", self.max_pixels)

    @property
    def hw(self) -> Tuple[int, int]:
        if isinstance(self.size, int):
            return (self.size, self.size)
        h, w = self.size
        return (int(h), int(w))

    def _native(self, name: str, native, on_device: bool = False):
        """on_device: the Loader normalises on its GPU after the copy; the C++ side gives uint8."""
        keys = _keys(self.keys, name)
        if self.keys is None and name.lower() in IMAGE_MEMBERS + ("image", "img"):
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
            optional=self.optional,
            dtype="uint8" if on_device else self.dtype,
            mean=self.mean,
            std=self.std,
            ops=self._native_ops(on_device),
        )

    def augmentations(self) -> Tuple[Op, ...]:
        """The per-sample ops in the order they run: ``ops``, else the keywords' list."""
        if self.ops is not None:
            return tuple(op.op() for op in self.ops)
        return keyword_ops(self.randaugment, self.color, self.grayscale, self.erasing)

    def _native_ops(self, on_device: bool) -> list:
        ops = self.augmentations()
        for op in ops:
            if op.stage == "output" and on_device and self.dtype != "uint8":
                # It would run in uint8 units before the GPU normalises the batch.
                raise ConfigError(f"Image: {op.name} works on the float output, which a CUDA device makes on the GPU "
                                  "after the copy: run it there (torchvision.transforms.RandomErasing per sample), "
                                  "or use device='cpu'")
        return [op._call for op in ops]


@dataclass(frozen=True)
class Int(Field):
    """An integer (e.g. a class label stored as text ``"3"``), batched as ``int64 [B]``."""

    keys: Optional[Union[str, Sequence[str]]] = None
    optional: bool = False

    def _native(self, name, native, on_device: bool = False):
        _bool("Int", "optional", self.optional)
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="int", optional=self.optional)


@dataclass(frozen=True)
class Text(Field):
    """UTF-8 text (a caption), batched as a list of ``str``."""

    keys: Optional[Union[str, Sequence[str]]] = None
    optional: bool = False

    def _native(self, name, native, on_device: bool = False):
        _bool("Text", "optional", self.optional)
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="text", optional=self.optional)


@dataclass(frozen=True)
class Json(Field):
    """A JSON document, validated in C++ and batched as a list of parsed Python objects."""

    keys: Optional[Union[str, Sequence[str]]] = None
    optional: bool = False

    def _native(self, name, native, on_device: bool = False):
        _bool("Json", "optional", self.optional)
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="json", optional=self.optional)


@dataclass(frozen=True)
class Bytes(Field):
    """The member's raw bytes, batched as a list of ``bytes``."""

    keys: Optional[Union[str, Sequence[str]]] = None
    optional: bool = False

    def _native(self, name, native, on_device: bool = False):
        _bool("Bytes", "optional", self.optional)
        return native.plain_field(name=name, keys=_keys(self.keys, name), kind="bytes", optional=self.optional)


@dataclass(frozen=True)
class VideoClip(Image):
    """Clips of a video, decoded with FFmpeg and batched as ``uint8 [B, T, 3, H, W]``
    (``[B, K, T, 3, H, W]`` with ``clips=K > 1``; channels last with ``channels_last=True``),
    plus ``"<name>.time"`` (``float64 [B, T]`` or ``[B, K, T]``: the presentation time in
    seconds of every returned frame) and ``"<name>.meta"`` (a dict per sample: duration, fps,
    frames, width, height, rotation, codec, stream).

    Args:
        frames: T, frames per clip.
        stride: frames between consecutive clip frames (sampling by frame index).
        fps: sample by presentation time at this rate instead (variable-frame-rate files work:
            each time shows the frame on screen then). Exclusive with ``stride``.
        position: ``"random"`` (a start drawn per clip), ``"uniform"`` (K clips evenly spaced
            over the video), ``"center"``.
        start: the name of a member holding the clip's start in seconds from the first frame
            (a manifest column such as Kinetics' ``time_start``, or a tar member): the clip
            starts at the frame shown then, instead of at ``position``. One clip per video; a
            start at or past the end fails the sample.
        clips: K clips per video.
        short: a video shorter than a clip: ``"pad"`` repeats its last frame (the timestamps say
            so), ``"fail"`` makes it a failed sample (raised or skipped per ``on_error``).
        size, crop, scale, ratio, resize, flip, channels_last: as for ``Image``; one crop and
            flip per clip, the same for all its frames.
        stream: the container's stream index; default FFmpeg's best video stream.
        decoder_threads: FFmpeg's own threads per video (0: FFmpeg decides; ``"auto"``: the
            cores the loader may use shared between its threads, at most 4, following
            ``threads="auto"``: docs/tuning.md). The loader's threads already decode different
            videos in parallel; see docs/video.md. The frames do not depend on it.
        rotate: apply the rotation metadata, so frames come out upright as players show them.
        max_pixels: frames larger than this (width x height) fail before decoding.
        color_tags: honour the stream's colour matrix (BT.709, BT.601, ...) and range tags when
            converting to RGB, as the ffmpeg CLI and torchcodec do (their frames are reproduced
            byte for byte). ``False``: swscale's defaults (BT.601, range from the pixel format),
            which is what PyAV and ``torchvision.io.read_video`` return.
        hwaccel: ``"cuda"`` or ``"cuda:N"``: decode on the GPU's NVDEC (FFmpeg's CUDA hwaccel);
            the frames are copied back and cropped, resized and converted as the CPU's are, so
            the batch is the same layout, on the device the loader's ``device`` says. A video
            whose codec or profile NVDEC does not take is decoded by the CPU, counted in
            ``video.cpu_fallbacks`` and reported as a warning naming it. Without a GPU the
            field fails when the loader is made. docs/video.md.
    """

    size: Size = 224
    crop: str = "random_resized"
    frames: int = 16
    stride: Optional[int] = None
    fps: Optional[float] = None
    position: str = "random"
    clips: int = 1
    short: str = "pad"
    stream: Optional[int] = None
    decoder_threads: Union[int, str] = 1
    rotate: bool = True
    color_tags: bool = True
    start: Optional[str] = None
    hwaccel: Optional[str] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        n = "VideoClip"
        _int(n, "frames", self.frames)
        _int(n, "clips", self.clips)
        if self.stride is not None and self.fps is not None:
            raise ConfigError("VideoClip: give stride or fps, not both")
        if self.stride is not None:
            _int(n, "stride", self.stride, 1)
        if self.fps is not None and (isinstance(self.fps, bool) or not isinstance(self.fps, (int, float)) or not self.fps > 0):
            raise ConfigError(f"VideoClip.fps must be a number > 0, got {self.fps!r}")
        if self.position not in POSITIONS:
            raise ConfigError(f"VideoClip.position={self.position!r} is not one of {', '.join(POSITIONS)}")
        if self.position == "center" and self.clips != 1:
            raise ConfigError("VideoClip: position='center' takes clips=1; use 'uniform' for several")
        if self.start is not None:
            if not isinstance(self.start, str) or not self.start:
                raise ConfigError(f"VideoClip.start must name a member (a manifest column) holding seconds, got {self.start!r}")
            if self.clips != 1:
                raise ConfigError("VideoClip: start= gives one clip's start; clips must be 1")
        if self.short not in SHORT:
            raise ConfigError(f"VideoClip.short={self.short!r} is not one of {', '.join(SHORT)}")
        if self.stream is not None:
            _int(n, "stream", self.stream, 0)
        if self.decoder_threads != "auto":
            if isinstance(self.decoder_threads, str):
                raise ConfigError(f"VideoClip.decoder_threads={self.decoder_threads!r}: an int (0: FFmpeg decides) "
                                  f"or 'auto'")
            _int(n, "decoder_threads", self.decoder_threads)
        _bool(n, "rotate", self.rotate)
        _bool(n, "color_tags", self.color_tags)
        self._cuda_device(resolve=False)
        if self.dct_scaling:
            raise ConfigError("VideoClip: dct_scaling applies to JPEG images only")
        if self.dtype != "uint8":
            raise ConfigError("VideoClip: clips are uint8 only; convert on the GPU, e.g. "
                              "loadscope.normalize(x, 'float16', mean, std, channels_last)")
        if self.augmentations():
            raise ConfigError("VideoClip: color, grayscale, erasing and randaugment are for images only so far (ops= "
                              "too)")
        if not self.exif:
            raise ConfigError("VideoClip: exif applies to images; videos are turned upright by rotate=")
        h, w = self.hw
        per_sample = self.frames * self.clips * h * w * 3
        if per_sample > 2**32:
            raise ConfigError(f"VideoClip: frames x clips x size is {per_sample / 2**30:.1f} GiB per sample; "
                              "more than 4 GiB is refused")

    def _cuda_device(self, resolve: bool = True) -> int:
        """The CUDA device NVDEC decodes on, -1 for the CPU. "cuda" is torch's current device
        (torch.cuda.set_device(local_rank) under torchrun), asked only when the loader is made:
        a field declared in a process that forks its workers later must not start CUDA."""
        hw = self.hwaccel
        if hw is None:
            return -1
        if isinstance(hw, str) and (hw == "cuda" or (hw.startswith("cuda:") and hw[5:].isdigit())):
            if hw != "cuda":
                return int(hw[5:])
            if not resolve:
                return 0
            import torch

            return torch.cuda.current_device() if torch.cuda.is_available() else 0
        raise ConfigError(f"VideoClip.hwaccel={hw!r}: allowed are None (the CPU decodes), 'cuda' and 'cuda:N'")

    def _native(self, name: str, native, on_device: bool = False):
        keys = _keys(self.keys, name)
        if self.keys is None and name.lower() in VIDEO_MEMBERS + ("video", "clip"):
            keys = [name.lower()] + [k for k in VIDEO_MEMBERS if k != name.lower()]
        h, w = self.hw
        return native.video_field(
            name=name, keys=keys, frames=int(self.frames),
            stride=int(self.stride) if self.stride is not None else (0 if self.fps else 1),
            fps=float(self.fps or 0.0), position=self.position, clips=int(self.clips), short=self.short,
            height=h, width=w, crop=self.crop, scale=_range("VideoClip", "scale", self.scale),
            ratio=_range("VideoClip", "ratio", self.ratio), resize=int(self.resize or 0),
            flip=float(self.flip), channels_last=self.channels_last,
            stream=-1 if self.stream is None else int(self.stream),
            decoder_threads=-1 if self.decoder_threads == "auto" else int(self.decoder_threads), rotate=self.rotate, color_tags=self.color_tags,
            optional=self.optional, max_pixels=int(self.max_pixels), start=self.start or "",
            cuda_device=self._cuda_device(),
        )


AUDIO_POSITIONS = ("random", "center", "start")
# An Audio field named like an audio type (or "audio") reads any audio or video member: the
# extensions of the audio files on the decoder's whitelist (decode/formats.h).
AUDIO_MEMBERS = tuple(_FORMATS["audio"])


def formats() -> dict:
    """The member names (file extensions, lower case) this build decodes, from the format table
    the decoders use (decode/formats.h): ``{"image": (...), "video": (...), "audio": (...)}``.
    An ``Image`` field named like one of ``image`` reads any of them; likewise ``VideoClip`` and
    ``Audio`` (which also reads the audio track of a video container)."""
    return {"image": IMAGE_MEMBERS, "video": VIDEO_MEMBERS, "audio": AUDIO_MEMBERS}


def _seconds(owner: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not value > 0:
        raise ConfigError(f"{owner}.{name} must be seconds > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Audio(Field):
    """An audio stream (an audio file's, or a video's), decoded with FFmpeg and resampled with
    libswresample to ``float32 [B, channels, N]``, N = ``seconds * sample_rate``; plus
    ``"<name>.length"`` (``int64 [B]``: the window's samples that came from the stream, the rest
    are zeros) and ``"<name>.time"`` (``float64 [B]``: the window's first sample, in seconds of
    the file's timeline, where video frames' times are too). See docs/audio.md.

    Args:
        sample_rate: output samples per second.
        channels: output channels, mixed as FFmpeg mixes them (``-ac``): 1 is the mono mix.
        seconds: a window this long, at ``position``: ``"random"`` (drawn per sample from seed,
            epoch and position, like every other draw), ``"center"`` or ``"start"``.
        max_seconds: instead of ``seconds``: the whole stream from its start, up to this long.
        align: the name of a ``VideoClip`` field of the same loader: the window is exactly that
            field's clip, from its first frame's time to its last frame's end, to the nearest
            sample; ``seconds`` is then the longest clip the output holds.
        stream: the container's stream index; default FFmpeg's best audio stream.
        optional: a missing member, or a file without an audio stream, gives zeros and
            ``"<name>.present"`` False instead of failing.
    """

    sample_rate: int = 16000
    channels: int = 1
    seconds: Optional[float] = None
    max_seconds: Optional[float] = None
    position: str = "random"
    align: Optional[str] = None
    stream: Optional[int] = None
    keys: Optional[Union[str, Sequence[str]]] = None
    optional: bool = False

    def __post_init__(self) -> None:
        n = "Audio"
        _int(n, "sample_rate", self.sample_rate)  # up to the highest rate decoded (decode/limits.h)
        int_arg("Audio.channels", self.channels, 1, 8)
        if (self.seconds is None) == (self.max_seconds is None):
            raise ConfigError("Audio: give seconds= (a window) or max_seconds= (the stream from its start), one of them")
        if self.seconds is not None:
            _seconds(n, "seconds", self.seconds)
        if self.max_seconds is not None:
            _seconds(n, "max_seconds", self.max_seconds)
            if self.position not in ("random", "start"):
                raise ConfigError("Audio: max_seconds reads from the start; position does not apply")
        if self.position not in AUDIO_POSITIONS:
            raise ConfigError(f"Audio.position={self.position!r} is not one of {', '.join(AUDIO_POSITIONS)}")
        if self.align is not None and (not isinstance(self.align, str) or not self.align):
            raise ConfigError(f"Audio.align must name a VideoClip field, got {self.align!r}")
        if self.stream is not None:
            int_arg("Audio.stream", self.stream, 0)
        _bool(n, "optional", self.optional)

    def _native(self, name: str, native, on_device: bool = False):
        keys = _keys(self.keys, name)
        if self.keys is None and name.lower() in AUDIO_MEMBERS + VIDEO_MEMBERS + ("audio",):
            keys = [name.lower()] + [k for k in AUDIO_MEMBERS + VIDEO_MEMBERS if k != name.lower()]
        return native.audio_field(
            name=name, keys=keys, sample_rate=int(self.sample_rate), channels=int(self.channels),
            seconds=float(self.seconds or 0.0), max_seconds=float(self.max_seconds or 0.0),
            position="start" if self.max_seconds is not None else self.position,
            stream=-1 if self.stream is None else int(self.stream), align=self.align or "", optional=self.optional,
        )
