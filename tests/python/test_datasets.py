"""The demo data generator: deterministic, ImageNet-like, the three layouts consistent."""

import hashlib
import json
import subprocess
import tarfile

import numpy as np
import pytest
from PIL import Image

from loadscope import ConfigError, datasets


def digest(root):
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != "dataset.json":
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    datasets.generate(str(a), images=12, seed=5, shard_size=5, quiet=True, videos=2)
    datasets.generate(str(b), images=12, seed=5, shard_size=5, quiet=True, videos=2)
    datasets.generate(str(c), images=12, seed=6, shard_size=5, quiet=True, videos=2)
    assert digest(a) == digest(b) != digest(c)
    info = json.loads((a / "dataset.json").read_text())
    assert info["images"] == 12 and info["shards"] == 3
    assert datasets.ensure(str(a), images=12, seed=5, quiet=True, videos=2)["seconds"] == info["seconds"]  # kept


def test_images_are_imagenet_like_photographs(demo):
    sizes, qualities = [], []
    for p in sorted((demo / "folder").rglob("*.jpg")):
        with Image.open(p) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            # 4:2:0: luma sampled 2x2 against chroma
            assert im.layer[0][1:3] == (2, 2) and im.layer[1][1:3] == (1, 1)
            w, h = im.size
            a = np.asarray(im)
        sizes.append((w, h))
        assert 256 <= min(w, h) <= 512
        assert 3 / 4 - 0.01 <= max(w, h) / min(w, h) <= 16 / 9 + 0.01
        # Real structure, not flat colour and not noise: 8x8 block means (which average the
        # sensor noise away) still vary.
        blocks = a[: h // 8 * 8, : w // 8 * 8].reshape(h // 8, 8, w // 8, 8, 3).mean((1, 3))
        assert blocks.std() > 3
        meta = json.loads(p.with_suffix(".json").read_text())
        qualities.append(meta["quality"])
        assert p.with_suffix(".txt").read_text().startswith("a ")
    assert 75 <= min(qualities) and max(qualities) <= 95
    assert len({s for s in sizes}) > 50  # varied sizes, like ImageNet


def test_shards_and_manifest_describe_the_folder(demo):
    folder = {p.stem: p.read_bytes() for p in (demo / "folder").rglob("*.jpg")}
    members = {}
    for shard in sorted((demo / "shards").glob("*.tar")):
        with tarfile.open(shard) as t:
            for m in t.getmembers():
                members[m.name] = t.extractfile(m).read()
    assert {k: v for k, v in members.items() if k.endswith(".jpg")} == {k + ".jpg": v for k, v in folder.items()}
    classes = json.loads((demo / "dataset.json").read_text())["classes"]
    for line in (demo / "manifest.jsonl").read_text().splitlines():
        rec = json.loads(line)
        key = rec["path"].rsplit("/", 1)[-1][:-4]
        assert rec["path"].split("/")[1] == classes[rec["cls"]]
        assert members[key + ".cls"] == str(rec["cls"]).encode()
        assert members[key + ".txt"].decode() == rec["txt"]


def test_videos_are_pans_and_zooms_of_the_photographs(demo_videos):
    from loadscope import _native

    rows = [json.loads(line) for line in (demo_videos / "videos.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    sizes, gops = set(), set()
    for row in rows:
        path = demo_videos / row["path"]
        meta = json.loads(path.with_suffix(".json").read_text())
        ix = _native.video_index(str(path))
        assert (ix["width"], ix["height"]) == (meta["width"], meta["height"])
        assert ix["codec"] == "h264" and len(ix["pts"]) == 150 and ix["fps"] == 30
        keys = subprocess.run(
            ["ffprobe", "-v", "error", "-select_streams", "v", "-skip_frame", "nokey", "-show_entries",
             "frame=pts", "-of", "csv=p=0", str(path)], capture_output=True, text=True, check=True).stdout.split()
        assert len(keys) == -(-150 // meta["gop"])  # a keyframe every GOP frames
        sizes.add((meta["width"], meta["height"]))
        gops.add(meta["gop"])
        assert path.with_suffix(".txt").read_text() == row["txt"]
    assert sizes == {(640, 360), (854, 480), (1280, 720)} and len(gops) == 2
    with tarfile.open(demo_videos / "video_shards/videos-000000.tar") as t:
        names = t.getnames()
    assert names[:4] == ["000000.mp4", "000000.cls", "000000.txt", "000000.json"]


def test_the_realistic_video_profile_is_what_video_datasets_hold(tmp_path):
    """10 s at 30 fps, H.264 High with B-frames, a keyframe every 60 frames, 720p then 360p:
    read back with ffprobe, independently of the generator's own metadata."""
    import shutil

    from loadscope import datasets

    if shutil.which("ffprobe") is None:
        pytest.skip("ffprobe not available")
    out = tmp_path / "real"
    info = datasets.generate(str(out), images=1, seed=0, quiet=True, videos=2, video_profile="realistic")
    assert info["video_profile"] == "realistic"
    rows = [json.loads(line) for line in (out / "videos.jsonl").read_text().splitlines()]
    shapes = []
    for row in rows:
        path = str(out / row["path"])
        st = json.loads(subprocess.run(
            ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
             "stream=width,height,profile,has_b_frames,nb_read_frames,avg_frame_rate", "-of", "json", path],
            capture_output=True, text=True, check=True).stdout)["streams"][0]
        keys = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-skip_frame", "nokey", "-show_entries",
                               "frame=pts", "-of", "csv=p=0", path], capture_output=True, text=True, check=True).stdout.split()
        assert st["profile"] == "High" and st["has_b_frames"] > 0 and st["avg_frame_rate"] == "30/1"
        assert int(st["nb_read_frames"]) == 300 and len(keys) == 5
        shapes.append((st["width"], st["height"]))
    assert shapes == [(1280, 720), (640, 360)]
    with pytest.raises(ConfigError, match="video_profile='hd': allowed are 'demo', 'realistic', 'dataset'"):
        datasets.generate(str(tmp_path / "x"), images=1, videos=1, video_profile="hd")


def test_the_dataset_video_profile_mixes_gops_codecs_sizes_and_rotations(tmp_path):
    """Issue 14's benchmark set: 8-12 s at 24-30 fps, 340x256 to 1280x720, GOP 250/60/30, one in
    ten HEVC and one in ten VP9 (WebM), one in ten rotated; read back with ffprobe."""
    from loadscope import datasets

    out = tmp_path / "set"
    datasets.generate(str(out), images=1, seed=0, quiet=True, videos=4, video_profile="dataset")
    rows = [json.loads(line) for line in (out / "videos.jsonl").read_text().splitlines()]
    seen = []
    for row in rows:
        path = str(out / row["path"])
        st = json.loads(subprocess.run(
            ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
             "stream=codec_name,width,height,avg_frame_rate,has_b_frames:stream_side_data=rotation:format=duration",
             "-of", "json", path], capture_output=True, text=True, check=True).stdout)
        st, duration = st["streams"][0], float(st["format"]["duration"])
        packets = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries",
                                  "packet=pts_time,flags", "-of", "csv=p=0", path], capture_output=True, text=True,
                                 check=True).stdout.split()
        shown = sorted((float(p.split(",")[0]), p.split(",")[1]) for p in packets)  # in presentation order
        keys = [n for n, (_, flags) in enumerate(shown) if flags.startswith("K")]
        codec = {".mp4": st["codec_name"], ".webm": "webm/" + st["codec_name"]}[path[path.rfind("."):]]
        fps = len(packets) / duration  # WebM states no rate: frames over seconds
        rotation = abs(int(st.get("side_data_list", [{}])[0].get("rotation", 0)))
        gap = keys[1] - keys[0] if len(keys) > 1 else None
        seen.append((codec, rotation, gap))
        assert min(abs(fps - f) for f in (24, 25, 30)) < 0.2 and 8 <= duration <= 12.1
        assert (st["width"], st["height"]) in datasets.VIDEO_PROFILES["dataset"]["sizes"]
        if codec == "h264":
            assert st["has_b_frames"] > 0
    # GOPs cycle 250, 60, 30 (a GOP of 250 frames: one or two keyframes in 8-12 s), codecs and
    # rotations by index, so that the first four videos show every kind.
    assert [c for c, _, _ in seen] == ["h264", "hevc", "webm/vp9", "h264"]
    assert [g for _, _, g in seen][1:3] == [60, 30] and seen[0][2] in (None, 250) and seen[3][2] in (None, 250)
    assert [r for _, r, _ in seen] == [0, 0, 0, 90]
