"""Same-run throughput comparisons of loadscope against torch's DataLoader (PIL +
torchvision transforms) and against decode-only ceilings, in one process: used by
benchmarks/bench_images.py and bench_video.py. The A/B harness (loadscope.bench) runs
experiments in fresh processes with correctness checks; these arms measure ceilings and
whole epochs, which the harness does not."""

from __future__ import annotations

import glob
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch

from . import _native
from ._fields import Image
from ._loader import Loader
from ._sources import Folder
from .bench.stats import t_quantile


@dataclass
class Arm:
    """One way of loading the data; `epoch()` runs one epoch and returns the images seen."""

    name: str
    epoch: Callable[[], int]
    close: Callable[[], None] = lambda: None


def loadscope_arm(root: str, *, threads: int, batch_size: int = 64, size: int = 224) -> Arm:
    loader = Loader(Folder(root), fields={"jpg": Image(size, flip=0.5)}, batch_size=batch_size,
                    threads=threads, shuffle=True, seed=0)

    def epoch() -> int:
        return sum(b["jpg"].shape[0] for b in loader)

    return Arm(f"loadscope ({threads} threads)", epoch)


def torch_arm(root: str, *, workers: int, batch_size: int = 64, size: int = 224) -> Arm:
    """What users run today: ImageFolder + PIL + RandomResizedCrop + flip, uint8 tensors."""
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = ImageFolder(root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0)

    def epoch() -> int:
        return sum(x.shape[0] for x, _ in dl)

    def close() -> None:
        it = getattr(dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    return Arm(f"torch DataLoader ({workers} workers) + PIL", epoch, close)


def ceiling_arm(root: str, *, threads: int) -> Arm:
    """TurboJPEG full decodes of the same files from memory: no reading, no augmentation, no
    batching. The practical ceiling of any JPEG loader on these cores."""
    files = sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))
    data = [open(f, "rb").read() for f in files]

    def epoch() -> int:
        _seconds, images, failures = _native.turbojpeg_decode_only(data, threads, 1)
        if failures:
            raise RuntimeError(f"{failures} images failed the decode-only ceiling")
        return images

    return Arm(f"decode-only ceiling (TurboJPEG, {threads} threads)", epoch)


def timed(arm: Arm) -> float:
    """Images per second of one epoch, wall clock."""
    t0 = time.perf_counter()
    n = arm.epoch()
    return n / (time.perf_counter() - t0)


def interleaved(arms: List[Arm], reps: int, warmup: int = 1) -> Dict[str, List[float]]:
    """Runs warm-up epochs (discarded), then `reps` rounds of A B C ... A B C ..., so that
    drift on a shared machine falls on every arm alike."""
    for arm in arms:
        for _ in range(warmup):
            arm.epoch()
    results: Dict[str, List[float]] = {a.name: [] for a in arms}
    for _ in range(reps):
        for arm in arms:
            results[arm.name].append(timed(arm))
    return results


def ratio_summary(num: List[float], den: List[float]) -> Dict[str, float]:
    """Per-round ratios (the arms of one round ran back to back) with median, min, max and a
    95% t-interval of the mean."""
    ratios = [a / b for a, b in zip(num, den)]
    out = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}
    if len(ratios) > 1:
        half = t_quantile(0.95, len(ratios) - 1) * statistics.stdev(ratios) / math.sqrt(len(ratios))
        mean = statistics.fmean(ratios)
        out.update(mean=mean, ci95=(mean - half, mean + half))
    return out


def format_ratio(label: str, r: Dict[str, float], digits: int = 2) -> str:
    """One line for a ratio_summary: median, range and, with two or more rounds, the 95% CI."""
    f = f".{digits}f"
    line = f"{label}: median {r['median']:{f}}x, range {r['min']:{f}}-{r['max']:{f}}"
    if "ci95" in r:
        lo, hi = r["ci95"]
        line += f", 95% CI of the mean {lo:{f}}-{hi:{f}}"
    return line


class PeakPss:
    """Samples the summed PSS of this process and its children (e.g. DataLoader workers)
    every `interval` seconds from a background thread; `peak` is the largest sum seen."""

    def __init__(self, interval: float = 0.02) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        for p in [self._proc] + self._proc.children(recursive=True):
            try:
                total += p.memory_full_info().pss
            except Exception:  # a worker that just exited
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self._interval)

    def __enter__(self) -> "PeakPss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def machine() -> Dict[str, object]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import PIL
    import torchvision

    return {
        "cpu": cpu, "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
        "torch": torch.__version__, "torchvision": torchvision.__version__, "pillow": PIL.__version__,
        "torch_threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d"),
    }


def pss_run(arm: str, root: str, n: int, epochs: int = 2) -> Dict[str, float]:
    """Runs `epochs` epochs of one arm in a fresh process and returns its throughput and peak
    PSS over all its processes (a fresh process, so arms do not share allocator state)."""
    code = (
        "import json, sys, time; from loadscope import compare as c;"
        f"a = c.loadscope_arm({root!r}, threads={n}) if {arm!r} == 'loadscope' else c.torch_arm({root!r}, workers={n});"
        "m = c.PeakPss();"
        "m.__enter__(); a.epoch(); t = time.perf_counter();"
        f"k = sum(a.epoch() for _ in range({epochs})); dt = time.perf_counter() - t;"
        "m.__exit__(); a.close();"
        "print(json.dumps({'images_per_s': k / dt, 'peak_pss_mib': m.peak / 2**20}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- video -----------------------------------------------------------------------------------

def video_clips(root: str, repeat: int = 4, gop: Optional[int] = None) -> List[dict]:
    """The demo videos (optionally one GOP length only), each listed `repeat` times: every
    listing is one clip of an epoch. Reads the generator's metadata sidecars."""
    rows = []
    with open(os.path.join(root, "videos.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            path = os.path.abspath(os.path.join(root, row["path"]))
            with open(path[: -len(".mp4")] + ".json") as m:
                meta = json.load(m)
            if gop is None or meta["gop"] == gop:
                rows.append({"path": path, "frames": meta["seconds"] * meta["fps"], "fps": meta["fps"], "gop": meta["gop"]})
    return rows * repeat


def _manifest(rows: List[dict]) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".jsonl", prefix="loadscope-clips-")
    with os.fdopen(fd, "w") as f:
        for r in rows:
            f.write(json.dumps({"path": r["path"]}) + "\n")
    return path


def video_loadscope_arm(rows: List[dict], *, threads: int, frames: int = 16, stride: int = 2, size: int = 224,
                        batch_size: int = 8, decoder_threads: int = 1) -> Arm:
    from ._fields import VideoClip
    from ._sources import FileList

    loader = Loader(FileList(_manifest(rows)), fields={"mp4": VideoClip(size, frames=frames, stride=stride, flip=0.5, decoder_threads=decoder_threads)},
                    batch_size=batch_size, threads=threads, shuffle=True, seed=0)

    def epoch() -> int:
        return sum(b["mp4"].shape[0] for b in loader)

    return Arm(f"loadscope ({threads} threads, {decoder_threads} FFmpeg thread{'s' if decoder_threads != 1 else ''} each)", epoch)


def read_clip(path: str, start_s: float, end_s: float) -> torch.Tensor:
    """The frames of [start_s, end_s] as uint8 [T, 3, H, W], decoded with PyAV the way
    torchvision.io.read_video did (seek to the keyframe before the start, decode, keep the frames
    in the range, convert to RGB). torchvision 0.22 deprecated read_video and later releases
    dropped it; this keeps the baseline the same on every torch."""
    import av
    import numpy as np

    out = []
    with av.open(path) as container:
        stream = container.streams.video[0]
        tb = float(stream.time_base)
        container.seek(int(start_s / tb), stream=stream, backward=True, any_frame=False)
        eps = tb / 2
        for frame in container.decode(stream):
            t = frame.pts * tb
            if t < start_s - eps:
                continue
            if t > end_s + eps:
                break
            out.append(frame.to_ndarray(format="rgb24"))
    if not out:
        raise RuntimeError(f"{path}: no frames in [{start_s:.3f}, {end_s:.3f}] s")
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)


class ReadVideoClips(torch.utils.data.Dataset):
    """The baseline users write: a PyAV decode of the clip's time range (read_clip, what
    torchvision.io.read_video did), every `stride`-th frame, RandomResizedCrop + flip on the clip
    tensor (one crop per clip)."""

    def __init__(self, rows: List[dict], frames: int, stride: int, size: int) -> None:
        import torchvision.transforms as T

        self.rows, self.frames, self.stride = rows, frames, stride
        self.tf = T.Compose([T.RandomResizedCrop(size, antialias=True), T.RandomHorizontalFlip()])
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> torch.Tensor:
        import random

        r = self.rows[i]
        span = (self.frames - 1) * self.stride + 1
        start = random.Random(i * 1000003 + self.epoch).randrange(0, r["frames"] - span + 1)
        video = read_clip(r["path"], start / r["fps"], (start + span - 1) / r["fps"])
        clip = video[:: self.stride][: self.frames]
        if clip.shape[0] < self.frames:  # pad with the last frame, as loadscope does
            clip = torch.cat([clip, clip[-1:].expand(self.frames - clip.shape[0], -1, -1, -1)])
        return self.tf(clip)


def video_torch_arm(rows: List[dict], *, workers: int, frames: int = 16, stride: int = 2, size: int = 224,
                    batch_size: int = 8) -> Arm:
    ds = ReadVideoClips(rows, frames, stride, size)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0)

    def epoch() -> int:
        return sum(x.shape[0] for x in dl)

    def close() -> None:
        it = getattr(dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    return Arm(f"torch DataLoader ({workers} workers) + PyAV clip decode (read_video's)", epoch, close)


def video_ceiling_arm(rows: List[dict], *, threads: int, frames: int = 16, stride: int = 2, seed: int = 0) -> Arm:
    """FFmpeg decoding exactly the frames each clip needs (seek to the keyframe before it, decode
    to its last frame), no conversion or resizing: the practical ceiling on these cores."""
    import random

    rng = random.Random(seed)
    span = (frames - 1) * stride + 1
    paths = [r["path"] for r in rows]

    def epoch() -> int:
        starts = [rng.randrange(0, r["frames"] - span + 1) / r["fps"] for r in rows]
        _s, clips, failures = _native.ffmpeg_decode_only(paths, starts, frames, stride, threads, 1)
        if failures:
            raise RuntimeError(f"{failures} clips failed the decode-only ceiling")
        return clips

    return Arm(f"decode-only ceiling (FFmpeg, {threads} threads)", epoch)
