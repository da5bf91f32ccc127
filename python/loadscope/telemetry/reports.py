"""Interval reports: deltas between snapshots, sent to a callable, a logger or a JSON-lines file
from a background thread (Reporter), and a last report at interpreter exit.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional

from .snapshot import Sink, Snapshot


_COUNTERS = (
    "samples", "batches", "failures", "warnings", "active_seconds", "uptime",
    "stages.*.*.items", "stages.*.*.bytes", "stages.*.*.failures", "stages.*.*.busy.count", "stages.*.*.busy.total",
    "loop.batches", "loop.wait_seconds", "loop.compute_seconds", "cpu.main_seconds", "cpu.workers_seconds",
    "loop.step.count", "loop.step.total", "loop.data_wait.count", "loop.data_wait.total",
    "queue.consumer_wait.count", "queue.consumer_wait.total", "queue.planner_wait.count", "queue.planner_wait.total",
    "queue.back_pressure_seconds", "queue.ready_batch_seconds", "queue.in_flight_batch_seconds",
    "cpu.user", "cpu.system", "io.engine_bytes", "io.engine_reads", "io.proc_rchar", "io.proc_read_bytes",
    "io.proc_syscr", "threads.*.cpu_seconds", "transfer.batches", "transfer.bytes",
    "network.requests", "network.bytes", "network.failures", "network.retries", "network.retries_server",
    "network.retries_network", "network.resumed", "network.busy_s",
    "video.clips", "video.frames_shown", "video.frames_decoded", "video.packets", "video.seeks", "video.open_seconds",
    "video.bytes", "video.gpu_frames", "video.cpu_fallbacks",
)


def _counters(d: Dict[str, Any]) -> Dict[str, float]:
    """The counter values of a snapshot dict, by concrete path (threads keyed by role)."""
    flat: Dict[str, float] = {}

    def walk(node: Any, path: List[str]) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [str(k)])
        elif path and path[0] == "threads" and isinstance(node, list):
            for t in node:
                flat[f"threads.{t['role']}.cpu_seconds"] = t["cpu_seconds"]
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            flat[".".join(path)] = node

    walk(d, [])
    out = {}
    for key, value in flat.items():
        parts = key.split(".")
        for pattern in _COUNTERS:
            pp = pattern.split(".")
            if len(pp) == len(parts) and all(p == "*" or p == q for p, q in zip(pp, parts)):
                out[key] = value
                break
    return out


def delta(now: Snapshot, before: Optional[Snapshot]) -> Dict[str, Any]:
    """An interval report: every counter as its difference since `before` (since the loader
    was made, for the first report), rates over the interval, and the snapshot itself (gauges
    as they are now, quantiles cumulative)."""
    cur = _counters(now.to_dict())
    prev = _counters(before.to_dict()) if before is not None else {}
    interval = {k: v - prev.get(k, 0) for k, v in cur.items()}
    dt = interval.get("uptime", 0)
    active = interval.get("active_seconds", 0)
    wait, compute = interval.get("loop.wait_seconds", 0), interval.get("loop.compute_seconds", 0)
    prefetch = now.to_dict().get("queue", {}).get("prefetch")  # a watched DataLoader has no queue
    out = {
        "time": time.time(),
        "interval": interval,
        "samples_per_s": interval.get("samples", 0) / dt if dt else 0.0,
        "data_wait_share": wait / (wait + compute) if wait + compute else None,
        "occupancy": (interval.get("queue.ready_batch_seconds", 0) / active / prefetch) if active and prefetch else None,
        "snapshot": now.to_dict(),
    }
    tuning = now.to_dict().get("tuning")
    if tuning:  # the auto controller: its settings now, and the decisions of this interval
        seen = (before.to_dict().get("tuning") or {}).get("decisions", []) if before is not None else []
        since = max((d["at_ns"] for d in seen), default=-1)
        out["tuning"] = {"threads": tuning["threads"], "prefetch": tuning["prefetch"],
                         "decoder_threads": tuning["decoder_threads"],
                         "decisions": [d["text"] for d in tuning["decisions"] if d["at_ns"] > since]}
    return out


class Reporter:
    """Emits interval reports every `seconds` from a daemon thread, and a final one on stop()."""

    def __init__(self, source: Callable[[], Snapshot], seconds: float, to: Sink) -> None:
        if not seconds > 0:
            raise ValueError("report interval must be > 0 seconds")
        self._source = source
        self._seconds = seconds
        self._emit = self._sink(to)
        self._stop = threading.Event()
        self._last: Optional[Snapshot] = None
        self._errors = 0
        self._thread = threading.Thread(target=self._run, name="loadscope-reporter", daemon=True)
        self._thread.start()
        _reporters.add(self)

    @staticmethod
    def _sink(to: Sink) -> Callable[[Dict[str, Any]], None]:
        if callable(to) and not isinstance(to, logging.Logger):
            return to
        if isinstance(to, logging.Logger):
            def log(r: Dict[str, Any]) -> None:
                to.info("loadscope telemetry %s", json.dumps(r["interval"]))
                for text in r.get("tuning", {}).get("decisions", []):
                    to.info("loadscope tuning: %s", text)
            return log
        path = os.fspath(to)

        def write(report: Dict[str, Any]) -> None:
            with open(path, "a") as f:
                f.write(json.dumps(report) + "\n")

        return write

    def report(self) -> None:
        try:
            snap = self._source()
        except ReferenceError:  # the loader is gone
            self._stop.set()
            return
        try:
            self._emit(delta(snap, self._last))
        except Exception as e:  # a full disk or a broken handler must not end the reports
            self._errors += 1
            if self._errors == 1:
                logging.getLogger("loadscope").warning("telemetry report could not be written: %r", e)
        self._last = snap

    def _run(self) -> None:
        while not self._stop.wait(self._seconds):
            self.report()

    def stop(self, final: bool = True) -> None:
        """Stops the thread and, unless told otherwise, emits a final report."""
        if not self._stop.is_set():
            self._stop.set()
            if self._thread is not threading.current_thread():
                self._thread.join()
            if final:
                self.report()
        _reporters.discard(self)


_reporters: "weakref.WeakSet[Reporter]" = weakref.WeakSet()


def _final_reports() -> None:  # interpreter exit: every reporter writes its last report
    for r in list(_reporters):
        r.stop()


import atexit  # noqa: E402

atexit.register(_final_reports)
