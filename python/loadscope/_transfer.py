"""The CUDA transfer stage: batches built in page-locked memory are copied to the GPU on a
side stream, timed with CUDA events.

Note [pinned batches without linking CUDA]
loadscope's extension does not link the CUDA runtime. When device="cuda", Python finds
cudaHostRegister / cudaHostUnregister in the libcudart that torch has loaded (through
/proc/self/maps and ctypes) and hands their addresses to the engine, whose buffer pool then
page-locks each batch block once, when it is allocated (and unlocks it before freeing). Copies
from those blocks are truly asynchronous, so the copy of batch k+1 overlaps step k's compute.

It ran on an H200 on 2026-12-04 (docs/gpu.md): the blocks were page-locked and the copies hid
under compute.
"""

from __future__ import annotations

import collections
import ctypes
import os
from typing import Any, Dict, Optional, Tuple

import torch

from . import _native
from ._errors import ConfigError


def parse_device(device: Any) -> Optional[torch.device]:
    """None for CPU batches; a CUDA device otherwise. Fails early with what is allowed."""
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={device!r}: allowed are 'cpu', 'cuda', 'cuda:N' or a torch.device") from None
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ConfigError(f"device={device!r}: allowed are 'cpu', 'cuda', 'cuda:N'")
    if not torch.cuda.is_available():
        raise ConfigError(f"device={device!r}, but torch.cuda.is_available() is False here "
                          "(a CPU-only torch, or no GPU); use device='cpu'")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def cudart_pin_functions() -> Tuple[int, int, str]:
    """Addresses of cudaHostRegister and cudaHostUnregister in the loaded CUDA runtime, and the
    library's path; (0, 0, reason) when none is loaded."""
    torch.cuda.init()
    path = None
    with open("/proc/self/maps") as f:
        for line in f:
            name = line.rsplit(None, 1)[-1] if "/" in line else ""
            if "libcudart" in os.path.basename(name):
                path = name
                break
    if path is None:
        return 0, 0, "no libcudart in this process"
    lib = ctypes.CDLL(path)
    reg = ctypes.cast(lib.cudaHostRegister, ctypes.c_void_p).value or 0
    unreg = ctypes.cast(lib.cudaHostUnregister, ctypes.c_void_p).value or 0
    return reg, unreg, path


class CudaTransfer:
    """Copies each batch's tensors to `device` on a side stream. The consumer's stream waits on
    the copy's end event (no host synchronisation); the CPU batch is kept alive until the copy
    has finished, so its pool block cannot be refilled under the DMA."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.pin, self.unpin, self.cudart = cudart_pin_functions()
        self.copy = _native.Histogram()     # ns, from CUDA events
        self.exposed = _native.Histogram()  # ns the compute stream waited for a copy
        self.bytes = 0
        self.batches = 0
        self.copy_ns = 0
        self.overlapped = 0
        self._pending: collections.deque = collections.deque()

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        consumer = torch.cuda.current_stream(self.device)
        nbytes = 0
        out: Dict[str, Any] = {}
        with torch.cuda.stream(self.stream):
            start.record(self.stream)
            for k, v in batch.items():
                if isinstance(v, torch.Tensor):
                    out[k] = v.to(self.device, non_blocking=True)
                    nbytes += v.numel() * v.element_size()
                else:
                    out[k] = v
            end.record(self.stream)
        handoff = torch.cuda.Event(enable_timing=True)
        handoff.record(consumer)
        consumer.wait_event(end)  # the GPU, not the host, waits for the copy
        for v in out.values():
            if isinstance(v, torch.Tensor) and v.is_cuda:
                v.record_stream(consumer)  # made on the side stream, used on the consumer's
        self._pending.append((start, end, handoff, nbytes, batch))
        self._collect()
        return out

    def _collect(self, wait: bool = False) -> None:
        while self._pending and (wait or self._pending[0][1].query()):
            start, end, handoff, nbytes, _batch = self._pending.popleft()
            end.synchronize()
            copy_ms = start.elapsed_time(end)
            exposed_ms = max(0.0, handoff.elapsed_time(end))  # compute stream idle, waiting
            self.copy.record(int(copy_ms * 1e6))
            self.exposed.record(int(exposed_ms * 1e6))
            self.copy_ns += int(copy_ms * 1e6)
            self.bytes += nbytes
            self.batches += 1
            self.overlapped += exposed_ms == 0.0

    def stats(self, pinned_bytes: int) -> Dict[str, Any]:
        self._collect()
        return {
            "enabled": True,
            "device": str(self.device),
            "batches": self.batches,
            "bytes": self.bytes,
            "copy": self.copy.summary(),
            "bandwidth_gbps": self.bytes / self.copy_ns if self.copy_ns else 0.0,  # bytes/ns = GB/s
            "exposed": self.exposed.summary(),
            "overlapped_share": self.overlapped / self.batches if self.batches else 0.0,
            "pinned": bool(self.pin),
            "pinned_bytes": pinned_bytes,
            "cudart": self.cudart,
        }

    def drain(self) -> None:
        self._collect(wait=True)
