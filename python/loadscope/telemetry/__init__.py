"""Telemetry: where the time and the memory of an input pipeline go.

    snap = loader.telemetry()          # a Snapshot: .summary(), .to_dict(), .to_json(), .to_prometheus()
    loader.report_every(10, to=print)  # interval reports (deltas) to a callable, a logger or a .jsonl path
    loader.start_trace("run.trace.json"); ...; loader.stop_trace()   # Chrome/Perfetto trace
    for batch in loadscope.telemetry.watch(dataloader): ...          # the same ruler on a torch DataLoader

Every metric, its unit and how it is measured: docs/telemetry.md. The package's parts:
snapshot (the loop's clock, Snapshot, build_snapshot), reports (interval reports, deltas),
traces (Chrome traces, PNG timelines), watcher (any iterable: a DataLoader and its worker
processes), ranks (across ranks: gather, stragglers), comm (a DDP model's gradient all-reduce, timed per
bucket: docs/scaling.md).
"""

from .comm import CommTimer, StepComm
from .ranks import format_ranks, gather, rank_summary
from .reports import Reporter, delta
from .snapshot import LoopStats, Sink, Snapshot, build_snapshot, network_section
from .traces import chrome_trace, render_trace
from .watcher import (
    ProcessTreeSampler,
    Watched,
    machine_cpu,
    machine_load,
    process_cpu_seconds,
    tree_cpu_seconds,
    watch,
)

__all__ = [
    "CommTimer", "LoopStats", "ProcessTreeSampler", "StepComm", "Reporter", "Sink", "Snapshot", "Watched", "build_snapshot", "chrome_trace",
    "delta", "format_ranks", "gather", "machine_cpu", "machine_load", "network_section", "process_cpu_seconds",
    "rank_summary", "render_trace", "tree_cpu_seconds", "watch",
]
