"""Every option of a Loader, declared once: its name, default, what is allowed, what it means,
and how it behaves when a loader is resumed or viewed one sample at a time. From this table
come the checks and their messages (`Spec`), `Loader`'s signature, docstring and repr, the
options `state_dict` must match on resume, the harness's allowed values, and the table of
docs/options.md (scripts/gen-options-doc.py, checked in `make lint`).

A check takes the value as given and returns it normalised (a size "16GiB" as bytes, a path as
an absolute path, output's list as a tuple), or raises ConfigError naming the option and what
is allowed. A check sees one option: what needs several (threads with prefetch and
memory_limit, rank with world_size) is resolved where the loader runs (`Loader._build`), since
it depends on that process (its cores, torchrun's RANK); a spec carries what was declared."""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from . import _native
from ._errors import ConfigError
from ._fields import int_arg
from ._sizes import parse_size
from .ray import Workers


class _Required:
    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()
KEEP: Any = type("Keep", (), {"__repr__": lambda self: "the loader's"})()

# How resume treats an option (Loader.load_state_dict): the value that saved a state must be the
# loader's own always, only when resuming inside an epoch (the epoch must be dealt the same
# way), or never (how the batches are made, not which).
ALWAYS, MID_EPOCH, NEVER = "always", "mid-epoch", "never"


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    allowed: str      # for messages and docs
    meaning: str      # for the docstring and docs/options.md (Markdown)
    check: Callable[["Option", Any], Any]
    resume: str = NEVER
    # In `loader.dataset[i]` (one sample, unbatched, in the source's order): this value, or the
    # loader's own (KEEP).
    one_sample: Any = REQUIRED
    default_text: Optional[str] = None  # how docs give the default, where repr() is not it
    type: str = "Any"  # the annotation of Loader's signature

    def fail(self, value: Any) -> ConfigError:
        allowed = self.allowed.replace("{cores}", str(default_threads()))
        # values listed ("allowed are 'cpu', 'cuda'"), or a phrase ("an int >= 1, 'auto', ...")
        lead = "allowed are " if hasattr(self.check, "values") or allowed.startswith("'") else ""
        return ConfigError(f"{self.name}={value!r}: {lead}{allowed}")


def default_threads() -> int:
    """The cores this process may run on: threads=None."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _choice(*values: Any) -> Callable[[Option, Any], Any]:
    def check(o: Option, v: Any) -> Any:
        for c in values:
            # `is` for bools: 1 == True, and drop_last=1 is a mistake to name, not to accept; a
            # str subclass (an enum.StrEnum, numpy.str_) is its plain value
            if v is c if isinstance(c, bool) else (isinstance(v, str) and v == c):
                return c
        raise o.fail(v)
    check.values = values  # type: ignore[attr-defined]
    return check


def _bool(o: Option, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{o.name} must be True or False, got {v!r}")
    return v


def _int_min(minimum: int, maximum: Optional[int] = None) -> Callable[[Option, Any], int]:
    return lambda o, v: int_arg(o.name, v, minimum, maximum)


def _int_or_auto(o: Option, v: Any) -> Any:
    if v == "auto" and isinstance(v, str):
        return v
    if isinstance(v, str):
        raise o.fail(v)
    if v is None and o.default is None:
        return v
    return int_arg(o.name, v, 1)


def _bytes(o: Option, v: Any) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, str)):
        raise ConfigError(f"{o.name} must be {o.allowed}, got {v!r}")
    n = parse_size(v, f"{o.name}=") if isinstance(v, str) else int(v)
    if n < 1:
        raise ConfigError(f"{o.name}={v!r}: must be >= 1 byte")
    return n


def _error_budget(o: Option, v: Any) -> Any:
    if v is None:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"error_budget must be an int count, a float fraction or None, got {v!r}")
    if isinstance(v, float) and not 0.0 <= v < 1.0:
        raise ConfigError(f"error_budget={v}: a fraction must be in [0, 1)")
    if isinstance(v, int) and v < 0:
        raise ConfigError(f"error_budget={v}: a count must be >= 0")
    return v


def _device(o: Option, v: Any) -> str:
    """The device's name: whether CUDA is there is asked where the loader runs (a spec made on a
    CPU node may be for a GPU trainer)."""
    import torch

    if v is None:
        return "cpu"
    try:
        dev = torch.device(v)
    except (RuntimeError, TypeError):
        raise o.fail(v) from None
    if dev.type not in ("cpu", "cuda"):
        raise o.fail(v)
    return str(dev)


def _seconds(o: Option, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= float(v) < float("inf"):
        raise o.fail(v)
    return float(v)


def _optional_int(minimum: int) -> Callable[[Option, Any], Optional[int]]:
    return lambda o, v: None if v is None else int_arg(o.name, v, minimum)


def _path(o: Option, v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, (str, bytes, os.PathLike)) or not os.fspath(v):
        raise o.fail(v)  # "" is not "no cache": that is None
    return os.path.abspath(os.fsdecode(v))


def _workers(o: Option, v: Any) -> Any:
    if v == "local" or isinstance(v, Workers):
        return v
    raise o.fail(v)


def _output(o: Option, v: Any) -> Any:
    # None for dict batches in the loader; the spec keeps "dict" (what was written)
    if isinstance(v, str) and v == "dict":
        return v
    if isinstance(v, str) or not isinstance(v, (tuple, list)) or not v or not all(isinstance(k, str) for k in v):
        raise o.fail(v)
    return tuple(v)


def _callable(o: Option, v: Any) -> Any:
    if v is not None and not callable(v):
        raise ConfigError(f"map must be a callable applied to each batch (or None), got {type(v).__name__}")
    return v


ON_ERROR = tuple(_native.ON_ERROR)       # the engine's lists (register_engine.cc)
PARTITIONS = tuple(_native.PARTITIONS)
DROP_LAST = (False, True, "uneven")

OPTIONS: Tuple[Option, ...] = (
    Option("batch_size", REQUIRED, "an int >= 1", "samples per batch", _int_min(1), ALWAYS, type="int", one_sample=1),
    Option("threads", None, "an int >= 1, 'auto', or None (the cores this process may use: {cores})",
           "decoding threads (oneTBB); `\"auto\"`: the least that keep the loop's data wait near zero, changed "
           "while it runs, batches unchanged ([tuning.md](tuning.md))", _int_or_auto,
           type="Union[int, str, None]", one_sample=1,
           default_text="the cores this process may use"),
    Option("shuffle", False, "True or False",
           "a new order each epoch from `(seed, epoch)`; for tar shards: shard order plus a shuffle buffer",
           _bool, ALWAYS, type="bool", one_sample=False),
    Option("seed", 0, "an int in [0, 2**64 - 1]", "seeds the order and every random augmentation",
           _int_min(0, 2**64 - 1), ALWAYS, type="int", one_sample=KEEP),
    Option("drop_last", False, "False (keep every sample), True (whole batches; several ranks: whole steps) and "
           "'uneven' (only the samples that do not split evenly between the ranks)",
           "`False`: keep every sample (a short last batch; several ranks pad the last step); `True`: drop the "
           "last, partial batch (several ranks: whole steps only); `\"uneven\"`: with several ranks, drop only "
           "the at most `W-1` samples that do not split evenly, as `DistributedSampler(drop_last=True)` "
           "([distributed.md](distributed.md#sharding-and-padding))", _choice(*DROP_LAST), ALWAYS,
           type="Union[bool, str]", one_sample=False),
    Option("prefetch", 2, "an int >= 1 (batches decoded ahead) or 'auto'",
           "batches decoded ahead; memory is about `prefetch × batch bytes` plus per-thread scratch; "
           "`\"auto\"`: deeper for bursts, shallower over `memory_limit` ([tuning.md](tuning.md))",
           _int_or_auto, type="Union[int, str]", one_sample=1),
    Option("memory_limit", None, "bytes, or a size like '24GiB'; only with an 'auto' setting",
           "the resident memory `\"auto\"` settings may grow into", _bytes,
           type="Union[int, str, None]", one_sample=None,
           default_text="half of what the cgroup (else the machine) allows"),
    Option("on_error", "raise", ", ".join(map(repr, ON_ERROR)),
           "`\"raise\"`: a bad sample raises a `SampleError` naming it when its batch is reached; `\"skip\"`: it "
           "is left out of its batch, counted and listed in `stats()` ([errors.md](errors.md))",
           _choice(*ON_ERROR), type="str", one_sample="raise"),
    Option("error_budget", 0.05, "an int >= 0 (a count), a float in [0, 1) (a fraction), or None",
           "under `\"skip\"`: more failures than this raise `ErrorBudgetExceeded`; a count per epoch, or a "
           "fraction of the samples seen so far, counting at least 100", _error_budget,
           type="Union[int, float, None]", one_sample=0.05),
    Option("timeout", 0.0, "seconds >= 0 (0: wait as long as it takes)",
           "how long `next()` waits for a batch before it raises `BatchTimeout` (a `TimeoutError`) naming the "
           "batch, as `DataLoader(timeout=)`: a stalled read or a hung decoder becomes an error instead of a "
           "silent stall of every rank. The epoch goes on: calling `next()` again waits again",
           _seconds, type="float", one_sample=0.0),
    Option("workers", "local", "'local', or loadscope.ray.Workers(n, ...)",
           "where the batches are made: by this process's threads, or by a pool of loadscope workers on Ray "
           "(other nodes' cores), the same batches byte for byte; `set_epoch`, `len`, resume, ranks, `output`, "
           "`device` and `map` work as locally ([disaggregation.md](disaggregation.md))",
           _workers, type="Union[str, Workers]", one_sample="local"),
    Option("device", "cpu", "'cpu', 'cuda', 'cuda:N' or a torch.device",
           "`Loader` only (a `Dataset` refuses it: its batches cross worker processes). With CUDA: batches are "
           "built in page-locked memory and copied on a side stream, timed with CUDA events "
           "([telemetry.md](telemetry.md#the-transfer-stage-cuda)); a `ConfigError` where CUDA is not available",
           _device, type="Union[str, torch.device, None]", one_sample="cpu"),
    Option("telemetry", True, "True or False",
           "measure everything ([telemetry.md](telemetry.md)); `False` turns every clock read off", _bool,
           type="bool", one_sample=False),
    Option("rank", None, "an int >= 0 with world_size, or None",
           "this process's share of each epoch; `None` (with `world_size`): from `torch.distributed`, else "
           "torchrun's `RANK`/`WORLD_SIZE`, else 0 of 1. Equal batch counts per rank, padding as "
           "`DistributedSampler` ([distributed.md](distributed.md))", _optional_int(0),
           type="Optional[int]", one_sample=0),
    Option("world_size", None, "an int >= 1 with rank, or None", "the number of ranks (see `rank`)",
           _optional_int(1), MID_EPOCH, type="Optional[int]", one_sample=1),
    Option("partition", "interleave", "'interleave' (rank r takes batches r, r+W, r+2W, ...) and 'contiguous' "
           "(rank r takes the r-th contiguous block of the epoch's batches)",
           "how the epoch's batches are dealt to the ranks: in turn (rank r takes r, r+W, ...), or a contiguous "
           "stretch per rank, so that with tar shards each rank reads its own shards; the same batches and "
           "draws either way ([distributed.md](distributed.md#which-batches-a-rank-takes))",
           _choice(*PARTITIONS), MID_EPOCH, type="str", one_sample="interleave"),
    Option("cache_dir", None, "a directory (created if missing; not ''), or None",
           "keep remote objects (`s3://`, `http(s)://`) whole on local disk, shared by every process of the "
           "node; this loader's own (other loaders of the process keep theirs); `None`: the environment's "
           "`LOADSCOPE_CACHE_DIR`, else no cache. A source's own cache, endpoint, credentials and retries: `Remote` "
           "([remote.md](remote.md#a-node-local-cache))",
           _path, type="Union[str, os.PathLike, None]", one_sample=KEEP),
    Option("cache_limit", None, "bytes, or a size like '500GB'; needs cache_dir",
           "least recently used objects are evicted to stay under it; below one pass over the data it is a "
           "`ReadError`, not a thrash", _bytes,
           type="Union[int, str, None]", one_sample=KEEP, default_text="no limit"),
    Option("output", "dict", "'dict', or a tuple of entry names of the batch, such as ('image', 'label')",
           "the form of each batch: a dict, or a tuple of those entries in that order, so that "
           "`for images, labels in loader:` works as with an ImageFolder `DataLoader`",
           _output, type="Union[str, Sequence[str]]", one_sample=KEEP),
    Option("map", None, "a callable, or None",
           "applied to every batch (in `output`'s form) before the loop sees it: in a background thread for "
           "CPU batches (up to `prefetch` ahead; timed as `loop.map`), right after the copy under a CUDA "
           "`device`; an exception in it is raised from `next()` naming the batch "
           "([augmentations.md](augmentations.md#map))", _callable,
           type="Optional[Callable[[Any], Any]]", one_sample=None),
)

BY_NAME: Dict[str, Option] = {o.name: o for o in OPTIONS}


def allowed_values(name: str) -> Tuple[Any, ...]:
    """The values of an option that takes one of a list (partition, on_error, drop_last)."""
    return BY_NAME[name].check.values  # type: ignore[attr-defined]


def check(name: str, value: Any) -> Any:
    o = BY_NAME[name]
    return o.check(o, value)
