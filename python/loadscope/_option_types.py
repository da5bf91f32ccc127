"""The Loader's keyword options as a type (PEP 692), for type checkers: generated from the
declaration (_options.OPTIONS) by scripts/gen-options-doc.py (`make options-doc`); `make lint`
fails when it differs. Do not edit."""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional, Sequence, TypedDict, Union

import torch

from ._fields import Field
from .ray import Workers

__all__ = ["LoaderOptions"]


class LoaderOptions(TypedDict, total=False):
    fields: Mapping[str, Field]
    batch_size: int
    threads: Union[int, str, None]
    shuffle: bool
    seed: int
    drop_last: Union[bool, str]
    prefetch: Union[int, str]
    memory_limit: Union[int, str, None]
    on_error: str
    error_budget: Union[int, float, None]
    timeout: float
    workers: Union[str, Workers]
    device: Union[str, torch.device, None]
    telemetry: bool
    rank: Optional[int]
    world_size: Optional[int]
    partition: str
    cache_dir: Union[str, os.PathLike, None]
    cache_limit: Union[int, str, None]
    output: Union[str, Sequence[str]]
    map: Optional[Callable[[Any], Any]]
