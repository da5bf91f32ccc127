"""Audio against independent references: the ffmpeg CLI's resampled samples (`-f f32le -ac C
-ar R`, libswresample in FFmpeg's own pipeline) and torchcodec's reference decodes
(../shared/data/real/README.md, "Audio")."""

import io
import json
import struct
import subprocess
import tarfile

import numpy as np
import pytest
import torch

import loadscope as ls

TC = "torchcodec/test/resources/"
# Every real file with an audio track, its codec and rate.
WITH_AUDIO = {
    "vision/test/assets/videos/R6llTwEh07w.mp4": ("aac", 44100, 1),
    "vision/test/assets/videos/SOX5yA1l24A.mp4": ("aac", 48000, 2),
    TC + "nasa_13013.mp4": ("aac", 16000, 2),  # FFmpeg's best audio stream: 4 (torchcodec's tests)
    TC + "nasa_13013.mp4.audio.mp3": ("mp3", 8000, 2),
    TC + "sine_mono_s16.wav": ("pcm_s16le", 16000, 1),
    "decord/examples/flipping_a_pancake.mkv": ("opus", 48000, 1),
    "moviepy/media/big_buck_bunny_432_433.webm": ("vorbis", 44100, 2),
    "moviepy/media/transparent.webm": ("vorbis", 48000, 2),
}
WITHOUT_AUDIO = ["decord/tests/test_data/video_0.mov", "vision/test/assets/videos/RATRACE_wave_f_nm_np1_fr_goo_37.avi"]


def cli(path, rate, channels, stream=None):
    """float32 [channels, N]: what the ffmpeg CLI makes of the file's best audio stream."""
    if stream is None and str(path).endswith("nasa_13013.mp4"):
        stream = 4  # the CLI's -map 0:a:0 would take the first, stream 1
    select = f"0:{stream}" if stream is not None else "0:a:0"
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-map", select, "-f", "f32le",
                          "-ac", str(channels), "-ar", str(rate), "-"], capture_output=True, check=True).stdout
    return np.frombuffer(out, dtype=np.float32).reshape(-1, channels).T


def manifest(tmp_path, paths, name="m.jsonl", **columns):
    p = tmp_path / name
    with open(p, "w") as f:
        for i, path in enumerate(paths):
            f.write(json.dumps({"path": str(path), **{k: v[i] for k, v in columns.items()}}) + "\n")
    return ls.FileList(p)


def batch(source, fields, **kw):
    return next(iter(ls.Loader(source, fields=fields, batch_size=kw.pop("batch_size", 1), **kw)))


@pytest.mark.parametrize("rel", sorted(WITH_AUDIO))
@pytest.mark.parametrize("rate,channels", [(None, None), (16000, 1), (22050, 2)])
def test_whole_stream_is_the_ffmpeg_cli_decode(real, tmp_path, rel, rate, channels):
    codec, native_rate, native_channels = WITH_AUDIO[rel]
    rate, channels = rate or native_rate, channels or native_channels
    ref = cli(real / rel, rate, channels)
    b = batch(manifest(tmp_path, [real / rel]), {"audio": ls.Audio(sample_rate=rate, channels=channels, max_seconds=20)})
    x = b["audio"]
    assert x.dtype == torch.float32 and x.shape == (1, channels, 20 * rate)
    n = int(b["audio.length"][0])
    assert n == ref.shape[1]  # every sample, the encoder delay and padding dropped as FFmpeg does
    np.testing.assert_allclose(x[0, :, :n].numpy(), ref, atol=1e-4, rtol=0)
    assert not x[0, :, n:].any()  # zeros after the end


def test_torchcodec_reference_decodes(real, tmp_path):
    # The WAV exactly; the MP3 and the AAC stream 4 of nasa_13013.mp4 frame by frame, as
    # torchcodec's AudioDecoder gives them (native rate and channels, no resampling).
    cases = [(TC + "sine_mono_s16.wav", 16000, 1, None), (TC + "nasa_13013.mp4.audio.mp3", 8000, 2, None),
             (TC + "nasa_13013.mp4", 16000, 2, 4)]
    for rel, rate, channels, stream in cases:
        pt = real / (rel + f".stream{stream or 0}.all_frames.pt")
        frames = torch.load(pt)
        ref = torch.cat(frames, dim=1) if isinstance(frames, list) else frames
        info = json.loads((real / (rel + f".stream{stream or 0}.all_frames_info.json")).read_text())
        b = batch(manifest(tmp_path, [real / rel], name=f"{pt.name}.jsonl"),
                  {"audio": ls.Audio(sample_rate=rate, channels=channels, max_seconds=30, stream=stream)})
        n = int(b["audio.length"][0])
        assert n == ref.shape[1], rel
        if stream is None:  # PCM and MP3: bit for bit
            assert torch.equal(b["audio"][0, :, :n], ref), rel
        else:  # AAC: torchcodec's reference comes from another FFmpeg's float AAC decoder
            torch.testing.assert_close(b["audio"][0, :, :n], ref, atol=1e-4, rtol=0)
        # The first sample's time is the first frame's, after the encoder delay (MP3: 0.138125 s).
        assert float(b["audio.time"][0]) == pytest.approx(float(info[0]["pts_time"]), abs=0.5 / rate), rel


@pytest.mark.parametrize("fmt, codec", [("wav", "pcm_s16le"), ("w64", "pcm_s16le"), ("aiff", "pcm_s16be"),
                                        ("caf", "pcm_s24le"), ("au", "pcm_s16be"), ("flac", "flac")])
def test_every_audio_file_container(real, tmp_path, fmt, codec):
    """Each audio-only container on the decoder's whitelist, made by the ffmpeg CLI from a real
    soundtrack: the whole stream and windows anywhere in it are the CLI's decode of the same
    file, a centred window lies in the middle (the duration is known: CAF and W64 state none in
    their headers), and an "audio" field reads each by its extension."""
    path = tmp_path / f"a.{fmt}"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(real / "vision/test/assets/videos/SOX5yA1l24A.mp4"), "-vn",
                    "-c:a", codec, "-ar", "44100", "-ac", "2", str(path)], check=True)
    rate = 16000
    ref = cli(path, rate, 2)
    whole = batch(manifest(tmp_path, [path], name="w.jsonl"), {"audio": ls.Audio(sample_rate=rate, channels=2,
                                                                                 max_seconds=20)})
    n = int(whole["audio.length"][0])
    assert n == ref.shape[1] and float(whole["audio.time"][0]) == pytest.approx(0.0, abs=0.5 / rate)
    np.testing.assert_allclose(whole["audio"][0, :, :n].numpy(), ref, atol=1e-4, rtol=0)
    for position in ("random", "center"):
        b = batch(manifest(tmp_path, [path] * 4), {"audio": ls.Audio(sample_rate=rate, channels=2, seconds=1.5,
                                                                     position=position)}, batch_size=4, seed=5)
        times = b["audio.time"].tolist()
        if position == "center":
            assert times[0] == pytest.approx((n / rate - 1.5) / 2, abs=1 / rate)
        else:
            assert len(set(times)) > 1
        for i in range(4):
            j = round(times[i] * rate)
            m = int(b["audio.length"][i])
            assert m == min(24000, ref.shape[1] - j)
            np.testing.assert_allclose(b["audio"][i, :, :m].numpy(), ref[:, j:j + m], atol=1e-4, rtol=0)


@pytest.mark.parametrize("rel", [TC + "nasa_13013.mp4.audio.mp3", "vision/test/assets/videos/SOX5yA1l24A.mp4",
                                 "decord/examples/flipping_a_pancake.mkv", TC + "sine_mono_s16.wav"])
def test_windows_are_slices_of_the_whole_decode(real, tmp_path, rel):
    rate, channels = 16000, 2
    ref = cli(real / rel, rate, channels)
    whole = batch(manifest(tmp_path, [real / rel], name="w.jsonl"),
                  {"audio": ls.Audio(sample_rate=rate, channels=channels, max_seconds=20)})
    start = float(whole["audio.time"][0])
    src = manifest(tmp_path, [real / rel] * 6)
    starts = set()
    for position in ("center", "random"):
        loader = ls.Loader(src, fields={"audio": ls.Audio(sample_rate=rate, channels=channels, seconds=1.5,
                                                          position=position)}, batch_size=6, seed=3)
        b = next(iter(loader))
        for i in range(6):
            j = round((float(b["audio.time"][i]) - start) * rate)
            assert abs(j - (float(b["audio.time"][i]) - start) * rate) < 1e-6  # on the output's grid
            n = int(b["audio.length"][i])
            assert n == min(24000, ref.shape[1] - j)
            # Opus in Matroska: millisecond timestamps; a window after a seek is placed exactly
            # here, and its samples agree to float rounding with the decode from the start.
            np.testing.assert_allclose(b["audio"][i, :, :n].numpy(), ref[:, j:j + n], atol=1e-4, rtol=0)
            starts.add((position, j))
        again = ls.Loader(src, fields={"audio": ls.Audio(sample_rate=rate, channels=channels, seconds=1.5,
                                                         position=position)}, batch_size=6, seed=3, threads=1)
        assert torch.equal(next(iter(again))["audio"], b["audio"])  # from (seed, epoch, position) only
    assert len({j for p, j in starts if p == "center"}) == 1
    assert len({j for p, j in starts if p == "random"}) > 1


@pytest.mark.parametrize("rel", ["vision/test/assets/videos/R6llTwEh07w.mp4", "vision/test/assets/videos/SOX5yA1l24A.mp4",
                                 "decord/examples/flipping_a_pancake.mkv"])
def test_aligned_audio_is_the_clip_span(real, tmp_path, rel):
    rate = 16000
    ref = cli(real / rel, rate, 1)
    whole = batch(manifest(tmp_path, [real / rel], name="w.jsonl"),
                  {"audio": ls.Audio(sample_rate=rate, max_seconds=20)})
    start = float(whole["audio.time"][0])
    fields = {"clip": ls.VideoClip(32, frames=8, stride=3, position="random"),
              "audio": ls.Audio(sample_rate=rate, seconds=2.0, align="clip")}
    # `fields` in this order and reversed: the audio follows its video whatever the order.
    for order in (fields, dict(reversed(list(fields.items())))):
        b = batch(manifest(tmp_path, [real / rel] * 4), order, batch_size=4, seed=1)
        for i in range(4):
            t = b["clip.time"][i].tolist()
            meta = b["clip.meta"][i]
            # The clip's span: its first frame to its last frame's end.
            end = t[-1] + 1.0 / meta["fps"]
            assert abs(float(b["audio.time"][i]) - t[0]) <= 1.0 / rate  # within one sample period
            n = int(b["audio.length"][i])
            assert abs(n - (end - t[0]) * rate) <= 1 + rate * 0.002  # frame ends from the index
            j = round((float(b["audio.time"][i]) - start) * rate)
            np.testing.assert_allclose(b["audio"][i, 0, :n].numpy(), ref[0, j:j + n], atol=1e-4, rtol=0)
            assert not b["audio"][i, :, n:].any()


def test_tuple_batches_name_every_declared_entry(real, tmp_path):
    """output= takes every entry the fields declare (audio's .length and .time, a video's .meta
    record, .present of an optional field), in the order given; an unknown name lists them."""
    src = manifest(tmp_path, [real / "vision/test/assets/videos/R6llTwEh07w.mp4"] * 2)
    fields = {"clip": ls.VideoClip(32, frames=4), "audio": ls.Audio(sample_rate=16000, seconds=1.0, align="clip",
                                                                     optional=True)}
    d = batch(src, fields, batch_size=2)
    names = ("audio.length", "clip.meta", "audio.present", "audio.time", "clip")
    t = batch(src, fields, batch_size=2, output=names)
    assert len(t) == len(names)
    for name, value in zip(names, t):
        assert value == d[name] if name == "clip.meta" else torch.equal(value, d[name])
    with pytest.raises(ls.ConfigError, match=r"'audio.len' is not an entry of the batch; entries: clip, clip.time, "
                                             r"clip.meta, audio, audio.length, audio.time, audio.present, __key__"):
        batch(src, fields, output=("audio.len",))


def test_no_audio_stream(real, tmp_path):
    src = manifest(tmp_path, [real / r for r in WITHOUT_AUDIO])
    with pytest.raises(ls.DecodeError, match="video_0.mov.*no decodable audio stream"):
        batch(src, {"mov": ls.Audio(seconds=1.0, keys="mov;avi")}, batch_size=2)
    b = batch(src, {"audio": ls.Audio(seconds=1.0, keys="mov;avi", optional=True)}, batch_size=2)
    assert b["audio.present"].tolist() == [False, False]
    assert not b["audio"].any() and b["audio.length"].tolist() == [0, 0]
    # An audio stream index that is not audio.
    with pytest.raises(ls.DecodeError, match="stream 0 is not a decodable audio stream"):
        batch(manifest(tmp_path, [real / TC / "nasa_13013.mp4"], name="s.jsonl"),
              {"mp4": ls.Audio(seconds=1.0, stream=0)})


def wav(samples, rate=16000, claimed=None):
    data = np.asarray(samples, dtype="<i2").tobytes()
    size = len(data) if claimed is None else claimed
    return (b"RIFF" + struct.pack("<I", 36 + size) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
            + b"data" + struct.pack("<I", size) + data)


def shard(tmp_path, members):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as tar:
        for key, (ext, data) in members.items():
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_bad_audio_is_named_or_skipped(real, tmp_path):
    mp3 = (real / TC / "nasa_13013.mp4.audio.mp3").read_bytes()
    mp4 = (real / "vision/test/assets/videos/R6llTwEh07w.mp4").read_bytes()
    cut = mp3[: len(mp3) // 3]
    members = {
        "ok": ("wav", wav(np.arange(32000) % 100)),
        "empty": ("wav", b""),
        "header-only": ("wav", wav([])),  # zero-length audio
        "garbage": ("mp3", bytes(range(256)) * 40),
        "cut-mp4": ("mp4", mp4[: len(mp4) // 2]),
        "damaged-mp3": ("mp3", mp3[:20000] + bytes(5000) + mp3[25000:]),
        # Its header states 13.248 s, 4.32 s are there: a centred window lies past the end.
        "cut-mp3": ("mp3", cut),
    }
    expected = {
        "empty": "wav: audio: cannot open (not an audio container loadscope reads?)",
        "header-only": "wav: audio: the stream has no samples",
        "garbage": "mp3: audio: cannot open",
        "cut-mp4": "moov atom not found",
        "damaged-mp3": "mp3: audio: cannot decode the packet at 2.304000 s",
        "cut-mp3": "mp3: audio: no samples at 6.262125 s (the stream ends at 4.320000 s, its header states 13.248000 s)",
    }
    src = shard(tmp_path, members)
    for audio in (ls.Audio(max_seconds=20, keys="wav;mp3;mp4"), ls.Audio(seconds=1.0, position="center", keys="wav;mp3;mp4")):
        loader = ls.Loader(ls.WebDataset([src]), fields={"audio": audio}, batch_size=8, on_error="skip",
                           error_budget=None)
        b = next(iter(loader))
        reasons = {d["key"].split(":")[-1]: d["reason"] for d in loader.stats()["skipped"]}
        kept = [k.split(":")[-1] for k in b["__key__"]]
        # Every bad sample is skipped with its reason, or decoded with a warning; nothing is lost.
        assert sorted(kept + list(reasons)) == sorted(members)
        for key, reason in reasons.items():
            assert expected[key] in reason, (key, reason)
        assert int(b["audio.length"][0]) == (32000 if audio.max_seconds else 16000)
        if audio.max_seconds:
            # The whole cut MP3 decodes to what the CLI makes of it, its cut last frame with a warning.
            assert "cut-mp3" in kept and "damaged-mp3" in reasons
            (tmp_path / "cut.mp3").write_bytes(cut)
            ref = cli(tmp_path / "cut.mp3", 16000, 1)
            n = int(b["audio.length"][kept.index("cut-mp3")])
            assert n == ref.shape[1]
            np.testing.assert_allclose(b["audio"][kept.index("cut-mp3"), :, :n].numpy(), ref, atol=1e-4, rtol=0)
            assert [w["key"].split(":")[-1] for w in loader.stats()["warning_notes"]] == ["cut-mp3"]
        else:
            assert "cut-mp3" in reasons
    with pytest.raises(ls.DecodeError, match="a.tar:empty': wav: audio: cannot open"):
        for _ in ls.Loader(ls.WebDataset([src]), fields={"audio": ls.Audio(seconds=1.0, keys="wav;mp3;mp4")},
                           batch_size=1):
            pass


def test_telemetry_has_an_audio_kind(real, tmp_path):
    loader = ls.Loader(manifest(tmp_path, [real / r for r in sorted(WITH_AUDIO)]),
                       fields={"audio": ls.Audio(seconds=1.0)}, batch_size=4, telemetry=True)
    for _ in loader:
        pass
    decode = loader.telemetry().to_dict()["stages"]["decode"]
    assert decode["audio"]["items"] == len(WITH_AUDIO)
    assert decode["audio"]["bytes"] > 0 and "other" not in decode


def test_audio_arguments_fail_early(tmp_path):
    with pytest.raises(ls.ConfigError, match="seconds= .* or max_seconds="):
        ls.Audio()
    with pytest.raises(ls.ConfigError, match="position='middle' is not one of random, center, start"):
        ls.Audio(seconds=1.0, position="middle")
    with pytest.raises(ls.ConfigError, match="channels must be an int in \\[1, 8\\]"):
        ls.Audio(seconds=1.0, channels=0)
    with pytest.raises(ls.ConfigError, match="align='clip' must name a VideoClip field"):
        ls.Loader(manifest(tmp_path, ["x.mp4"]), fields={"audio": ls.Audio(seconds=1.0, align="clip")}, batch_size=1)
    with pytest.raises(ls.ConfigError, match="align= follows one clip; field 'clip' has clips=2"):
        ls.Loader(manifest(tmp_path, ["x.mp4"]), batch_size=1,
                  fields={"clip": ls.VideoClip(32, clips=2, position="uniform"), "audio": ls.Audio(seconds=1.0, align="clip")})


def test_mixed_dataset_images_webp_videos_with_aligned_audio_and_text(real, tmp_path, demo):
    """The issue's mixed dataset: JPEG and WebP images, videos with their aligned audio, text;
    one Loader over a Mix, the same batches for any thread count, resumable, telemetry per kind."""
    jpgs = sorted(demo.glob("folder/*/*.jpg"))[:6]
    webps = [real / "pillow/Tests/images/hopper.webp", real / "pillow/Tests/images/flower.webp"]
    images = manifest(tmp_path, jpgs + webps, name="images.jsonl", txt=[f"image {i}" for i in range(8)])
    videos = {"R6llTwEh07w.mp4": "vision/test/assets/videos/R6llTwEh07w.mp4",
              "SOX5yA1l24A.mp4": "vision/test/assets/videos/SOX5yA1l24A.mp4",
              "pancake.mkv": "decord/examples/flipping_a_pancake.mkv"}
    path = tmp_path / "videos.tar"
    with tarfile.open(path, "w") as tar:
        for name, rel in videos.items():
            stem, ext = name.rsplit(".", 1)
            tar.add(real / rel, arcname=f"{stem}.{ext}")
            text = f"video {stem}".encode()
            info = tarfile.TarInfo(f"{stem}.txt")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    fields = {
        "image": ls.Image(48, keys="jpg;webp", optional=True),
        "clip": ls.VideoClip(32, frames=4, stride=2, keys="mp4;mkv", optional=True),
        "audio": ls.Audio(sample_rate=16000, seconds=0.5, align="clip", keys="mp4;mkv", optional=True),
        "txt": ls.Text(),
    }

    def loader(threads):
        mix = ls.Mix({"images": images, "videos": ls.WebDataset([str(path)], shuffle_buffer=4)},
                     weights={"images": 0.6, "videos": 0.4}, samples_per_epoch=30)
        return ls.Loader(mix, fields=fields, batch_size=5, threads=threads, seed=7, shuffle=True, telemetry=True)

    one = loader(1)
    batches = list(one)
    assert sum(len(b["__key__"]) for b in batches) == 30
    kinds = set()
    for b in batches:
        for i in range(len(b["__key__"])):
            is_video = bool(b["clip.present"][i])
            assert is_video != bool(b["image.present"][i])
            assert bool(b["audio.present"][i]) == is_video  # every video here has audio
            assert b["txt"][i].startswith("video" if is_video else "image")
            if is_video:
                assert abs(float(b["audio.time"][i]) - float(b["clip.time"][i, 0])) <= 1 / 16000
                assert 0 < int(b["audio.length"][i]) <= 8000
            else:
                assert not b["audio"][i].any()
            kinds.add(is_video)
    assert kinds == {True, False}
    decode = one.telemetry().to_dict()["stages"]["decode"]
    assert {"image", "video", "audio", "other"} <= set(decode)

    def same(a, b):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k], k

    for x, y in zip(batches, loader(3)):  # any thread count: the same bytes
        same(x, y)
    # Resume after two batches in a new loader: the rest of the epoch, unchanged.
    first = loader(2)
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    resumed = loader(2)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(batches) - 2
    for x, y in zip(batches[2:], rest):
        same(x, y)


def test_a_clip_after_the_soundtracks_end_is_zeros(real, tmp_path):
    # The video's 10 s with only its first 2 s of sound (made by the ffmpeg CLI): a clip at 5 s
    # has no audio; aligned, that is zeros and length 0, not a failed sample.
    short = tmp_path / "short-sound.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(real / "vision/test/assets/videos/R6llTwEh07w.mp4"),
                    "-c:v", "copy", "-af", "atrim=0:2", "-c:a", "aac", str(short)], check=True)
    ref = cli(short, 16000, 1)
    assert 32000 <= ref.shape[1] < 34000  # the file holds about 2 s of sound (AAC pads its last frame)
    src = manifest(tmp_path, [short, short], t=["5.0", "0.5"])
    b = batch(src, {"mp4": ls.VideoClip(32, frames=4, stride=2, start="t"),
                    "audio": ls.Audio(seconds=1.0, align="mp4", keys="mp4")}, batch_size=2)
    assert b["audio.length"].tolist()[0] == 0 and not b["audio"][0].any()
    # The clip at 0.5 s has its sound: the CLI's samples of its span (7 frames of 30 fps).
    n = int(b["audio.length"][1])
    assert abs(n - 7 / 30 * 16000) <= 1
    j = round(float(b["audio.time"][1]) * 16000)  # the stream starts at 0
    np.testing.assert_allclose(b["audio"][1, 0, :n].numpy(), ref[0, j:j + n], atol=1e-4, rtol=0)
