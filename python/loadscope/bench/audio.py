"""The built-in audio experiment's pipeline (benchmarks/experiments/audio.toml): windows of the
soundtracks of a dataset's videos (its videos.jsonl, as `python -m loadscope.datasets --audio`
writes) through loadscope. A factory of the harness's user-pipeline kind, so any argument can be
the factor: `threads` (the windows are identical whatever its value, and the harness checks
that they are), `sample_rate`, `channels`, `seconds` (they change the data: correctness "none"),
or `root`, to compare the same soundtracks encoded another way in two folders."""

from __future__ import annotations

import os
from typing import Any, List

from .._errors import ConfigError


def windows(root: str = "data/demo", threads: int = 2, sample_rate: int = 16000, channels: int = 1,
            seconds: float = 4.0, batch_size: int = 16, seed: int = 0, train: bool = True) -> Any:
    """A Loader of audio windows ({"audio": float32 [B, channels, seconds * sample_rate], "cls":
    int64 [B], ...}) from root/videos.jsonl, shuffled by (seed, epoch); train: a window drawn per
    sample, else the centred one."""
    from .. import Audio, FileList, Int, Loader, formats

    manifest = os.path.join(root, "videos.jsonl")
    if not os.path.isfile(manifest):
        raise ConfigError(f"[pipeline] root = {root!r}: no videos.jsonl there; make one with "
                          f"`python -m loadscope.datasets --out {root} --audio` or point root at a folder that has it")
    audio = Audio(sample_rate=sample_rate, channels=channels, seconds=seconds, position="random" if train else "center",
                  keys=list(formats()["video"] + formats()["audio"]))
    return Loader(FileList(manifest), fields={"audio": audio, "cls": Int()}, batch_size=batch_size, threads=threads,
                  shuffle=True, seed=seed)


def sample_ids(batch: Any) -> List[str]:
    """A window's id: its file's name without the extension."""
    return [os.path.splitext(os.path.basename(k))[0] for k in batch["__key__"]]
