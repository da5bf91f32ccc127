#!/usr/bin/env python3
"""Audio benchmark of issue 15 (a benchmark, not a test: it asserts nothing).

10 s windows at 16 kHz mono from the 48 kHz stereo AAC soundtracks of videos like a real
dataset's (the project's generator: `--video-profile dataset --audio`, 8-12 s, H.264/HEVC in MP4
with AAC, VP9 in WebM with Opus), centred in each video, batch 16, same cores:

- loadscope (T threads): ls.Audio(sample_rate=16000, channels=1, seconds=10, position="center");
- torch DataLoader (T workers) + PyAV, the way torchvision.io.read_video read audio (seek to the
  window, decode the frames that overlap it) and resampled with PyAV's AudioResampler, which is
  libswresample as in loadscope (torchaudio, the issue's other baseline, has no build for this
  torch; torchvision 0.22 dropped read_video, which was PyAV underneath).

Interleaved over --reps rounds after a warm-up epoch; ratios per round with median, range and
95% CI; CPU per window. Both arms take the same windows (loadscope's `.time`, handed to the
baseline), and a check round compares their samples with each other and with the ffmpeg CLI's
decode of the whole stream.

    .venv/bin/python benchmarks/bench_audio.py [--videos 48] [--reps 7] [--out results/bench_audio.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np
import torch

import loadscope as ls
from loadscope import datasets
from loadscope.bench import arms as bench_arms

RATE, SECONDS = 16000, 10.0
N = int(RATE * SECONDS)


def read_window(path: str, start: float) -> np.ndarray:
    """float32 [1, N]: the window [start, start + SECONDS) of the file's audio at RATE, mono, from
    PyAV's decode (seek before it, decode the overlapping frames) through its resampler."""
    import av

    out = np.zeros((1, N), dtype=np.float32)
    with av.open(path) as c:
        s = c.streams.audio[0]
        tb = float(s.time_base)
        c.seek(int(max(start - 0.1, 0) / tb), stream=s, backward=True)
        resampler = av.AudioResampler(format="flt", layout="mono", rate=RATE)
        got, first = [], None
        for frame in c.decode(s):
            t = frame.pts * tb
            if t + frame.samples / frame.sample_rate < start:
                continue
            if first is None:
                first = t  # the resampler's first output sample is its first input sample's time
            for r in resampler.resample(frame):
                got.append(r.to_ndarray().reshape(-1))
            if t > start + SECONDS:
                break
        if got:
            x = np.concatenate(got)
            skip = max(int(round((start - first) * RATE)), 0)
            x = x[skip:skip + N]
            out[0, :len(x)] = x
    return out


def cli_whole(path: str) -> np.ndarray:
    """float32 [N]: the ffmpeg CLI's decode of the file's first audio stream at RATE, mono (the
    reference of tests/python/test_audio.py)."""
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:a:0", "-f", "f32le", "-ac", "1",
                          "-ar", str(RATE), "-"], capture_output=True, check=True).stdout
    return np.frombuffer(out, dtype=np.float32)


def off_cli(window: np.ndarray, whole: np.ndarray, start: float, whole_start: float) -> float:
    """max |diff| of a window starting at `start` against the same span of the CLI's whole decode
    (which starts at `whole_start`), over the samples both have."""
    j = round((start - whole_start) * RATE)
    n = min(N, len(whole) - j)
    return float(np.abs(window.reshape(-1)[:n] - whole[j:j + n]).max())


class Windows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows  # (path, start)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        path, start = self.rows[i]
        return torch.from_numpy(read_window(path, start)), i


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="data/audio-bench", help="videos with soundtracks (made if missing)")
    p.add_argument("--videos", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=4, help="each video listed this often in an epoch")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--out", default="results/bench_audio.json")
    a = p.parse_args()
    torch.set_num_threads(1)
    datasets.ensure(a.data, images=1, videos=a.videos, video_profile="dataset", audio=True)
    # Each video listed --repeat times (an epoch of 48 windows is over before the workers are
    # all busy); the listing lies next to the data.
    manifest = os.path.join(a.data, f"videos-x{a.repeat}.jsonl")
    with open(os.path.join(a.data, "videos.jsonl")) as f:
        lines = [line for line in f if line.strip()]
    with open(manifest, "w") as f:
        f.writelines(lines * a.repeat)
    env = bench_arms.machine()
    print(json.dumps(env))

    audio = ls.Audio(sample_rate=RATE, channels=1, seconds=SECONDS, position="center",
                     keys=["mp4", "webm", "mkv"])
    loader = ls.Loader(ls.FileList(manifest), fields={"audio": audio}, batch_size=16, threads=a.threads,
                       shuffle=True, seed=0)
    # The windows: loadscope's centred ones, handed to the baseline.
    probe = ls.Loader(ls.FileList(manifest), fields={"audio": audio}, batch_size=16, threads=a.threads)
    rows, reference = [], {}
    for b in probe:
        for k, t, x in zip(b["__key__"], b["audio.time"].tolist(), b["audio"]):
            rows.append((k, t))
            reference[k] = x.clone()
    rows.sort()
    print(f"{len(rows)} windows of {SECONDS:.0f} s at {RATE} Hz from {a.data} ({a.repeat} per video)")
    # Check round: the same windows' samples from both arms.
    # Each also against the ffmpeg CLI's decode of the whole stream, placed by the start time of
    # loadscope's whole decode (as the tests place it).
    whole_audio = ls.Audio(sample_rate=RATE, channels=1, max_seconds=60, keys=["mp4", "webm", "mkv"])
    starts = {}
    for b in ls.Loader(ls.FileList(os.path.join(a.data, "videos.jsonl")), fields={"audio": whole_audio},
                       batch_size=16, threads=a.threads):
        starts.update(zip(b["__key__"], b["audio.time"].tolist()))
    diffs, ls_cli, tv_cli = [], [], []
    for k, t in sorted(set(rows)):
        base, ours, whole = read_window(k, t), reference[k].numpy(), cli_whole(k)
        diffs.append(float(np.abs(base - ours).max()))
        ls_cli.append(off_cli(ours, whole, t, starts[k]))
        tv_cli.append(off_cli(base, whole, t, starts[k]))
    for label, d in (("baseline vs loadscope", diffs), ("loadscope vs the ffmpeg CLI", ls_cli),
                     ("baseline vs the ffmpeg CLI", tv_cli)):
        print(f"{label}, max |diff| per window: median {statistics.median(d):.2e}, max {max(d):.2e}")

    seen_ls, seen_tv = [], []

    def ls_epoch() -> int:
        seen_ls.clear()
        for b in loader:
            seen_ls.extend((os.path.basename(k), round(t, 4)) for k, t in zip(b["__key__"], b["audio.time"].tolist()))
        return len(seen_ls)

    ds = Windows(rows)
    # Spawned workers: the check round leaves PyAV objects in this process, and a forked worker
    # that frees one by garbage collection hangs in avcodec_close (its codec's slice threads
    # exist only here; the read_video arm of bench/arms.py collects before forking instead).
    dl = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=a.threads,
                                     persistent_workers=a.threads > 0, multiprocessing_context="spawn")

    def tv_epoch() -> int:
        seen_tv.clear()
        for _, idx in dl:
            seen_tv.extend((os.path.basename(rows[i][0]), round(rows[i][1], 4)) for i in idx.tolist())
        return len(seen_tv)

    def close() -> None:
        it = getattr(dl, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    arms = [bench_arms.Arm(f"loadscope ({a.threads} threads)", ls_epoch, read=lambda: bench_arms.digest(seen_ls)),
            bench_arms.Arm(f"torch DataLoader ({a.threads} workers) + PyAV decode + resample", tv_epoch, close,
                           read=lambda: bench_arms.digest(seen_tv))]
    try:
        rounds = bench_arms.measured(arms, reps=a.reps, warmup=1)
    finally:
        for arm in arms:
            arm.close()
    same = bench_arms.same_inputs(rounds)
    res = {name: [r["per_s"] for r in rs] for name, rs in rounds.items()}
    ls_name, tv_name = (arm.name for arm in arms)
    ratio = bench_arms.ratio_summary(res[ls_name], res[tv_name])
    report = {"machine": env, "threads": a.threads, "reps": a.reps, "windows": len(rows), "windows_per_s": res,
              "cpu_per_window": {n: [r["cpu_per_item"] for r in rs] for n, rs in rounds.items()},
              "same_inputs": same,
              "max_abs_diff": {label: {"median": statistics.median(d), "max": max(d)}
                               for label, d in (("baseline_vs_loadscope", diffs), ("loadscope_vs_cli", ls_cli),
                                                ("baseline_vs_cli", tv_cli))},
              "loadscope_vs_torch": ratio}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\n| arm | windows/s, median of {a.reps} (min-max) | CPU ms per window |\n|---|---|---|")
    for name, xs in res.items():
        cpu = statistics.median(r["cpu_per_item"] for r in rounds[name]) * 1e3
        print(f"| {name} | {statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f}) | {cpu:.2f} |")
    print(f"\nevery arm read the same windows in every round: {'yes' if same['identical'] else 'NO'}")
    print(bench_arms.format_ratio("loadscope / DataLoader + PyAV (audio windows)", ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
