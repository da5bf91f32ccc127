"""Bounded work per sample (part 26): a header whose claims cannot be honoured within
decode/limits.h is refused before work is done, as a DecodeError naming the sample and the
claim — or the sample is decoded correctly — within a second of CPU and 64 MiB of memory.

The files are crafted here, byte by byte, from what the fuzzer found (a WAVE_FORMAT_EXTENSIBLE
header claiming 1442856576 Hz once cost 12.5 s and 2 GB); the references are the ffmpeg CLI's
decode of the same bytes, and a video's clips under an ordinary time base.

Each file is read in a fresh process that reports its own CPU time and peak RSS around the read:
the bounds are 10x and more away from what a sane file costs, and the crafted ones cost 12 s and
2 GB without the limits (a resource bound, not a timing)."""

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

import loadscope as ls

READ = r'''
import json, resource, sys, time
import loadscope as ls
path, kind = sys.argv[1], sys.argv[2]
fields = {"wav": ls.Audio(sample_rate=16000, channels=1, seconds=2.0, position=sys.argv[3])} if kind == "audio" else \
         {path.rsplit(".", 1)[1]: ls.VideoClip(64, frames=4, stride=2)}
loader = ls.Loader(ls.Files([path], labels=False), fields=fields, batch_size=1, threads=1, on_error="skip",
                   error_budget=None)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu0 = time.process_time()
batches = list(loader)
out = {"cpu": time.process_time() - cpu0, "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024,
       "skipped": [s["reason"] for s in loader.stats()["skipped"]]}
if batches:
    import numpy
    name = next(iter(fields))
    numpy.save(sys.argv[4], batches[0][name][0].numpy())
print(json.dumps(out))
'''


def read(path, kind, tmp_path, position="start"):
    """(report, the decoded sample or None) from a fresh process."""
    got = tmp_path / "sample.npy"
    got.unlink(missing_ok=True)
    r = subprocess.run([sys.executable, "-c", READ, str(path), kind, position, str(got)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.splitlines()[-1])
    # The bound: a second of CPU and 64 MiB over what the process held before the read.
    assert report["cpu"] < 1.0 and report["rss_mb"] < 64, report
    return report, (np.load(got) if got.exists() else None)


def wav(path, *, rate, channels=1, bits=32, extensible=True, data=None, claim=None):
    """A WAV file: fmt chunk as given (WAVE_FORMAT_EXTENSIBLE with the PCM subformat, or plain
    PCM), then a data chunk of `data` whose header claims `claim` bytes."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else 1, channels, rate & 0xFFFFFFFF, (rate * block) & 0xFFFFFFFF,
                      block & 0xFFFF, bits)
    if extensible:
        fmt += struct.pack("<HHI", 22, bits, 0) + bytes.fromhex("0100000000001000800000aa00389b71")
    if data is None:  # a quiet sine, as PCM of `bits`
        t = np.arange(32000) / 16000.0
        x = (np.sin(2 * np.pi * 440 * t) * 0.25 * (2 ** (bits - 1) - 1)).astype(f"<i{bits // 8}")
        data = np.repeat(x[:, None], channels, axis=1).tobytes() if channels <= 8 else bytes(256 * 1024)
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data"
            + struct.pack("<I", len(data) if claim is None else claim) + data)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body) & 0xFFFFFFFF) + body)
    return path


@pytest.mark.parametrize("name, header, claim", [
    ("the fuzzer's", dict(rate=0x56003E80), "a sample rate of 1442856576 Hz, outside the 1..768000 Hz"),
    ("rate 2^31-1", dict(rate=2**31 - 1), "a sample rate of 2147483647 Hz, outside the 1..768000 Hz"),
    ("rate 0", dict(rate=0), None),  # FFmpeg refuses it itself
    ("65535 channels", dict(rate=48000, channels=65535, bits=16, extensible=False), "65535"),
])
def test_a_wav_header_claiming_what_cannot_be_decoded_is_refused_by_name(tmp_path, name, header, claim):
    path = wav(tmp_path / "crafted.wav", **header)
    report, sample = read(path, "audio", tmp_path)
    assert sample is None and len(report["skipped"]) == 1, report
    reason = report["skipped"][0]
    assert reason.startswith("wav: audio: "), reason  # the member, the decoder
    if claim:
        assert claim in reason, reason


def test_a_resampling_ratio_over_the_bound_is_refused_before_the_resampler_is_made(tmp_path):
    """768 kHz is a real rate; to 1 kHz it is a ratio of 768, over 256 either way."""
    path = wav(tmp_path / "hires.wav", rate=768000, bits=16, extensible=False)
    with pytest.raises(ls.DecodeError, match="resampling 768000 Hz to 1000 Hz: a ratio over 256x"):
        next(iter(ls.Loader(ls.Files([str(path)], labels=False), batch_size=1,
                            fields={"wav": ls.Audio(sample_rate=1000, seconds=0.5, position="start")})))


def test_a_data_chunk_claiming_4_gib_decodes_what_is_there_as_the_cli_does(tmp_path):
    """The header claims 4 GiB of samples, the file holds 2 s: the stream is those 2 s (FFmpeg's
    WAV demuxer takes the claim only as far as the file goes), so a 2-second window, at the start
    or drawn at random, is the ffmpeg CLI's decode of the file."""
    path = wav(tmp_path / "long-claim.wav", rate=16000, bits=16, extensible=False, claim=0xFFFFFFF0)
    cli = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "f32le", "-ac", "1", "-ar", "16000", "-"],
                         capture_output=True, check=True).stdout
    ref = np.frombuffer(cli, dtype=np.float32)
    assert len(ref) == 32000
    for position in ("start", "random"):
        report, sample = read(path, "audio", tmp_path, position=position)
        assert report["skipped"] == [] and sample is not None, report
        assert sample.shape == (1, 32000) and np.abs(sample[0] - ref).max() < 1e-6


@pytest.mark.parametrize("side, claim", [
    ((65535, 65535), "65535x65535"),  # FFmpeg refuses these itself, naming them
    ((12000, 8000), "frames of 12000x8000 (96000000 pixels), over the 35651584 pixels"),  # within FFmpeg's, over ours
])
def test_a_video_header_claiming_frames_too_large_is_refused_by_name(tmp_path, side, claim):
    path = tmp_path / "big.y4m"
    path.write_bytes(f"YUV4MPEG2 W{side[0]} H{side[1]} F25:1 Ip A1:1 C420jpeg\nFRAME\n".encode() + bytes(100_000))
    report, sample = read(path, "video", tmp_path)
    assert sample is None and len(report["skipped"]) == 1 and claim in report["skipped"][0], report


def test_a_nanosecond_time_base_gives_the_clip_an_ordinary_one_gives(tmp_path):
    """The same H.264 stream in MP4s of time base 1/1e9 and 1/12800: the same clip."""
    clips = []
    for timescale in (1_000_000_000, 12800):
        path = tmp_path / f"tb{timescale}.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=160x120:r=25:d=2", "-c:v", "libx264",
                        "-g", "25", "-bf", "2", "-video_track_timescale", str(timescale), str(path)], check=True)
        report, clip = read(path, "video", tmp_path)
        assert report["skipped"] == [] and clip is not None, report
        clips.append(clip)
    assert clips[0].shape == (4, 3, 64, 64) and np.array_equal(clips[0], clips[1])


def test_the_limits_are_declared_once_and_are_the_options_bounds():
    limits = ls._native.decode_limits()
    assert limits == {"sample_rate": 768000, "channels": 64, "resample_ratio": 256, "video_pixels": 139264 * 256,
                      "video_side": 16384}
    assert ls._native.option_bounds()["sample_rate"] == (1, limits["sample_rate"])
    with pytest.raises(ls.ConfigError, match=r"Audio.sample_rate must be an int in \[1, 768000\]"):
        ls.Audio(sample_rate=768001, seconds=1.0)
