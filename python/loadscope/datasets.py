"""Deterministic demo data: ImageNet-like JPEGs cut from real photographs.

    python -m loadscope.datasets --out data/demo [--images 2000] [--videos 24] [--seed 0]

Every image is a random crop of one of the photographs scikit-image ships (an astronaut, a cat,
coffee, a rocket, a galaxy field, a retina, ...), one class per photograph, resized to a short
side of 256-512 px with an aspect ratio between 3:4 and 16:9, given mild sensor-like noise (so
that upscaled crops keep a photograph's entropy), and saved as baseline 4:2:0 JPEG at quality
75-95. Written three ways over the same files:

    <out>/folder/<class>/<key>.jpg (+ .txt caption, .json metadata)   for ls.Folder / ImageFolder
    <out>/shards/train-{000000..}.tar   key.jpg key.cls key.txt key.json  for ls.WebDataset
    <out>/manifest.jsonl                {"path", "cls", "txt"}             for ls.FileList

Videos (``--videos``, made by the ffmpeg CLI with libx264): slow pans and zooms across the same
photographs, 5 s at 30 fps, 640x360 / 854x480 / 1280x720, GOP of 10, 30, 60 or 150 frames,
each with a label and a caption (``--video-profile``: "realistic" and "dataset" make videos like
those of real datasets, see VIDEO_PROFILES):

``--audio`` gives every video a soundtrack (48 kHz stereo AAC, Opus in WebM: two gliding
tones with a syllable-rate tremolo over pink noise, like speech over room tone).

    <out>/videos/<class>/<key>.mp4 (+ .txt, .json)
    <out>/video_shards/videos-{000000..}.tar   key.mp4 key.cls key.txt key.json
    <out>/videos.jsonl                          {"path", "cls", "txt"}
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._errors import ConfigError

GENERATOR_VERSION = 2
# Video profiles. "demo": short videos of every size and GOP length, for tests and the demo.
# "realistic": what video datasets hold (issue 14): 10 s at 30 fps, H.264 High with B-frames,
# a keyframe every 2 s, 720p and 360p — for speed figures (docs/benchmarks.md).
# "dataset": what a large video dataset holds (issue 14, part 10): 8-12 s at 24-30 fps,
# 340x256 to 1280x720, H.264 High with B-frames at x264's default GOP of 250 and at 60 and 30,
# one video in ten HEVC (MP4) and one in ten VP9 (WebM, as Something-Something ships), one in
# ten stored landscape with a rotation to portrait (phone footage); made for hundreds of
# distinct videos, so that every clip of an epoch comes from another one.
VIDEO_PROFILES: Dict[str, Dict[str, Any]] = {
    "demo": {"sizes": [(640, 360), (854, 480), (1280, 720)], "gops": [10, 30, 60, 150], "seconds": 5, "fps": 30},
    "realistic": {"sizes": [(1280, 720), (640, 360)], "gops": [60], "seconds": 10, "fps": 30},
    "dataset": {"sizes": [(340, 256), (480, 360), (640, 360), (854, 480), (1280, 720)], "gops": [250, 60, 30],
                "seconds": (8, 12), "fps": [24, 25, 30], "codecs": ["h264", "hevc", "vp9"] + ["h264"] * 7},
    # One size each, for where GPU decoding starts to win (scripts/gpu-check.sh's crossover):
    # a small source, where NVDEC's fixed costs dominate, and a large one.
    "360p": {"sizes": [(640, 360)], "gops": [30], "seconds": 3, "fps": 30},
    "1080p": {"sizes": [(1920, 1080)], "gops": [30], "seconds": 3, "fps": 30},
}

# How each codec is encoded: (file extension, encoder arguments for a GOP of g frames).
_ENCODERS = {
    "h264": (".mp4", lambda g: ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23",
                                "-g", str(g), "-keyint_min", str(g), "-sc_threshold", "0", "-bf", "2",
                                "-movflags", "+faststart"]),
    "hevc": (".mp4", lambda g: ["-c:v", "libx265", "-preset", "ultrafast", "-crf", "28", "-tag:v", "hvc1",
                                "-x265-params", f"keyint={g}:min-keyint={g}:scenecut=0:bframes=2:log-level=error"]),
    # WebM stores variable rates: without cfr the CLI passes the still's 25 frames/s through
    # (MP4 gets them repeated to the rate asked for).
    "vp9": (".webm", lambda g: ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1",
                                "-b:v", "0", "-crf", "33", "-g", str(g), "-keyint_min", str(g), "-fps_mode", "cfr"]),
}

# (class name, scikit-image function, how a caption names it)
PHOTOS: List[Tuple[str, str, str]] = [
    ("astronaut", "astronaut", "an astronaut in a spacesuit"),
    ("coffee", "coffee", "a cup of coffee on a saucer"),
    ("cat", "chelsea", "a tabby cat"),
    ("rocket", "rocket", "a rocket on its launch pad"),
    ("galaxies", "hubble_deep_field", "a field of distant galaxies"),
    ("tissue", "immunohistochemistry", "stained tissue under a microscope"),
    ("retina", "retina", "a photograph of a human retina"),
    ("motorcycle", "stereo_motorcycle", "a motorcycle in a workshop"),
    ("cameraman", "camera", "a man with a camera on a tripod"),
    ("moon", "moon", "the surface of the moon"),
]
ADJECTIVES = ["close-up", "wide", "bright", "dim", "grainy", "sharp", "cropped", "tilted"]


def _load_photos() -> List[np.ndarray]:
    import skimage.data

    photos = []
    for _, fn, _ in PHOTOS:
        a = getattr(skimage.data, fn)()
        if isinstance(a, tuple):  # stereo pairs
            a = a[0]
        if a.ndim == 2:
            a = np.stack([a] * 3, axis=-1)
        photos.append(np.ascontiguousarray(a[..., :3].astype(np.uint8)))
    return photos


def _make_image(photo: np.ndarray, rng: np.random.Generator, short_side: Optional[int] = None):
    from PIL import Image

    h, w = photo.shape[:2]
    aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(16 / 9))))  # width / height
    if rng.random() < 0.3:  # some portrait images
        aspect = 1.0 / aspect
    # A crop of 30-100% of the photograph's shorter side with the target aspect ratio.
    frac = rng.uniform(0.3, 1.0)
    ch = int(min(h, w / aspect) * frac)
    cw = int(ch * aspect)
    ch, cw = max(ch, 16), max(cw, 16)
    y = int(rng.integers(0, h - ch + 1))
    x = int(rng.integers(0, w - cw + 1))
    crop = photo[y : y + ch, x : x + cw]
    short = short_side or int(rng.integers(256, 513))  # ImageNet's range
    out_w, out_h = (short, int(round(short * aspect))) if aspect >= 1 else (int(round(short / aspect)), short)
    img = Image.fromarray(crop).resize((out_w, out_h), Image.BICUBIC)
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(img).astype(np.float32)
    a *= rng.uniform(0.85, 1.15)  # exposure
    a += rng.normal(0.0, 2.0, size=a.shape)  # sensor noise
    img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))
    quality = int(rng.integers(75, 96))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, subsampling="4:2:0", optimize=False)
    return buf.getvalue(), img.size, quality, (x, y, cw, ch)


def _tar_add(tar: Optional[tarfile.TarFile], name: str, data: bytes) -> None:
    assert tar is not None  # the writers open a shard at the first sample
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


# The soundtrack of --audio: per channel a tone gliding around a pitch, 3 Hz tremolo (syllables),
# and noise; the pitches and glide rates come from the video's key so that videos differ.
def _soundtrack(seconds: float, i: int) -> List[str]:
    f0, f1 = 140 + 17 * (i % 7), 210 + 13 * (i % 5)
    tone = "0.25*sin(2*PI*({f}+{d}*sin(2*PI*{g}*t))*t)*(0.55+0.45*sin(2*PI*3*t))+0.04*(random({r})-0.5)"
    left = tone.format(f=f0, d=30, g=0.4, r=0)
    right = tone.format(f=f1, d=25, g=0.6, r=1)
    return ["-f", "lavfi", "-i", f"aevalsrc='{left}|{right}':s=48000:d={seconds}"]


def _video_jobs(tmp: str, videos: int, rng: np.random.Generator, photos: List[np.ndarray], profile: str = "demo",
                audio: bool = False):
    """Plans the videos: one ffmpeg command each (a pan or a zoom over a photograph)."""
    from PIL import Image

    prof = VIDEO_PROFILES[profile]
    sizes, gops = prof["sizes"], prof["gops"]

    stills = os.path.join(tmp, "stills")
    os.makedirs(stills, exist_ok=True)
    jobs = []
    for i in range(videos):
        cls = int(rng.integers(0, len(PHOTOS)))
        seconds, fps, codec, rotation = prof["seconds"], prof["fps"], "h264", 0
        if profile == "dataset":  # sizes drawn; GOP, codec and rotation cycle: each codec has every GOP
            w, h = sizes[int(rng.integers(0, len(sizes)))]
            gop = gops[i % len(gops)]
            codec = prof["codecs"][i % len(prof["codecs"])]
            seconds = round(float(rng.uniform(*prof["seconds"])), 1)
            fps = int(prof["fps"][int(rng.integers(0, len(prof["fps"])))])
            rotation = {3: 90, 13: 270}.get(i % 20, 0)  # one in ten
        else:
            w, h = sizes[i % len(sizes)]
            gop = gops[(i // len(sizes)) % len(gops)]
        still = os.path.join(stills, f"{cls}.png")
        if not os.path.exists(still):
            Image.fromarray(photos[cls]).save(still)
        # The photo scaled to cover 1.5x the frame, then a window moving across it (pan) or a
        # growing scale around the centre (zoom); grain keeps the entropy of real footage.
        cover = f"scale=w='max({w}*1.5,ih*0+{h}*1.5*iw/ih)':h=-2"
        if rng.random() < 0.5:
            dx, dy = rng.uniform(-1, 1, size=2)
            x = f"(iw-ow)*(0.5+{dx / 2:.3f}*(t/{seconds}-0.5))"
            y = f"(ih-oh)*(0.5+{dy / 2:.3f}*(t/{seconds}-0.5))"
            motion = f"{cover},crop={w}:{h}:x='{x}':y='{y}'"
            kind = "pan"
        else:
            motion = (f"{cover},scale=w='iw*(1+0.3*t/{seconds})':h=-2:eval=frame,"
                      f"crop={w}:{h}")
            kind = "zoom"
        key = f"{i:06d}"
        name, _, thing = PHOTOS[cls]
        caption = f"a slow {'pan across' if kind == 'pan' else 'zoom into'} {thing}"
        meta = {"class": name, "width": w, "height": h, "gop": gop, "fps": fps,
                "seconds": seconds, "motion": kind}
        if profile == "dataset":
            meta.update(codec=codec, rotation=rotation)
        ext, encoder = _ENCODERS[codec]
        sound = (["-map", "0:v", "-map", "1:a", "-ar", "48000", "-ac", "2", "-b:a", "128k", "-c:a",
                  "libopus" if ext == ".webm" else "aac", "-shortest"] if audio else ["-an"])
        cmd = ["ffmpeg", "-v", "error", "-y", "-loop", "1", "-i", still, *(_soundtrack(seconds, i) if audio else []),
               "-t", str(seconds), "-r", str(fps), "-vf", f"{motion},noise=alls=4:allf=t,format=yuv420p",
               *encoder(gop), "-threads", "1", *sound]
        # FFmpeg 5.1 sets a rotation only when it copies a stream: a second, copying pass.
        rotate = (["ffmpeg", "-v", "error", "-y", "-i", "{tmp}", "-c", "copy", "-metadata:s:v:0",
                   f"rotate={rotation}", "-movflags", "+faststart"] if rotation else None)
        jobs.append((key, cls, caption, meta, cmd, ext, rotate))
    return jobs


def _make_videos(tmp: str, videos: int, rng: np.random.Generator, photos, shard_size: int, quiet: bool,
                 profile: str = "demo", audio: bool = False) -> int:
    import concurrent.futures

    if videos <= 0:
        return 0
    if shutil.which("ffmpeg") is None:
        raise RuntimeError("making demo videos needs the ffmpeg CLI (Debian package ffmpeg)")
    jobs = _video_jobs(tmp, videos, rng, photos, profile, audio)
    labels = sorted(p[0] for p in PHOTOS)
    outputs = {}
    for key, cls, _caption, _meta, _cmd, ext, _rotate in jobs:
        folder = os.path.join(tmp, "videos", PHOTOS[cls][0])
        os.makedirs(folder, exist_ok=True)
        outputs[key] = os.path.join(folder, key + ext)

    def run(job):
        key, _, _, _, cmd, ext, rotate = job
        if rotate is None:
            subprocess.run(cmd + [outputs[key]], check=True, capture_output=True)
            return
        unrotated = outputs[key] + ".unrotated" + ext
        subprocess.run(cmd + [unrotated], check=True, capture_output=True)
        subprocess.run([unrotated if a == "{tmp}" else a for a in rotate] + [outputs[key]], check=True,
                       capture_output=True)
        os.remove(unrotated)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for n, _ in enumerate(pool.map(run, jobs), 1):
            if not quiet and n % 8 == 0:
                print(f"  {n}/{videos} videos", file=sys.stderr)
    os.makedirs(os.path.join(tmp, "video_shards"))
    tar: Optional[tarfile.TarFile] = None
    total = 0
    with open(os.path.join(tmp, "videos.jsonl"), "w") as manifest:
        for i, (key, cls, caption, meta, _, ext, _) in enumerate(jobs):
            if i % shard_size == 0:
                if tar is not None:
                    tar.close()
                tar = tarfile.open(os.path.join(tmp, "video_shards", f"videos-{i // shard_size:06d}.tar"), "w", format=tarfile.USTAR_FORMAT)
            path = outputs[key]
            with open(path, "rb") as f:
                data = f.read()
            total += len(data)
            base = path[: -len(ext)]
            with open(base + ".txt", "w") as text:
                text.write(caption)
            with open(base + ".json", "w") as side:
                json.dump(meta, side)
            label = labels.index(PHOTOS[cls][0])
            _tar_add(tar, key + ext, data)
            _tar_add(tar, key + ".cls", str(label).encode())
            _tar_add(tar, key + ".txt", caption.encode())
            _tar_add(tar, key + ".json", json.dumps(meta).encode())
            manifest.write(json.dumps({"path": os.path.relpath(path, tmp), "cls": label, "txt": caption}) + "\n")
    if tar is not None:
        tar.close()
    shutil.rmtree(os.path.join(tmp, "stills"))
    return total


# The NVDEC checks' videos (tests/python/test_cuda.py): (file, ffmpeg output arguments, whether
# NVDEC decodes it, else the reason the loader reports). 4:4:4 H.264 is a profile NVDEC does not
# decode (to Hopper); Theora is a codec loadscope does not send to NVDEC (nor has FFmpeg a path).
_GPU_CHECK_VIDEOS = [
    ("h264-360p.mp4", "640x360", ["-c:v", "libx264", "-preset", "veryfast", "-g", "30", "-bf", "2", "-pix_fmt", "yuv420p"],
     ""),
    ("h264-720p.mp4", "1280x720", ["-c:v", "libx264", "-preset", "veryfast", "-g", "30", "-bf", "2",
                                   "-pix_fmt", "yuv420p"], ""),
    ("hevc-360p.mp4", "640x360", ["-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1", "-pix_fmt", "yuv420p",
                                  "-x265-params", "keyint=30:bframes=2:log-level=error"], ""),
    ("vp9-360p.webm", "640x360", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "30",
                                  "-pix_fmt", "yuv420p"], ""),
    ("h264-444-360p.mp4", "640x360", ["-c:v", "libx264", "-preset", "veryfast", "-g", "30", "-pix_fmt", "yuv444p"],
     "NVDEC did not take this stream"),
    ("theora-360p.ogv", "640x360", ["-c:v", "libtheora", "-g", "30", "-pix_fmt", "yuv420p"],
     "NVDEC is used for H.264, HEVC, VP8, VP9 and AV1 only (exact decoding), not theora"),
]


def gpu_check_videos(out: str) -> List[Dict[str, Any]]:
    """Writes the NVDEC checks' videos (2 s of FFmpeg's testsrc2 each) and out/videos.json
    listing them: [{"file", "nvdec", "why"}]. Needs the ffmpeg CLI (not on the GPU machine:
    scripts/gpu-prefix.sh makes them here and gpu-check.sh carries them)."""
    os.makedirs(out, exist_ok=True)
    listed = []
    for name, size, args, why in _GPU_CHECK_VIDEOS:
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={size}:rate=30:duration=2",
                        *args, "-an", os.path.join(out, name)], check=True)
        listed.append({"file": name, "nvdec": not why, "why": why})
    with open(os.path.join(out, "videos.json"), "w") as f:
        json.dump(listed, f, indent=1)
    return listed


def generate(out: str, images: int = 2000, seed: int = 0, shard_size: int = 200, quiet: bool = False,
             videos: int = 24, video_shard_size: int = 8, video_profile: str = "demo", audio: bool = False,
             image_short: Optional[int] = None) -> dict:
    """Writes the demo dataset to `out` (replacing a demo dataset there) and returns its
    metadata. Refuses a non-empty directory that is not a demo dataset: it would be deleted."""
    if video_profile not in VIDEO_PROFILES:
        raise ConfigError(f"video_profile={video_profile!r}: allowed are {', '.join(map(repr, VIDEO_PROFILES))}")
    if os.path.isdir(out) and os.listdir(out) and not os.path.isfile(os.path.join(out, "dataset.json")):
        raise ConfigError(f"{out!r} is not empty and holds no demo dataset (no dataset.json): refusing to "
                          "replace it; choose an empty or new directory")
    t0 = time.time()
    tmp = out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "shards"))
    photos = _load_photos()
    rng = np.random.default_rng(seed)
    manifest = []
    n_shards = (images + shard_size - 1) // shard_size
    total_bytes = 0
    tar: Optional[tarfile.TarFile] = None
    for i in range(images):
        if i % shard_size == 0:
            if tar is not None:
                tar.close()
            tar = tarfile.open(os.path.join(tmp, "shards", f"train-{i // shard_size:06d}.tar"), "w", format=tarfile.USTAR_FORMAT)
        cls = int(rng.integers(0, len(PHOTOS)))
        name, _, thing = PHOTOS[cls]
        jpg, (w, h), quality, crop = _make_image(photos[cls], rng, image_short)
        key = f"{i:07d}"
        caption = f"a {ADJECTIVES[int(rng.integers(0, len(ADJECTIVES)))]} photo of {thing}"
        meta = {"class": name, "width": w, "height": h, "quality": quality, "source": PHOTOS[cls][1], "crop_xywh": list(crop)}
        folder = os.path.join(tmp, "folder", name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, key + ".jpg"), "wb") as f:
            f.write(jpg)
        with open(os.path.join(folder, key + ".txt"), "w") as f:
            f.write(caption)
        with open(os.path.join(folder, key + ".json"), "w") as f:
            json.dump(meta, f)
        # Folder classes are sorted names, so the label is the index among sorted names.
        label = sorted(p[0] for p in PHOTOS).index(name)
        _tar_add(tar, key + ".jpg", jpg)
        _tar_add(tar, key + ".cls", str(label).encode())
        _tar_add(tar, key + ".txt", caption.encode())
        _tar_add(tar, key + ".json", json.dumps(meta).encode())
        manifest.append({"path": f"folder/{name}/{key}.jpg", "cls": label, "txt": caption})
        total_bytes += len(jpg)
        if not quiet and (i + 1) % 500 == 0:
            print(f"  {i + 1}/{images} images", file=sys.stderr)
    if tar is not None:
        tar.close()
    with open(os.path.join(tmp, "manifest.jsonl"), "w") as f:
        for m in manifest:
            f.write(json.dumps(m) + "\n")
    video_bytes = _make_videos(tmp, videos, np.random.default_rng([seed, 1]), photos, video_shard_size, quiet,
                               video_profile, audio)
    info = {
        "generator_version": GENERATOR_VERSION, "images": images, "seed": seed, "shards": n_shards,
        "shard_size": shard_size, "classes": sorted(p[0] for p in PHOTOS), "jpeg_bytes": total_bytes,
        "videos": videos, "video_profile": video_profile, "audio": audio, "video_bytes": video_bytes,
        "image_short": image_short,
        "seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(tmp, "dataset.json"), "w") as f:
        json.dump(info, f, indent=1)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return info


def ensure(out: str, images: int = 2000, seed: int = 0, quiet: bool = False, videos: int = 24,
           video_profile: str = "demo", audio: bool = False, image_short: Optional[int] = None) -> dict:
    """Generates the dataset unless `out` already holds this exact one."""
    try:
        with open(os.path.join(out, "dataset.json")) as f:
            info = json.load(f)
        if (info.get("generator_version") == GENERATOR_VERSION and info.get("images") == images
                and info.get("seed") == seed and info.get("videos") == videos
                and info.get("video_profile", "demo") == video_profile and info.get("audio", False) == audio
                and info.get("image_short") == image_short):
            return info
    except (OSError, ValueError):
        pass
    if not quiet:
        print(f"generating {images} demo images and {videos} videos in {out} ...", file=sys.stderr)
    return generate(out, images=images, seed=seed, quiet=quiet, videos=videos, video_profile=video_profile, audio=audio,
                    image_short=image_short)


def main(argv=None, prog: str = "python -m loadscope.datasets") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="data/demo", help="output directory (default: data/demo)")
    p.add_argument("--images", type=int, default=2000, help="number of images (default: 2000)")
    p.add_argument("--videos", type=int, default=24, help="number of videos (default: 24; 0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--video-profile", choices=sorted(VIDEO_PROFILES), default="demo",
                   help="demo: 5 s videos of every size and GOP; realistic: 10 s, GOP 60, 720p/360p; "
                        "dataset: 8-12 s, 256p-720p, GOP 250/60/30, some HEVC, VP9 and rotated (for 500+ videos)")
    p.add_argument("--audio", action="store_true", help="give the videos a soundtrack (48 kHz stereo AAC; Opus in WebM)")
    p.add_argument("--image-short", type=int, default=None,
                   help="every image's shorter side in pixels (default: drawn from 256-512, ImageNet's sizes; "
                        "1080: photos as a phone takes them, for where GPU decoding wins)")
    p.add_argument("--force", action="store_true", help="regenerate even if present")
    a = p.parse_args(argv)
    if a.images < 1 or a.videos < 0 or (a.image_short is not None and not 16 <= a.image_short <= 8192):
        p.error("--images must be >= 1, --videos >= 0 and --image-short in 16-8192")
    kw = dict(videos=a.videos, video_profile=a.video_profile, audio=a.audio, image_short=a.image_short)
    info = generate(a.out, a.images, a.seed, **kw) if a.force else ensure(a.out, a.images, a.seed, **kw)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
