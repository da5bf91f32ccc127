"""The Loader's last stages: a native batch made into what the user asked for (tensors over the
batch's memory, records as dicts, JSON parsed), copied to the device and normalised there
(``_transfer``), laid out as ``output=`` says, then ``map=``."""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, cast

import torch

from ._fields import Field, Image, normalize

Batch = Any  # a dict of entries, or a tuple of them with output=(...)


class BatchMaker:
    """``outputs``: every output as its field declares it in C++ (pipeline/outputs.h): (field,
    output name, type, per-sample shape, index into the batch's fixed or string area, record
    key). No kind is known here. ``loop``: the loop's statistics (the map stage's time), or
    None without telemetry."""

    def __init__(self, outputs: list, fields: Mapping[str, Field], transfer, output: Optional[Tuple[str, ...]],
                 map: Optional[Callable[..., Any]], loop) -> None:
        self.outputs = outputs
        self.fields = fields
        self.transfer = transfer
        self.output = output
        self.map = map
        self.loop = loop
        # Float images under a CUDA device: uint8 is copied, and normalised on the GPU after.
        self.normalize_on_device = [(name, f) for name, f in fields.items()
                                    if transfer is not None and isinstance(f, Image) and f.dtype != "uint8"]

    def deliver(self, b, enter_ns: int, epoch: int = 0) -> Batch:
        """The batch the loop gets from next(): made, and mapped here when it is on a device (a
        CPU batch is mapped ahead by the epoch's map thread instead)."""
        native_ns = time.monotonic_ns() if self.loop is not None else 0
        out = self.make(b)
        if self.map is not None and self.transfer is not None:
            out = self.apply_map(out, epoch, b.index)  # after the copy: GPU work is queued, not waited for
        if self.loop is not None:
            self.loop.delivered(enter_ns, native_ns, time.monotonic_ns(), b.index)
        return out

    def make(self, b) -> Batch:
        """A native batch as the user asked for it: tensors, on the device, in `output`'s form."""
        return self.finish(self.convert(b))

    def finish(self, out: Batch) -> Batch:
        """A batch's entries (``convert``'s, here or on a remote worker) on the device, in
        `output`'s form."""
        if self.transfer is not None:
            out = self.transfer(out)
            for name, f in self.normalize_on_device:
                # Image's validation made mean and std 3-tuples of floats
                out[name] = normalize(out[name], f.dtype, cast(Sequence[float], f.mean), cast(Sequence[float], f.std),
                                      f.channels_last)
        if self.output is not None:
            out = tuple(out[k] for k in self.output)
        return out

    def apply_map(self, batch: Batch, epoch: int, index: int) -> Batch:
        """map(batch); a callable that declares ``wants_position = True`` (ls.mixup_cutmix)
        also gets the batch's place, ``epoch=`` and ``batch_index=`` (in the epoch), so that
        its own randomness can be a function of them like every other draw."""
        assert self.map is not None
        t0 = time.monotonic_ns()
        if getattr(self.map, "wants_position", False):
            out = self.map(batch, epoch=epoch, batch_index=index)
        else:
            out = self.map(batch)
        if self.loop is not None:
            self.loop.map.record(time.monotonic_ns() - t0)
        return out

    def convert(self, b) -> Dict[str, Any]:
        """The batch's entries: tensors over its memory (no copy), strings, parsed JSON, records."""
        n = b.size
        out: Dict[str, Any] = {}
        records: Dict[str, Tuple[str, List[Tuple[str, List[Any]]]]] = {}
        for field, name, kind, shape, at, key in self.outputs:
            if kind == "text":
                value = b.strings(at, False)
            elif kind == "bytes":
                value = b.strings(at, True)
            elif kind == "json":
                value = [json.loads(s) if s else None for s in b.strings(at, False)]
            else:
                value = torch.frombuffer(b.fixed(at), dtype=getattr(torch, kind)).view((n,) + shape)
            if not key:
                out[name] = value
                continue
            # One entry of a record: a dict per sample, made once all its entries are read.
            out.setdefault(name, None)  # its place among the entries
            records.setdefault(name, (field, []))[1].append(
                (key, value if isinstance(value, list) else value.tolist()))
        for name, (field, entries) in records.items():
            keys = [k for k, _ in entries]
            rows: List[Optional[Dict[str, Any]]] = [dict(zip(keys, row)) for row in zip(*(v for _, v in entries))]
            if self.fields[field].optional:
                rows = [r if p else None for r, p in zip(rows, out[field + ".present"].tolist())]
            out[name] = rows
        out["__key__"] = list(b.keys)
        out["__index__"] = torch.tensor(b.positions, dtype=torch.int64)
        return out
