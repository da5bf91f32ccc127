"""The wheel against the source build (scripts/check-wheel.sh runs this, docs/install.md).

    python wheel_check.py decode OUT.pt      # with either install: decode, read S3, record
    python wheel_check.py compare SOURCE.pt WHEEL.pt

`decode` decodes every real image, video and audio file of ../shared/data/real (LOADSCOPE_REAL)
through the public API, reads two shards from the tests' radosgw (LOADSCOPE_WHEEL_BUCKET, with
the AWS_* variables) and the same shards from disk, and records what it got, with the
versions of the libraries and the shared objects the process mapped (/proc/self/maps).
`compare` asserts that the wheel decoded every file exactly as the source build did (the same
pixels and samples, the same errors), that its S3 reads equal its local reads, and that the
wheel's process mapped no codec, TBB, jpeg, webp or curl library of the system.
"""

import json
import os
import re
import sys
import tarfile
import tempfile
from pathlib import Path

import torch

# The libraries the wheel must carry, by file name: any of these mapped from outside
# loadscope.libs/ means the wheel leaned on the system.
CARRIED = re.compile(r"^lib(avcodec|avformat|avutil|swscale|swresample|avfilter|postproc|dav1d|tbb|tbbmalloc|"
                     r"jpeg|turbojpeg|webp|webpdemux|webpmux|sharpyuv|curl|curl-gnutls)[-.]")
IMAGES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".ppm")
VIDEOS = (".mp4", ".mkv", ".webm", ".avi", ".mov")
AUDIO = (".wav", ".mp3")
# Real JPEGs that decode (the damaged ones are decoded one by one above, errors and all).
SHARD_JPEGS = ("imageio/chelsea.jpg", "imageio/bricks.jpg", "libjpeg-turbo/testimages/testorig.jpg",
               "libjpeg-turbo/testimages/testimgari.jpg", "pillow/Tests/images/hopper.jpg",
               "pillow/Tests/images/pil_sample_rgb.jpg", "exif-orientation-examples/Landscape_6.jpg",
               "exif-orientation-examples/Landscape_3.jpg")


def real_files(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.suffix.lower() in IMAGES + VIDEOS + AUDIO and "_reference" not in p.parts)


def read_all(source, fields: dict) -> dict:
    import loadscope as ls

    out: dict = {}
    for batch in ls.Loader(source, fields=fields, batch_size=1, shuffle=False, threads=2):
        for k, v in batch.items():
            if isinstance(v, torch.Tensor):
                out.setdefault(k, []).append(v.clone())
    return {k: torch.cat(v) for k, v in out.items()}


def decode_one(root: Path, rel: str, tmp: Path) -> dict:
    """Every field that applies to the file, each read on its own: {field: tensors or "error"}."""
    import loadscope as ls

    ext = Path(rel).suffix.lower()
    manifest = tmp / "one.jsonl"
    manifest.write_text(json.dumps({"path": str(root / rel)}) + "\n")
    member = ext[1:]
    fields = {}
    if ext in IMAGES:
        fields["image"] = ls.Image((72, 96), crop="resize", dct_scaling=False, keys=member)
    if ext in VIDEOS:
        fields["video"] = ls.VideoClip((48, 64), crop="resize", frames=6, position="uniform", keys=member)
    if ext in VIDEOS + AUDIO:
        fields["audio"] = ls.Audio(sample_rate=16000, seconds=1.5, position="center", keys=member)
    got = {}
    for name, field in fields.items():
        try:
            got[name] = read_all(ls.FileList(manifest, cache_dir=None), {name: field})
        except ls.LoadscopeError as e:  # the same bad files must fail the same way
            got[name] = f"{type(e).__name__}: {e}"
    return got


def shards(root: Path, tmp: Path) -> dict:
    """{name: local path} of the shards the S3 part reads: a real WebDataset shard, and a tar of
    real JPEGs made here."""
    jpegs = tmp / "jpegs.tar"
    with tarfile.open(jpegs, "w") as tar:
        for rel in SHARD_JPEGS:
            tar.add(root / rel, arcname=rel.replace("/", "_").replace(".jpg", "") + ".jpg")
    return {"sample.tgz": root / "webdataset/testdata/sample.tgz", "jpegs.tar": jpegs}


def read_shards(urls: dict) -> dict:
    import loadscope as ls

    fields = {"sample.tgz": {"png": ls.Image((28, 28), crop="resize"), "cls": ls.Int()},
              "jpegs.tar": {"jpg": ls.Image((64, 64), crop="center", resize=80)}}
    return {name: read_all(ls.WebDataset([url]), fields[name]) for name, url in urls.items()}


def mapped_libraries() -> list:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if ".so" in line.split()[-1]})


def decode(out: str) -> None:
    import loadscope as ls
    from loadscope import _native
    from loadscope._version import carried_libraries

    root = Path(os.environ["LOADSCOPE_REAL"])
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        files = {rel: decode_one(root, rel, tmp) for rel in real_files(root)}
        local = shards(root, tmp)
        bucket = os.environ["LOADSCOPE_WHEEL_BUCKET"]
        from_disk = read_shards({name: str(p) for name, p in local.items()})
        from_s3 = read_shards({name: f"s3://{bucket}/{name}" for name in local})
    torch.save({"files": files, "shards_disk": from_disk, "shards_s3": from_s3, "maps": mapped_libraries(),
                "versions": _native.library_versions(), "carried": carried_libraries(), "package": ls.__file__,
                "missing_demuxers": _native.formats()["missing_demuxers"]}, out)
    print(f"wheel_check: {len(files)} real files decoded by {ls.__file__}")


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def compare(source_pt: str, wheel_pt: str) -> None:
    src, whl = torch.load(source_pt), torch.load(wheel_pt)
    problems = []
    if whl["carried"] is None:
        problems.append(f"the wheel run imported a source build: {whl['package']}")
    if src["carried"] is not None:
        problems.append(f"the source run imported a wheel: {src['package']}")
    if src["files"].keys() != whl["files"].keys():
        problems.append(f"different file lists: {sorted(src['files'].keys() ^ whl['files'].keys())}")
    kinds: dict = {}
    for rel, got in src["files"].items():
        for field, value in got.items():
            kind = "error" if isinstance(value, str) else field
            kinds[kind] = kinds.get(kind, 0) + 1
            if not same(value, whl["files"].get(rel, {}).get(field)):
                problems.append(f"{rel} [{field}]: the wheel decoded it differently "
                                f"({str(value)[:120]!r} against {str(whl['files'].get(rel, {}).get(field))[:120]!r})")
    for name in src["shards_disk"]:
        for run, label in ((src, "source"), (whl, "wheel")):
            if not same(run["shards_s3"][name], run["shards_disk"][name]):
                problems.append(f"{label}: {name} read from S3 differs from the same shard read from disk")
        if not same(whl["shards_s3"][name], src["shards_s3"][name]):
            problems.append(f"{name}: the wheel's S3 read differs from the source build's")
    system = [p for p in whl["maps"] if CARRIED.match(os.path.basename(p)) and "/loadscope.libs/" not in p]
    if system:
        problems.append(f"the wheel's process mapped the system's libraries: {system}")
    carried = {re.sub(r"-[0-9a-f]{8}", "", os.path.basename(p)).split(".")[0]
               for p in whl["maps"] if "/loadscope.libs/" in p}
    for lib in ("libavcodec", "libavformat", "libdav1d", "libtbb", "libturbojpeg", "libjpeg", "libwebp", "libcurl"):
        if lib not in carried:
            problems.append(f"the wheel's process never mapped its own {lib} (mapped: {sorted(carried)})")
    for run, label in ((src, "source"), (whl, "wheel")):
        if run["missing_demuxers"]:  # the format table promises containers this FFmpeg cannot open
            problems.append(f"the {label} build's FFmpeg lacks the demuxers {run['missing_demuxers']} of the format "
                            "table (scripts/build-ffmpeg.sh)")
    if not whl["versions"]["ffmpeg_license"].startswith("LGPL"):
        problems.append(f"the wheel's FFmpeg is {whl['versions']['ffmpeg_license']}")
    if problems:
        sys.exit("wheel_check: FAILED\n  " + "\n  ".join(problems))
    print(f"wheel_check: ok: {len(src['files'])} real files equal to the source build ({kinds}); "
          f"S3 shards equal to disk; {len(carried)} carried libraries mapped, none of the system's; "
          f"FFmpeg {whl['versions']['ffmpeg_license']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["decode"] and len(sys.argv) == 3:
        decode(sys.argv[2])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
