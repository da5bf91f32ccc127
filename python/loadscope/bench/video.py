"""The built-in video experiment's pipeline (benchmarks/experiments/video.toml): clips of a
dataset's videos (its videos.jsonl, as `python -m loadscope.datasets` writes) through loadscope.
It is a factory of the harness's user-pipeline kind, so any of its arguments can be the factor:
`decoder_threads` or `threads` (the clips are identical whatever their value, and the harness
checks that they are), `frames`, `stride`, `size` (they change the data: correctness "none"),
or `root`, to compare the same videos re-encoded (another GOP, codec or size) in two folders."""

from __future__ import annotations

import os
from typing import Any, List, Union

from .._errors import ConfigError


def clips(root: str = "data/demo", threads: Union[int, str] = 2, decoder_threads: Union[int, str] = 1,
          frames: int = 16, stride: int = 2, size: int = 224, batch_size: int = 8, seed: int = 0, train: bool = True,
          prefetch: Union[int, str] = 2, decode: str = "cpu") -> Any:
    """A Loader of clips ({"video": uint8 [B, T, 3, size, size], "cls": int64 [B], ...}) from
    root/videos.jsonl, shuffled by (seed, epoch); train: a RandomResizedCrop and a flip per clip,
    else a center crop (what the correctness check of a factor that changes pixels compares).
    threads, prefetch and decoder_threads take "auto" too (`bench tune`, docs/tuning.md).
    decode: "cpu" (FFmpeg's software decoders) or "gpu" (NVDEC: VideoClip(hwaccel="cuda"),
    the decode-video experiment)."""
    from .. import FileList, Int, Loader, VideoClip, formats

    manifest = os.path.join(root, "videos.jsonl")
    if not os.path.isfile(manifest):
        raise ConfigError(f"[pipeline] root = {root!r}: no videos.jsonl there; make one with "
                          f"`python -m loadscope.datasets --out {root}` (demo videos) or point root at a folder that has it")
    if decode not in ("cpu", "gpu"):
        raise ConfigError(f"decode = {decode!r}: allowed are 'cpu' and 'gpu' (NVDEC)")
    clip = VideoClip(size, frames=frames, stride=stride, decoder_threads=decoder_threads, keys=list(formats()["video"]),
                     crop="random_resized" if train else "center", flip=0.5 if train else 0.0,
                     hwaccel="cuda" if decode == "gpu" else None)
    return Loader(FileList(manifest), fields={"video": clip, "cls": Int()}, batch_size=batch_size, threads=threads,
                  prefetch=prefetch, shuffle=True, seed=seed)


def sample_ids(batch: Any) -> List[str]:
    """A clip's id: its video's file name without the extension, the same in every re-encoding."""
    return [os.path.splitext(os.path.basename(k))[0] for k in batch["__key__"]]
