"""Batch-level mixing (MixUp, CutMix) for ``Loader(map=...)``: they mix samples of one batch,
so they belong on the batch, not in the per-sample C++ ops.

    loader = ls.Loader(src, fields={"jpg": ls.Image(224, dtype="float32", mean=ls.IMAGENET_MEAN,
                                                     std=ls.IMAGENET_STD), "cls": ls.Int()},
                       batch_size=256, output=("jpg", "cls"), map=ls.mixup_cutmix(1000))
    for images, soft_labels in loader: ...   # labels [B, 1000] float

The semantics are torchvision's ``transforms.v2.MixUp`` and ``CutMix`` (the batch mixed with
itself rolled by one; CutMix's box from a centre uniform in the image, its label weight from the
box's actual area). The draws are loadscope's: a function of (seed, epoch, batch index), so
they are the same run after run, after a resume, and whatever the training loop does with
torch's global generator (which they never touch).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

import torch

from ._errors import ConfigError


class _MixUpCutMix:
    wants_position = True  # Loader(map=...) passes epoch= and batch_index=

    def __init__(self, num_classes: int, mixup_alpha: float, cutmix_alpha: float, image: str, label: str,
                 seed: int) -> None:
        self.num_classes, self.image, self.label, self.seed = num_classes, image, label, seed
        self.alphas = [a for a in (("mixup", float(mixup_alpha)), ("cutmix", float(cutmix_alpha))) if a[1] > 0]

    def _mix(self, x: torch.Tensor, y: torch.Tensor, rng: random.Random):
        if not x.is_floating_point():
            raise ConfigError("mixup_cutmix mixes pixel values: give the image field a float dtype, e.g. "
                              "Image(..., dtype='float32', mean=..., std=...)")
        if y.dtype != torch.int64 or y.dim() != 1:
            raise ConfigError(f"mixup_cutmix: labels must be int64 class indices [B] (an Int field), got {y.dtype} "
                              f"{tuple(y.shape)}")
        kind, alpha = self.alphas[rng.randrange(len(self.alphas))]
        lam = rng.betavariate(alpha, alpha)
        onehot = torch.nn.functional.one_hot(y, self.num_classes).to(x.dtype)
        if kind == "mixup":
            out = x.roll(1, 0).mul(1.0 - lam).add_(x.mul(lam))
        else:
            channels_last = x.shape[-1] == 3 and x.shape[1] != 3
            h, w = (x.shape[1], x.shape[2]) if channels_last else (x.shape[-2], x.shape[-1])
            cx, cy = rng.randrange(w), rng.randrange(h)
            r = 0.5 * math.sqrt(1.0 - lam)
            rw, rh = int(r * w), int(r * h)
            x1, y1, x2, y2 = max(cx - rw, 0), max(cy - rh, 0), min(cx + rw, w), min(cy + rh, h)
            out = x.clone()
            rolled = x.roll(1, 0)
            if channels_last:
                out[:, y1:y2, x1:x2, :] = rolled[:, y1:y2, x1:x2, :]
            else:
                out[..., y1:y2, x1:x2] = rolled[..., y1:y2, x1:x2]
            lam = 1.0 - (x2 - x1) * (y2 - y1) / (w * h)
        labels = onehot.roll(1, 0).mul(1.0 - lam).add_(onehot.mul(lam))
        return out, labels

    def __call__(self, batch: Any, *, epoch: int = 0, batch_index: int = 0) -> Any:
        rng = random.Random(hash((self.seed, epoch, batch_index)))
        if isinstance(batch, tuple):
            if len(batch) < 2:
                raise ConfigError("mixup_cutmix: a tuple batch needs (images, labels, ...): output=('jpg', 'cls')")
            images, labels = self._mix(batch[0], batch[1], rng)
            return (images, labels) + batch[2:]
        if isinstance(batch, dict):
            missing = [k for k in (self.image, self.label) if k not in batch]
            if missing:
                raise ConfigError(f"mixup_cutmix: the batch has no {', '.join(map(repr, missing))}; name the "
                                  f"entries with mixup_cutmix(..., image=..., label=...) (the batch has "
                                  f"{', '.join(k for k in batch if not k.startswith('__'))})")
            out = dict(batch)
            out[self.image], out[self.label] = self._mix(batch[self.image], batch[self.label], rng)
            return out
        raise ConfigError(f"mixup_cutmix: a tuple or dict batch expected, got {type(batch).__name__}")


def mixup_cutmix(num_classes: int, *, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0,
                 image: str = "jpg", label: str = "cls", seed: int = 0) -> Callable[..., Any]:
    """A ``map=`` callable applying, per batch, MixUp or CutMix (one of the two at random; an
    alpha of 0 leaves that one out): images must be float (``Image(dtype=...)``), labels int64
    class indices; labels come out as ``[B, num_classes]`` float. Tuple batches ``(images,
    labels, ...)`` are mixed in their first two entries; dict batches under ``image`` and
    ``label``. Draws: a function of (``seed``, epoch, batch index)."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ConfigError(f"mixup_cutmix(num_classes={num_classes!r}): an int >= 2")
    for name, a in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
        if isinstance(a, bool) or not isinstance(a, (int, float)) or a < 0:
            raise ConfigError(f"mixup_cutmix({name}={a!r}): a number >= 0 (0 leaves it out)")
    if not mixup_alpha > 0 and not cutmix_alpha > 0:
        raise ConfigError("mixup_cutmix: give mixup_alpha > 0 or cutmix_alpha > 0")
    return _MixUpCutMix(num_classes, mixup_alpha, cutmix_alpha, image, label, seed)
