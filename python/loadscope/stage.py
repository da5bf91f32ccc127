"""Staging a dataset to local disk: ``loadscope stage SRC DST``.

Copies every file under SRC (a local folder, or every object under an ``s3://bucket/prefix/``;
or the listed ones) to the same relative path under DST with
several threads, hashes each file while copying, reads the copy back and compares (size and
BLAKE2b), and only then renames it into place and records it in ``DST/.loadscope-stage.jsonl``.
Interrupted (killed, Ctrl-C, a full disk), it is restartable: a rerun skips the files the
journal lists with the source's size and modification time unchanged and copies the rest;
``--verify`` re-hashes those too. Objects are fetched in ranged chunks, each retried and
resumed, and count as current while their size and ETag are unchanged. Reports bytes, seconds and throughput. The staging
experiment of the A/B harness (benchmarks/experiments/staging.toml) uses it."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence

from ._errors import ConfigError, LoadscopeError
from ._progress import Progress

JOURNAL = ".loadscope-stage.jsonl"
PARTIAL = ".loadscope-partial"  # a file being copied (a name no dataset uses)
CHUNK = 1 << 20


def _hash_file(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                return h.hexdigest()
            h.update(b)


def _copy_one(src: str, dst: str) -> Dict[str, Any]:
    """Copies src to dst through dst + PARTIAL, hashing on the way; reads the copy back and
    compares before renaming it into place. Returns size and digest."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    tmp = dst + PARTIAL
    h = hashlib.blake2b(digest_size=16)
    n = 0
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        while True:
            b = fi.read(CHUNK)
            if not b:
                break
            h.update(b)
            fo.write(b)
            n += len(b)
        fo.flush()
        os.fsync(fo.fileno())
    digest = h.hexdigest()
    got = os.path.getsize(tmp)
    if got != n or _hash_file(tmp) != digest:
        os.unlink(tmp)
        raise OSError(f"{dst}: the copy does not read back as written ({got} of {n} bytes, or a checksum mismatch)")
    os.replace(tmp, dst)
    return {"size": n, "blake2b": digest}


def _copy_remote_one(url: str, size: int, etag: str, dst: str) -> Dict[str, Any]:
    """Downloads an object in ranged chunks (each retried and resumed by the native client,
    pinned to the ETag listed), through dst + PARTIAL, then renames it into place."""
    from . import _native

    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    tmp = dst + PARTIAL
    h = hashlib.blake2b(digest_size=16)
    with open(tmp, "wb") as fo:
        for at in range(0, size, 8 * CHUNK):
            b = _native.read_bytes(url, at, min(8 * CHUNK, size - at), etag)  # one version, or an error
            h.update(b)
            fo.write(b)
        fo.flush()
        os.fsync(fo.fileno())
    got = os.path.getsize(tmp)
    if got != size:
        os.unlink(tmp)
        raise OSError(f"{dst}: {got} of {size} bytes written")
    os.replace(tmp, dst)
    return {"size": size, "blake2b": h.hexdigest(), "etag": etag}


def _list_files(src: str) -> List[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in sorted(filenames):
            if name == JOURNAL or name.endswith(PARTIAL):
                continue
            out.append(os.path.relpath(os.path.join(dirpath, name), src))
    return out


def stage(src: str, dst: str, *, files: Optional[Sequence[str]] = None, threads: int = 8, verify: bool = False,
          progress: Optional[Callable[[Dict[str, Any]], None]] = None, show_progress: bool = False) -> Dict[str, Any]:
    """Copies ``files`` (paths relative to src; default: every file under it) to dst. Returns
    {files, copied, skipped, bytes, bytes_copied, seconds, mb_per_s, root}. ``progress`` is
    called after each file with its record (raising there interrupts the staging); show_progress
    writes files, bytes, rate and time left to stderr (loadscope._progress)."""
    remote = src.startswith("s3://")
    if not remote and "://" in src:
        raise ConfigError(f"{src}: staging reads local folders and s3:// prefixes (an HTTP server cannot be listed)")
    if remote:
        src = src.rstrip("/") + "/"
        dst = os.path.realpath(dst)
    else:
        src, dst = os.path.realpath(src), os.path.realpath(dst)  # links resolved: no copying into the source
    if not remote and not os.path.isdir(src):
        raise ConfigError(f"{src} is not a directory")
    if dst == src or dst.startswith(src + os.sep):
        raise ConfigError(f"the destination {dst} lies inside the source {src}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be an int >= 1, got {threads!r}")
    if remote:
        from . import _native
        rel = list(files) if files is not None else [u[len(src):] for u in _native.remote_list(src)]
        if not rel:
            raise ConfigError(f"no objects under {src}")
    else:
        rel = list(files) if files is not None else _list_files(src)
    for r in rel:
        norm = os.path.normpath(r)
        if os.path.isabs(r) or norm == ".." or norm.startswith(".." + os.sep):
            raise ConfigError(f"{r!r} is not a path inside {src}")
    os.makedirs(dst, exist_ok=True)
    journal_path = os.path.join(dst, JOURNAL)
    done: Dict[str, Dict[str, Any]] = {}
    if os.path.exists(journal_path):
        with open(journal_path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    done[rec["path"]] = rec
                except (ValueError, KeyError):
                    continue  # a line cut by the interruption: that file is copied again
    lock = threading.Lock()
    bar = Progress(f"stage {src}", len(rel), quiet=not show_progress)
    t0 = time.perf_counter()
    stats = {"copied": 0, "skipped": 0, "bytes": 0, "bytes_copied": 0}

    def one(r: str) -> None:
        d = os.path.join(dst, r)
        rec = done.get(r)
        if remote:
            size, etag = _native.remote_stat(src + r)
            current = rec is not None and rec.get("size") == size and rec.get("etag") == etag
        else:
            st = os.stat(os.path.join(src, r))
            size = st.st_size
            current = rec is not None and rec.get("size") == size and rec.get("mtime_ns") == st.st_mtime_ns
        current = current and os.path.isfile(d) and os.path.getsize(d) == size
        if current and verify and rec is not None:
            current = _hash_file(d) == rec.get("blake2b")
        if current:
            with lock:
                stats["skipped"] += 1
                stats["bytes"] += size
            out = dict(rec or {}, skipped=True)
        elif remote:
            out = {"path": r, **_copy_remote_one(src + r, size, etag, d)}
        else:
            out = {"path": r, "mtime_ns": st.st_mtime_ns, **_copy_one(os.path.join(src, r), d)}
        if not current:
            with lock:
                with open(journal_path, "a") as j:
                    j.write(json.dumps(out) + "\n")
                    j.flush()
                    os.fsync(j.fileno())
                stats["copied"] += 1
                stats["bytes"] += out["size"]
                stats["bytes_copied"] += out["size"]
        bar.update(1, out.get("size", 0))
        if progress is not None:
            progress(out)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(one, r) for r in rel]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    bar.close()
    secs = time.perf_counter() - t0
    return {"root": dst, "files": len(rel), **stats, "seconds": secs,
            "mb_per_s": stats["bytes_copied"] / secs / 1e6 if secs > 0 else 0.0}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="loadscope stage", description="Copy a dataset to local disk, verified and "
                                "restartable.")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--verify", action="store_true", help="re-hash files already staged by an earlier run")
    a = p.parse_args(argv)
    try:
        r = stage(a.src, a.dst, threads=a.threads, verify=a.verify, show_progress=True)
    except (ConfigError, OSError, LoadscopeError) as e:
        print(f"loadscope stage: {e}", file=sys.stderr)
        return 1
    print(f"{r['files']} files, {r['bytes'] / 1e6:.1f} MB in {r['root']}: {r['copied']} copied "
          f"({r['bytes_copied'] / 1e6:.1f} MB, {r['mb_per_s']:.0f} MB/s), {r['skipped']} already staged; "
          f"{r['seconds']:.2f} s")
    return 0
