"""Video clips against independent references: the ffmpeg CLI's decoded frames and frame
timestamps (../shared/data/real/_reference/framemd5), torchcodec's reference frames, and the
metadata peer projects' tests assert (../shared/data/real/README.md)."""

import bisect
import glob
import io
import json
import re
import subprocess
import tarfile
from fractions import Fraction

import numpy as np
import pytest
import torch

import loadscope as ls
from loadscope import _native, shards

# (file, output stream of the framemd5, expected facts)
VIDEOS = {
    "vision/test/assets/videos/R6llTwEh07w.mp4": dict(frames=303, fps=30.0, duration=10.1, size=(340, 256)),
    "vision/test/assets/videos/SOX5yA1l24A.mp4": dict(frames=332, fps=29.97, duration=11.08, size=(340, 256)),
    # header: 73 frames; 72 decode (one "not coded" N-VOP packet): indexed by decoding
    "vision/test/assets/videos/RATRACE_wave_f_nm_np1_fr_goo_37.avi": dict(frames=72, fps=30.0, duration=2.43, size=(560, 240)),
    "vision/test/assets/videos/v_SoccerJuggling_g23_c01.avi": dict(frames=240, fps=29.97, duration=8.008, size=(320, 240)),
    # the framemd5 holds both video streams; its output stream 1 is stream 3, the best one
    "torchcodec/test/resources/nasa_13013.mp4": dict(frames=390, fps=29.97, duration=13.013, size=(480, 270), md5_stream=1),
    "torchcodec/test/resources/h265_video.mp4": dict(frames=10, fps=10.0, duration=1.0, size=(128, 128)),
    "torchcodec/test/resources/av1_video.mkv": dict(frames=125, fps=25.0, duration=5.0, size=(640, 360)),
    "decord/examples/flipping_a_pancake.mkv": dict(frames=310, fps=30.0, duration=10.381, size=(426, 240)),
    "decord/tests/test_data/video_0.mov": dict(frames=3, fps=30.0, duration=0.1, size=(568, 320)),
    "decord/tests/test_data/video_90.mov": dict(frames=3, fps=30.0, duration=0.1, size=(320, 568)),
    "moviepy/media/big_buck_bunny_432_433.webm": dict(frames=24, fps=24.0, duration=1.0, size=(1280, 720)),
    "moviepy/media/transparent.webm": dict(frames=150, fps=30.0, duration=5.0, size=(200, 200)),
    # VFR, no duration, no stated rate: fps is the mean over the stream, 93 steps in 3.104 s
    # (ffprobe's 1000/33 comes from probing the first frames)
    "imageio/test.webm": dict(frames=94, fps=93 / 3.104, duration=None, size=(640, 480)),
}


def framemd5_times(real, rel, stream=0):
    """Presentation times (s) of the frames ffmpeg 5.1 decoded, from the reference framemd5,
    and the tick of its time base (its times are rounded to that grid)."""
    path = real / "_reference/framemd5" / (rel.replace("/", "_") + ".framemd5")
    text = path.read_text()
    tb = Fraction(re.search(rf"#tb {stream}: (\d+)/(\d+)", text).group(0).split(": ")[1])
    times = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        cols = [c.strip() for c in line.split(",")]
        if int(cols[0]) == stream:
            times.append(float(int(cols[2]) * tb))
    return sorted(times), float(tb)


def nearest(times, t, tolerance):
    """Index of the time in sorted `times` nearest to t; asserts it is within tolerance."""
    i = bisect.bisect_left(times, t)
    best = min((j for j in (i - 1, i) if 0 <= j < len(times)), key=lambda j: abs(times[j] - t))
    assert abs(times[best] - t) <= tolerance, (t, times[best])
    return best


def cli_frames(path, w, h, stream_spec="0:v:0"):
    """Every decoded frame, upright, converted by the ffmpeg CLI to rgb24 (presentation order),
    with swscale's bilinear filter as loadscope uses (it decides chroma interpolation where
    swscale converts through its scaler, e.g. from 10-bit; the CLI's default is bicubic)."""
    out = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-map", stream_spec, "-fps_mode", "passthrough",
         "-sws_flags", "bilinear", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True, check=True,
    ).stdout
    return np.frombuffer(out, np.uint8).reshape(-1, h, w, 3)


def decode(source, pts, w, h, **kw):
    raw = _native.decode_video_frames(str(source) if not isinstance(source, bytes) else source, pts, h, w, **kw)
    return np.frombuffer(raw, np.uint8).reshape(len(pts), h, w, 3)


@pytest.mark.parametrize("rel", sorted(VIDEOS))
def test_index_and_metadata_match_the_references(real, rel):
    facts = VIDEOS[rel]
    ix = _native.video_index(str(real / rel))
    assert len(ix["pts"]) == facts["frames"]
    assert (ix["width"], ix["height"]) == facts["size"]
    assert ix["fps"] == pytest.approx(facts["fps"], abs=0.01)
    if facts["duration"] is not None:
        assert ix["duration"] == pytest.approx(facts["duration"], abs=0.01)
    else:  # no stated duration: the index's span plus a frame
        assert ix["duration"] == pytest.approx(3.104 + 0.033, abs=0.002)
    # Every frame ffmpeg decodes is in the index at its timestamp, and nothing else.
    times = [p * ix["time_base"] for p in ix["pts"]]
    ref, tick = framemd5_times(real, rel, facts.get("md5_stream", 0))
    assert len(ref) == len(times)
    matched = [nearest(times, t, tick / 2 + 1e-3) for t in ref]
    assert len(set(matched)) == len(ref)  # one index frame per decoded frame


@pytest.mark.parametrize("rel", sorted(set(VIDEOS) - {"imageio/test.webm", "torchcodec/test/resources/nasa_13013.mp4"}))
def test_decoded_frames_equal_the_ffmpeg_cli(real, rel):
    """Whole frames through loadscope's decoder equal the ffmpeg CLI's rgb24 output, frame for
    frame at ffmpeg's own timestamps (seeking, B-frames, rotation, AV1, HEVC, VP8/9, MPEG-4)."""
    w, h = VIDEOS[rel]["size"]
    ref = cli_frames(real / rel, w, h)
    ix = _native.video_index(str(real / rel))
    times, tick = framemd5_times(real, rel)
    assert len(ref) == len(times)
    index_times = [p * ix["time_base"] for p in ix["pts"]]
    pts = [ix["pts"][nearest(index_times, t, tick / 2 + 1e-3)] for t in times]
    pick = list(range(len(pts))) if len(pts) <= 40 else sorted({0, 1, len(pts) // 3, len(pts) // 2, len(pts) - 2, len(pts) - 1})
    got = decode(real / rel, [pts[i] for i in pick], w, h)
    for k, i in enumerate(pick):
        assert np.array_equal(got[k], ref[i]), f"{rel}: frame {i}"


@pytest.mark.parametrize("rel", sorted(set(VIDEOS) - {"imageio/test.webm", "torchcodec/test/resources/nasa_13013.mp4"}))
def test_resized_frames_equal_the_ffmpeg_cli_scale(real, rel):
    """Resized frames equal the ffmpeg CLI's bilinear scale to planar RGB (gbrp) byte for byte,
    as [3, H, W] and as [H, W, 3]. The rotated file within 1: the CLI turns the frame before
    scaling it, loadscope after, and swscale rounds its two axes differently."""
    w, h = 64, 48
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", str(real / rel), "-map", "0:v:0", "-fps_mode", "passthrough",
                          "-frames:v", "4", "-vf", f"scale={w}:{h}:flags=bilinear", "-f", "rawvideo", "-pix_fmt", "gbrp", "-"],
                         capture_output=True, check=True).stdout
    ref = np.frombuffer(out, np.uint8).reshape(-1, 3, h, w)[:, [2, 0, 1]]  # G, B, R planes to R, G, B
    ix = _native.video_index(str(real / rel))
    times, tick = framemd5_times(real, rel)
    index_times = [p * ix["time_base"] for p in ix["pts"]]
    pts = [ix["pts"][nearest(index_times, t, tick / 2 + 1e-3)] for t in times[: len(ref)]]
    planes = np.frombuffer(_native.decode_video_frames(str(real / rel), pts, h, w, channels_last=False), np.uint8)
    planes = planes.reshape(len(pts), 3, h, w)
    assert np.array_equal(decode(real / rel, pts, w, h), planes.transpose(0, 2, 3, 1))
    diff = np.abs(planes.astype(int) - ref)
    assert diff.max() <= (1 if ix["rotation"] else 0), (rel, diff.max())


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_flipped_clip_is_the_mirror_of_the_clip_upright_or_turned(real, tmp_path, channels_last):
    rels = ["decord/tests/test_data/video_90.mov", "vision/test/assets/videos/R6llTwEh07w.mp4"]
    src = write_manifest(tmp_path, [real / r for r in rels])

    def clips(flip):
        field = ls.VideoClip((40, 27), frames=3, stride=2, crop="resize", flip=flip, position="center",
                             channels_last=channels_last, keys=["mov", "mp4"])
        return next(iter(ls.Loader(src, fields={"v": field}, batch_size=2, shuffle=False)))["v"]

    plain, mirrored = clips(0.0), clips(1.0)
    assert plain.shape == ((2, 3, 40, 27, 3) if channels_last else (2, 3, 3, 40, 27))  # size is (h, w)
    assert torch.equal(mirrored, plain.flip(-2 if channels_last else -1))
    assert not torch.equal(mirrored, plain)


@pytest.mark.parametrize("rotate", [90, 180, 270])
def test_turned_frames_equal_the_ffmpeg_clis_autorotation(tmp_path, rotate):
    """A stream tagged with each rotation, made here: whole frames upright equal the CLI's
    autorotated rgb24 exactly; resized ones its turned-then-scaled gbrp within 1."""
    plain = tmp_path / "plain.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=10:duration=0.5",
                    "-pix_fmt", "yuv420p", "-c:v", "libx264", str(plain)], check=True)
    path = tmp_path / f"r{rotate}.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(plain), "-c", "copy", "-metadata:s:v:0", f"rotate={rotate}", str(path)],
                   check=True)
    ix = _native.video_index(str(path))
    # FFmpeg 5.1's MP4 muxer writes the tag as a counter-clockwise turn; the pixels below are
    # what decides, against the CLI's own autorotation.
    assert ix["rotation"] == (360 - rotate) % 360
    w, h = (64, 96) if rotate != 180 else (96, 64)
    assert np.array_equal(decode(path, ix["pts"], w, h), cli_frames(path, w, h))
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-vf", "scale=20:30:flags=bilinear", "-f", "rawvideo",
                          "-pix_fmt", "gbrp", "-"], capture_output=True, check=True).stdout
    ref = np.frombuffer(out, np.uint8).reshape(-1, 3, 30, 20)[:, [2, 0, 1]]
    got = np.frombuffer(_native.decode_video_frames(str(path), ix["pts"], 30, 20, channels_last=False), np.uint8)
    assert np.abs(got.reshape(ref.shape).astype(int) - ref).max() <= 1


def test_torchcodec_reference_frames_byte_for_byte(real):
    base = real / "torchcodec/test/resources/nasa_13013.mp4"
    for ref in sorted(glob.glob(str(base) + ".stream*.frame*.pt")):
        stream, frame = map(int, re.search(r"stream(\d)\.frame(\d+)", ref).groups())
        ix = _native.video_index(str(base), stream=stream)
        want = torch.load(ref).numpy()
        h, w = want.shape[:2]
        got = decode(base, [ix["pts"][frame]], w, h, stream=stream)[0]
        assert np.array_equal(got, want), ref
    # torchcodec's test: the frame played at 6.006 s is time6.000000.pt (frame 180).
    ix = _native.video_index(str(base))
    got = decode(base, [round(6.006 / ix["time_base"])], 480, 270)[0]
    assert np.array_equal(got, torch.load(str(base) + ".time6.000000.pt").numpy())


def test_best_stream_and_explicit_stream(real):
    path = str(real / "torchcodec/test/resources/nasa_13013.mp4")
    assert _native.video_index(path)["stream"] == 3  # torchcodec's test: best video stream 3
    s0 = _native.video_index(path, stream=0)
    assert (s0["width"], s0["height"], len(s0["pts"])) == (320, 180, 325)
    with pytest.raises(ls.DecodeError, match="stream 1 is not a decodable video stream"):
        _native.video_index(path, stream=1)  # audio


def test_rotation_gives_upright_frames(real):
    """decord's test: video_90.mov (rotation -90) decodes to (568, 320, 3); resized to 300x200."""
    path = real / "decord/tests/test_data/video_90.mov"
    ix = _native.video_index(str(path))
    assert ix["rotation"] == 90 and (ix["height"], ix["width"]) == (568, 320)
    assert decode(path, ix["pts"], 320, 568).shape == (3, 568, 320, 3)
    assert decode(path, ix["pts"][:1], 200, 300).shape == (1, 300, 200, 3)
    # The upright frame is the stored one turned clockwise: compare with the stored decode.
    stored = decode(path, ix["pts"][:1], 568, 320, rotate=False)[0]
    upright = decode(path, ix["pts"][:1], 320, 568)[0]
    assert np.array_equal(upright, np.rot90(stored, k=-1))


def write_manifest(tmp_path, paths, name="v.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps({"path": str(x)}) for x in paths))
    return ls.FileList(p)


def test_clips_through_the_loader(real, tmp_path):
    rel = "vision/test/assets/videos/R6llTwEh07w.mp4"
    src = write_manifest(tmp_path, [real / rel] * 6)
    field = ls.VideoClip(64, frames=8, stride=2, crop="resize")
    loader = ls.Loader(src, fields={"mp4": field}, batch_size=3, threads=2, shuffle=False)
    batches = list(loader)
    b = batches[0]
    assert b["mp4"].shape == (3, 8, 3, 64, 64) and b["mp4"].dtype == torch.uint8
    assert b["mp4.time"].shape == (3, 8) and b["mp4.time"].dtype == torch.float64
    assert b["mp4.meta"][0] == {"duration": 10.1, "fps": 30, "frames": 303, "width": 340, "height": 256,
                                "rotation": 0, "codec": "h264", "stream": 0}
    # Typed as the field declares its record (no JSON between C++ and Python): the same dict
    # as ffprobe's figures, float seconds and rate, int counts.
    assert [type(v) for v in b["mp4.meta"][0].values()] == [float, float, int, int, int, int, str, int]
    ix = _native.video_index(str(real / rel))
    times = [p * ix["time_base"] for p in ix["pts"]]
    for row in torch.cat([x["mp4.time"] for x in batches]).tolist():
        first = times.index(row[0])  # each clip: 8 frames, every second frame
        assert row == pytest.approx(times[first : first + 16 : 2])
    # The pixels are the frames at those times (resized by swscale).
    got = batches[0]["mp4"][0].permute(0, 2, 3, 1).numpy()
    pts = [ix["pts"][times.index(t)] for t in batches[0]["mp4.time"][0].tolist()]
    assert np.array_equal(got, decode(real / rel, pts, 64, 64))


def test_clips_under_auto_threads_and_decoder_threads_equal_fixed_ones(real, tmp_path):
    """threads="auto" with decoder_threads="auto": FFmpeg's threads per video follow the loader's
    (cores / threads: 4, 2, 1 here as a script changes threads after every batch), and the clips
    equal those of one thread with one decoder thread."""
    files = [real / r for r in VIDEOS if "test.webm" not in r and "transparent" not in r]
    src = write_manifest(tmp_path, files)
    keys = sorted(ls._fields.VIDEO_MEMBERS)

    def run(**kw):
        loader = ls.Loader(src, fields={"v": ls.VideoClip(48, frames=4, stride=3, flip=0.5, keys=keys, **kw)},
                           batch_size=2, shuffle=True, seed=1, threads="auto" if "decoder_threads" in kw else 1)
        if "decoder_threads" in kw:
            loader._max_threads = 4
            loader._tuner = _native.Tuner(max_threads=4, threads=1, auto_threads=True, prefetch=2, max_prefetch=2,
                                          auto_prefetch=False, auto_decoder_threads=True, cores=4.0, memory_limit=-1,
                                          window_batches=1, window_seconds=0.0,
                                          script=[(1, 2), (2, 2), (4, 2), (3, 2)] * 4)
            seen = []
            bs = []
            for b in loader:
                seen.append(loader._tuner.decoder_threads)
                bs.append(b)
            assert {1, 2, 4} <= set(seen)
        else:
            bs = list(loader)
        return torch.cat([b["v"] for b in bs]), torch.cat([b["v.time"] for b in bs])

    ref = run()
    got = run(decoder_threads="auto")
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


def test_clips_identical_for_1_2_4_threads_and_vary_with_epoch(real, tmp_path):
    files = [real / r for r in VIDEOS if "test.webm" not in r and "transparent" not in r]
    src = write_manifest(tmp_path, files)
    field = ls.VideoClip(48, frames=4, stride=3, flip=0.5, keys=sorted(ls._fields.VIDEO_MEMBERS))

    def run(threads, epoch):
        loader = ls.Loader(src, fields={"v": field}, batch_size=4, threads=threads, shuffle=True, seed=1)
        loader.set_epoch(epoch)
        bs = list(loader)
        return torch.cat([b["v"] for b in bs]), torch.cat([b["v.time"] for b in bs])

    ref = run(1, 0)
    for threads in (2, 4):
        got = run(threads, 0)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    other = run(2, 1)
    assert not torch.equal(other[1], ref[1])


def test_variable_frame_rate_sampling_by_time(real, tmp_path):
    """test.webm is VFR (31-48 ms steps) without a duration: fps=10 sampling returns, for each
    time t0 + k/10, the frame on screen then."""
    rel = real / "imageio/test.webm"
    ix = _native.video_index(str(rel))
    times = [p * ix["time_base"] for p in ix["pts"]]
    loader = ls.Loader(write_manifest(tmp_path, [rel]), fields={"webm": ls.VideoClip(32, frames=12, fps=10.0, position="center")}, batch_size=1)
    got = next(iter(loader))["webm.time"][0].tolist()
    span = 11 / 10
    end = times[-1] + (times[-1] - times[-2])  # the last frame shows for one more step
    t0 = times[0] + (end - times[0] - span - 1e-6) / 2  # "center": half of the free room
    for k, t in enumerate(got):
        shown = times[bisect.bisect_right(times, t0 + k / 10 + 1e-9) - 1]
        assert t == pytest.approx(shown)
    assert len(set(got)) == 12


def test_clip_starts_given_by_a_manifest_column(real, tmp_path):
    """VideoClip(start="start"): the clip starts at the frame on screen `start` seconds after the
    first frame (times from ffmpeg's reference framemd5), by frame index and by time, whatever
    the seed or epoch; a clip running past the end pads or fails like a short video; a start at
    or past the end, a missing or non-numeric start fail the sample, naming it."""
    rel = "vision/test/assets/videos/R6llTwEh07w.mp4"  # 303 frames at 30 fps
    times, tb = framemd5_times(real, rel)
    starts = [0.0, 1.0, 2.51, 7.0 + 1 / 60, 9.9]
    p = tmp_path / "plan.jsonl"
    p.write_text("\n".join(json.dumps({"path": str(real / rel), "start": s}) for s in starts))
    for seed, epoch in ((0, 0), (7, 3)):
        loader = ls.Loader(ls.FileList(p), fields={"mp4": ls.VideoClip(32, frames=5, stride=3, start="start")},
                           batch_size=len(starts), seed=seed)
        loader.set_epoch(epoch)
        got = next(iter(loader))["mp4.time"].tolist()
        for s, clip in zip(starts, got):
            first = bisect.bisect_right(times, times[0] + s + 1e-9) - 1  # the frame on screen at s
            want = [times[min(first + 3 * j, len(times) - 1)] for j in range(5)]  # 9.9 s: padded
            assert clip == pytest.approx(want, abs=tb), s
    # The same starts as members of an indexed tar shard (byte ranges of the shard, read as such).
    shard = tmp_path / "clips.tar"
    with tarfile.open(shard, "w") as t:
        for k, s in enumerate(starts):
            t.add(real / rel, arcname=f"{k:03d}.mp4")
            info = tarfile.TarInfo(f"{k:03d}.start")
            data = f" {s!r}\n".encode()
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    shards.index([str(shard)])
    tar = ls.Loader(ls.WebDataset([str(shard)]), fields={"mp4": ls.VideoClip(32, frames=5, stride=3, start="start")},
                    batch_size=len(starts))
    assert torch.allclose(next(iter(tar))["mp4.time"], torch.tensor(got, dtype=torch.float64), atol=tb)
    by_time = ls.Loader(ls.FileList(p), fields={"mp4": ls.VideoClip(32, frames=3, fps=10.0, start="start")},
                        batch_size=len(starts))
    for s, clip in zip(starts, next(iter(by_time))["mp4.time"].tolist()):
        want = [times[bisect.bisect_right(times, times[0] + s + k / 10 + 1e-9) - 1] for k in range(3)]
        assert clip == pytest.approx(want, abs=tb), s

    def failure(start, **kw):
        q = tmp_path / "bad.jsonl"
        q.write_text(json.dumps({"path": str(real / rel), **({} if start is None else {"start": start})}))
        with pytest.raises(ls.SampleError) as e:
            next(iter(ls.Loader(ls.FileList(q), fields={"mp4": ls.VideoClip(32, frames=5, start="start", **kw)},
                                batch_size=1)))
        assert rel in str(e.value)
        return str(e.value)

    assert "past the video's end" in failure(10.5)
    assert "no member 'start'" in failure(None)
    assert "must be seconds >= 0, got '-1'" in failure(-1)
    assert "must be seconds >= 0, got 'soon'" in failure("soon")
    assert "past the video's 303" in failure(9.99, short="fail")
    with pytest.raises(ls.ConfigError, match="clips must be 1"):
        ls.VideoClip(32, start="start", clips=2)


def test_uniform_and_center_positions(real, tmp_path):
    rel = real / "vision/test/assets/videos/v_SoccerJuggling_g23_c01.avi"  # 240 frames
    loader = ls.Loader(write_manifest(tmp_path, [rel]), fields={"avi": ls.VideoClip(32, frames=4, stride=5, position="uniform", clips=3)}, batch_size=1)
    b = next(iter(loader))
    assert b["avi"].shape == (1, 3, 4, 3, 32, 32) and b["avi.time"].shape == (1, 3, 4)
    fps = 30000 / 1001
    starts = [round(t * fps) for t in b["avi.time"][0, :, 0].tolist()]
    assert starts == [0, 112, 224]  # span 16 frames: starts 0, (240-16)/2, 240-16
    center = ls.Loader(write_manifest(tmp_path, [rel], "c.jsonl"), fields={"avi": ls.VideoClip(32, frames=4, stride=5, position="center")}, batch_size=1)
    assert round(next(iter(center))["avi.time"][0, 0].item() * fps) == 112


def test_short_videos_pad_or_fail(real, tmp_path):
    rel = real / "decord/tests/test_data/video_0.mov"  # 3 frames
    src = write_manifest(tmp_path, [rel])
    b = next(iter(ls.Loader(src, fields={"mov": ls.VideoClip(32, frames=5)}, batch_size=1)))
    t = b["mov.time"][0].tolist()
    assert t[:3] == pytest.approx([0, 1 / 30, 2 / 30]) and t[3:] == [t[2], t[2]]  # padded with the last frame
    assert torch.equal(b["mov"][0, 4], b["mov"][0, 2])
    with pytest.raises(ls.DecodeError, match="video too short: 3 frames, a clip spans 5"):
        list(ls.Loader(src, fields={"mov": ls.VideoClip(32, frames=5, short="fail")}, batch_size=1))


def test_corrupt_and_truncated_videos(real, tmp_path):
    corrupted = real / "decord/tests/test_data/corrupted.mp4"
    # Frames 28-49 are damaged; decord's test reads frames 0-39 and expects an error. The MP4 is
    # indexed from its tables (it opens): any clip that covers the damage names it.
    with pytest.raises(ls.DecodeError, match="Invalid NAL unit size") as e:
        list(ls.Loader(write_manifest(tmp_path, [corrupted]), fields={"mp4": ls.VideoClip(32, frames=40)}, batch_size=1))
    assert e.value.key == str(corrupted)
    cut = []
    for i, rel in enumerate(["vision/test/assets/videos/R6llTwEh07w.mp4", "decord/examples/flipping_a_pancake.mkv", "vision/test/assets/videos/v_SoccerJuggling_g23_c01.avi"]):
        data = (real / rel).read_bytes()
        p = tmp_path / f"cut{i}{rel[rel.rfind('.'):]}"
        p.write_bytes(data[: len(data) * 2 // 3])
        cut.append(p)
    # The same MP4 with its moov first (indexed from its tables, frames unread): the cut shows
    # where the demuxer's walk over the packets runs past the end.
    faststart = tmp_path / "faststart.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(real / "vision/test/assets/videos/R6llTwEh07w.mp4"), "-c", "copy",
                    "-movflags", "+faststart", str(faststart)], check=True)
    data = faststart.read_bytes()
    cut.append(tmp_path / "cut3.mp4")
    cut[-1].write_bytes(data[: len(data) * 2 // 3])
    loader = ls.Loader(write_manifest(tmp_path, cut, "cut.jsonl"), fields={"v": ls.VideoClip(32, frames=4, keys=["mp4", "mkv", "avi"])},
                       batch_size=4, on_error="skip", error_budget=None, shuffle=False)
    assert sum(len(b["__key__"]) for b in loader) == 0
    reasons = [s["reason"] for s in sorted(loader.stats()["skipped"], key=lambda s: s["key"])]
    assert len(reasons) == 4
    assert "moov atom not found" in reasons[0]
    assert "damaged or truncated" in reasons[1]
    assert "truncated: the container lists 240 frames" in reasons[2]
    assert "partial file" in reasons[3]


def test_videos_in_tar_shards_decode_from_memory(real, tmp_path):
    import tarfile

    rels = ["vision/test/assets/videos/R6llTwEh07w.mp4", "decord/examples/flipping_a_pancake.mkv"]
    with tarfile.open(tmp_path / "v.tar", "w") as t:
        for i, rel in enumerate(rels):
            t.add(real / rel, arcname=f"{i:03d}{rel[rel.rfind('.'):]}")
    field = ls.VideoClip(40, frames=6, stride=3, keys=["mp4", "mkv"])
    from_tar = next(iter(ls.Loader(ls.WebDataset(str(tmp_path / "v.tar")), fields={"v": field}, batch_size=2)))
    from_files = next(iter(ls.Loader(write_manifest(tmp_path, [real / r for r in rels]), fields={"v": field}, batch_size=2)))
    assert torch.equal(from_tar["v"], from_files["v"]) and torch.equal(from_tar["v.time"], from_files["v.time"])


def test_images_and_videos_mixed_with_optional_fields(real, tmp_path, demo):
    jpgs = sorted((demo / "folder").rglob("*.jpg"))[:3]
    rows = [{"path": str(p), "txt": "a photo"} for p in jpgs] + [{"path": str(real / "vision/test/assets/videos/R6llTwEh07w.mp4"), "txt": "a clip"}]
    (tmp_path / "mix.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    fields = {"jpg": ls.Image(32, optional=True), "mp4": ls.VideoClip(32, frames=2, optional=True), "txt": ls.Text()}
    b = next(iter(ls.Loader(ls.FileList(tmp_path / "mix.jsonl"), fields=fields, batch_size=4)))
    assert b["jpg.present"].tolist() == [True, True, True, False]
    assert b["mp4.present"].tolist() == [False, False, False, True]
    assert b["jpg"][3].sum() == 0 and b["mp4"][:3].sum() == 0 and b["mp4"][3].sum() > 0
    assert b["mp4.meta"][:3] == [None, None, None] and b["mp4.meta"][3]["frames"] == 303
    assert b["txt"] == ["a photo"] * 3 + ["a clip"]


def test_bad_video_arguments():
    with pytest.raises(ls.ConfigError, match="give stride or fps, not both"):
        ls.VideoClip(32, stride=2, fps=10)
    with pytest.raises(ls.ConfigError, match="random, uniform, center"):
        ls.VideoClip(32, position="start")
    with pytest.raises(ls.ConfigError, match="position='center' takes clips=1"):
        ls.VideoClip(32, position="center", clips=3)
    with pytest.raises(ls.ConfigError, match="pad, fail"):
        ls.VideoClip(32, short="loop")
    with pytest.raises(ls.ConfigError, match=r"frames must be an int in \[1, 100000\]"):
        ls.VideoClip(32, frames=0)
    with pytest.raises(ls.ConfigError, match="dct_scaling applies to JPEG images only"):
        ls.VideoClip(32, dct_scaling=True)


def test_mix_of_image_folder_and_video_shards_by_weight(demo, demo_videos):
    images = ls.Folder(demo / "folder")
    clips = ls.WebDataset(str(demo_videos / "video_shards/videos-{000000..000001}.tar"))
    mix = ls.Mix({"images": images, "clips": clips}, weights={"images": 0.75, "clips": 0.25}, samples_per_epoch=200)
    fields = {"jpg": ls.Image(32, optional=True), "mp4": ls.VideoClip(32, frames=2, stride=5, optional=True), "cls": ls.Int()}
    loader = ls.Loader(mix, fields=fields, batch_size=25, threads=2, shuffle=True)
    assert len(loader) == 8
    n_img = int(torch.cat([b["jpg.present"] for b in loader]).sum())
    assert 130 <= n_img <= 170  # 150 expected
    b = next(iter(loader))
    assert torch.equal(b["jpg.present"], ~b["mp4.present"])
    # The six videos repeat (each only after all six were shown), and orders are reproducible.
    keys = [k for b in loader for k in b["__key__"] if ".tar:" in k]
    first = keys[:6]
    assert len(set(first)) == 6
    loader.set_epoch(3)
    a = [k for b in loader for k in b["__key__"]]
    loader.set_epoch(3)
    assert a == [k for b in loader for k in b["__key__"]]
    with pytest.raises(ls.ConfigError, match="give samples_per_epoch"):
        ls.Mix([images, clips])
    with pytest.raises(ls.ConfigError, match="weights must name exactly the sources"):
        ls.Mix({"a": images}, weights={"b": 1})


@pytest.mark.parametrize("pix_fmt, codec", [("yuv444p", "libx264"), ("yuv420p10le", "libx264"), ("yuvj420p", "libx264"),
                                            ("yuv422p", "libx264"), ("yuv420p", "mpeg4")])
def test_pixel_formats_convert_like_the_ffmpeg_cli(tmp_path, pix_fmt, codec):
    """10-bit, 4:4:4, 4:2:2 and full-range streams, made here by the ffmpeg CLI, decode to the
    CLI's own rgb24 conversion (crop offsets must respect each format's chroma layout)."""
    path = tmp_path / f"v_{pix_fmt}.mkv"
    made = subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=202x118:rate=10:duration=1",
                           "-pix_fmt", pix_fmt, "-c:v", codec, "-g", "5", str(path)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"this ffmpeg cannot encode {pix_fmt} with {codec}: {made.stderr.decode()[-200:]}")
    ref = cli_frames(path, 202, 118)
    ix = _native.video_index(str(path))
    assert len(ix["pts"]) == len(ref) == 10
    got = decode(path, ix["pts"], 202, 118)
    for i in range(10):
        assert np.array_equal(got[i], ref[i]), (pix_fmt, i)


@pytest.fixture(scope="module")
def awkward(tmp_path_factory):
    """Ordinary files that once failed (found by review): open-GOP H.264, an MP4 with an edit
    list, MPEG-4 Part 2 with B-frames in AVI, MPEG-2 in MPEG-PS; and hostile or broken ones:
    an HLS playlist and a JPEG named .mp4, a truncated FLV."""
    d = tmp_path_factory.mktemp("awkward")
    src = "testsrc2=s=160x120:r=30:d=4"

    def ff(*args):
        subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True, capture_output=True)

    ff("-f", "lavfi", "-i", src, "-c:v", "libx264", "-x264-params", "keyint=15:open-gop=1", str(d / "opengop.mp4"))
    ff("-f", "lavfi", "-i", src, "-c:v", "libx265", "-x265-params", "keyint=15:open-gop=1:bframes=3:log-level=error",
       str(d / "opengop_hevc.mp4"))
    ff("-f", "lavfi", "-i", src, "-c:v", "libx264", "-g", "30", str(d / "src.mp4"))
    ff("-ss", "1.3", "-i", str(d / "src.mp4"), "-c", "copy", str(d / "cut.mp4"))
    ff("-f", "lavfi", "-i", "color=c=red:s=64x64", "-frames:v", "1", str(d / "cover.jpg"))
    ff("-i", str(d / "src.mp4"), "-i", str(d / "cover.jpg"), "-map", "0", "-map", "1", "-c", "copy",
       "-disposition:v:1", "attached_pic", str(d / "cover.mp4"))  # cover art: a video stream without a size
    ff("-f", "lavfi", "-i", src, "-c:v", "mpeg4", "-bf", "2", str(d / "mp4v_b.avi"))
    ff("-f", "lavfi", "-i", src, "-c:v", "mpeg2video", "-bf", "2", "-g", "15", str(d / "m2.mpg"))
    ff("-f", "lavfi", "-i", src, "-c:v", "flv1", str(d / "full.flv"))
    ff("-f", "lavfi", "-i", src, "-c:v", "libx264", str(d / "other.ts"))
    data = (d / "full.flv").read_bytes()
    (d / "trunc.flv").write_bytes(data[: len(data) * 6 // 10])
    (d / "playlist.mp4").write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:4.0,\n{d / 'other.ts'}\n#EXT-X-ENDLIST\n")
    return d


def test_an_hevc_clip_starts_at_its_cra_keyframe(awkward, tmp_path):
    """x265's open GOPs: a keyframe (CRA) followed in decode order by its leading pictures,
    timed before it (ffprobe's packet order says so). A clip starting at it decodes from it:
    FFmpeg's decoder drops the leading pictures after the seek, nothing of the GOP before is
    decoded (H.264's open GOPs start a keyframe earlier, Note [leading pictures]). Its frames
    against the CLI: test_awkward_but_valid_files_decode_like_the_cli."""
    path = awkward / "opengop_hevc.mp4"
    packets = _packets(path)
    cra = next(n for n, (_, _, _, key) in enumerate(packets) if key and n > 0)
    assert packets[cra + 1][0] < packets[cra][0]  # a leading picture after the CRA
    ix = _native.video_index(str(path))
    start = (packets[cra][0] - ix["pts"][0]) * ix["time_base"]
    manifest = tmp_path / "cra.jsonl"
    manifest.write_text(json.dumps({"path": str(path), "t": start + 0.5 / 30}) + "\n")
    L = ls.Loader(ls.FileList(manifest), fields={"mp4": ls.VideoClip(32, frames=1, start="t")}, batch_size=1)
    b = next(iter(L))
    assert round(b["mp4.time"][0, 0].item() / ix["time_base"]) == packets[cra][0]
    # One packet, the CRA itself, and the drain after it (Note [draining early]); starting a
    # keyframe earlier, as for H.264, read 13 packets and decoded 8 frames here.
    v = L.telemetry().to_dict()["video"]
    assert (v["seeks"], v["packets"], v["frames_decoded"]) == (1, 1, 1), v


@pytest.mark.parametrize("name", ["opengop.mp4", "opengop_hevc.mp4", "cut.mp4", "cover.mp4", "mp4v_b.avi", "m2.mpg"])
def test_awkward_but_valid_files_decode_like_the_cli(awkward, name):
    path = awkward / name
    ix = _native.video_index(str(path))
    ref = cli_frames(path, 160, 120)
    assert len(ix["pts"]) == len(ref)  # e.g. the edit list's hidden frames are not frames
    # every frame on its own (a seek each: open-GOP leading pictures, inexact MPEG-PS seeks);
    # the open GOPs' every frame, the frames just after each keyframe among them
    for i in range(0, len(ref), 1 if "opengop" in name else 7):
        assert np.array_equal(decode(path, [ix["pts"][i]], 160, 120)[0], ref[i]), (name, i)
    assert np.array_equal(decode(path, ix["pts"][-1:], 160, 120)[0], ref[-1])  # the last frame
    # runs of consecutive frames in one call (Note [draining early]: the decoder is drained once
    # the run's packets are sent; an edit list's hidden frames are packets too, but not frames)
    for i in range(0, len(ref) - 16, 23):
        got = decode(path, ix["pts"][i : i + 16], 160, 120)
        assert all(np.array_equal(a, b) for a, b in zip(got, ref[i : i + 16])), (name, i)
    got = decode(path, ix["pts"], 160, 120, threads=0)  # FFmpeg's own thread count
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))


def test_hostile_and_broken_files_are_refused(awkward, demo):
    with pytest.raises(ls.DecodeError, match="not a video container"):
        _native.video_index(str(awkward / "playlist.mp4"))  # would read other.ts
    with pytest.raises(ls.DecodeError, match="not a video container"):
        _native.video_index(str(awkward / "playlist.mp4"))
    photo = awkward / "photo.mp4"
    photo.write_bytes(next((demo / "folder").rglob("*.jpg")).read_bytes())
    with pytest.raises(ls.DecodeError, match="not a video container"):
        _native.video_index(str(photo))
    with pytest.raises(ls.DecodeError, match=r"truncated: the container states 4\.0+ s"):
        _native.video_index(str(awkward / "trunc.flv"))


def _packets(path):
    """The video stream's packets in file order, by ffprobe: (pts, pos, size, key)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "packet=pts,pos,size,flags", "-of", "csv=p=0", str(path)],
                         check=True, capture_output=True, text=True).stdout
    rows = [line.split(",") for line in out.split()]
    return [(int(pts), int(pos), int(size), flags.startswith("K")) for pts, size, pos, flags in rows]


MP4S = ["vision/test/assets/videos/SOX5yA1l24A.mp4", "vision/test/assets/videos/R6llTwEh07w.mp4",
        "torchcodec/test/resources/nasa_13013.mp4", "torchcodec/test/resources/h265_video.mp4",
        "decord/tests/test_data/video_90.mov", "decord/tests/test_data/video_0.mov"]


@pytest.mark.parametrize("name", MP4S + ["opengop.mp4", "cut.mp4", "cover.mp4"])
def test_an_mp4_is_indexed_from_its_tables_like_ffprobes_packets(real, awkward, name):
    """Note [index from the container's tables]: the frames of an MP4/MOV (edit lists, open GOPs,
    B-frames, HEVC) without reading its packets: the shown packets' times by ffprobe."""
    path = awkward / name if "/" not in name else real / name
    d = _native.video_index(str(path))
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", str(d["stream"]), "-show_entries",
                          "packet=pts,flags", "-of", "csv=p=0", str(path)], check=True, capture_output=True, text=True)
    rows = [line.split(",") for line in out.stdout.split()]
    assert d["pts"] == sorted({int(pts) for pts, flags in rows if "D" not in flags})
    if path.stat().st_size > 256 << 10:
        assert d["bytes_read"] < path.stat().st_size / 4  # the header, not the frames


@pytest.mark.parametrize("layout", ["moov-last", "faststart"])
def test_a_clip_reads_the_gops_it_decodes_not_the_whole_file(tmp_path, video_720p, layout):
    """Issue 14: an MP4 is indexed from its tables; a clip of a 10 s 720p video reads at most
    twice the bytes of the GOPs holding its frames (ffprobe's packet table is the reference)."""
    video = video_720p
    if layout == "faststart":
        video = tmp_path / "v.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-i", str(video_720p), "-c", "copy", "-movflags", "+faststart",
                        str(video)], check=True)
    packets = _packets(video)
    manifest = tmp_path / "clip.jsonl"
    manifest.write_text(json.dumps({"path": str(video), "t": 5.5}) + "\n")
    L = ls.Loader(ls.FileList(manifest), fields={"mp4": ls.VideoClip(32, frames=16, stride=2, start="t")},
                  batch_size=1)
    b = next(iter(L))
    read = L.stats()["bytes_read"]
    # The GOPs (a keyframe and the packets after it, in file order) holding the clip's frames.
    tb = _native.video_index(str(video))["time_base"]
    shown = {round(t / tb) for t in b["mp4.time"][0].tolist()}
    gop, touched, gop_bytes = -1, set(), {}
    for pts, _pos, size, key in packets:
        gop += key
        gop_bytes[gop] = gop_bytes.get(gop, 0) + size
        if pts in shown:
            touched.add(gop)
    assert len(shown) == 16 and touched == {2, 3}  # 5.5 s to 6.5 s: the GOPs from 4 s and from 6 s
    needed = sum(gop_bytes[g] for g in touched)
    assert read <= 2 * needed, (read, needed, video.stat().st_size)
    assert read < video.stat().st_size / 2
    # The clip's telemetry: one seek, to the keyframe at 4 s; packets from it (file order) to the
    # last one timed at or before the last frame shown, not one more (Note [draining early]:
    # the decoder would want the P-frame after them before letting its last frames out).
    v = L.telemetry().to_dict()["video"]
    first = next(n for n, (pts, _, _, key) in enumerate(packets) if key and pts * tb >= 4.0 - 1e-6)
    last = max(n for n, (pts, _, _, _) in enumerate(packets) if packets[first][0] <= pts <= max(shown))
    assert (v["clips"], v["frames_shown"], v["seeks"]) == (1, 16, 1)
    assert v["packets"] == last - first + 1, (v, first, last)
    assert 16 <= v["frames_decoded"] <= v["packets"] and v["bytes"] == read
    list(L)  # once more: the index comes from the cache; the clip reads the same
    assert L.stats()["bytes_read"] <= 2 * read


def test_the_video_baselines_pyav_read_equals_torchvisions_read_video(demo_videos):
    """bench_arms.read_clip replaces torchvision.io.read_video (gone from torchvision 0.24 on) in
    the video baseline; where read_video still exists (the torch 1.13 lane, `make test-compat`)
    both must return the same frames, byte for byte."""
    import glob

    import torch
    import torchvision.io

    from loadscope.bench.arms import read_clip

    if not hasattr(torchvision.io, "read_video"):
        pytest.skip(f"torchvision {torchvision.__version__} has no read_video to compare with (make test-compat has)")
    for path in sorted(glob.glob(str(demo_videos / "videos" / "**" / "*.mp4"), recursive=True))[:3]:
        for a, b in ((0.0, 0.5), (1.0, 1.6), (2.3, 2.9)):
            ref, _, _ = torchvision.io.read_video(path, a, b, pts_unit="sec", output_format="TCHW")
            got = read_clip(path, a, b)
            assert got.shape == ref.shape and torch.equal(got, ref), (path, a, b)


def test_video_benchmark_arms_read_one_plan_per_epoch(demo_videos):
    """benchmarks/bench_video.py's arms read the same clips: one plan per epoch (drawn from the
    seed and the epoch) handed to loadscope (a start column: what it read is recovered from the
    frames' presentation times), to a DataLoader with persistent workers (through its batch
    sampler) and to the decode-only ceiling; each arm's digest of what it read equals the plan's,
    epoch after epoch, and the plan moves with the epoch."""
    from loadscope.bench import arms as bench_arms

    rows = bench_arms.video_clips(str(demo_videos), repeat=2)
    plans = bench_arms.clip_plans(rows, frames=4, stride=2, seed=3)
    arms = [bench_arms.video_loadscope_arm(rows, threads=2, frames=4, stride=2, size=32, batch_size=4, plans=plans),
            bench_arms.video_torch_arm(rows, workers=2, frames=4, stride=2, size=32, batch_size=4, plans=plans),
            bench_arms.video_ceiling_arm(rows, threads=2, frames=4, stride=2, plans=plans),
            bench_arms.video_ceiling_arm(rows, threads=2, frames=4, stride=2, plans=plans, least=True)]
    try:
        res = bench_arms.measured(arms, reps=2, warmup=0)
    finally:
        for arm in arms:
            arm.close()
    assert bench_arms.same_inputs(res) == {"arms_checked": [a.name for a in arms], "rounds": 2, "identical": True,
                                        "differing_rounds": []}
    # The ceiling and the floor decoded every clip's 4 frames; the floor fewer frames in all
    # (the demo's B-frames between a stride-2 clip's frames are not references).
    ceiling, floor = (res[a.name][0]["info"] for a in arms[2:])
    assert ceiling["frames_shown"] == floor["frames_shown"] == 4
    assert ceiling["clip_frames_missing"] == floor["clip_frames_missing"] == 0
    assert 4 <= floor["frames_decoded"] < ceiling["frames_decoded"]
    for e in (0, 1):
        assert {res[a.name][e]["read"] for a in arms} == {plans(e).digest()}
        assert all(res[a.name][e]["items"] == len(rows) and res[a.name][e]["cpu_per_item"] > 0 for a in arms)
    assert plans(0).digest() != plans(1).digest()
    work = plans(0).work()
    assert work["frames"] >= len(rows) * 7 and work["megapixels"] > 0  # at least each clip's own 7 frames
    assert bench_arms.batches_per_worker(24, 8, 2) == [2, 1]  # the split the issue saw: reported, not hidden
    assert "uneven" in bench_arms.video_torch_arm(rows * 2, workers=2, batch_size=8,  # 24 clips in batches of 8
                                               plans=bench_arms.clip_plans(rows * 2)).name
    with pytest.raises(ValueError, match="other clips"):  # a plan of other clips is refused
        bench_arms.video_ceiling_arm(rows[:3], threads=1, plans=plans)


def test_video_benchmark_arms_agree_on_a_video_that_does_not_start_at_0(tmp_path):
    """A Matroska file whose first frame is shown at 2 s: the plan's starts count from the first
    frame for loadscope (VideoClip(start=)) and are presentation times for the seeks of PyAV and
    the ceiling; loadscope's and PyAV's digests are recovered from the frames they returned."""
    from loadscope.bench import arms as bench_arms

    path = str(tmp_path / "late.mkv")
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=160x120:r=30:d=4", "-c:v", "libx264",
                    "-g", "15", "-output_ts_offset", "2", path], check=True, capture_output=True)
    ix = _native.video_index(path)
    assert ix["pts"][0] * ix["time_base"] > 1.0  # the premise: this file starts late
    rows = [{"path": path, "frames": len(ix["pts"]), "fps": 30, "gop": 250}] * 4
    plans = bench_arms.clip_plans(rows, frames=4, stride=2, seed=1)
    arms = [bench_arms.video_loadscope_arm(rows, threads=1, frames=4, stride=2, size=32, batch_size=2, plans=plans),
            bench_arms.video_torch_arm(rows, workers=0, frames=4, stride=2, size=32, batch_size=2, plans=plans),
            bench_arms.video_ceiling_arm(rows, threads=1, frames=4, stride=2, plans=plans)]
    res = bench_arms.measured(arms, reps=1, warmup=0)
    assert {res[a.name][0]["read"] for a in arms} == {plans(0).digest()}


def _ffmpeg_decoders_with_cuda(codecs):
    """{codec: [its decoders whose `ffmpeg -h decoder=` lists the cuda device]}, from the ffmpeg
    CLI (the same libavcodec): the reference for which codecs FFmpeg can decode on NVDEC. The
    *_cuvid wrappers are left out, as VideoClip(hwaccel=) leaves them (they seek and skip frames
    on their own terms)."""
    listing = subprocess.run(["ffmpeg", "-hide_banner", "-decoders"], capture_output=True, text=True, check=True).stdout
    by_codec = {}
    for line in listing.splitlines():
        m = re.match(r"^ V\S{5} (\S+)\s+(.*)$", line)
        if not m or m.group(1).endswith("_cuvid"):
            continue
        name, text = m.groups()
        codec = re.search(r"\(codec (\S+)\)$", text)
        by_codec.setdefault(codec.group(1) if codec else name, []).append(name)
    return {c: [d for d in by_codec.get(c, [])
                if re.search(r"Supported hardware devices:.*\bcuda\b",
                             subprocess.run(["ffmpeg", "-hide_banner", "-h", f"decoder={d}"],
                                            capture_output=True, text=True).stdout)]
            for c in codecs}


# The codecs whose decoding is exact by their specification: the only ones sent to NVDEC, so
# that its frames are the CPU path's (MPEG-2/4's IDCT rounding is the decoder's own).
EXACT = {"h264", "hevc", "vp8", "vp9", "av1"}


def test_nvdec_decodes_the_exact_codecs_ffmpeg_lists_with_cuda_and_av1_through_ffmpegs_own_decoder(real):
    codecs = {_native.video_index(str(real / rel))["codec"] for rel in VIDEOS}
    assert {"h264", "hevc", "av1", "vp8", "vp9", "mpeg4"} <= codecs  # what the real videos hold
    codecs |= {"mpeg2video", "theora", "prores", "mjpeg"}
    with_cuda = _ffmpeg_decoders_with_cuda(codecs)
    assert with_cuda["mpeg4"] and with_cuda["mpeg2video"]  # FFmpeg could: loadscope does not (not exact)
    for codec in sorted(codecs):
        got = _native.video_nvdec_decoder(codec)
        if codec in EXACT and with_cuda[codec]:
            assert got in with_cuda[codec], (codec, got, with_cuda[codec])
        else:
            assert got == "", (codec, got)  # the CPU decodes it, counted as a fallback
    # FFmpeg prefers libdav1d for AV1, which has no hwaccel; its own av1 decoder has NVDEC's.
    assert _native.video_nvdec_decoder("av1") == "av1"
    assert _native.video_nvdec_decoder("h264") == "h264" and _native.video_nvdec_decoder("theora") == ""


def test_hwaccel_takes_cuda_only_and_fails_when_the_loader_is_made_without_a_gpu(real, tmp_path):
    for bad in ("vaapi", "cuda:", "cuda:-1", "gpu", 0, True):
        with pytest.raises(ls.ConfigError, match=r"allowed are None \(the CPU decodes\), 'cuda' and 'cuda:N'"):
            ls.VideoClip(32, frames=4, hwaccel=bad)
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: test_cuda.py decodes on it")
    src = write_manifest(tmp_path, [real / "vision/test/assets/videos/R6llTwEh07w.mp4"] * 2)
    for hw, device in (("cuda", 0), ("cuda:1", 1)):
        with pytest.raises(ls.ConfigError, match=rf"field 'mp4': hwaccel='cuda:{device}': FFmpeg could not open CUDA "
                                                 rf"device {device} \(.*\). Leave hwaccel unset to decode on the CPU"):
            ls.Loader(src, fields={"mp4": ls.VideoClip(32, frames=4, hwaccel=hw)}, batch_size=2)


def test_the_nvdec_check_videos_hold_what_test_cuda_expects_of_them(tmp_path):
    """datasets.gpu_check_videos (carried to the GPU machine): ffprobe's codec, profile and pixel
    format of each agree with whether NVDEC should take it: a codec with an NVDEC decoder and
    4:2:0 (NVDEC's H.264 has no 4:4:4 to Hopper), else the reason the loader gives."""
    from loadscope import datasets

    listed = datasets.gpu_check_videos(str(tmp_path))
    assert json.loads((tmp_path / "videos.json").read_text()) == listed
    for v in listed:
        probe = json.loads(subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                                           "stream=codec_name,profile,pix_fmt,width,height", "-of", "json",
                                           str(tmp_path / v["file"])], capture_output=True, text=True, check=True).stdout)
        st = probe["streams"][0]
        takes = _native.video_nvdec_decoder(st["codec_name"]) != "" and st["pix_fmt"] == "yuv420p"
        assert takes == (st["codec_name"] in EXACT and st["pix_fmt"] == "yuv420p")
        assert takes == v["nvdec"], (v, st)
        if not v["nvdec"]:
            assert v["why"] == ("NVDEC is used for H.264, HEVC, VP8, VP9 and AV1 only (exact decoding), not theora"
                                if st["codec_name"] == "theora" else "NVDEC did not take this stream"), (v, st)
        if v["file"].startswith("h264-444"):
            assert st["profile"] == "High 4:4:4 Predictive"
        # every one decodes on the CPU (the fallback's path)
        ix = _native.video_index(str(tmp_path / v["file"]))
        assert len(ix["pts"]) == 60 and (ix["width"], ix["height"]) == (st["width"], st["height"])
        assert len(decode(tmp_path / v["file"], ix["pts"][:3], 32, 32)) == 3
