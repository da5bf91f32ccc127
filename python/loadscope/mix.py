"""Batch-level mixing (MixUp, CutMix) for ``Loader(map=...)``: they mix samples of one batch,
so they belong on the batch, not in the per-sample C++ ops. torchvision's ``transforms.v2``
already implements them well; this wraps them for loadscope's batch forms:

    loader = ls.Loader(src, fields={"jpg": ls.Image(224, dtype="float32", mean=ls.IMAGENET_MEAN,
                                                     std=ls.IMAGENET_STD), "cls": ls.Int()},
                       batch_size=256, output=("jpg", "cls"), map=ls.mixup_cutmix(1000))
    for images, soft_labels in loader: ...   # labels [B, 1000] float
"""

from __future__ import annotations

from typing import Any, Callable

from ._errors import ConfigError


def mixup_cutmix(num_classes: int, *, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0,
                 image: str = "jpg", label: str = "cls") -> Callable[[Any], Any]:
    """A ``map=`` callable applying, per batch, MixUp or CutMix (one of the two at random;
    an alpha of 0 leaves that one out) with torchvision's ``transforms.v2`` semantics: images
    must be float (``Image(dtype=...)``), labels int64 class indices; the labels come out as
    ``[B, num_classes]`` float. Tuple batches ``(images, labels, ...)`` are mixed in place of
    their first two entries; dict batches under the keys ``image`` and ``label``. The draws use
    torch's global generator (seed it with ``torch.manual_seed`` for repeatable runs)."""
    try:
        from torchvision.transforms import v2
    except ImportError:  # torchvision < 0.16
        raise ConfigError("mixup_cutmix needs torchvision >= 0.16 (torchvision.transforms.v2)") from None
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ConfigError(f"mixup_cutmix(num_classes={num_classes!r}): an int >= 2")
    ops = []
    if mixup_alpha > 0:
        ops.append(v2.MixUp(alpha=float(mixup_alpha), num_classes=num_classes))
    if cutmix_alpha > 0:
        ops.append(v2.CutMix(alpha=float(cutmix_alpha), num_classes=num_classes))
    if not ops:
        raise ConfigError("mixup_cutmix: give mixup_alpha > 0 or cutmix_alpha > 0")
    mix = ops[0] if len(ops) == 1 else v2.RandomChoice(ops)

    def apply(batch: Any) -> Any:
        if isinstance(batch, tuple):
            images, labels = mix(batch[0], batch[1])
            return (images, labels) + batch[2:]
        if isinstance(batch, dict):
            out = dict(batch)
            out[image], out[label] = mix(batch[image], batch[label])
            return out
        raise ConfigError(f"mixup_cutmix: a tuple or dict batch expected, got {type(batch).__name__}")

    return apply
