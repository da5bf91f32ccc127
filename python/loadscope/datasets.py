"""Deterministic demo data: ImageNet-like JPEGs cut from real photographs.

    python -m loadscope.datasets --out data/demo [--images 2000] [--seed 0]

Every image is a random crop of one of the photographs scikit-image ships (an astronaut, a cat,
coffee, a rocket, a galaxy field, a retina, ...), one class per photograph, resized to a short
side of 256-512 px with an aspect ratio between 3:4 and 16:9, given mild sensor-like noise (so
that upscaled crops keep a photograph's entropy), and saved as baseline 4:2:0 JPEG at quality
75-95. Written three ways over the same files:

    <out>/folder/<class>/<key>.jpg (+ .txt caption, .json metadata)   for ls.Folder / ImageFolder
    <out>/shards/train-{000000..}.tar   key.jpg key.cls key.txt key.json  for ls.WebDataset
    <out>/manifest.jsonl                {"path", "cls", "txt"}             for ls.FileList
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
import time
from typing import List, Tuple

import numpy as np

GENERATOR_VERSION = 1

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


def _make_image(photo: np.ndarray, rng: np.random.Generator):
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
    short = int(rng.integers(256, 513))
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


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def generate(out: str, images: int = 2000, seed: int = 0, shard_size: int = 200, quiet: bool = False) -> dict:
    """Writes the demo dataset to `out` (replacing it) and returns its metadata."""
    t0 = time.time()
    tmp = out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "shards"))
    photos = _load_photos()
    rng = np.random.default_rng(seed)
    manifest = []
    n_shards = (images + shard_size - 1) // shard_size
    total_bytes = 0
    tar = None
    for i in range(images):
        if i % shard_size == 0:
            if tar is not None:
                tar.close()
            tar = tarfile.open(os.path.join(tmp, "shards", f"train-{i // shard_size:06d}.tar"), "w", format=tarfile.USTAR_FORMAT)
        cls = int(rng.integers(0, len(PHOTOS)))
        name, _, thing = PHOTOS[cls]
        jpg, (w, h), quality, crop = _make_image(photos[cls], rng)
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
    info = {
        "generator_version": GENERATOR_VERSION, "images": images, "seed": seed, "shards": n_shards,
        "shard_size": shard_size, "classes": sorted(p[0] for p in PHOTOS), "jpeg_bytes": total_bytes,
        "seconds": round(time.time() - t0, 1),
    }
    with open(os.path.join(tmp, "dataset.json"), "w") as f:
        json.dump(info, f, indent=1)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return info


def ensure(out: str, images: int = 2000, seed: int = 0, quiet: bool = False) -> dict:
    """Generates the dataset unless `out` already holds this exact one."""
    try:
        with open(os.path.join(out, "dataset.json")) as f:
            info = json.load(f)
        if info.get("generator_version") == GENERATOR_VERSION and info.get("images") == images and info.get("seed") == seed:
            return info
    except (OSError, ValueError):
        pass
    if not quiet:
        print(f"generating {images} demo images in {out} ...", file=sys.stderr)
    return generate(out, images=images, seed=seed, quiet=quiet)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadscope.datasets", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="data/demo", help="output directory (default: data/demo)")
    p.add_argument("--images", type=int, default=2000, help="number of images (default: 2000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="regenerate even if present")
    a = p.parse_args(argv)
    if a.images < 1:
        p.error("--images must be >= 1")
    info = generate(a.out, a.images, a.seed) if a.force else ensure(a.out, a.images, a.seed)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
