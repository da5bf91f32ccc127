"""The GPU machine's measurements beside the A/B experiments, and the table scripts/gpu-check.sh
prints last.

    python benchmarks/bench_gpu.py probe OUT.json      # H2D bandwidth, the bus, NVDEC's reach
    python benchmarks/bench_gpu.py summary DIR         # the table, from DIR's results

probe: host-to-device copy bandwidth from page-locked and from pageable memory (CUDA events,
median of 20 copies after 3 warm-ups, one batch-sized and one 256 MiB buffer) against the
PCIe link's nominal rate as nvidia-smi reports it; and whether FFmpeg (the libraries loadscope
links) can open a CUDA device and the driver's NVDEC library is there — what video decoding on
the GPU would need."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
from typing import Any, Dict, Optional

# Per lane and direction, after line coding (PCIe 3.0+ use 128b/130b): GB/s.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def _smi(query: str) -> Optional[str]:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def _copy_gbps(src, dst, reps: int = 20) -> float:
    import torch

    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src, non_blocking=True)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    return src.numel() * src.element_size() / times[len(times) // 2] / 1e9


def _ffmpeg_cuda() -> Dict[str, Any]:
    """Which hardware device types the loaded libavutil knows, whether it opens a CUDA one, and
    whether the driver's NVDEC library (libnvcuvid) loads."""
    out: Dict[str, Any] = {}
    try:
        import loadscope  # noqa: F401  (loads the same libavutil the loader uses)
        path = next((line.split()[-1] for line in open("/proc/self/maps") if "libavutil.so" in line), None)
        av = ctypes.CDLL(path or "libavutil.so.57")
        av.av_hwdevice_iterate_types.restype = ctypes.c_int
        av.av_hwdevice_get_type_name.restype = ctypes.c_char_p
        types, t = [], 0
        while True:
            t = av.av_hwdevice_iterate_types(t)
            if t == 0:
                break
            types.append(av.av_hwdevice_get_type_name(t).decode())
        out["libavutil"] = path
        out["hwdevice_types"] = types
        if "cuda" in types:
            ctx = ctypes.c_void_p()
            cuda = av.av_hwdevice_find_type_by_name(b"cuda")
            rc = av.av_hwdevice_ctx_create(ctypes.byref(ctx), cuda, None, None, 0)
            out["cuda_device_opened"] = rc == 0
            out["cuda_device_rc"] = rc
            if rc == 0:
                av.av_buffer_unref(ctypes.byref(ctx))
    except (OSError, StopIteration, AttributeError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    try:
        ctypes.CDLL("libnvcuvid.so.1")
        out["libnvcuvid"] = "loads"
    except OSError as e:
        out["libnvcuvid"] = f"missing: {e}"
    return out


def probe(path: str) -> Dict[str, Any]:
    import torch

    res: Dict[str, Any] = {"gpu": _smi("name"), "driver": _smi("driver_version")}
    link = _smi("pcie.link.gen.max,pcie.link.width.max,pcie.link.gen.current,pcie.link.width.current")
    if link:
        gen, width, gen_now, width_now = (int(x) if x.strip().isdigit() else None for x in link.split(","))
        res["pcie"] = {"gen_max": gen, "width_max": width, "gen_current": gen_now, "width_current": width_now}
        if gen in PCIE_LANE_GBPS and width:
            res["pcie"]["nominal_gbps"] = round(PCIE_LANE_GBPS[gen] * width, 1)
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        res["h2d"] = {}
        for name, nbytes in (("batch_64x3x224x224", 64 * 3 * 224 * 224), ("256MiB", 256 << 20)):
            dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            pinned = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
            pageable = torch.empty(nbytes, dtype=torch.uint8)
            pageable.fill_(1)
            pinned.fill_(1)
            res["h2d"][name] = {"pinned_gbps": round(_copy_gbps(pinned, dst), 2),
                                "pageable_gbps": round(_copy_gbps(pageable, dst), 2)}
    res["ffmpeg_cuda"] = _ffmpeg_cuda()
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))
    return res


def _med(v: Dict[str, Any], digits: int = 0, pct: bool = False) -> str:
    if not v or v.get("median") is None:
        return "—"
    m, lo, hi = v["median"], v.get("ci_low"), v.get("ci_high")
    f = (lambda x: f"{x:.1%}") if pct else (lambda x: f"{x:.{digits}f}")
    return f"{f(m)} [{f(lo)}, {f(hi)}]" if lo is not None else f(m)


def summary(root: str) -> str:
    from loadscope.bench.report import _load_raw  # the harness's reader of raw.jsonl

    lines = [f"## GPU check ({root})", ""]
    for name in ("decode", "pin_memory"):
        d = os.path.join(root, name)
        sp = os.path.join(d, "summary.json")
        if not os.path.exists(sp):
            lines += [f"{name}: not run (see the log)", ""]
            continue
        with open(sp) as f:
            s = json.load(f)
        if s.get("status") != "ok":
            lines += [f"{name}: {s.get('status')}: {s.get('reason') or s.get('failure')}", ""]
            if not s.get("arms"):
                continue
        s["repetitions"] = max((s.get("repetitions") or {0: 0}).values())
        lines += [f"### {name}: median [95% CI of the mean] over {s.get('repetitions')} repetitions", "",
                  "| arm | samples/s (pipeline) | samples/s (e2e) | step ms | GPU idle | peak PSS MiB |",
                  "|---|---|---|---|---|---|"]
        for a in s["arms"]:
            p = s["per_arm"][a]
            lines.append(f"| {a} | {_med(p.get('throughput'))} | {_med(p.get('e2e_throughput'))} | "
                         f"{_med(p.get('step_ms'), 2)} | {_med(p.get('gpu_idle_share'), pct=True)} | {_med(p.get('peak_pss'))} |")
        for a, v in (s.get("verdicts") or {}).items():
            lines.append(f"- verdict for {a}: **{v['decision']}** — " + "; ".join(v["reasons"]))
        for a, c in ((s.get("correctness") or {}).get("arms") or {}).items():
            extra = (f" (mean |diff| {c['mean_abs_diff']:.2f}, max {c['max_abs_diff']:.0f})"
                     if "mean_abs_diff" in c else "")
            lines.append(f"- correctness {a}: {'ok' if c.get('ok') else 'FAILED'}: {c.get('detail')}{extra}")
        bw = [r["telemetry"]["transfer"] for r in _load_raw(d)
              if isinstance(r.get("telemetry"), dict) and (r["telemetry"].get("transfer") or {}).get("enabled")]
        if bw:
            g = sorted(t["bandwidth_gbps"] for t in bw)
            ov = sorted(t["overlapped_share"] for t in bw)
            lines.append(f"- loader's side-stream copies: {g[len(g) // 2]:.1f} GB/s median over {len(g)} runs "
                         f"(CUDA events), overlapped share {ov[len(ov) // 2]:.0%}")
        lines.append("")
    pp = os.path.join(root, "probe.json")
    if os.path.exists(pp):
        with open(pp) as f:
            p = json.load(f)
        nominal = (p.get("pcie") or {}).get("nominal_gbps")
        lines.append(f"### H2D copies ({p.get('gpu')}, driver {p.get('driver')}, PCIe {p.get('pcie')})")
        for k, v in (p.get("h2d") or {}).items():
            rel = f" ({v['pinned_gbps'] / nominal:.0%} of the link's nominal {nominal} GB/s)" if nominal else ""
            lines.append(f"- {k}: pinned {v['pinned_gbps']} GB/s{rel}, pageable {v['pageable_gbps']} GB/s")
        lines.append(f"- FFmpeg and NVDEC: {json.dumps(p.get('ffmpeg_cuda'))}")
    cross = os.path.join(root, "crossover", "crossover.md")  # benchmarks/crossover.py
    if os.path.exists(cross):
        with open(cross) as f:
            lines += ["", "### Crossover: CPU decode at n loader threads against GPU decode (e2e samples/s)", "",
                      f.read()]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "probe":
        probe(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        print(summary(sys.argv[2]))
    else:
        print(__doc__)
        sys.exit(2)
