"""Same-run throughput comparisons of loadscope against torch's DataLoader (PIL +
torchvision transforms) and against a decode-only ceiling. Used by `loadscope demo` and
benchmarks/bench_images.py; the A/B harness of later work builds on the same arms."""

from __future__ import annotations

import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional

import torch

from . import _native
from ._fields import Image
from ._loader import Loader
from ._sources import Folder


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
        from math import sqrt

        t95 = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}
        half = t95.get(len(ratios), 2.0) * statistics.stdev(ratios) / sqrt(len(ratios))
        mean = statistics.fmean(ratios)
        out.update(mean=mean, ci95=(mean - half, mean + half))
    return out


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
