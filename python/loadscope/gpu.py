"""JPEG decoding on the GPU. loadscope's threads still read and batch the bytes (a ``Bytes``
field); nvJPEG decodes them on the GPU (``torchvision.io.decode_jpeg(..., device="cuda")``, a
whole batch per call where torchvision can), and the crop, resize and flip run there too, into
the CPU path's layout: ``uint8 [B, 3, H, W]``, on the GPU.

    loader = ls.Loader(src, fields={"jpg": ls.Bytes(), "cls": ls.Int()}, batch_size=256,
                       device="cuda")
    decode = ls.gpu.JpegDecoder(224, flip=0.5, seed=0, device="cuda")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for b in loader:
            images = decode(b["jpg"], b["__index__"], epoch, keys=b["__key__"])

What differs from decoding in loadscope's threads (docs/gpu.md has the measured differences):
- Random crops are drawn from a torch generator seeded by ``(seed, epoch, position)`` with
  torchvision's ``RandomResizedCrop.get_params``: the same for any thread or worker count, and
  the same crops as a DataLoader that seeds that way (the bench's torch arm), but not the crops
  that loadscope's own threads draw. ``crop="center"`` and ``"resize"`` are deterministic and
  comparable pixel for pixel, within the decoders' differences (IDCT, chroma upsampling) and
  the resamplers' (torch's antialiased bilinear against Pillow's taps).
- EXIF orientation is not applied (nvJPEG does not read it); images with an orientation tag
  come out as stored. Use the CPU path for such data.
- A JPEG that nvJPEG refuses (CMYK, some progressive or unusual files) is decoded on the CPU
  by torchvision instead and counted in ``stats()["cpu_fallbacks"]``; one that neither decodes
  raises ``DecodeError`` naming the sample.
- The decode takes GPU time from training: measure it (``benchmarks/experiments/decode.toml``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ._errors import ConfigError, DecodeError
from ._fields import CROPS


def crop_params(crop: str, seed: int, flip: float, height: int, width: int, epoch: int,
                position: int) -> Tuple[int, int, int, int, bool]:
    """(top, left, height, width, flip) of a sample's crop in the source image. random_resized:
    torchvision's RandomResizedCrop.get_params drawn from a generator seeded by (seed, epoch,
    position); center and resize: the whole image (the caller resizes, then center-crops)."""
    if crop != "random_resized":
        return 0, 0, height, width, False
    import torchvision.transforms as T

    g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 1_000_003 + position)
    # The flip first: drawn after the crop from the same starting state, it would echo the
    # crop's first draw (flipped crops would be the small ones).
    flipped = bool(torch.rand(1, generator=g) < flip)
    # get_params draws from the global generator: lend it this sample's state (set_rng_state
    # costs ~1 µs where torch.manual_seed costs ~17 µs).
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(g.get_state())
        top, left, h, w = T.RandomResizedCrop.get_params(torch.empty(0, height, width), (0.08, 1.0), (3 / 4, 4 / 3))
    return top, left, h, w, flipped


class JpegDecoder:
    """Decodes a batch of JPEG bytes on a CUDA device and crops/resizes/flips them there.

    Args:
        size: output side (square outputs, as ``Image(size)``).
        crop: ``"random_resized"`` (RandomResizedCrop, scale 0.08-1, ratio 3/4-4/3),
            ``"center"`` (Resize(size) of the shorter side, then CenterCrop(size)) or
            ``"resize"`` (the whole image to size x size).
        flip: probability of a horizontal flip (random_resized only).
        seed: seeds every crop with the epoch and the sample's position.
        device: a CUDA device.
    """

    def __init__(self, size: int, *, crop: str = "random_resized", flip: float = 0.0, seed: int = 0,
                 device: Any = "cuda") -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"size must be an int >= 1, got {size!r}")
        if crop not in CROPS:
            raise ConfigError(f"crop={crop!r}: allowed are {', '.join(map(repr, CROPS))}")
        if not 0.0 <= float(flip) <= 1.0:
            raise ConfigError(f"flip={flip!r}: a probability in [0, 1]")
        if crop != "random_resized" and flip:
            raise ConfigError(f"flip applies to crop='random_resized' only (crop={crop!r} is deterministic)")
        dev = torch.device(device)
        if dev.type != "cuda":
            raise ConfigError(f"device={device!r}: JpegDecoder decodes on a CUDA device ('cuda', 'cuda:N')")
        if not torch.cuda.is_available():
            raise ConfigError("JpegDecoder needs CUDA, and torch.cuda.is_available() is False here")
        self.size, self.crop, self.flip, self.seed = size, crop, float(flip), int(seed)
        self.device = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
        self._batched: Optional[bool] = None  # whether decode_jpeg takes a list (torchvision >= 0.19)
        self.images = 0
        self.batches = 0
        self.cpu_fallbacks = 0

    def __call__(self, blobs: Sequence[bytes], positions: Any, epoch: int,
                 keys: Optional[Sequence[str]] = None) -> torch.Tensor:
        """``uint8 [B, 3, size, size]`` on the device, for the JPEG bytes of one batch.
        ``positions``: each sample's position in the epoch (the batch's ``"__index__"``)."""
        import torch.nn.functional as F

        positions = positions.tolist() if isinstance(positions, torch.Tensor) else list(positions)
        if len(positions) != len(blobs):
            raise ConfigError(f"{len(blobs)} images but {len(positions)} positions")
        keys = list(keys) if keys is not None else [f"position {p}" for p in positions]
        images = self._decode(blobs, keys)
        out = torch.empty((len(blobs), 3, self.size, self.size), dtype=torch.uint8, device=self.device)
        for i, (img, pos) in enumerate(zip(images, positions)):
            h, w = int(img.shape[1]), int(img.shape[2])
            top, left, ch, cw, flipped = crop_params(self.crop, self.seed, self.flip, h, w, epoch, pos)
            x = img[:, top:top + ch, left:left + cw].unsqueeze(0).float()
            if self.crop == "center":  # torchvision: Resize(shorter side) then CenterCrop
                rh, rw = (self.size, max(self.size, int(self.size * w / h))) if h <= w else \
                    (max(self.size, int(self.size * h / w)), self.size)
                x = F.interpolate(x, size=(rh, rw), mode="bilinear", antialias=True, align_corners=False)
                top, left = int(round((rh - self.size) / 2.0)), int(round((rw - self.size) / 2.0))
                x = x[:, :, top:top + self.size, left:left + self.size]
            else:
                x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", antialias=True, align_corners=False)
            x = x[0].round_().clamp_(0, 255)
            out[i] = x.flip(-1) if flipped else x
        self.images += len(blobs)
        self.batches += 1
        return out

    def _decode(self, blobs: Sequence[bytes], keys: List[str]) -> List[torch.Tensor]:
        from torchvision.io import ImageReadMode, decode_jpeg

        data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
        if self._batched is not False:
            try:
                out = decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
                self._batched = True
                return list(out)
            except TypeError:  # torchvision < 0.19 takes one image per call
                self._batched = False
            except RuntimeError:
                pass  # one bad image fails the whole call: find it one by one
        images = []
        for d, key in zip(data, keys):
            try:
                images.append(decode_jpeg(d, mode=ImageReadMode.RGB, device=self.device))
                continue
            except RuntimeError as gpu_error:
                reason = str(gpu_error).strip().splitlines()[0] if str(gpu_error).strip() else "nvJPEG failed"
            try:
                images.append(decode_jpeg(d, mode=ImageReadMode.RGB).to(self.device))
                self.cpu_fallbacks += 1
            except RuntimeError as cpu_error:
                raise DecodeError(key, f"not decodable on the GPU ({reason}) nor on the CPU "
                                       f"({str(cpu_error).strip().splitlines()[0] if str(cpu_error).strip() else 'libjpeg failed'})") from None
        return images

    def stats(self) -> Dict[str, Any]:
        return {"device": str(self.device), "images": self.images, "batches": self.batches,
                "cpu_fallbacks": self.cpu_fallbacks, "batched_decode": bool(self._batched)}
