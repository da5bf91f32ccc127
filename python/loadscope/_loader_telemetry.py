"""A Loader's telemetry: its snapshot (the engine's counters with the loop's, the process's
memory and CPU, the transfer stage's), interval reports, and traces. ``Loader.telemetry()``,
``report_every()``, ``stop_reports()``, ``start_trace()`` and ``stop_trace()`` are this."""

from __future__ import annotations

import os
import time
import weakref
from typing import Any, Callable, Dict, Optional, Union

from . import _native, telemetry
from ._errors import ConfigError
from ._fields import int_arg
from .telemetry import Sink


class LoaderTelemetry:
    """``config``: the loader's settings as the snapshot reports them (fixed when it is made)."""

    def __init__(self, pipeline, enabled: bool, transfer, config: Dict[str, Any], tuner=None,
                 pool: Optional[Any] = None) -> None:
        self.pipeline = pipeline
        # A Ray pool's state (_ray_pool.PoolState): its snapshot section and its workers' spans.
        self.pool = pool
        self.workers: Optional[Callable[[], Dict[str, Any]]] = pool.section if pool is not None else None
        self.tuner = tuner  # the auto controller (_native.Tuner) or None
        self.enabled = enabled
        self.transfer = transfer
        self.config = config
        self.loop = telemetry.LoopStats(pipeline.telemetry_created_ns())
        self.reporter: Optional[telemetry.Reporter] = None
        self.trace_path: Optional[str] = None
        self.pss_peak = 0
        self.pss, self.pss_at = None, -1e9
        # CPU and I/O are reported since the loader was made: the process's counters now.
        p0 = _native.process_stats(pss=False)
        self.baseline = {"wall": time.monotonic(), "cpu_user": p0["cpu_user"], "cpu_system": p0["cpu_system"],
                         "io_rchar": p0["io_rchar"], "io_read_bytes": p0["io_read_bytes"], "io_syscr": p0["io_syscr"],
                         "network": _native.network_stats()}

    def snapshot(self, depth: bool = False) -> "telemetry.Snapshot":
        native = self.pipeline.telemetry_snapshot(depth=depth)
        # PSS costs milliseconds to read (smaps_rollup walks every mapping): at most once a second.
        now = time.monotonic()
        fresh = now - self.pss_at >= 1.0
        process = _native.process_stats(pss=fresh)
        if fresh:
            self.pss_at, self.pss = now, process["pss"]
        process["pss"] = self.pss
        if process["pss"] is not None:
            self.pss_peak = max(self.pss_peak, process["pss"])
        pinned = native["engine_memory"]["pinned_bytes"]
        if self.transfer is not None:
            transfer = self.transfer.stats(pinned)
        else:
            transfer = {"enabled": False, "reason": "device='cpu'", "pinned_bytes": 0}
        return telemetry.build_snapshot(native, self.loop, process, transfer, self.pss_peak or None, dict(self.config),
                                        self.baseline, None if self.pss is None else now - self.pss_at,
                                        self.tuning(), self.workers() if self.workers is not None else None)

    def tuning(self) -> Optional[Dict[str, Any]]:
        """The auto controller's settings now and its decisions (the last 256), or None."""
        t = self.tuner
        if t is None:
            return None
        auto = [k for k in ("threads", "prefetch") if self.config.get(k) == "auto"]
        return {"auto": auto, "threads": t.threads, "prefetch": t.prefetch, "decoder_threads": t.decoder_threads,
                "max_threads": t.max_threads, "changes": t.changes, "decisions": t.decisions()}

    def report_every(self, seconds: float, to: Sink) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ConfigError(f"report_every(seconds={seconds!r}): must be a number > 0")
        self.stop_reports()
        ref = weakref.ref(self)  # the reporter's thread must not keep the loader alive

        def read():
            me = ref()
            if me is None:
                raise ReferenceError
            return me.snapshot()

        self.reporter = telemetry.Reporter(read, seconds, to)

    def stop_reports(self) -> None:
        if self.reporter is not None:
            self.reporter.stop()
            self.reporter = None

    def start_trace(self, path: Union[str, "os.PathLike[str]"], max_spans: int) -> None:
        if not self.enabled:
            raise ConfigError("tracing needs telemetry=True")
        self.trace_path = os.fspath(path)
        self.pipeline.take_spans()  # start clean
        self.pipeline.take_trace_depth()
        self.loop.spans, self.loop.max_spans, self.loop.spans_dropped = [], int_arg("max_spans", max_spans, 1), 0
        self.pipeline.set_tracing(True, max_spans)
        if self.pool is not None:
            self.pool.start_trace(max_spans)

    def stop_trace(self) -> Optional[str]:
        if self.trace_path is None:
            return None
        dropped = self.pipeline.telemetry_snapshot()["spans_dropped"] + self.loop.spans_dropped
        self.pipeline.set_tracing(False)
        native = self.pipeline.take_spans()
        if self.pool is not None:  # each worker's threads, on this process's clock
            native = native + self.pool.stop_trace()
        depth = self.pipeline.take_trace_depth()  # the queue's changes while tracing
        path = telemetry.chrome_trace(native, self.loop.spans or [], depth, self.pipeline.telemetry_created_ns(),
                                      self.trace_path, dropped, self.tuner.decisions() if self.tuner else None)
        self.loop.spans = None
        self.trace_path = None
        return path
