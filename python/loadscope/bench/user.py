"""The user's own code as parts of an experiment: a pipeline factory, a training step, sample
ids, named by import path ("package.module:function"). Also how the harness reads batches of
any shape: samples per batch, ids, and the tensors a correctness check compares.

Nothing here knows a batch's layout in advance: dicts, tuples and lists are walked, and every
tensor (or NumPy array) whose first dimension is the batch's sample count is a per-sample
"leaf" (images, labels, masks...). Leaves are compared between arms by position in that walk,
so two arms agree only if they yield batches of the same structure — which the step, shared
by all arms, needs anyway."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib
import inspect
import os
import sys
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .._errors import ConfigError


@contextmanager
def on_path(repo: Optional[str]) -> Iterator[None]:
    """The training repository's root first on sys.path while user code is imported."""
    if not repo or repo in sys.path:
        yield
        return
    sys.path.insert(0, repo)
    try:
        yield
    finally:
        try:
            sys.path.remove(repo)
        except ValueError:
            pass


def _import_file(path: str) -> Any:
    """A module named by its file ("results/baseline/.../loadscope_factory.py"): absolute, or
    relative to the working directory or to an entry of sys.path (the training repository)."""
    import importlib.util

    candidates = [path] if os.path.isabs(path) else [os.path.join(p or os.getcwd(), path) for p in ["", *sys.path]]
    found = next((c for c in candidates if os.path.isfile(c)), None)
    if found is None:
        raise FileNotFoundError(f"no file {path}")
    found = os.path.realpath(found)
    # Keyed by the file's version too: a file written again (bench baseline's stub in place of a
    # factory that failed) is imported again, not taken from sys.modules.
    st = os.stat(found)
    name = "_loadscope_file_" + hashlib.blake2b(f"{found}\0{st.st_mtime_ns}\0{st.st_size}".encode(),
                                                digest_size=6).hexdigest()
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, found)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def resolve(spec: str, what: str) -> Callable[..., Any]:
    """"pkg.module:function" (or "pkg.module:Class.method", or "path/to/file.py:function") to
    the callable. Raises ConfigError
    naming `what` (e.g. "[pipeline] factory") with the user's traceback when the import fails."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ConfigError(f"{what} = {spec!r}: an import path 'package.module:function'")
    mod_name, attr = spec.split(":")
    try:
        obj: Any = _import_file(mod_name) if mod_name.endswith(".py") else importlib.import_module(mod_name)
    except Exception as e:
        tb = traceback.format_exc()
        hint = ("; is the training repository's root on the path (training_repo = ...)?"
                if isinstance(e, ModuleNotFoundError) and e.name and mod_name.startswith(e.name) else "")
        raise ConfigError(f"{what} = {spec!r}: importing {mod_name} failed: {type(e).__name__}: {e}{hint}\n{tb}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None)))
            raise ConfigError(f"{what} = {spec!r}: {mod_name} has no {attr!r}; its callables are {', '.join(names) or 'none'}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{what} = {spec!r}: {attr} is a {type(obj).__name__}, not a function")
    return obj


def check_call(fn: Callable[..., Any], spec: str, what: str, args: Tuple[Any, ...] = (),
               kwargs: Optional[Dict[str, Any]] = None) -> None:
    """Refuses, before anything runs, a call the function's signature cannot take, listing
    the keyword arguments it accepts."""
    kwargs = kwargs or {}
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    accepted = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    open_ended = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    unknown = [] if open_ended else sorted(set(kwargs) - set(accepted))
    if unknown:  # the usual mistake, a misspelt argument: name it alone
        raise ConfigError(f"{what} = {spec!r} does not take {', '.join(unknown)}; it accepts "
                          f"{', '.join(accepted) or 'no keyword arguments'}")
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        given = ", ".join(sorted(kwargs)) or "no keyword arguments"
        raise ConfigError(f"{what} = {spec!r} cannot be called with {given}: {e}; it accepts "
                          f"{', '.join(accepted) or 'no keyword arguments'}") from None


def accepts(fn: Callable[..., Any]) -> Dict[str, Any]:
    """The keyword arguments `fn` accepts, with their defaults (inspect.Parameter.empty if none)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


# --- reading batches of any shape -------------------------------------------------------------

def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (str, bytes))


def samples_in(batch: Any) -> int:
    """Samples in a batch: the first dimension of the first tensor or array found walking it
    (dict values in order, tuple and list items), else a list's length, else 1."""
    from ..telemetry.watcher import _batch_len

    return _batch_len(batch)


def leaves(batch: Any, n: int, path: str = "") -> List[Tuple[str, Any]]:
    """(path, tensor) of every tensor or array in `batch` whose first dimension is `n`, in walk
    order (dict keys in insertion order). Other values (strings, scalars, tensors of another
    first dimension) are not per-sample data and are left out."""
    if _is_array(batch):
        shape = tuple(batch.shape)
        return [(path or "batch", batch)] if shape and shape[0] == n else []
    out: List[Tuple[str, Any]] = []
    if isinstance(batch, dict):
        for k, v in batch.items():
            out += leaves(v, n, f"{path}[{k!r}]")
    elif isinstance(batch, (list, tuple)):
        for i, v in enumerate(batch):
            out += leaves(v, n, f"{path}[{i}]")
    return out


def to_tensor(x: Any) -> "Any":
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    return torch.as_tensor(x)


def describe(leaf_list: List[Tuple[str, Any]]) -> List[str]:
    """The structure of a batch's per-sample leaves, e.g. ["[0] uint8 [3, 224, 224]", "[1] int64 []"]."""
    return [f"{p} {str(x.dtype).replace('torch.', '')} {list(x.shape[1:])}" for p, x in leaf_list]


def sample_checksum(leaf_list: List[Tuple[str, Any]], i: int) -> str:
    """BLAKE2b over sample i of every leaf, with each leaf's dtype and shape."""
    h = hashlib.blake2b(digest_size=8)
    for _, x in leaf_list:
        t = to_tensor(x[i]).contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(_raw_bytes(t))
    return h.hexdigest()


def _raw_bytes(t: Any) -> bytes:
    """A tensor's bytes as laid out in memory, as NumPy's tobytes() gives them, without NumPy
    (a torch-only training environment has none)."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())


@functools.lru_cache(maxsize=4096)
def _real_dir(path: str) -> str:
    return os.path.realpath(path)


def _norm_id(key: Any) -> str:
    """A sample id as both arms of a swap name it: a path with its folder made real (a
    DataLoader's dataset and a loadscope Folder may name the same file from different roots,
    relative or through a link), else the key as is. Cheap: ids are read inside the timed loop,
    and a folder is resolved once."""
    key = os.fsdecode(key) if isinstance(key, bytes) else str(key)
    if os.sep not in key:
        return key
    head, tail = os.path.split(key)
    return os.path.join(_real_dir(head), tail)


def default_ids(batch: Any, obj: Any = None) -> Optional[List[str]]:
    """Sample ids without a sample_ids callable: a loadscope batch's `__key__` (a dict's, or
    the tuple entry that `output=(..., "__key__")` put there when `obj` is the Loader); else
    none."""
    if isinstance(batch, dict) and isinstance(batch.get("__key__"), list):
        return [_norm_id(k) for k in batch["__key__"]]
    output = getattr(obj, "output", None)
    if isinstance(batch, (tuple, list)) and isinstance(output, tuple) and "__key__" in output \
            and len(batch) == len(output) and isinstance(batch[output.index("__key__")], list):
        return [_norm_id(k) for k in batch[output.index("__key__")]]
    return None


def positional_ids(obj: Any) -> Optional[Callable[[int], str]]:
    """Where the epoch's order is known without looking at the batches — a DataLoader whose
    sampler is sequential over a dataset listing its files (ImageFolder's `samples`), or an
    unshuffled single-rank loadscope Loader over a folder or file list — the id of the sample
    at each position of the epoch: its file. Else None. (The correctness check still compares
    the tensors of the samples so named: a wrong position shows as different pixels.)"""
    import torch

    if isinstance(obj, torch.utils.data.DataLoader):
        from ..swap import dataset_samples

        found = dataset_samples(obj.dataset)  # an ImageFolder's samples, or a Subset's of them
        samples = found[1] if found else getattr(obj.dataset, "samples", None)
        if (isinstance(obj.sampler, torch.utils.data.SequentialSampler) and isinstance(samples, list)
                and samples and isinstance(samples[0], tuple) and isinstance(samples[0][0], str)):
            return lambda i: _norm_id(samples[i][0])
        return None
    from .. import Loader

    table = getattr(getattr(obj, "source", None), "_table", None)
    if (table is not None and isinstance(obj, Loader) and not obj.shuffle and obj.world_size == 1
            and obj.state_dict()["batches"] == 0):  # from the start of an epoch, in the source's order
        return lambda i: _norm_id(table.sample(i)[0])
    return None


def environ_for(repo: Optional[str]) -> Dict[str, str]:
    """A child process's environment with the training repository importable (DataLoader
    workers started with 'spawn' import the user's modules again)."""
    env = dict(os.environ)
    if repo:
        env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


class StepContext:
    """What the harness tells your step. `setup(ctx)` is called once per repetition process
    (after torch.distributed is initialised when world_size > 1) and returns your state (model,
    optimizer, ...); `step(state, batch)` is then called once per batch. Keep `ctx` if your
    step accumulates gradients: `ctx.boundary` is True on the micro-batch that ends an
    optimizer step (every `grad_accum` batches), when a DDP step must synchronise.

    Attributes: rank, world_size, local_rank, grad_accum, device (``cuda:<local_rank>`` when
    CUDA is available, else ``cpu``), micro_step (batches stepped so far in this phase, counting
    this one), boundary."""

    def __init__(self, rank: int, world_size: int, local_rank: int, grad_accum: int, device: Any) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.grad_accum, self.device = grad_accum, device
        self.micro_step, self.boundary = 0, True

    def __repr__(self) -> str:
        return (f"StepContext(rank={self.rank}, world_size={self.world_size}, device={self.device}, "
                f"grad_accum={self.grad_accum}, micro_step={self.micro_step}, boundary={self.boundary})")


def validate(exp: Any) -> None:
    """Imports every callable a user experiment names (the training repository first on the
    path) and checks that each can be called as the harness will call it: the factory with
    every arm's arguments (and the check pass's overrides), sample_ids and batch_size_of with a
    batch, setup with the context, the step with (state, batch). Raises ConfigError naming the
    arm and the key, with the user's traceback for an import that fails."""
    with on_path(exp.training_repo):
        for arm in exp.arms:
            spec = arm.config["factory"]
            what = f"arm {arm.name}: [pipeline] factory"
            fn = resolve(spec, what)
            kwargs = exp.factory_kwargs(arm.config)
            check_call(fn, spec, what, kwargs=kwargs)
            if exp.correctness["overrides"]:
                check_call(fn, spec, f"{what} (with [correctness] overrides)", kwargs=dict(kwargs, **exp.correctness["overrides"]))
            for key in ("sample_ids", "batch_size_of"):
                if arm.config.get(key):
                    check_call(resolve(arm.config[key], f"arm {arm.name}: {key}"), arm.config[key], f"arm {arm.name}: {key}",
                               args=(None,))
        if exp.step["compute"] == "user":
            if exp.step["setup"]:
                check_call(resolve(exp.step["setup"], "[step] setup"), exp.step["setup"], "[step] setup", args=(None,))
            check_call(resolve(exp.step["function"], "[step] function"), exp.step["function"], "[step] function",
                       args=(None, None))


def data_files(root: str, limit: int = 1_000_000) -> List[str]:
    """The files under a user experiment's [dataset] path (for the environment record's scale
    and mix), up to `limit`."""
    if os.path.isfile(root):
        return [root]
    out: List[str] = []
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            out.append(os.path.join(top, f))
            if len(out) >= limit:
                return out
    return out
