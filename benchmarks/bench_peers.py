#!/usr/bin/env python3
"""loadscope against every peer loader that runs here, in one run (issue 19; a benchmark, not a
test: it asserts nothing about speed).

Images (the demo's real-photo JPEGs, RandomResizedCrop(224) + flip, batch 64, T threads or
workers): loadscope; torch DataLoader + PIL; the same DataLoader decoding with simplejpeg or
torchvision.io.decode_jpeg (torchvision's transforms on tensors); SPDL (its pipeline, FFmpeg's
JPEG decoder and a crop/scale/flip filter); NVIDIA DALI's CPU-only pipeline when installed
(benchmarks/requirements-peers.txt). Every arm reads the same files and applies the same crop
and flip to each (seeded by seed, epoch and position: loadscope.gpu.crop_params).

Video clips (the "realistic" profile: 10 s, 30 fps, H.264 High with B-frames, GOP 60, 720p
and 360p; 16 frames, stride 2, 224x224, batch 8): loadscope; a DataLoader over decord (its
decode-time resize), torchcodec (its Resize + CenterCrop decoder transforms) or PyAV (decode
of the clip's time range, swscale resize). Every arm decodes the same frames of every video —
the centre clip — and returns the same shape, so their work is the same; random clip positions
shared by every arm are part 16's.

Per arm and round: samples per second and CPU seconds per sample (this process, its live and
its exited children). Rounds are interleaved (A B C, B C A, ...) after a warm-up epoch each;
ratios to loadscope per round with their median, range and a 95% t interval. Pixels: each arm's
centre crops of the first images (image arms) and its first clips (video arms) against
loadscope's, mean |difference| in 0-255 levels. Peer versions are recorded.

    .venv/bin/python benchmarks/bench_peers.py [--rounds 5] [--threads 2] [--out results/bench_peers.json]
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

import torch

from loadscope import datasets
from loadscope.bench import arms as bench_arms
from loadscope.bench import env as envmod
from loadscope.bench import pipelines
from loadscope.bench.experiment import PIPELINE
from loadscope.gpu import crop_params
from loadscope.telemetry import tree_cpu_seconds

Arm = bench_arms.Arm


# --- images ----------------------------------------------------------------------------------

def image_config(loader: str, threads: int, batch: int, size: int, crop: str = "random_resized") -> Dict[str, Any]:
    c = {k: default for k, (_, default) in PIPELINE.items()}
    c.update(loader=loader, threads=threads, prefetch=2, batch_size=batch, size=size, crop=crop,
             flip=0.5 if crop == "random_resized" else 0.0, layout="files", seed=0)
    return c


def builtin_image_arm(root: str, loader: str, threads: int, batch: int, size: int) -> Arm:
    """loadscope, or a DataLoader with PIL / simplejpeg / torchvision.io decoding: the harness's
    own pipelines (bench.pipelines), the same files in the same order, the same crops."""
    pipe = pipelines.make(root, image_config(loader, threads, batch, size))
    epochs = itertools.count()
    names = {"loadscope": f"loadscope ({threads} threads)", "torch": f"DataLoader ({threads} workers) + PIL",
             "simplejpeg": f"DataLoader ({threads} workers) + simplejpeg", "torchvision":
             f"DataLoader ({threads} workers) + torchvision.io.decode_jpeg"}
    return Arm(names[loader], lambda: sum(len(keys) for _, _, keys in pipe.epoch(next(epochs))), pipe.close)


def _image_rows(root: str) -> List[Tuple[str, int, int]]:
    """(path, height, width) of the manifest's files, in its order (headers only)."""
    from PIL import Image

    rows = []
    with open(os.path.join(root, "manifest.jsonl")) as f:
        for line in f:
            path = os.path.join(root, json.loads(line)["path"])
            with Image.open(path) as im:
                rows.append((path, im.height, im.width))
    return rows


def _spdl_filter(crop: Tuple[int, int, int, int, bool], size: int) -> str:
    top, left, h, w, flip = crop
    return f"crop={w}:{h}:{left}:{top},scale={size}:{size}:flags=bilinear{',hflip' if flip else ''},format=rgb24"


def spdl_image_arm(root: str, threads: int, batch: int, size: int) -> Arm:
    """SPDL's own pipeline: a thread pool loading each image with spdl.io.load_image (FFmpeg's
    JPEG decoder and one filter graph for the crop, the scale and the flip), batches aggregated
    and stacked — as SPDL's image examples build it."""
    import numpy as np
    import spdl.io
    from spdl.pipeline import PipelineBuilder

    rows = _image_rows(root)
    epochs = itertools.count()

    def epoch() -> int:
        e = next(epochs)

        def load(i: int) -> torch.Tensor:
            path, h, w = rows[i]
            crop = crop_params("random_resized", 0, 0.5, h, w, e, i)
            return torch.from_numpy(np.array(spdl.io.load_image(path, filter_desc=_spdl_filter(crop, size))))

        pipeline = (PipelineBuilder().add_source(range(len(rows))).pipe(load, concurrency=threads, output_order="input")
                    .aggregate(batch).pipe(torch.stack).add_sink(2).build(num_threads=threads))
        n = 0
        with pipeline.auto_stop():
            for b in pipeline.get_iterator(timeout=600):
                n += b.shape[0]
        return n

    return Arm(f"SPDL ({threads} threads)", epoch)


def dali_image_arm(root: str, threads: int, batch: int, size: int) -> Arm:
    """NVIDIA DALI's CPU-only pipeline (device_id=None): its file reader, its JPEG decoder
    decoding only the crop (fn.decoders.image_slice, the crops fed from Python so that they are
    the other arms' crops), fn.resize, fn.flip and a transpose to [3, H, W] — every operator on
    its thread pool."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types

    rows = _image_rows(root)
    n = len(rows)

    def crops(info):  # batch k of the run is samples k*batch ... of the file order, epoch after epoch
        anchors, shapes, flips = [], [], []
        for j in range(batch):
            g = info.iteration * batch + j
            path, h, w = rows[g % n]
            top, left, ch, cw, flip = crop_params("random_resized", 0, 0.5, h, w, g // n, g % n)
            anchors.append(np.array([top, left], dtype=np.int32))
            shapes.append(np.array([ch, cw], dtype=np.int32))
            flips.append(np.array(int(flip), dtype=np.int32))
        return anchors, shapes, flips

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, prefetch_queue_depth=2)
    def pipe():
        jpegs, _ = fn.readers.file(files=[r[0] for r in rows], random_shuffle=False, name="files")
        anchor, shape, flip = fn.external_source(source=crops, num_outputs=3, batch=True, batch_info=True)
        images = fn.decoders.image_slice(jpegs, anchor, shape, axis_names="HW", device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=size, resize_y=size, antialias=True)
        images = fn.flip(images, horizontal=flip)
        return fn.transpose(images, perm=[2, 0, 1])

    p = pipe()
    p.build()
    steps = -(-n // batch)  # an epoch's worth of batches (the reader runs on into the next epoch)

    def epoch() -> int:
        total = 0
        for _ in range(steps):
            (out,) = p.run()
            total += len(out)
        return total

    return Arm(f"DALI CPU pipeline ({threads} threads)", epoch)


def image_pixels(root: str, n: int, size: int) -> Dict[str, float]:
    """Mean |difference| of each arm's centre crops (Resize + CenterCrop) of the first `n`
    images against loadscope's: what differs is the decoder and the resampling filter."""
    import numpy as np
    import spdl.io

    def first(loader: str) -> torch.Tensor:
        pipe = pipelines.make(root, image_config(loader, 1, n, size, crop="center"))
        try:
            return next(iter(pipe.epoch(0)))[0][:n].float()
        finally:
            pipe.close()

    ref = first("loadscope")
    out = {loader: float((first(loader) - ref).abs().mean()) for loader in ("torch", "simplejpeg", "torchvision")}
    got = []
    for path, h, w in _image_rows(root)[:n]:  # SPDL: the same Resize(shorter side) + CenterCrop as a filter
        sh, sw = (size, max(size, int(size * w / h))) if h <= w else (max(size, int(size * h / w)), size)
        f = f"scale={sw}:{sh}:flags=bilinear,crop={size}:{size}:{(sw - size) // 2}:{(sh - size) // 2},format=rgb24"
        got.append(torch.from_numpy(np.array(spdl.io.load_image(path, filter_desc=f))).permute(2, 0, 1))
    out["spdl"] = float((torch.stack(got).float() - ref).abs().mean())
    if _has("nvidia.dali"):  # DALI: Resize(shorter side) + centre crop as its operators
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(batch_size=n, num_threads=1, device_id=None)
        def centre():
            jpegs, _ = fn.readers.file(files=[r[0] for r in _image_rows(root)[:n]], random_shuffle=False)
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=size, antialias=True)
            return fn.transpose(fn.crop(images, crop_h=size, crop_w=size), perm=[2, 0, 1])

        pipe = centre()
        pipe.build()
        (batch,) = pipe.run()
        got = torch.stack([torch.from_numpy(np.array(batch.at(i))) for i in range(n)])
        out["dali"] = float((got.float() - ref).abs().mean())
    return out


# --- video -----------------------------------------------------------------------------------

def clip_indices(frames: int, n: int, stride: int) -> List[int]:
    """The centre clip, as loadscope's position="center" takes it: start at room / 2 rounded
    half up, room = frames - span (docs/video.md)."""
    span = (n - 1) * stride + 1
    start = (frames - span + 1) // 2
    return [start + k * stride for k in range(n)]


def _resized(h: int, w: int, size: int) -> Tuple[int, int]:
    """Resize(size) of the shorter side, as torchvision (the longer side truncated)."""
    return (size, int(size * w / h)) if h <= w else (int(size * h / w), size)


class _Clips(torch.utils.data.Dataset):
    def __init__(self, rows: List[dict], frames: int, stride: int, size: int, decoder: str) -> None:
        self.rows, self.frames, self.stride, self.size, self.decoder = rows, frames, stride, size, decoder

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> torch.Tensor:
        r = self.rows[i]
        idx = clip_indices(r["frames"], self.frames, self.stride)
        rh, rw = _resized(r["height"], r["width"], self.size)
        top, left = (rh - self.size) // 2, (rw - self.size) // 2
        if self.decoder == "decord":
            import decord

            vr = decord.VideoReader(r["path"], width=rw, height=rh, num_threads=1)
            x = torch.from_numpy(vr.get_batch(idx).asnumpy()).permute(0, 3, 1, 2)
        elif self.decoder == "torchcodec":
            from torchcodec.decoders import VideoDecoder
            from torchcodec.transforms import CenterCrop, Resize

            dec = VideoDecoder(r["path"], num_ffmpeg_threads=1, seek_mode="approximate",
                               transforms=[Resize((rh, rw)), CenterCrop((self.size, self.size))])
            return dec.get_frames_at(idx).data
        else:  # PyAV: decode the clip's time range, swscale to the size, keep the clip's frames
            import av

            wanted = set(idx)
            frames = []
            with av.open(r["path"]) as container:
                stream = container.streams.video[0]
                tb, fps = float(stream.time_base), r["fps"]
                container.seek(int(idx[0] / fps / tb), stream=stream, backward=True, any_frame=False)
                for frame in container.decode(stream):
                    k = round(frame.pts * tb * fps)
                    if k > idx[-1]:
                        break
                    if k in wanted:
                        frames.append(frame.to_ndarray(width=rw, height=rh, format="rgb24"))
            x = torch.from_numpy(__import__("numpy").stack(frames)).permute(0, 3, 1, 2)
        return x[:, :, top:top + self.size, left:left + self.size].contiguous()


def video_rows(root: str) -> List[dict]:
    rows = []
    with open(os.path.join(root, "videos.jsonl")) as f:
        for line in f:
            path = os.path.abspath(os.path.join(root, json.loads(line)["path"]))
            with open(path[: -len(".mp4")] + ".json") as m:
                meta = json.load(m)
            rows.append({"path": path, "frames": meta["seconds"] * meta["fps"], "fps": meta["fps"],
                         "width": meta["width"], "height": meta["height"]})
    return rows


def video_arms(rows: List[dict], threads: int, frames: int, stride: int, size: int, batch: int) -> List[Arm]:
    from loadscope import FileList, Loader, VideoClip

    manifest = bench_arms._manifest(rows)
    loader = Loader(FileList(manifest), fields={"mp4": VideoClip(size, crop="center", frames=frames, stride=stride,
                                                                 position="center")},
                    batch_size=batch, threads=threads)
    arms = [Arm(f"loadscope ({threads} threads)", lambda: sum(b["mp4"].shape[0] for b in loader))]
    for decoder, label in (("decord", "decord"), ("torchcodec", "torchcodec"), ("pyav", "PyAV")):
        # Spawned workers: forked ones inherit whatever locks the parent's threads (the decoders'
        # own, FFmpeg's, the other arms') hold at that moment; two runs here hung that way.
        # A timeout turns any other hang into an error.
        dl = torch.utils.data.DataLoader(_Clips(rows, frames, stride, size, decoder), batch_size=batch,
                                         num_workers=threads, persistent_workers=True,
                                         multiprocessing_context="spawn", timeout=300)

        def close(dl=dl) -> None:
            it = getattr(dl, "_iterator", None)
            if it is not None:
                it._shutdown_workers()

        arms.append(Arm(f"DataLoader ({threads} workers) + {label}", lambda dl=dl: sum(x.shape[0] for x in dl), close))
    return arms


def video_pixels(rows: List[dict], frames: int, stride: int, size: int) -> Dict[str, Any]:
    """The first clips of every arm against loadscope's: the same frames (checked from
    loadscope's timestamps) and their mean |difference| (colour conversion and scaling differ)."""
    from loadscope import FileList, Loader, VideoClip

    n = min(4, len(rows))
    loader = Loader(FileList(bench_arms._manifest(rows[:n])),
                    fields={"mp4": VideoClip(size, crop="center", frames=frames, stride=stride, position="center")},
                    batch_size=n, threads=1)
    b = next(iter(loader))
    ref = b["mp4"].float()
    taken = [[round(t * r["fps"]) for t in ts] for ts, r in zip(b["mp4.time"].tolist(), rows)]
    planned = [clip_indices(r["frames"], frames, stride) for r in rows[:n]]
    out: Dict[str, Any] = {"same_frames_as_loadscope": taken == planned}
    for decoder in ("decord", "torchcodec", "pyav"):
        ds = _Clips(rows[:n], frames, stride, size, decoder)
        out[decoder] = float((torch.stack([ds[i] for i in range(n)]).float() - ref).abs().mean())
    return out


# --- running ---------------------------------------------------------------------------------

def rounds(arms: List[Arm], reps: int) -> Dict[str, Dict[str, List[float]]]:
    """A warm-up epoch per arm, then `reps` rounds, the order rotated every round; per arm and
    round: samples/s and CPU seconds per sample of the whole process tree."""
    for arm in arms:
        arm.epoch()
    out = {a.name: {"per_s": [], "cpu_per_sample": []} for a in arms}
    for r in range(reps):
        for j in range(len(arms)):
            arm = arms[(r + j) % len(arms)]
            c0, t0 = tree_cpu_seconds(), time.perf_counter()
            n = arm.epoch()
            dt, dc = time.perf_counter() - t0, tree_cpu_seconds() - c0
            out[arm.name]["per_s"].append(n / dt)
            out[arm.name]["cpu_per_sample"].append(dc / n)
    return out


def table(kind: str, res: Dict[str, Dict[str, List[float]]], unit: str) -> List[str]:
    names = list(res)
    ref = names[0]
    lines = [f"| {kind} | {unit}, median (min-max) | CPU s per {unit.split('/')[0][:-1]} | loadscope / arm, median "
             "[95% CI] (range) |", "|---|---|---|---|"]
    for name in names:
        x, c = res[name]["per_s"], res[name]["cpu_per_sample"]
        cell = "—"
        if name != ref:
            r = bench_arms.ratio_summary(res[ref]["per_s"], x)
            ci = f" [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" if "ci95" in r else ""
            cell = f"**{r['median']:.2f}x**{ci} ({r['min']:.2f}-{r['max']:.2f})"
        lines.append(f"| {name} | {statistics.median(x):.1f} ({min(x):.1f}-{max(x):.1f}) | "
                     f"{statistics.median(c):.4f} | {cell} |")
    return lines


def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", default="data/demo", help="demo dataset for the image arms")
    p.add_argument("--videos", default="data/realistic", help="dataset with the realistic video profile")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", choices=("images", "video"), help="run one half")
    p.add_argument("--video-repeat", type=int, default=4, help="each video listed N times per epoch (default 4)")
    p.add_argument("--out", default="results/bench_peers.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    report: Dict[str, Any] = {"machine": bench_arms.machine(), "versions": {"torch": torch.__version__,
                                                                          **envmod.peer_versions()},
                              "threads": a.threads, "rounds": a.rounds}
    print(json.dumps(report["versions"]), flush=True)
    if not _has("nvidia.dali"):
        print("DALI is not installed: no DALI arm (pip install -r benchmarks/requirements-peers.txt)", flush=True)
    runs: List[Tuple[str, Callable[[], List[Arm]], Callable[[], Any], str]] = []
    if a.only in (None, "images"):
        if not os.path.isfile(os.path.join(a.images, "dataset.json")):  # make demo's dataset
            datasets.ensure(a.images)
        runs.append(("images", lambda: [builtin_image_arm(a.images, ld, a.threads, 64, 224)
                                        for ld in ("loadscope", "torch", "simplejpeg", "torchvision")]
                     + [spdl_image_arm(a.images, a.threads, 64, 224)]
                     + ([dali_image_arm(a.images, a.threads, 64, 224)] if _has("nvidia.dali") else []),
                     lambda: image_pixels(a.images, 64, 224), "images/s"))
    if a.only in (None, "video"):
        datasets.ensure(a.videos, images=1, videos=24, video_profile="realistic")
        rows = video_rows(a.videos) * a.video_repeat
        runs.append(("video clips", lambda: video_arms(rows, a.threads, 16, 2, 224, 8),
                     lambda: video_pixels(rows, 16, 2, 224), "clips/s"))
    out_lines: List[str] = []
    for kind, make_arms, pixels, unit in runs:
        report.setdefault("pixels", {})[kind] = pixels()
        print(kind, "pixels vs loadscope:", json.dumps(report["pixels"][kind]), flush=True)
        arms = make_arms()
        try:
            res = rounds(arms, a.rounds)
        finally:
            for arm in arms:
                arm.close()
        report[kind] = res
        out_lines += [""] + table(kind, res, unit)
        print("\n".join(table(kind, res, unit)), flush=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print("\n".join(out_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
