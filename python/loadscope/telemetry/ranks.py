"""Across ranks: each rank's summary, gathered with torch.distributed, and the straggler.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from .snapshot import _t


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
