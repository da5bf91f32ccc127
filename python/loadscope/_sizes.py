"""Sizes as users write them ("256MB", "1GiB", a number of bytes): one parser for the Loader's
options, `Remote`, and the CLI's --shard-size."""

from __future__ import annotations

import re

from ._errors import ConfigError


def parse_size(text: str, what: str = "--shard-size") -> int:
    """'256MB' (10^6), '1GiB' (2^30), '1000000' (bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(i?)b?|b)?\s*", str(text).lower())
    if not m:
        raise ConfigError(f"{what} {text!r}: a size like 256MB, 1GiB or 1000000 (bytes)")
    power = " kmgt".index(m.group(2)) if m.group(2) else 0
    return int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)
