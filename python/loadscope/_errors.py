"""loadscope's exceptions. The native engine raises these classes (see csrc/loadscope/core/error.h).

    LoadscopeError
    ├── ConfigError (also a ValueError)   bad arguments or data layout, raised at construction
    ├── SampleError                       one sample could not be used; has .key and .reason
    │   ├── ReadError                     missing/unreadable file, truncated or corrupt shard
    │   ├── DecodeError                   corrupt, truncated or unsupported image
    │   └── FieldError                    a member is missing or not of the declared type
    ├── ErrorBudgetExceeded               on_error="skip" met more failures than the budget
    └── BatchTimeout (also a TimeoutError) no batch within the loader's timeout=
"""

from __future__ import annotations

import re
from typing import Optional


class LoadscopeError(Exception):
    """Base class of every error loadscope raises."""


class ConfigError(LoadscopeError, ValueError):
    """A bad argument or data layout, reported before any thread starts."""


class SampleError(LoadscopeError):
    """A sample (or a shard) that could not be read, decoded or converted.

    Attributes:
        key: what names the sample: a file path, or ``shard.tar:key``.
        reason: what went wrong, including the codec's own message.
    """

    key: Optional[str]
    reason: str

    def __init__(self, key: Optional[str], reason: Optional[str] = None) -> None:
        if reason is None:
            # torch's DataLoader re-raises a worker's exception as type(e)(message), with the
            # worker's traceback in the message: recover key and reason from its last line.
            message = str(key)
            found = re.findall(r"sample '(.*?)': (.*)", message)
            key, reason = found[-1] if found else (None, message)
            super().__init__(message)
        else:
            super().__init__(f"sample '{key}': {reason}")
        self.key = key
        self.reason = reason

    def __reduce__(self):  # picklable: keeps key and reason across processes
        if self.key is None:  # made from a message alone (no sample named): the message again
            return (type(self), (str(self),))
        return (type(self), (self.key, self.reason))


class ReadError(SampleError):
    """The sample's bytes could not be read (missing file, I/O error, corrupt or truncated shard)."""


class DecodeError(SampleError):
    """The image is corrupt, truncated or in an unsupported format."""


class FieldError(SampleError):
    """A declared field is missing from the sample or does not parse (e.g. a non-integer label)."""


class ErrorBudgetExceeded(LoadscopeError):
    """Under ``on_error="skip"``, more samples failed than ``error_budget`` allows."""


class BatchTimeout(LoadscopeError, TimeoutError):
    """``next()`` waited longer than the loader's ``timeout`` for a batch. The epoch is not
    ended: the batch is still being made, and calling ``next()`` again waits for it again."""
