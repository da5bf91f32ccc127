"""What a Loader resolves where it runs, from its spec: threads and the auto controller (this
process's cores and memory), rank and world size (torch.distributed, torchrun), the node-local
cache's directory. The options themselves are declared and checked in _options."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

from ._errors import ConfigError
from ._options import check, default_threads


def resolve_rank(rank: Optional[int], world_size: Optional[int]) -> Dict[str, Any]:
    """This process's rank and the world size: the spec's, else torch.distributed when
    initialised, else torchrun's RANK and WORLD_SIZE, else 0 of 1; with where they came from.
    (The spec has checked that both or neither are given.)"""
    if rank is not None and world_size is not None:
        return {"rank": rank, "world_size": world_size, "from": "arguments"}
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "from": "torch.distributed"}
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        try:
            world = int(os.environ["WORLD_SIZE"])
            r = int(os.environ["RANK"])
        except ValueError:
            raise ConfigError(f"RANK={os.environ['RANK']!r}, WORLD_SIZE={os.environ['WORLD_SIZE']!r}: "
                              "integers expected (torchrun sets them)") from None
        if not 0 <= r < world:
            raise ConfigError(f"RANK={r} is outside WORLD_SIZE={world}")
        return {"rank": r, "world_size": world, "from": "environment"}
    return {"rank": 0, "world_size": 1, "from": "default"}


def node_cache(cache_dir: Any, cache_limit: Any) -> Optional[Tuple[str, int]]:
    """(dir, limit in bytes, 0 for none) of a node-local cache, its directory made; None without
    one. The values are checked as the Loader options of those names (Remote takes them too)."""
    cache_dir, cache_limit = check("cache_dir", cache_dir), check("cache_limit", cache_limit)
    if cache_dir is None:
        if cache_limit is not None:
            raise ConfigError("cache_limit needs a cache_dir")
        return None
    try:
        os.makedirs(cache_dir, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cache_dir={cache_dir!r}: cannot create it: {e.strerror}") from None
    return cache_dir, cache_limit or 0


def _memory_allowed() -> int:
    """What this process's cgroup allows (memory.max), else the machine's memory, in bytes."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            text = f.read().strip()
        if text != "max":
            return int(text)
    except (OSError, ValueError):
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# Without memory_limit=, auto grows into at most this share of what the cgroup allows: the
# training step, the model's host copies and the other ranks of the node need the rest.
DEFAULT_MEMORY_SHARE = 0.5


def resolve_tuning(threads: Any, prefetch: Any, memory_limit: Any, batch_size: int,
                   decoder_auto: bool) -> Dict[str, Any]:
    """threads, prefetch ("auto" or ints) and memory_limit checked, with the auto controller's
    settings (core/tuner.h) when any of them, or a field's decoder_threads, is "auto"."""
    cores = default_threads()
    auto_threads, auto_prefetch = threads == "auto", prefetch == "auto"
    fixed_threads = None if auto_threads else (cores if threads is None else threads)
    fixed_prefetch = None if auto_prefetch else prefetch
    limit = -1
    if memory_limit is not None:
        limit = memory_limit
    elif auto_threads or auto_prefetch:
        limit = int(_memory_allowed() * DEFAULT_MEMORY_SHARE)
    out: Dict[str, Any] = {"threads": "auto" if auto_threads else fixed_threads,
                           "prefetch": "auto" if auto_prefetch else fixed_prefetch, "tuner": None}
    if not (auto_threads or auto_prefetch or decoder_auto):
        return out
    most = cores if auto_threads else fixed_threads
    assert most is not None
    # Auto starts halfway and grows in proportion to the data wait (a few windows to the top).
    start = max(1, cores // 2) if auto_threads else most
    # Enough batches in flight to give every thread a sample, and one ready.
    depth = max(2, -(-most // batch_size) + 1) if auto_prefetch else fixed_prefetch
    assert depth is not None
    out["tuner"] = {"max_threads": most, "threads": start, "auto_threads": auto_threads, "prefetch": depth,
                    "max_prefetch": max(depth, 8) if auto_prefetch else depth, "auto_prefetch": auto_prefetch,
                    "auto_decoder_threads": decoder_auto, "cores": float(cores), "memory_limit": limit}
    return out
