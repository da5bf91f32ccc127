"""The Loader's arguments: checked and resolved (threads, rank and world size, cache, output,
drop_last, partition, map), each with a message that lists what is allowed."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Tuple, Union

from ._errors import ConfigError
from ._fields import int_arg

ON_ERROR = ("raise", "skip")


def default_threads() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def resolve_rank(rank: Optional[int], world_size: Optional[int]) -> Dict[str, Any]:
    """This process's rank and the world size: explicit arguments, else torch.distributed when
    initialised, else torchrun's RANK and WORLD_SIZE, else 0 of 1; with where they came from."""
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise ConfigError("give both rank and world_size, or neither (then they come from torch.distributed "
                              "or torchrun's RANK/WORLD_SIZE)")
        world = int_arg("world_size", world_size, 1)
        return {"rank": int_arg("rank", rank, 0, world - 1), "world_size": world, "from": "arguments"}
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


def _cache_args(cache_dir: Any, cache_limit: Any) -> Optional[Tuple[str, int]]:
    """(dir, limit bytes) for the native cache, or None to leave it as the environment says."""
    if cache_dir is None:
        if cache_limit is not None:
            raise ConfigError("cache_limit needs a cache_dir")
        return None
    from .shards import _parse_size
    limit = 0
    if cache_limit is not None:
        if isinstance(cache_limit, bool) or not isinstance(cache_limit, (int, str)):
            raise ConfigError(f"cache_limit must be bytes (an int) or a size like '500GB', got {cache_limit!r}")
        limit = _parse_size(cache_limit, "cache_limit=") if isinstance(cache_limit, str) else cache_limit
        if limit < 1:
            raise ConfigError(f"cache_limit={cache_limit!r}: must be >= 1 byte (None: no limit)")
    path = os.fspath(cache_dir)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cache_dir={path!r}: cannot create it: {e.strerror}") from None
    return os.path.abspath(path), limit


def _output_arg(output: Any) -> Optional[Tuple[str, ...]]:
    """None for dict batches, else the entries of a tuple batch in their order (checked against
    the batch's entries once the fields have declared them: Loader._build)."""
    if output == "dict":
        return None
    if isinstance(output, str) or not isinstance(output, (tuple, list)) or not output \
            or not all(isinstance(k, str) for k in output):
        raise ConfigError(f"output={output!r}: 'dict', or a tuple of entry names of the batch, "
                          f"such as ('image', 'label')")
    return tuple(output)


def _drop_last_arg(value: Any) -> Union[bool, str]:
    if value is False or value is True or value == "uneven":
        return value
    raise ConfigError(f"drop_last={value!r}: allowed are False (keep every sample; several ranks pad the last step), "
                      "True (whole steps only, as DataLoader's drop_last) and 'uneven' (only the samples that do not "
                      "split evenly between the ranks, as DistributedSampler(drop_last=True))")


PARTITIONS = ("interleave", "contiguous")


def _partition_arg(value: Any) -> str:
    if value in PARTITIONS:
        return value
    raise ConfigError(f"partition={value!r}: allowed are 'interleave' (rank r takes batches r, r+W, r+2W, ...) and "
                      "'contiguous' (rank r takes the r-th contiguous block of the epoch's batches: ranks read "
                      "their own shards)")


def _native_drop_last(value: Union[bool, str]) -> str:
    return "uneven" if value == "uneven" else "steps" if value else "none"


def _map_arg(fn: Any) -> Optional[Callable[[Any], Any]]:
    if fn is not None and not callable(fn):
        raise ConfigError(f"map must be a callable applied to each batch (or None), got {type(fn).__name__}")
    return fn


def _bool_arg(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return value


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
    if isinstance(threads, str) and not auto_threads:
        raise ConfigError(f"threads={threads!r}: an int >= 1, 'auto', or None (the cores this process may use: {cores})")
    if isinstance(prefetch, str) and not auto_prefetch:
        raise ConfigError(f"prefetch={prefetch!r}: an int >= 1 (batches decoded ahead) or 'auto'")
    fixed_threads = None if auto_threads else int_arg("threads", cores if threads is None else threads, 1)
    fixed_prefetch = None if auto_prefetch else int_arg("prefetch", prefetch, 1)
    limit = -1
    if memory_limit is not None:
        if not (auto_threads or auto_prefetch):
            raise ConfigError("memory_limit bounds what threads='auto' and prefetch='auto' may grow into; "
                              "with fixed settings it has nothing to bound")
        from .shards import _parse_size
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, str)):
            raise ConfigError(f"memory_limit must be bytes (an int) or a size like '16GiB', got {memory_limit!r}")
        limit = _parse_size(memory_limit, "memory_limit=") if isinstance(memory_limit, str) else memory_limit
        if limit < 1:
            raise ConfigError(f"memory_limit={memory_limit!r}: must be >= 1 byte")
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
