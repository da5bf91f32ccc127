"""What a Loader or a watched DataLoader measured at one moment: the training loop's own
clock (LoopStats), the snapshot and its renderings (Snapshot), how it is assembled from the
engine's counters (build_snapshot).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Union

from .. import _native


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

    def __contains__(self, key: object) -> bool:
        return key in self._d

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
        if d.get("tuning"):
            lines += self._tuning_lines()
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
        if isinstance(d.get("workers"), dict):  # a Ray pool's (a watched DataLoader's is its worker count)
            lines += self._workers_lines()
        return "\n".join(lines)

    def _workers_lines(self) -> List[str]:
        w = self._d["workers"]
        per_sample = w["bytes_per_sample"]
        lines = [f"workers (Ray): {w['alive']} of {w['n']} alive on {len(w['per_node'])} node(s), {w['lost']} lost, "
                 f"{w['remade_batches']} batches made again; received {w['received_batches']} batches, "
                 f"{_mb(w['received_bytes'])}" + (f" ({per_sample / 1024:.0f} KiB per sample)" if per_sample else "")
                 + f"; the trainer waited {_t(w['wait_seconds'])} for batches to be made and "
                 f"{_t(w['transfer_seconds'])} pulling them here; {w['in_flight_mean'] or 0:.1f} of "
                 f"{w['in_flight_limit']} requests in flight on average"]
        for r in w["per_worker"]:
            rate = r["made_samples"] / r["active_seconds"] if r["active_seconds"] else 0
            lines.append(f"  worker {r['worker']} (pid {r['pid']}{'' if r['alive'] else ', lost'}): made "
                         f"{r['made_samples']} samples, {rate:.0f}/s, CPU {r['cpu_seconds']:.2f} s; delivered "
                         f"{r['delivered_batches']} batches")
        return lines

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
            if v.get("gpu_frames") or v.get("cpu_fallbacks"):  # VideoClip(hwaccel="cuda")
                lines.append(f"video on NVDEC: {v.get('gpu_frames', 0)} frames decoded there; "
                             f"{v.get('cpu_fallbacks', 0)} videos decoded by the CPU instead (loader.stats()"
                             f"['warning_notes'] says why)")
        t = d.get("transfer", {})
        if t.get("enabled"):
            lines.append(f"transfer: {t['batches']} batches, copy p50 {_t(t['copy']['p50'])}, "
                         f"{t['bandwidth_gbps']:.1f} GB/s, {t['overlapped_share']:.0%} overlapped with compute")
        else:
            lines.append(f"transfer: off ({t.get('reason', 'no device')})")
        return lines

    def _tuning_lines(self) -> List[str]:
        t = self._d["tuning"]
        what = ", ".join(f"{k}='auto'" for k in t["auto"]) or "decoder_threads='auto'"
        lines = [f"tuning ({what}): threads {t['threads']} of at most {t['max_threads']}, prefetch {t['prefetch']}, "
                 f"decoder threads {t['decoder_threads']}; {t['changes']} changes"]
        shown = t["decisions"][-5:]
        if len(t["decisions"]) > len(shown):
            lines.append(f"  ... {len(t['decisions']) - len(shown)} earlier decisions (telemetry()['tuning'])")
        lines += [f"  {d['text']}" for d in shown]
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
                   pss_age: Optional[float] = None, tuning: Optional[Dict[str, Any]] = None,
                   workers: Optional[Dict[str, Any]] = None) -> Snapshot:
    """Assembles the snapshot dictionary (see docs/telemetry.md for each field). `baseline`: the
    process's CPU and I/O counters (and the time) when the loader was made."""
    d = dict(native)
    if tuning is not None:
        d["tuning"] = tuning
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
    if workers is not None:
        d["workers"] = workers
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
