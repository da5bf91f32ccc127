"""Indexed tar shards: ``loadscope index`` and ``loadscope convert``.

    loadscope index data/shards/*.tar                     # writes <shard>.idx beside each shard
    loadscope convert data/folder out/ --shard-size 256MB # folder or file list -> indexed shards

A shard's index (format in csrc/loadscope/io/tar_index.h) lists every sample's key and where
each member's bytes lie. ``WebDataset`` reads it when present: the loader then knows the epoch's
size before reading (ranks split it evenly), skips without reading (resume), and its threads
read members in parallel. Indexing reads the tar headers only."""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
import time
from typing import Any, Dict, List, Optional, Sequence

from . import _native
from ._errors import ConfigError, LoadscopeError
from ._progress import Progress
from ._sizes import parse_size
from ._sources import FileList, Folder, Source, _exists, expand_braces, is_url


def index(shards: Sequence[str], *, force: bool = False, show_progress: bool = False) -> List[Dict[str, Any]]:
    """Writes ``<shard>.idx`` for each shard (skipping those whose index is current unless
    ``force``). Returns one record per shard: samples, bytes, seconds, whether it was written.
    Shards may be s3:// or http(s):// URLs (an index is then PUT next to an s3:// shard)."""

    def one(shard: str) -> Dict[str, Any]:
        t0 = time.perf_counter()
        idx_path = shard + ".idx"
        if not force and _exists(idx_path):
            try:
                current = _native.read_index(idx_path, shard)
                return {"shard": shard, "samples": current.samples, "bytes": current.tar_bytes, "written": False,
                        "seconds": time.perf_counter() - t0}
            except LoadscopeError:
                pass  # stale or unreadable: rewrite it
        ix = _native.index_shard(shard)
        ix.write(idx_path)
        return {"shard": shard, "samples": ix.samples, "bytes": ix.tar_bytes, "written": True,
                "seconds": time.perf_counter() - t0}

    out = []
    bar = Progress("index", len(shards), quiet=not show_progress)
    for shard in shards:
        out.append(one(shard))
        bar.update(1, out[-1]["bytes"])
    bar.close()
    return out


def _member_bytes(value: Any, is_path: bool) -> bytes:
    if is_path:
        path = os.fsdecode(value)
        if is_url(path):  # a file list whose files are in object storage
            return _native.read_bytes(path)
        with open(path, "rb") as f:
            return f.read()
    return value if isinstance(value, bytes) else str(value).encode()


def convert(source: Source, out_dir: str, *, shard_bytes: int = 256 << 20, prefix: str = "shard",
            quiet: bool = False, on_shard: Optional[Any] = None) -> Dict[str, Any]:
    """Writes the samples of a Folder or FileList, in its order, into uncompressed tar shards
    of about ``shard_bytes`` each (``{prefix}-000000.tar``, ...) with their indexes. Sample i
    becomes key ``{i:09d}``; its members keep their names (``jpg``, ``cls``, ...) and bytes."""
    samples = getattr(source, "_samples", None)
    if samples is None:
        raise ConfigError(f"convert reads a Folder or FileList, got {type(source).__name__}")
    if shard_bytes < 1:
        raise ConfigError("shard size must be >= 1 byte")
    if is_url(out_dir):
        return _convert_to_s3(source, out_dir, shard_bytes=shard_bytes, prefix=prefix, quiet=quiet)
    root = source.root if isinstance(source, Folder) else None
    if root is not None:
        r, o = os.path.realpath(root), os.path.realpath(out_dir)
        if o == r or o.startswith(r + os.sep):
            raise ConfigError(f"convert: the output {out_dir} lies inside the folder it converts ({root}): "
                              "the next scan would take it for a class")
    os.makedirs(out_dir, exist_ok=True)
    stale = [n for n in os.listdir(out_dir) if n.startswith(prefix + "-") and n.endswith((".tar", ".tar.idx"))]
    if stale:
        raise ConfigError(f"convert: {out_dir} already holds {prefix}-*.tar shards; choose an empty directory")
    t0 = time.perf_counter()
    shards: List[str] = []
    tf: Optional[tarfile.TarFile] = None
    size = 0
    total = 0

    def close() -> None:
        if tf is not None:
            tf.close()
            index([shards[-1]], force=True)
            if on_shard is not None:
                on_shard(shards[-1])

    bar = Progress("convert", len(samples), quiet=quiet)
    for i, (_key, members) in enumerate(samples):
        if tf is None or size >= shard_bytes:
            close()
            shards.append(os.path.join(out_dir, f"{prefix}-{len(shards):06d}.tar"))
            tf = tarfile.open(shards[-1], "w", format=tarfile.USTAR_FORMAT)
            size = 0
        before = size
        for name, is_path, value in members:
            data = _member_bytes(value, is_path)
            info = tarfile.TarInfo(f"{i:09d}.{os.fsdecode(name)}")
            info.size = len(data)
            info.mtime = 0  # reproducible shards
            tf.addfile(info, io.BytesIO(data))
            size += 512 + (len(data) + 511) // 512 * 512
            total += len(data)
        bar.update(1, size - before)
    close()
    bar.close()
    return {"shards": shards, "samples": len(samples), "bytes": total, "seconds": time.perf_counter() - t0}


def _expand(pattern: str) -> List[str]:
    """Brace patterns; an ``s3://bucket/prefix/`` (ending in a slash) names every .tar under it."""
    if pattern.startswith("s3://") and pattern.endswith("/"):
        shards = [u for u in _native.remote_list(pattern) if u.endswith(".tar")]
        if not shards:
            raise ConfigError(f"no .tar objects under {pattern}")
        return shards
    return expand_braces(pattern)


def _convert_to_s3(source: Source, out: str, *, shard_bytes: int, prefix: str, quiet: bool) -> Dict[str, Any]:
    """convert() into an s3:// prefix: each shard is written and indexed in a local temporary
    directory, then uploaded with its index (read from disk as it is sent) and removed, so the
    local disk holds one shard at a time."""
    import shutil
    import tempfile

    if not out.startswith("s3://"):
        raise ConfigError(f"convert: {out}: shards can be written to a local directory or an s3:// prefix")
    out = out.rstrip("/")
    existing = [u for u in _native.remote_list(out + "/") if u.rsplit("/", 1)[-1].startswith(prefix + "-")]
    if existing:
        raise ConfigError(f"convert: {out}/ already holds {prefix}-* objects ({existing[0]}, ...); choose an empty prefix")
    tmp = tempfile.mkdtemp(prefix="loadscope-convert-")
    uploaded: List[str] = []
    t0 = time.perf_counter()
    try:
        def upload(shard: str) -> None:
            url = f"{out}/{os.path.basename(shard)}"
            _native.remote_put_file(url, shard)
            _native.remote_put_file(url + ".idx", shard + ".idx")
            uploaded.append(url)
            os.unlink(shard)
            os.unlink(shard + ".idx")

        r = convert(source, tmp, shard_bytes=shard_bytes, prefix=prefix, quiet=quiet, on_shard=upload)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dict(r, shards=uploaded, seconds=time.perf_counter() - t0)


def main_index(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="loadscope index", description="Write <shard>.idx beside each tar shard "
                                "(reads the headers only).")
    p.add_argument("shards", nargs="+", help="tar shards, or brace patterns like 'train-{000..127}.tar'")
    p.add_argument("--force", action="store_true", help="rewrite indexes that are current")
    a = p.parse_args(argv)
    try:
        shards = [s for pat in a.shards for s in _expand(pat)]
        rows = index(shards, force=a.force, show_progress=True)
    except LoadscopeError as e:
        where = getattr(e, "key", None)
        print(f"loadscope index: {where}: {getattr(e, 'reason', e)}" if where else f"loadscope index: {e}", file=sys.stderr)
        return 1
    for r in rows:
        print(f"{r['shard']}: {r['samples']} samples, {'indexed' if r['written'] else 'index current'} "
              f"in {r['seconds'] * 1e3:.1f} ms")
    return 0


def main_convert(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="loadscope convert", description="Folder or file list -> indexed tar shards.")
    p.add_argument("source", help="an image folder (ImageFolder layout) or a .jsonl/.csv file list")
    p.add_argument("out", help="output directory (empty or new), or an s3://bucket/prefix")
    p.add_argument("--shard-size", default="256MB", help="target shard size: 256MB (10^6), 1GiB (2^30), bytes (default 256MB)")
    p.add_argument("--prefix", default="shard", help="shard file names: PREFIX-000000.tar (default shard)")
    p.add_argument("--labels", default="auto", choices=("auto", "subfolders", "none"), help="folders: class labels (as ls.Folder)")
    a = p.parse_args(argv)
    try:
        if os.path.isdir(a.source):
            src: Source = Folder(a.source, labels=a.labels)
        elif (os.path.isfile(a.source) or is_url(a.source)) and a.source.lower().endswith((".jsonl", ".csv")):
            src = FileList(a.source)
        else:
            raise ConfigError(f"{a.source!r} is not a folder or a .jsonl/.csv file list")
        r = convert(src, a.out, shard_bytes=parse_size(a.shard_size), prefix=a.prefix)
    except LoadscopeError as e:
        print(f"loadscope convert: {e}", file=sys.stderr)
        return 1
    print(f"{r['samples']} samples, {r['bytes'] / 1e6:.1f} MB into {len(r['shards'])} indexed shards in "
          f"{a.out} ({r['seconds']:.1f} s)")
    return 0
