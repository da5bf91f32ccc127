"""Progress of the long commands (index, convert, stage): files and bytes done, rate and time
left. On a terminal one line is redrawn in place; elsewhere (CI logs, files) a line is written
at most every 10 seconds, so a log shows the command is alive without drowning in lines."""

from __future__ import annotations

import sys
import threading
import time
from typing import Optional, TextIO


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


class Progress:
    def __init__(self, what: str, total: int, total_bytes: Optional[int] = None, *,
                 stream: Optional[TextIO] = None, quiet: bool = False) -> None:
        self.what, self.total, self.total_bytes = what, total, total_bytes
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.quiet = quiet
        self.done = self.bytes = 0
        self.t0 = self.last = time.monotonic()
        self.lock = threading.Lock()

    def line(self) -> str:
        secs = max(time.monotonic() - self.t0, 1e-9)
        rate = self.bytes / secs
        left = ""
        if self.total_bytes and self.bytes and self.total_bytes > self.bytes:
            left = f", {(self.total_bytes - self.bytes) / rate:.0f} s left"
        elif self.done and self.total > self.done:
            left = f", {(self.total - self.done) * secs / self.done:.0f} s left"
        of_bytes = f" of {_size(self.total_bytes)}" if self.total_bytes else ""
        return (f"{self.what}: {self.done}/{self.total} files, {_size(self.bytes)}{of_bytes}, "
                f"{_size(rate)}/s{left}")

    def update(self, files: int = 1, nbytes: int = 0) -> None:
        with self.lock:
            self.done += files
            self.bytes += nbytes
            now = time.monotonic()
            if self.quiet or now - self.last < (0.2 if self.tty else 10.0):
                return
            self.last = now
            self.stream.write(("\r" + self.line() + "\033[K") if self.tty else self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        if not self.quiet and self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
