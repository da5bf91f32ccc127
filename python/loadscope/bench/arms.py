"""The arms of the same-run comparisons in benchmarks/bench_*.py: loadscope against torch's
DataLoader (PIL + torchvision transforms, read_video) and against decode-only ceilings, timed
in one process with paired rounds. The A/B harness (runner, rep) runs experiments in fresh
processes with correctness checks; these arms measure ceilings and whole epochs, which the
harness does not. Machine records and process sampling are the harness's own (env,
telemetry.ProcessTreeSampler)."""

from __future__ import annotations

import gc
import glob
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional

import torch

from .. import _native
from .._fields import Image
from .._loader import Loader
from .._sources import Folder
from ..telemetry import tree_cpu_seconds
from . import env
from .stats import t_quantile


@dataclass
class Arm:
    """One way of loading the data; `epoch()` runs one epoch and returns the images seen.
    `read()`, where an arm has one: a digest of what its last epoch read (which files, which
    clips), so that a comparison can show its arms did the same work (fixed inputs). `info()`,
    where an arm has one: what its last epoch measured of itself (loadscope's telemetry)."""

    name: str
    epoch: Callable[[], int]
    close: Callable[[], None] = lambda: None
    read: Callable[[], Optional[str]] = lambda: None
    info: Callable[[], Optional[Dict[str, Any]]] = lambda: None


def digest(items: Iterable[Any]) -> str:
    """An order-free digest of what an epoch read: the sorted reprs of its items."""
    import hashlib

    return hashlib.sha256("\n".join(sorted(repr(x) for x in items)).encode()).hexdigest()[:16]


def loadscope_arm(root: str, *, threads: int, batch_size: int = 64, size: int = 224) -> Arm:
    loader = Loader(Folder(root), fields={"jpg": Image(size, flip=0.5)}, batch_size=batch_size,
                    threads=threads, shuffle=True, seed=0)
    seen: List[str] = []

    def epoch() -> int:
        seen.clear()
        for b in loader:
            seen.extend(os.path.relpath(k, root) for k in b["__key__"])
        return len(seen)

    return Arm(f"loadscope ({threads} threads)", epoch, read=lambda: digest(seen))


class _WithIndex(torch.utils.data.Dataset):
    """A dataset's image with its index (what the epoch read); module-level, so that spawned
    DataLoader workers can unpickle it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> tuple:
        return self.inner[i][0], i


def torch_arm(root: str, *, workers: int, batch_size: int = 64, size: int = 224) -> Arm:
    """What users run today: ImageFolder + PIL + RandomResizedCrop + flip, uint8 tensors."""
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])

    ds = _WithIndex(ImageFolder(root, transform=tf))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0)
    seen: List[str] = []

    def epoch() -> int:
        seen.clear()
        for _, idx in dl:
            seen.extend(os.path.relpath(ds.inner.samples[i][0], root) for i in idx.tolist())
        return len(seen)

    def close() -> None:
        it = getattr(dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    return Arm(f"torch DataLoader ({workers} workers) + PIL", epoch, close, read=lambda: digest(seen))


def ceiling_arm(root: str, *, threads: int) -> Arm:
    """TurboJPEG full decodes of the same files from memory: no reading, no augmentation, no
    batching. The practical ceiling of any JPEG loader on these cores."""
    files = sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True))
    data = [open(f, "rb").read() for f in files]
    names = [os.path.relpath(f, root) for f in files]

    def epoch() -> int:
        _seconds, images, failures = _native.turbojpeg_decode_only(data, threads, 1)
        if failures:
            raise RuntimeError(f"{failures} images failed the decode-only ceiling")
        return images

    return Arm(f"decode-only ceiling (TurboJPEG, {threads} threads)", epoch, read=lambda: digest(names))


def webp_ceiling_arm(root: str, *, threads: int, epochs: int, crop: bool = True) -> Arm:
    """libwebp decodes of the same WebP files from memory: no reading, no resampling, no
    batching. crop=True decodes only a RandomResizedCrop region of each image, drawn by
    torchvision's own RandomResizedCrop.get_params (seeded per epoch; `epochs` sets of crops are
    drawn up front, so that drawing is not timed, then reused in turn), with libwebp's cropping:
    the practical ceiling of any exact WebP loader making such crops on these cores.
    crop=False decodes every image whole, as a loader without region decoding must."""
    import torchvision.transforms as T
    from PIL import Image

    files = sorted(glob.glob(os.path.join(root, "**", "*.webp"), recursive=True))
    data = [open(f, "rb").read() for f in files]
    names = [os.path.relpath(f, root) for f in files]
    plans = [[[0, 0, 0, 0]] * len(files)]
    if crop:
        sizes = []
        for f in files:
            with Image.open(f) as im:
                sizes.append(im.size)
        plans = []
        with torch.random.fork_rng(devices=[]):
            for e in range(epochs):
                torch.manual_seed(e)
                plan = []
                for w, h in sizes:  # get_params reads only the shape
                    y, x, ch, cw = T.RandomResizedCrop.get_params(torch.empty(1).expand(3, h, w),
                                                                  (0.08, 1.0), (3 / 4, 4 / 3))
                    plan.append([x, y, cw, ch])
                plans.append(plan)
    calls = [0]

    def epoch() -> int:
        plan = plans[calls[0] % len(plans)]
        calls[0] += 1
        _seconds, images, failures = _native.webp_decode_only(data, plan, threads)
        if failures:
            raise RuntimeError(f"{failures} images failed the WebP decode-only ceiling")
        return images

    what = "RandomResizedCrop regions" if crop else "whole images"
    return Arm(f"decode-only ceiling (libwebp, {what}, {threads} threads)", epoch, read=lambda: digest(names))


def timed(arm: Arm) -> Dict[str, Any]:
    """One epoch: items per second (wall clock), CPU seconds per item and cores kept busy
    (this process and its children: DataLoader workers; ns clocks), and what it read."""
    c0, t0 = tree_cpu_seconds(), time.perf_counter()
    n = arm.epoch()
    wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - c0
    return {"per_s": n / wall, "items": n, "cpu_per_item": cpu / max(n, 1), "cores": cpu / wall, "read": arm.read(),
            "info": arm.info()}


def measured(arms: List[Arm], reps: int, warmup: int = 1) -> Dict[str, List[Dict[str, Any]]]:
    """Runs warm-up epochs (discarded), then `reps` rounds of A B C ... A B C ..., so that
    drift on a shared machine falls on every arm alike. Per arm, one `timed` record a round.
    Every arm's k-th epoch is its k-th call: arms that take a plan per epoch (video clips) read
    the same plan in the same round."""
    for arm in arms:
        for _ in range(warmup):
            arm.epoch()
    results: Dict[str, List[Dict[str, Any]]] = {a.name: [] for a in arms}
    for _ in range(reps):
        for arm in arms:
            results[arm.name].append(timed(arm))
    return results


def interleaved(arms: List[Arm], reps: int, warmup: int = 1) -> Dict[str, List[float]]:
    """`measured`, items per second only."""
    return {name: [r["per_s"] for r in rs] for name, rs in measured(arms, reps, warmup).items()}


def same_inputs(results: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """Whether every arm that reports what it read read the same in every round (the A/B
    harness's fixed-input check, for benchmarks/)."""
    rounds = max((len(rs) for rs in results.values()), default=0)
    checked = [name for name, rs in results.items() if rs and all(r["read"] is not None for r in rs)]
    differ = [k for k in range(rounds) if len({results[n][k]["read"] for n in checked}) > 1]
    return {"arms_checked": checked, "rounds": rounds, "identical": not differ, "differing_rounds": differ}


def ratio_summary(num: List[float], den: List[float]) -> Dict[str, Any]:
    """Per-round ratios (the arms of one round ran back to back) with median, min, max and a
    95% t-interval of the mean."""
    ratios = [a / b for a, b in zip(num, den)]
    out: Dict[str, Any] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "n": len(ratios)}
    if len(ratios) > 1:
        half = t_quantile(0.95, len(ratios) - 1) * statistics.stdev(ratios) / math.sqrt(len(ratios))
        mean = statistics.fmean(ratios)
        out.update(mean=mean, ci95=(mean - half, mean + half))
    return out


def format_ratio(label: str, r: Dict[str, Any], digits: int = 2) -> str:
    """One line for a ratio_summary: median, range and, with two or more rounds, the 95% CI."""
    f = f".{digits}f"
    line = f"{label}: median {r['median']:{f}}x, range {r['min']:{f}}-{r['max']:{f}}"
    if "ci95" in r:
        lo, hi = r["ci95"]
        line += f", 95% CI of the mean {lo:{f}}-{hi:{f}}"
    return line


def machine() -> Dict[str, object]:
    """The machine and versions a benchmark's figures come from (bench.env's records, short)."""
    import PIL
    import torchvision

    return {
        "cpu": env.cpu()["model"], "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
        "torch": torch.__version__, "torchvision": torchvision.__version__, "pillow": PIL.__version__,
        "torch_threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d"),
    }


def pss_run(arm: str, root: str, n: int, epochs: int = 2) -> Dict[str, float]:
    """Runs `epochs` epochs of one arm in a fresh process and returns its throughput and peak
    PSS over all its processes (a fresh process, so arms do not share allocator state)."""
    code = (
        "import json, sys, time; from loadscope.bench import arms as c;"
        "from loadscope.telemetry import ProcessTreeSampler;"
        f"a = c.loadscope_arm({root!r}, threads={n}) if {arm!r} == 'loadscope' else c.torch_arm({root!r}, workers={n});"
        "m = ProcessTreeSampler(0.02, lambda: None);"  # this process and every child
        "a.epoch(); t = time.perf_counter();"
        f"k = sum(a.epoch() for _ in range({epochs})); dt = time.perf_counter() - t;"
        "m.stop(); m.sample(); a.close();"
        "print(json.dumps({'images_per_s': k / dt, 'peak_pss_mib': m.peak_total_pss / 2**20}))"
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
            with open(os.path.splitext(path)[0] + ".json") as m:
                meta = json.load(m)
            if gop is None or meta["gop"] == gop:
                rows.append({"path": path, "frames": int(meta["seconds"] * meta["fps"]) - 1, "fps": meta["fps"],
                             "gop": meta["gop"], "codec": meta.get("codec", "h264"), "height": meta["height"]})
    return rows * repeat


def _manifest(rows: List[dict]) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".jsonl", prefix="loadscope-clips-")
    with os.fdopen(fd, "w") as f:
        for r in rows:
            f.write(json.dumps({"path": r["path"]}) + "\n")
    return path


@dataclass
class ClipPlan:
    """One epoch's clips, drawn once and handed to every arm: clip i is frames start[i],
    start[i] + stride, ... of rows[i]'s video (starting at start[i] / fps seconds)."""

    epoch: int
    rows: List[dict]
    starts: List[int]
    frames: int
    stride: int

    def seconds(self, i: int) -> float:
        """Clip i's start in seconds from its video's first frame (VideoClip(start=)'s unit)."""
        return self.starts[i] / self.rows[i]["fps"]

    def time(self, i: int) -> float:
        """Clip i's start as a presentation time (what a seek takes): the first frame's time on."""
        return _video_info(self.rows[i]["path"])["t0"] + self.seconds(i)

    def digest(self) -> str:
        return digest((os.path.basename(r["path"]), s) for r, s in zip(self.rows, self.starts))

    def work(self) -> Dict[str, float]:
        """What a decoder that seeks to the keyframe at or before a clip and decodes to its last
        frame must decode this epoch: frames and megapixels (equal for every arm by construction)."""
        frames = mp = 0.0
        span = (self.frames - 1) * self.stride
        for r, s in zip(self.rows, self.starts):
            info = _video_info(r["path"])
            key = max((k for k in info["keyframes"] if k <= s), default=0)
            n = s + span - key + 1
            frames += n
            mp += n * info["width"] * info["height"] / 1e6
        return {"frames": frames, "megapixels": mp}


_VIDEO_INFO: Dict[str, Dict[str, Any]] = {}


def _video_info(path: str) -> Dict[str, Any]:
    """Frame size, the first frame's presentation time (t0, seconds) and keyframe positions
    (frame indices, presentation order) of a video, from its packets (PyAV demux, no decode);
    cached per process."""
    if path not in _VIDEO_INFO:
        import av

        with av.open(path) as c:
            st = c.streams.video[0]
            pts = sorted((p.pts, p.is_keyframe) for p in c.demux(st) if p.pts is not None)
            _VIDEO_INFO[path] = {"width": st.codec_context.width, "height": st.codec_context.height,
                                 "t0": float(pts[0][0] * st.time_base) if pts else 0.0,
                                 "keyframes": [i for i, (_, key) in enumerate(pts) if key]}
    return _VIDEO_INFO[path]


def clip_plans(rows: List[dict], frames: int = 16, stride: int = 2, seed: int = 0) -> Callable[[int], ClipPlan]:
    """The plan of epoch e: a start frame per clip drawn from (seed, e), uniformly over the
    starts whose clip fits in its video."""
    import random

    span = (frames - 1) * stride + 1

    def plan(epoch: int) -> ClipPlan:
        rng = random.Random(seed * 1_000_003 + epoch)
        return ClipPlan(epoch, rows, [rng.randrange(0, int(r["frames"]) - span + 1) for r in rows], frames, stride)

    return plan


def _planned_arm(name: str, rows: List[dict], plans: Callable[[int], ClipPlan], run: Callable[[ClipPlan], List[tuple]],
                 close: Callable[[], None] = lambda: None,
                 info: Callable[[], Optional[Dict[str, Any]]] = lambda: None) -> Arm:
    """An arm whose k-th epoch reads plan k; `run` returns the (video, start frame) pairs read."""
    if plans(0).rows is not rows and plans(0).rows != rows:
        raise ValueError(f"{name}: the plans are of other clips than the arm's rows")
    epochs = 0
    read: Optional[str] = None

    def epoch() -> int:
        nonlocal epochs, read
        got = run(plans(epochs))
        epochs += 1
        read = digest(got)
        return len(got)

    return Arm(name, epoch, close, read=lambda: read, info=info)


def video_loadscope_arm(rows: List[dict], *, threads: int, frames: int = 16, stride: int = 2, size: int = 224,
                        batch_size: int = 8, decoder_threads: int = 1,
                        plans: Optional[Callable[[int], ClipPlan]] = None) -> Arm:
    """loadscope through its public API: each epoch's plan is a manifest with a `start` column
    (seconds) and VideoClip(start="start"); what was read is recovered from the returned
    frames' presentation times."""
    import tempfile

    from .._fields import VideoClip
    from .._sources import FileList

    plans = plans or clip_plans(rows, frames, stride)
    clip = VideoClip(size, frames=frames, stride=stride, flip=0.5, decoder_threads=decoder_threads, start="start")
    fps = {r["path"]: r["fps"] for r in rows}
    t0 = {r["path"]: _video_info(r["path"])["t0"] for r in rows}  # .time is a presentation time
    tmp = tempfile.mkdtemp(prefix="loadscope-clips-")
    last: Dict[str, Any] = {"info": None}

    def run(plan: ClipPlan) -> List[tuple]:
        manifest = os.path.join(tmp, "plan.jsonl")
        with open(manifest, "w") as f:
            for i, r in enumerate(plan.rows):
                # The middle of the start frame's interval names it whatever the container's
                # rounding: WebM keeps milliseconds, and frame 32 of a 30 fps video is at 1.067 s,
                # after 32 / 30 s, where frame 31 is still on screen.
                f.write(json.dumps({"path": r["path"], "start": plan.seconds(i) + 0.5 / r["fps"]}) + "\n")
        loader = Loader(FileList(manifest), fields={"mp4": clip}, batch_size=batch_size, threads=threads,
                        shuffle=True, seed=plan.epoch)
        got = []
        for b in loader:
            for key, t in zip(b["__key__"], b["mp4.time"][:, 0].tolist()):
                got.append((os.path.basename(key), round((t - t0[key]) * fps[key])))
        snap = loader.telemetry().to_dict()
        decode = snap["stages"]["decode"]["video"]["busy"]
        last["info"] = {"clip_decode_p50": decode["p50"], "clip_decode_p99": decode["p99"], **snap["video"]["per_clip"]}
        return got

    def close() -> None:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)

    return _planned_arm(f"loadscope ({threads} threads, {decoder_threads} FFmpeg thread{'s' if decoder_threads != 1 else ''} each)",
                        rows, plans, run, close, info=lambda: last["info"])


def read_clip(path: str, start_s: float, end_s: float, times: Optional[List[float]] = None) -> torch.Tensor:
    """The frames of [start_s, end_s] (presentation times) as uint8 [T, 3, H, W], decoded with
    PyAV the way torchvision.io.read_video did (seek to the keyframe before the start, decode,
    keep the frames in the range, convert to RGB); `times`, if given, receives their times.
    torchvision 0.22 deprecated read_video and later releases dropped it; this keeps the
    baseline the same on every torch."""
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
            if times is not None:
                times.append(t)
    if not out:
        raise RuntimeError(f"{path}: no frames in [{start_s:.3f}, {end_s:.3f}] s")
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2)


class ReadVideoClips(torch.utils.data.Dataset):
    """The baseline users write: a PyAV decode of the clip's time range (read_clip, what
    torchvision.io.read_video did), every `stride`-th frame, RandomResizedCrop + flip on the clip
    tensor (one crop per clip). Indexed by (row, start frame): the plan comes with the index, from
    the sampler in the main process, so persistent workers see every epoch's plan."""

    def __init__(self, rows: List[dict], frames: int, stride: int, size: int) -> None:
        import torchvision.transforms as T

        self.rows, self.frames, self.stride = rows, frames, stride
        self.tf = T.Compose([T.RandomResizedCrop(size, antialias=True), T.RandomHorizontalFlip()])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: tuple) -> tuple:
        """(clip, row, start frame it decoded: recovered from the first frame's time)."""
        i, start = item
        r = self.rows[i]
        span = (self.frames - 1) * self.stride + 1
        t0 = _video_info(r["path"])["t0"]
        times: List[float] = []
        video = read_clip(r["path"], t0 + start / r["fps"], t0 + (start + span - 1) / r["fps"], times)
        clip = video[:: self.stride][: self.frames]
        if clip.shape[0] < self.frames:  # pad with the last frame, as loadscope does
            clip = torch.cat([clip, clip[-1:].expand(self.frames - clip.shape[0], -1, -1, -1)])
        return self.tf(clip), i, round((times[0] - t0) * r["fps"])


class _PlanBatches:
    """A batch sampler over the current plan: (row, start) pairs, shuffled by the epoch."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.plan: Optional[ClipPlan] = None

    def __iter__(self):
        import random

        plan = self.plan
        order = list(range(len(plan.rows)))
        random.Random(plan.epoch).shuffle(order)
        for b in range(0, len(order), self.batch_size):
            yield [(i, plan.starts[i]) for i in order[b:b + self.batch_size]]

    def __len__(self) -> int:
        return math.ceil(len(self.plan.rows) / self.batch_size) if self.plan else 0


def batches_per_worker(items: int, batch_size: int, workers: int) -> List[int]:
    """How a DataLoader deals an epoch's batches to its workers (round robin): unequal counts
    mean some workers idle at the epoch's end, and clips/s measures the split."""
    n, w = math.ceil(items / batch_size), max(workers, 1)  # 0 workers: the main process takes all
    return [len(range(k, n, w)) for k in range(w)]


def video_torch_arm(rows: List[dict], *, workers: int, frames: int = 16, stride: int = 2, size: int = 224,
                    batch_size: int = 8, plans: Optional[Callable[[int], ClipPlan]] = None) -> Arm:
    plans = plans or clip_plans(rows, frames, stride)
    sampler = _PlanBatches(batch_size)
    dl = torch.utils.data.DataLoader(ReadVideoClips(rows, frames, stride, size), batch_sampler=sampler,
                                     num_workers=workers, persistent_workers=workers > 0)

    def run(plan: ClipPlan) -> List[tuple]:
        sampler.plan = plan
        got: List[tuple] = []
        # PyAV objects of this process (the plan's probes) that only a collection frees must not
        # be freed in a forked worker: their codecs' FFmpeg slice threads do not exist there, and
        # avcodec_close then waits forever (seen in a test run after other tests).
        gc.collect()
        for _, idx, start in dl:
            got.extend((os.path.basename(rows[i]["path"]), s) for i, s in zip(idx.tolist(), start.tolist()))
        return got

    def close() -> None:
        it = getattr(dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    split = batches_per_worker(len(rows), batch_size, workers)
    uneven = "" if len(set(split)) <= 1 else f", batches per worker {split}: uneven"
    return _planned_arm(f"torch DataLoader ({workers} workers) + PyAV clip decode (read_video's){uneven}", rows, plans, run,
                        close)


def video_ceiling_arm(rows: List[dict], *, threads: int, frames: int = 16, stride: int = 2,
                      plans: Optional[Callable[[int], ClipPlan]] = None, least: bool = False) -> Arm:
    """FFmpeg decoding exactly the frames each clip needs (seek to the keyframe before it, decode
    to its last frame), no conversion or resizing: the practical ceiling on these cores.
    `least`: the decode floor instead, the least any decoder returning exact frames decodes
    (non-reference frames that are not shown skipped, the decoder drained after the clip's last
    packet): what is left between loadscope and it is conversion and batching."""
    plans = plans or clip_plans(rows, frames, stride)
    paths = [r["path"] for r in rows]
    what = "decode floor" if least else "decode-only ceiling"
    last: Dict[str, Any] = {"info": None}

    def run(plan: ClipPlan) -> List[tuple]:
        starts = [plan.time(i) for i in range(len(rows))]  # it seeks to presentation times
        _s, clips, failures, decoded, shown = _native.ffmpeg_decode_only(paths, starts, frames, stride, threads, 1, least)
        if failures or clips != len(rows):
            raise RuntimeError(f"the {what} decoded {clips} of {len(rows)} clips ({failures} failed)")
        # Clip frames it did not decode (reported: they would flatter its speed). A naive seek
        # misses some: an open-GOP HEVC clip starting just before a CRA keyframe lands on it,
        # and the decoder drops the frame before, a leading picture (as PyAV's seek does).
        last["info"] = {"frames_decoded": decoded / len(rows), "frames_shown": shown / len(rows),
                        "clip_frames_missing": frames * len(rows) - shown}
        # It reports counts only: what it read is the plan it was handed, not recovered.
        return [(os.path.basename(p), s) for p, s in zip(paths, plan.starts)]

    return _planned_arm(f"{what} (FFmpeg, {threads} threads)", rows, plans, run, info=lambda: last["info"])
