"""The same ruler on any iterable of batches (a torch DataLoader): per-__next__ data wait,
worker processes' RSS, PSS and CPU (ProcessTreeSampler), the machine's CPU.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

from .. import _native
from .reports import Reporter
from .snapshot import LoopStats, Sink, Snapshot


PSUTIL_MISSING = ("loadscope's telemetry of processes (memory, CPU, I/O of a DataLoader and its workers) and its "
                  "bench harness need psutil, a dependency of loadscope that this environment lacks (installed "
                  "with --no-deps?): pip install psutil")


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
    # /proc/stat counts in ticks (10 ms): each core's busy time is known to a tick at either
    # read, so over a short window "others" is uncertain by 2 ticks x cores / wall (0.6 cores
    # over 64 ms on 2 cores). A window that short cannot show contention: it is not flagged.
    resolution = 2 * 0.01 * cores / wall
    return {"other_cores": others, "steal_share": steal, "load1": after["load1"], "cores": cores,
            "resolution": resolution, "contended": others > 0.25 + resolution or steal > 0.05}


class ProcessTreeSampler:
    """Samples RSS, PSS and CPU of this process and of the watched worker processes with psutil
    every `interval` seconds, from a daemon thread. Exited workers keep their last sample (their
    CPU still counts); the largest total PSS is kept."""

    def __init__(self, interval: float, workers: Callable[[], Optional[List[int]]], history: bool = False) -> None:
        try:
            import psutil
        except ImportError:  # pragma: no cover - a dependency of loadscope (pyproject.toml)
            raise ImportError(PSUTIL_MISSING) from None
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
            from .._errors import ConfigError
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
