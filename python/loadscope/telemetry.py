"""Telemetry: where the time and the memory of an input pipeline go.

    snap = loader.telemetry()          # a Snapshot: .summary(), .to_dict(), .to_json(), .to_prometheus()
    loader.report_every(10, to=print)  # interval reports (deltas) to a callable, a logger or a .jsonl path
    loader.start_trace("run.trace.json"); ...; loader.stop_trace()   # Chrome/Perfetto trace
    for batch in loadscope.telemetry.watch(dataloader): ...          # the same ruler on a torch DataLoader

Every metric, its unit and how it is measured: docs/telemetry.md.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

from . import _native

Sink = Union[Callable[[Dict[str, Any]], None], logging.Logger, str, "os.PathLike[str]"]


def _hist() -> "_native.Histogram":
    return _native.Histogram()


class LoopStats:
    """What the training loop sees, measured in the consumer's thread: the time each
    ``__next__`` takes (data wait: the loop, and so the GPU, waits for input), the time the loop
    spends between a batch's arrival and the next ``__next__`` (compute), the gap between
    consecutive ``__next__`` calls (step time), and the time to the first batch."""

    def __init__(self, created_ns: int) -> None:
        self.created_ns = created_ns
        self.wait = _hist()      # __next__ duration, ns
        self.step = _hist()      # entry-to-entry within an epoch, ns
        self.convert = _hist()   # native batch -> tensors, ns
        self.map = _hist()       # Loader(map=...) per batch, ns
        self.wait_total = 0      # ns, every __next__ that delivered a batch
        self.compute_total = 0   # ns, from a batch's arrival to the next __next__, same epoch
        self.batches = 0
        self.first_batch_after_create: Optional[float] = None
        self.first_batch_last_epoch: Optional[float] = None
        self._last_enter: Optional[int] = None
        self._last_done: Optional[int] = None
        self._epoch_start: Optional[int] = None
        self.spans: Optional[List[tuple]] = None  # (name, start_ns, dur_ns, arg) when tracing
        self.max_spans = 0
        self.spans_dropped = 0

    def epoch_started(self, at_ns: Optional[int] = None) -> None:
        self._epoch_start = at_ns or time.monotonic_ns()
        self._last_enter = self._last_done = None  # the gap across epochs is not a step

    def delivered(self, enter_ns: int, native_ns: int, done_ns: int, index: int) -> None:
        wait = done_ns - enter_ns
        self.wait.record(wait)
        self.convert.record(done_ns - native_ns)
        self.wait_total += wait  # the first batch of an epoch too: the restart is data wait
        if self._last_enter is not None and self._last_done is not None:
            self.step.record(enter_ns - self._last_enter)
            self.compute_total += enter_ns - self._last_done
        self._last_enter, self._last_done = enter_ns, done_ns
        self.batches += 1
        if self.first_batch_after_create is None:
            self.first_batch_after_create = (done_ns - self.created_ns) * 1e-9
        if self._epoch_start is not None:
            self.first_batch_last_epoch = (done_ns - self._epoch_start) * 1e-9
            self._epoch_start = None
        if self.spans is not None:
            for span in (("next()", enter_ns, wait, index), ("to tensors", native_ns, done_ns - native_ns, index)):
                if len(self.spans) < self.max_spans:
                    self.spans.append(span)
                else:
                    self.spans_dropped += 1

    def to_dict(self) -> Dict[str, Any]:
        busy = self.wait_total + self.compute_total
        return {
            "batches": self.batches,
            "step": self.step.summary(),
            "data_wait": self.wait.summary(),
            "wait_seconds": self.wait_total * 1e-9,
            "compute_seconds": self.compute_total * 1e-9,
            "data_wait_share": (self.wait_total / busy) if self.batches >= 2 and busy else None,
            "to_tensors": self.convert.summary(),
            "map": self.map.summary(),
            "first_batch_after_create": self.first_batch_after_create,
            "first_batch_last_epoch": self.first_batch_last_epoch,
        }


def _mb(n: Optional[float]) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def _t(s: Optional[float]) -> str:
    if s is None:
        return "n/a"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} µs"


class Snapshot:
    """One reading of a loader's telemetry. ``to_dict()`` has every metric (docs/telemetry.md);
    ``summary()`` is the table for people."""

    def __init__(self, data: Dict[str, Any]) -> None:
        self._d = data

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self._d))  # a deep copy of plain types

    def to_json(self, **kw) -> str:
        return json.dumps(self._d, **kw)

    def verdict(self) -> str:
        if not self._d.get("enabled", True):
            return "telemetry is off (telemetry=False)"
        share = self._d["loop"]["data_wait_share"]
        if share is None:
            return "not enough batches yet"
        if share > 0.5:
            return f"input-bound: the training loop waited for data {share:.0%} of its step time"
        if share > 0.1:
            return f"partly input-bound: data wait is {share:.0%} of step time"
        return f"compute-bound: data wait is {share:.0%} of step time; faster input would not help"

    def summary(self) -> str:
        """The table for people. A watched DataLoader (``watch(dl).telemetry()``) prints with the
        same lines and words, so the two can be read side by side; lines about the engine's own
        queue, stages and reads appear for a Loader only."""
        d = self._d
        if not d.get("enabled", True):
            return "loadscope telemetry: off (Loader(..., telemetry=False)); nothing was measured"
        watched = d.get("watched")
        lines = []
        active = d["active_seconds"] or 0
        rate = d["samples"] / active if active else 0
        failed = ("" if watched else f"; {d['failures']} failed, {d['warnings']} with decoder warnings")
        lines.append(f"{'watched ' + watched['type'] if watched else 'loadscope'} telemetry: {d['samples']} samples "
                     f"in {d['batches']} batches, {rate:.0f} samples/s over {active:.2f} s of epochs{failed}")
        loop = d["loop"]
        if loop["batches"]:
            lines.append(f"training loop: step p50 {_t(loop['step']['p50'])}, data wait p50 "
                         f"{_t(loop['data_wait']['p50'])} p99 {_t(loop['data_wait']['p99'])} max "
                         f"{_t(loop['data_wait']['max'])}; first batch {_t(loop['first_batch_last_epoch'])} "
                         f"after the epoch started")
            lines.append(f"  -> {self.verdict()}")
            m = loop.get("map") or {}
            if m.get("count"):
                lines.append(f"map: {m['count']} batches, p50 {_t(m['p50'])} p99 {_t(m['p99'])}, "
                             f"{_t(m['total'])} in all (the map= callable; input work, before the loop's wait)")
        if "queue" in d:
            lines += self._engine_lines()
        m = d["memory"]
        age = m.get("pss_age_seconds")
        line = (f"memory: RSS {_mb(m['rss'])}, PSS {_mb(m['pss'])} "
                f"({'read ' + _t(age) + ' ago, ' if age else ''}largest seen {_mb(m['pss_peak'])}), "
                f"RSS peak {_mb(m['rss_peak'])}, cgroup peak {_mb(m['cgroup_peak'])}, available {_mb(m['mem_available'])}")
        if "engine" in m:
            e = m["engine"]
            line += (f"; engine-owned {_mb(e['total'])} (batches {_mb(e['pool_bytes'])}, scratch {_mb(e['scratch_bytes'])}, "
                     f"shuffle buffer {_mb(e['source_buffer_bytes'])}, pinned {_mb(e['pinned_bytes'])})")
        else:
            line += f" (RSS and PSS: the main process and its {watched['workers'] if watched else 0} live workers)"
        lines.append(line)
        c = d["cpu"]
        if watched:
            lines.append(f"cpu: process {c['cores']:.2f} cores busy since watching began; main "
                         f"{c['main_seconds']:.2f} s, workers {c['workers_seconds']:.2f} s")
        else:
            lines.append(f"cpu: process {c['cores']:.2f} cores busy since the loader was made; engine threads "
                         + ", ".join(f"{th['role']} {th['cpu_seconds']:.2f} s" for th in d["threads"] if th["cpu_seconds"]))
        if "io" in d:
            lines += self._storage_lines()
        return "\n".join(lines)

    def _engine_lines(self) -> List[str]:
        d = self._d
        lines = []
        q = d["queue"]
        lines.append(f"queue: {q['mean_ready']:.2f} of {q['prefetch']} batches ready on average "
                     f"(occupancy {q['occupancy']:.0%}), {q['mean_in_flight']:.2f} being built; "
                     f"back-pressure {_t(q['back_pressure_seconds'])} (all {q['prefetch']} ready, workers idle "
                     f"for the consumer), consumer waited {_t(q['consumer_wait']['total'])}")
        lines.append(f"{'stage':<8} {'kind':<7} {'items':>7} {'busy':>9} {'p50':>9} {'p99':>9} {'max':>9} {'MiB/s':>7} {'failed':>6}")
        for stage, kinds in d["stages"].items():
            for kind, c in kinds.items():
                busy = c["busy"]["total"]
                mbps = (c["bytes"] / 2**20 / busy) if busy and c["bytes"] else None
                lines.append(f"{stage:<8} {kind:<7} {c['items']:>7} {_t(busy):>9} {_t(c['busy']['p50']):>9} "
                             f"{_t(c['busy']['p99']):>9} {_t(c['busy']['max']):>9} "
                             f"{'' if mbps is None else f'{mbps:.0f}':>7} {c['failures']:>6}")
        v = d.get("video", {})
        if v.get("clips"):
            c = v["per_clip"]
            lines.append(f"video: {v['clips']} clips; per clip {c['frames_decoded']:.1f} frames decoded for "
                         f"{c['frames_shown']:.1f} shown ({c['packets']:.1f} packets read), {c['seeks']:.2f} seeks, "
                         f"{c['bytes'] / 2**20:.2f} MiB read by path, open and index {_t(c['open_seconds'])}")
        t = d.get("transfer", {})
        if t.get("enabled"):
            lines.append(f"transfer: {t['batches']} batches, copy p50 {_t(t['copy']['p50'])}, "
                         f"{t['bandwidth_gbps']:.1f} GB/s, {t['overlapped_share']:.0%} overlapped with compute")
        else:
            lines.append(f"transfer: off ({t.get('reason', 'no device')})")
        return lines

    def _storage_lines(self) -> List[str]:
        d = self._d
        lines = []
        n = d.get("network") or {}
        if n.get("requests"):
            lines.append(f"network: {n['requests']} requests, {_mb(n['bytes'])} ({_mb(n['bytes_per_s'])}/s over epochs), "
                         f"first byte p50 {_t(n['first_byte']['p50'])} p99 {_t(n['first_byte']['p99'])}, request p50 "
                         f"{_t(n['request']['p50'])} p99 {_t(n['request']['p99'])}; retries {n['retries']} "
                         f"({n['retries_server']} server 5xx/429, {n['retries_network']} network, {n['resumed']} bodies "
                         f"resumed), {n['failures']} failed")
        io = d["io"]
        lines.append(f"storage: engine read {_mb(io['engine_bytes'])} in {io['engine_reads']} reads "
                     f"({_mb(io['engine_bytes_per_s'])}/s over epochs); since the loader was made the process "
                     f"read {_mb(io['proc_rchar'])} ({_mb(io['proc_read_bytes'])} from storage)")
        return lines

    def to_prometheus(self, prefix: str = "loadscope") -> str:
        """Prometheus text exposition of the counters, gauges and quantiles."""
        d = self._d
        out: List[str] = []

        def metric(name: str, kind: str, helptext: str, samples: List[tuple]) -> None:
            out.append(f"# HELP {prefix}_{name} {helptext}")
            out.append(f"# TYPE {prefix}_{name} {kind}")
            for labels, value in samples:
                if value is None:
                    continue
                lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
                out.append(f"{prefix}_{name}{{{lab}}} {value}" if lab else f"{prefix}_{name} {value}")

        metric("samples_total", "counter", "Samples delivered.", [({}, d["samples"])])
        metric("batches_total", "counter", "Batches delivered.", [({}, d["batches"])])
        metric("failures_total", "counter", "Samples skipped or failed.", [({}, d.get("failures"))])
        metric("active_seconds_total", "counter", "Time with an epoch running.", [({}, d["active_seconds"])])
        busy, items, quant = [], [], []
        for stage, kinds in d.get("stages", {}).items():
            for kind, c in kinds.items():
                lab = {"stage": stage, "kind": kind}
                busy.append((lab, c["busy"]["total"]))
                items.append((lab, c["items"]))
                for q in ("p50", "p90", "p99"):
                    quant.append(({**lab, "quantile": "0." + q[1:]}, c["busy"][q]))
        metric("stage_busy_seconds_total", "counter", "Busy time per stage and kind.", busy)
        metric("stage_items_total", "counter", "Items per stage and kind.", items)
        metric("stage_busy_seconds", "summary", "Busy time per item, quantiles.", quant)
        loop = d["loop"]
        wait = loop["data_wait"]
        out.append(f"# HELP {prefix}_data_wait_seconds Time __next__ blocked the training loop.")
        out.append(f"# TYPE {prefix}_data_wait_seconds summary")
        for q in ("p50", "p90", "p99"):
            out.append(f'{prefix}_data_wait_seconds{{quantile="0.{q[1:]}"}} {wait[q]}')
        out.append(f"{prefix}_data_wait_seconds_sum {wait['total']}")
        out.append(f"{prefix}_data_wait_seconds_count {wait['count']}")
        metric("data_wait_share", "gauge", "Data wait over data wait plus compute.", [({}, loop["data_wait_share"])])
        if "queue" in d:  # a Loader's own engine; a watched DataLoader has none
            q = d["queue"]
            metric("queue_occupancy", "gauge", "Mean ready batches over prefetch.", [({}, q["occupancy"])])
            metric("back_pressure_seconds_total", "counter", "Time all prefetch slots held ready batches.",
                   [({}, q["back_pressure_seconds"])])
            metric("consumer_wait_seconds_total", "counter", "Time the consumer blocked in the engine.",
                   [({}, q["consumer_wait"]["total"])])
        m = d["memory"]
        metric("memory_bytes", "gauge", "Process memory now.",
               [({"kind": k}, m.get(k)) for k in ("rss", "pss", "cgroup_current", "mem_available")]
               + ([({"kind": "engine"}, m["engine"]["total"])] if "engine" in m else []))
        metric("memory_peak_bytes", "gauge", "Process memory peaks.",
               [({"kind": k}, m.get(k)) for k in ("rss_peak", "pss_peak", "cgroup_peak")])
        c = d["cpu"]
        if "user" in c:
            metric("cpu_seconds_total", "counter", "Process CPU time since the loader was made.",
                   [({"mode": "user"}, c["user"]), ({"mode": "system"}, c["system"])])
        else:
            metric("cpu_seconds_total", "counter", "CPU time of the process and its workers since watching began.",
                   [({"process": "main"}, c["main_seconds"]), ({"process": "workers"}, c["workers_seconds"])])
        if "io" in d:
            metric("engine_read_bytes_total", "counter", "Bytes the engine read.", [({}, d["io"]["engine_bytes"])])
        n = d.get("network") or {}
        if n:
            metric("network_requests_total", "counter", "Object storage requests.", [({}, n["requests"])])
            metric("network_bytes_total", "counter", "Object storage bytes received.", [({}, n["bytes"])])
            metric("network_retries_total", "counter", "Requests retried, by cause.",
                   [({"cause": "server"}, n["retries_server"]), ({"cause": "network"}, n["retries_network"])])
            metric("network_failures_total", "counter", "Requests that failed after their retries.", [({}, n["failures"])])
            metric("network_first_byte_seconds", "summary", "Time to first byte (process-wide).",
                   [({"quantile": "0." + q[1:]}, n["first_byte"][q]) for q in ("p50", "p90", "p99")])
        return "\n".join(out) + "\n"


def build_snapshot(native: Dict[str, Any], loop: LoopStats, process: Dict[str, Any], transfer: Dict[str, Any],
                   pss_peak: Optional[int], config: Dict[str, Any], baseline: Dict[str, Any],
                   pss_age: Optional[float] = None) -> Snapshot:
    """Assembles the snapshot dictionary (see docs/telemetry.md for each field). `baseline`: the
    process's CPU and I/O counters (and the time) when the loader was made."""
    d = dict(native)
    # Slots are indexed by the thread that claimed them first; list planner, then workers 0, 1, ...
    d["threads"] = sorted(d["threads"], key=lambda t: (t["role"] != "planner", len(t["role"]), t["role"]))
    q = d["queue"]
    q["occupancy"] = q["mean_ready"] / q["prefetch"] if q["prefetch"] else 0.0
    d["loop"] = loop.to_dict()
    e = dict(d.pop("engine_memory"))
    e["pinned_bytes"] = transfer.get("pinned_bytes", 0)
    e["total"] = e["pool_bytes"] + e["scratch_bytes"] + e["source_buffer_bytes"]
    d["memory"] = {k: process[k] for k in ("rss", "pss", "rss_peak", "cgroup_current", "cgroup_peak", "mem_available")}
    d["memory"]["pss_peak"] = pss_peak
    d["memory"]["pss_age_seconds"] = pss_age
    d["memory"]["engine"] = e
    wall = time.monotonic() - baseline["wall"]
    user = process["cpu_user"] - baseline["cpu_user"]
    system = process["cpu_system"] - baseline["cpu_system"]
    d["cpu"] = {"user": user, "system": system, "cores": (user + system) / wall if wall > 0 else 0.0}
    read = d["stages"].get("read", {})
    # Reads: files the workers read, samples the planner read from shards (lists cost no read),
    # and videos FFmpeg read by path (its bytes are under decode.video).
    source = read.get("source", {})
    video = d["stages"].get("decode", {}).get("video", {})
    reads = sum(c["items"] for k, c in read.items() if k != "source")
    reads += source.get("items", 0) if source.get("bytes") else 0
    reads += video.get("items", 0)
    engine_bytes = sum(c["bytes"] for c in read.values()) + video.get("bytes", 0)

    def since(key: str) -> Optional[int]:
        v, b = process.get(key), baseline.get(key)
        return None if v is None or b is None else v - b

    active = d["active_seconds"]
    d["io"] = {"engine_bytes": engine_bytes, "engine_reads": reads,
               "engine_bytes_per_s": engine_bytes / active if active else 0.0,
               "engine_reads_per_s": reads / active if active else 0.0,
               "proc_rchar": since("io_rchar"), "proc_read_bytes": since("io_read_bytes"), "proc_syscr": since("io_syscr")}
    d["network"] = network_section(_native.network_stats(), baseline.get("network"), active)
    v = d["video"]
    v["bytes"] = video.get("bytes", 0)  # read by FFmpeg for videos opened by path
    n = v["clips"]
    v["per_clip"] = {"frames_decoded": v["frames_decoded"] / n, "frames_shown": v["frames_shown"] / n,
                     "packets": v["packets"] / n, "seeks": v["seeks"] / n, "bytes": v["bytes"] / n,
                     "open_seconds": v["open_seconds"] / n} if n else {}
    d["transfer"] = transfer
    d["config"] = config
    return Snapshot(d)


_NETWORK_COUNTERS = ("requests", "bytes", "failures", "retries_server", "retries_network", "resumed", "busy_s")


def network_section(now: Dict[str, Any], before: Optional[Dict[str, Any]], active: float) -> Dict[str, Any]:
    """Object storage reads (s3://, http(s)://) since the loader was made: counters as
    differences; the latency quantiles (time to first byte, whole request) are the process's,
    as the client is shared by every loader in it (docs/remote.md)."""
    out: Dict[str, Any] = {k: now[k] - (before or {}).get(k, 0) for k in _NETWORK_COUNTERS}
    out["retries"] = out["retries_server"] + out["retries_network"]
    out["bytes_per_s"] = out["bytes"] / active if active else 0.0
    out["first_byte"] = now["first_byte"]
    out["request"] = now["request"]
    out["environment"] = _native.remote_environment() if out["requests"] else {}
    return out


# Paths (dot-separated, * for any key) whose difference between two snapshots is the
# interval's share; everything else is a gauge or a cumulative quantile and is reported as is.
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
    "video.bytes",
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
    return {
        "time": time.time(),
        "interval": interval,
        "samples_per_s": interval.get("samples", 0) / dt if dt else 0.0,
        "data_wait_share": wait / (wait + compute) if wait + compute else None,
        "occupancy": (interval.get("queue.ready_batch_seconds", 0) / active / prefetch) if active and prefetch else None,
        "snapshot": now.to_dict(),
    }


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
            return lambda r: to.info("loadscope telemetry %s", json.dumps(r["interval"]))
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


def chrome_trace(native_spans: List[tuple], loop_spans: List[tuple], depth: List[tuple],
                 created_ns: int, path: Union[str, "os.PathLike[str]"], dropped: int = 0) -> str:
    """Writes spans as a Chrome/Perfetto trace (JSON trace-event format): one row per engine
    thread and one for the training loop, a counter track for the ready queue."""
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
        cat = role.split()[0]
        for name, start, dur, arg in sorted(spans, key=lambda s: s[1]):
            x(name, start, dur, t, arg, cat)
    for at, ready, inflight in depth:
        events.append({"ph": "C", "name": "batches", "pid": pid, "ts": at * 1e6,
                       "args": {"ready": ready, "being built": inflight}})
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms",
                   "otherData": {"producer": "loadscope", "clock": "CLOCK_MONOTONIC, µs from the loader's creation",
                                 "spans_dropped": dropped}}, f)
    return os.fspath(path)


# --- watching any iterable, e.g. a torch DataLoader ------------------------------------------

def process_cpu_seconds(pid: int) -> Optional[float]:
    """CPU time of a whole process (all its threads, exited ones included) from its kernel CPU
    clock, in ns resolution (psutil's /proc figures move in 10 ms ticks: too coarse for a
    per-sample cost). Linux encodes another process's clock id as ((~pid) << 3) | CPUCLOCK_SCHED;
    None when the process is gone or not ours."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2) * 1e-9
    except OSError:
        return None


def tree_cpu_seconds() -> float:
    """CPU seconds of this process, of its children that have exited and been waited for
    (DataLoader workers that are not persistent end with every epoch), and of the live ones;
    from clocks of ns (live processes) and µs (waited children, getrusage) resolution."""
    import resource

    import psutil

    total = time.process_time()  # CLOCK_PROCESS_CPUTIME_ID
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    total += ru.ru_utime + ru.ru_stime
    for p in psutil.Process().children(recursive=True):
        t = process_cpu_seconds(p.pid)
        if t is None:
            try:
                c = p.cpu_times()
                t = c.user + c.system
            except psutil.Error:
                continue
        total += t
    return total


def machine_cpu() -> Dict[str, float]:
    """The machine's CPU counters since boot (/proc/stat, seconds): busy (user, nice, system,
    irq, softirq), steal (taken by the hypervisor) and total; with the 1-minute load average."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    with open("/proc/loadavg") as f:
        load1 = float(f.read().split()[0])
    return {"busy": (user + nice + system + irq + softirq) / hz, "steal": steal / hz,
            "total": (user + nice + system + idle + iowait + irq + softirq + steal) / hz, "load1": load1}


def machine_load(before: Dict[str, float], after: Dict[str, float], own_cpu_seconds: float,
                 seconds: float) -> Dict[str, Any]:
    """What else the machine did during a measurement: cores kept busy by other processes (all
    busy time minus this process tree's), the share of time stolen by the hypervisor, and the
    load average at the end. `contended` when others took more than a quarter core on average
    or more than 5% was stolen: figures from such a run may be off."""
    cores = os.cpu_count() or 1
    wall = max(seconds, 1e-9)
    busy = after["busy"] - before["busy"]
    total = max(after["total"] - before["total"], 1e-9)
    others = max(0.0, busy - own_cpu_seconds) / wall
    steal = (after["steal"] - before["steal"]) / total
    return {"other_cores": others, "steal_share": steal, "load1": after["load1"], "cores": cores,
            "contended": others > 0.25 or steal > 0.05}


class ProcessTreeSampler:
    """Samples RSS, PSS and CPU of this process and of the watched worker processes with psutil
    every `interval` seconds, from a daemon thread. Exited workers keep their last sample (their
    CPU still counts); the largest total PSS is kept."""

    def __init__(self, interval: float, workers: Callable[[], Optional[List[int]]], history: bool = False) -> None:
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil is a Debian package here
            raise ImportError("loadscope.telemetry.watch needs psutil (pip install psutil)") from None
        self._psutil = psutil
        self._me = psutil.Process()
        self._workers = workers
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: Dict[int, Dict[str, Any]] = {}  # pid -> last sample
        self._peaks: Dict[int, Dict[str, Any]] = {}  # pid -> largest RSS and PSS seen
        self.latest: Dict[str, Any] = {"processes": [], "total": {}, "workers": 0}
        self.peak_total_pss = 0
        # (monotonic s, total PSS, total RSS, total CPU s) per sample, for plots over time;
        # bounded: the oldest half is thinned when it fills.
        self.history: Optional[List[tuple]] = [] if history else None
        self._thread = threading.Thread(target=self._run, name="loadscope-watch", daemon=True)
        self._thread.start()

    def _one(self, role: str, p) -> Optional[Dict[str, Any]]:
        try:
            with p.oneshot():
                full = p.memory_full_info()
                cpu = p.cpu_times()
                return {"role": role, "pid": p.pid, "alive": True, "rss": full.rss, "pss": full.pss,
                        "cpu_seconds": cpu.user + cpu.system}
        except (self._psutil.NoSuchProcess, self._psutil.AccessDenied, self._psutil.ZombieProcess):
            return None

    def sample(self) -> None:
        pids = self._workers()
        if pids is None:  # not a torch DataLoader: every child process counts
            procs = self._me.children(recursive=True)
        else:
            procs = []
            for pid in pids:
                try:
                    procs.append(self._psutil.Process(pid))
                except self._psutil.NoSuchProcess:
                    pass
        main = self._one("main", self._me)
        alive = {}
        for p in procs:
            got = self._one("worker", p)
            if got is not None:
                alive[p.pid] = got
        with self._lock:
            for pid, old in self._seen.items():
                if pid not in alive and old["alive"]:
                    old.update(alive=False, rss=0, pss=0)  # exited: memory gone, CPU stays
            self._seen.update(alive)
            for p in ([main] if main else []) + list(alive.values()):
                peak = self._peaks.setdefault(p["pid"], {"role": p["role"], "pid": p["pid"], "rss_peak": 0, "pss_peak": 0})
                peak.update(rss_peak=max(peak["rss_peak"], p["rss"]), pss_peak=max(peak["pss_peak"], p["pss"]),
                            cpu_seconds=p["cpu_seconds"])
            workers = list(self._seen.values())
            procs_out = ([main] if main else []) + workers
            total = {k: sum(p[k] for p in procs_out) for k in ("rss", "pss", "cpu_seconds")}
            self.peak_total_pss = max(self.peak_total_pss, total["pss"])
            if self.history is not None:
                if len(self.history) >= 20000:
                    self.history[:10000] = self.history[:10000:2]
                self.history.append((time.monotonic(), total["pss"], total["rss"], total["cpu_seconds"]))
            self.latest = {"processes": [dict(p) for p in procs_out], "total": total,
                           "workers": sum(p["alive"] for p in workers)}

    def peaks(self) -> List[Dict[str, Any]]:
        """Every process seen (main first, then workers in order of appearance): its largest RSS
        and PSS (bytes) and its last CPU seconds."""
        with self._lock:
            return [dict(p) for p in self._peaks.values()]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


class Watched:
    """Wraps any iterable of batches (a torch DataLoader) and measures it with loadscope's
    ruler: per-``__next__`` data wait (creating the iterator, which starts DataLoader workers,
    counts as waiting for the first batch), compute between batches, tail latency, and
    RSS/PSS/CPU of the process and of each worker process (sampled every `interval` s; for a
    DataLoader exactly its workers, otherwise every child process). ``telemetry()`` returns the
    same ``loop`` and ``memory`` sections as a Loader's snapshot, plus ``processes``. Use it as
    a context manager, or call ``close()``, to stop its sampling thread."""

    def __init__(self, iterable: Iterable, interval: float = 0.2) -> None:
        self._iterable = iterable
        self.loop = LoopStats(time.monotonic_ns())
        self._interval = interval
        self._sampler: Optional[ProcessTreeSampler] = None
        self._iterator: Optional[Iterator[Any]] = None
        self._samples = 0
        self._active_ns = 0  # time inside finished epochs
        self._epoch_start_ns: Optional[int] = None
        self._reporter: Optional[Reporter] = None
        self._final_tree: Dict[str, Any] = {"processes": [], "total": {}, "workers": 0}
        self._final_peak = 0
        p0 = _native.process_stats(pss=False)
        self._baseline = (time.monotonic(), p0["cpu_user"] + p0["cpu_system"])

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def _worker_pids(self) -> Optional[List[int]]:
        import torch

        if not isinstance(self._iterable, torch.utils.data.DataLoader):
            return None
        # A persistent DataLoader keeps its iterator (and workers) between epochs.
        it = self._iterator or getattr(self._iterable, "_iterator", None)
        workers = getattr(it, "_workers", None) or []
        return [w.pid for w in workers if getattr(w, "pid", None)]

    def __iter__(self) -> Iterator[Any]:
        if self._sampler is None:
            self._sampler = ProcessTreeSampler(self._interval, self._worker_pids)
        start = time.monotonic_ns()
        self._epoch_start_ns = start
        self.loop.epoch_started(start)
        self._iterator = it = iter(self._iterable)
        self._sampler.sample()  # the workers exist now
        first = True
        try:
            while True:
                enter = start if first else time.monotonic_ns()
                first = False
                try:
                    batch = next(it)
                except StopIteration:
                    return
                done = time.monotonic_ns()
                self.loop.delivered(enter, done, done, self.loop.batches)
                self._samples += _batch_len(batch)
                yield batch
        finally:
            if self._epoch_start_ns is not None:
                self._active_ns += time.monotonic_ns() - self._epoch_start_ns
                self._epoch_start_ns = None
            self._sampler.sample()  # last figures of this epoch's workers
            # Let go of the iterator: an epoch abandoned with a break then shuts its (non-
            # persistent) workers down now, not when the next epoch starts new ones beside them.
            self._iterator = None

    def telemetry(self, *, sample: bool = False) -> Snapshot:
        """The latest figures as a ``Snapshot`` shaped like a Loader's (``summary()``,
        ``to_dict()``, ``to_prometheus()``): ``samples``, ``batches``, ``active_seconds``,
        ``loop``, ``memory`` and ``cpu`` mean the same, measured over the main process and its
        workers; plus ``processes`` and ``watched``. No sampling here: cheap to call every step.
        sample=True takes a fresh sample of the processes first (~3.5 ms per process)."""
        if sample and self._sampler:
            self._sampler.sample()
        # After close(): the figures of the last sample (exited workers keep their CPU).
        tree = self._sampler.latest if self._sampler else self._final_tree
        peak_pss = self._sampler.peak_total_pss if self._sampler else self._final_peak
        proc = _native.process_stats(pss=False)
        wall0, cpu0 = self._baseline
        now = time.monotonic_ns()
        active = self._active_ns + (now - self._epoch_start_ns if self._epoch_start_ns is not None else 0)
        main = proc["cpu_user"] + proc["cpu_system"] - cpu0
        workers = sum(p["cpu_seconds"] for p in tree["processes"] if p["role"] == "worker")
        return Snapshot({
            "watched": {"type": type(self._iterable).__name__, "workers": tree["workers"],
                        "num_workers": getattr(self._iterable, "num_workers", None)},
            "samples": self._samples, "batches": self.loop.batches, "active_seconds": active * 1e-9,
            "uptime": time.monotonic() - wall0,
            "loop": self.loop.to_dict(),
            "processes": tree["processes"],
            "workers": tree["workers"],
            "memory": {"rss": tree["total"].get("rss", proc["rss"]), "pss": tree["total"].get("pss"),
                       "pss_peak": peak_pss or None,
                       "rss_peak": proc["rss_peak"], "cgroup_current": proc["cgroup_current"],
                       "cgroup_peak": proc["cgroup_peak"], "mem_available": proc["mem_available"],
                       "main_rss": proc["rss"], "total_rss": tree["total"].get("rss"),
                       "total_pss": tree["total"].get("pss"),
                       "total_pss_peak": peak_pss or None},
            "cpu": {"cores": (main + workers) / max(time.monotonic() - wall0, 1e-9), "main_seconds": main,
                    "workers_seconds": workers, "main_cores": main / max(time.monotonic() - wall0, 1e-9),
                    "total_seconds": tree["total"].get("cpu_seconds")},
        })

    def report_every(self, seconds: float, to: "Sink" = print) -> None:
        """As ``Loader.report_every``: an interval report every `seconds` to a callable, a
        logging.Logger or a JSON-lines path, and a final one from ``close()``."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            from ._errors import ConfigError
            raise ConfigError(f"report_every(seconds={seconds!r}): must be a number > 0")
        self._stop_reports()
        ref = weakref.ref(self)

        def read() -> Snapshot:
            w = ref()
            if w is None:
                raise ReferenceError
            return w.telemetry(sample=True)

        self._reporter = Reporter(read, seconds, to)

    def _stop_reports(self) -> None:
        if self._reporter is not None:
            self._reporter.stop()
            self._reporter = None

    def close(self) -> None:
        self._stop_reports()  # its final report while the sampler still runs
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler.sample()
            self._final_tree, self._final_peak = self._sampler.latest, self._sampler.peak_total_pss
            self._sampler = None

    def __enter__(self) -> "Watched":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass


def _batch_len(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor or array, else its length."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    if isinstance(batch, dict) and batch:
        return _batch_len(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        if getattr(first, "shape", None) is not None or isinstance(first, (dict, list, tuple)):
            return _batch_len(first)
        return len(batch)  # a list of strings or numbers: one per sample
    return 1


def watch(iterable: Iterable, *, interval: float = 0.2) -> Watched:
    """Measures any iterable of batches (e.g. ``torch.utils.data.DataLoader``) with loadscope's
    ruler. Iterate the result instead of the DataLoader; call ``.telemetry()`` for the numbers."""
    return Watched(iterable, interval=interval)


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


# --- across ranks -----------------------------------------------------------------------------

def rank_summary(loader: Any) -> Dict[str, Any]:
    """This rank's figures that a data-parallel report compares: throughput and data wait."""
    import socket

    s = loader.telemetry().to_dict()
    loop = s["loop"]
    active = s.get("active_seconds") or 0.0
    return {"rank": loader.rank, "world_size": loader.world_size, "host": socket.gethostname(), "pid": os.getpid(),
            "telemetry": bool(loader._telemetry_on),
            "batches": loop["batches"], "samples": s["samples"], "active_seconds": active,
            "samples_per_s": s["samples"] / active if active else None,
            "wait_seconds": loop["wait_seconds"], "data_wait_share": loop["data_wait_share"],
            "wait_p99": loop["data_wait"].get("p99"), "first_batch_last_epoch": loop["first_batch_last_epoch"]}


def gather(loader: Any, group: Any = None) -> Dict[str, Any]:
    """Every rank's summary (``rank_summary``), gathered with ``torch.distributed`` — call it on
    every rank at the same point, as any collective — and the straggler: the rank whose training
    loop waited longest for data (its input is the slowest; the other ranks wait for it in the
    gradient all-reduce). Without an initialised process group, this rank alone."""
    import torch.distributed as dist

    mine = rank_summary(loader)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        ranks: List[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(ranks, mine, group=group)
    else:
        ranks = [mine]
    ranks.sort(key=lambda r: r["rank"])
    straggler = _straggler(ranks)
    return {"ranks": ranks, "straggler": straggler, "text": format_ranks(ranks, straggler)}


def _straggler(ranks: List[Dict[str, Any]]) -> Dict[str, Any]:
    import statistics

    if not all(r.get("telemetry", True) for r in ranks):
        return {"rank": None, "wait_seconds": None, "vs_median": None,
                "note": "telemetry is off on some rank (Loader(telemetry=False)): no straggler can be named"}
    median = statistics.median(r["wait_seconds"] for r in ranks)
    slow = max(ranks, key=lambda r: r["wait_seconds"])
    return {"rank": slow["rank"], "wait_seconds": slow["wait_seconds"],
            "vs_median": slow["wait_seconds"] / median if median > 0 else None}


def format_ranks(ranks: List[Dict[str, Any]], straggler: Dict[str, Any]) -> str:
    lines = ["rank  host             samples/s  data wait  wait share  wait p99  first batch"]
    for r in ranks:
        sps = "n/a" if r["samples_per_s"] is None else f"{r['samples_per_s']:.0f}"
        share = "n/a" if r["data_wait_share"] is None else f"{r['data_wait_share']:.0%}"
        lines.append(f"{r['rank']:>4}  {r['host'][:15]:<15}  {sps:>9}  {_t(r['wait_seconds']):>9}  {share:>10}  "
                     f"{_t(r['wait_p99']):>8}  {_t(r['first_batch_last_epoch']):>11}")
    if straggler.get("rank") is None:
        lines.append(f"straggler: none named ({straggler.get('note')})")
    else:
        ratio = f", {straggler['vs_median']:.1f}x the median" if straggler.get("vs_median") else ""
        lines.append(f"straggler: rank {straggler['rank']} (waited {_t(straggler['wait_seconds'])} for data{ratio})")
    return "\n".join(lines)
