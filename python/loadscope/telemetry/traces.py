"""Chrome/Perfetto traces of spans (chrome_trace) and a PNG timeline drawn from one
(render_trace), for docs and quick looks without a browser.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Union



def chrome_trace(native_spans: List[tuple], loop_spans: List[tuple], depth: List[tuple],
                 created_ns: int, path: Union[str, "os.PathLike[str]"], dropped: int = 0,
                 decisions: Optional[List[Dict[str, Any]]] = None) -> str:
    """Writes spans as a Chrome/Perfetto trace (JSON trace-event format): one row per engine
    thread and one for the training loop, a counter track for the ready queue, and the auto
    controller's decisions as instant events on the loop's row."""
    pid = os.getpid()
    events: List[Dict[str, Any]] = []
    tid = 0

    def lane(name: str) -> int:
        nonlocal tid
        tid += 1
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        return tid

    def x(name: str, start: int, dur: int, t: int, arg: int, cat: str) -> None:
        ev = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": t,
              "ts": (start - created_ns) / 1e3, "dur": dur / 1e3}
        if arg >= 0:
            ev["args"] = {"batch" if cat in ("loop", "planner", "consumer") else "sample": arg}
        events.append(ev)

    loop_lane = lane("training loop")
    for name, start, dur, arg in loop_spans:
        x(name, start, dur, loop_lane, arg, "loop")
    for role, spans in native_spans:
        if not spans:
            continue
        t = lane(role)
        cat = role.split(": ", 1)[-1].split()[0]  # a Ray worker's rows: "worker 0: <its role>"
        for name, start, dur, arg in sorted(spans, key=lambda s: s[1]):
            x(name, start, dur, t, arg, cat)
    for d in decisions or ():
        if d["at_ns"] >= created_ns:
            events.append({"name": d["text"], "cat": "tuner", "ph": "i", "s": "p", "pid": pid, "tid": loop_lane,
                           "ts": (d["at_ns"] - created_ns) / 1e3, "args": {k: d[k] for k in ("knob", "from", "to")}})
    for at, ready, inflight in depth:
        events.append({"ph": "C", "name": "batches", "pid": pid, "ts": at * 1e6,
                       "args": {"ready": ready, "being built": inflight}})
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms",
                   "otherData": {"producer": "loadscope", "clock": "CLOCK_MONOTONIC, µs from the loader's creation",
                                 "spans_dropped": dropped}}, f)
    return os.fspath(path)


def render_trace(trace_path: Union[str, "os.PathLike[str]"], png_path: Union[str, "os.PathLike[str]"], *,
                 start: float = 0.0, seconds: Optional[float] = None, width: int = 1400) -> str:
    """Draws a trace written by ``stop_trace`` as a PNG timeline: one row per thread, one box
    per span, the ready-queue depth as a step line. For docs and quick looks without a browser."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:  # pragma: no cover
        raise ImportError("render_trace needs Pillow (pip install pillow)") from None

    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    counters = sorted((e["ts"], e["args"]["ready"]) for e in events if e.get("ph") == "C")
    if not spans:
        raise ValueError("the trace holds no spans")
    t0 = min(e["ts"] for e in spans) + start * 1e6
    t1 = max(e["ts"] + e["dur"] for e in spans) if seconds is None else t0 + seconds * 1e6
    order = sorted(lanes)
    left, row, top = 130, 26, 30
    height = top + row * (len(order) + 2) + 30
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    scale = (width - left - 10) / max(t1 - t0, 1.0)
    colors = {"sample": (66, 133, 244), "next()": (219, 68, 55), "to tensors": (244, 180, 0),
              "fill batch": (15, 157, 88), "wait for batch": (171, 71, 188)}
    y_of = {tid: top + row * i for i, tid in enumerate(order)}
    for tid in order:
        draw.text((5, y_of[tid] + 6), lanes[tid], fill="black")
        draw.line([(left, y_of[tid] + row - 2), (width - 10, y_of[tid] + row - 2)], fill=(230, 230, 230))
    for e in spans:
        if e["tid"] not in y_of or e["ts"] > t1 or e["ts"] + e["dur"] < t0:
            continue
        x0 = left + (max(e["ts"], t0) - t0) * scale
        x1 = left + (min(e["ts"] + e["dur"], t1) - t0) * scale
        inner = e["name"] == "to tensors"
        y = y_of[e["tid"]] + (12 if inner else 4)
        draw.rectangle([x0, y, max(x1, x0 + 1), y_of[e["tid"]] + row - 5], fill=colors.get(e["name"], (120, 120, 120)))
    # ready-queue depth
    qy = top + row * len(order) + 4
    draw.text((5, qy + 6), "ready batches", fill="black")
    peak = max([c[1] for c in counters] + [1])
    prev = None
    for ts, ready in counters:
        if ts < t0 or ts > t1:
            continue
        x = left + (ts - t0) * scale
        y = qy + row + 10 - ready / peak * (row + 6)
        if prev:
            draw.line([prev, (x, prev[1]), (x, y)], fill=(0, 0, 0))
        prev = (x, y)
    # time axis
    ay = height - 22
    span_s = (t1 - t0) / 1e6
    step = 10 ** int(f"{span_s / 8:e}".split("e")[1])
    step = step * 5 if span_s / step > 40 else step * 2 if span_s / step > 16 else step
    k = 0.0
    while k <= span_s:
        x = left + k * 1e6 * scale
        draw.line([(x, ay - 4), (x, ay)], fill="black")
        draw.text((x + 2, ay), f"{k * 1e3:.0f} ms", fill="black")
        k += step
    legend = ", ".join(f"{n}" for n in colors)
    draw.text((left, 8), f"{span_s * 1e3:.0f} ms of trace; boxes: {legend}", fill="black")
    img.save(png_path)
    return os.fspath(png_path)
