"""The environment record of an experiment (env.json): what ran, where, on what data. An A/B
result means little without it: the same change can win on NVMe and lose on a network mount.
Everything is read from the running system; what cannot be read is recorded as None with no
guessing."""

from __future__ import annotations

import glob
import json
import os
import platform
import statistics
import subprocess
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

from .. import _native


def _git(path: Optional[str]) -> Optional[Dict[str, Any]]:
    """Commit, branch and whether the tree has uncommitted changes, of the checkout at `path`."""
    if not path or not os.path.isdir(path):
        return None

    def git(*args: str) -> Optional[str]:
        try:
            out = subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None:
        return {"path": os.path.abspath(path), "commit": None, "note": "not a git checkout"}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"path": top, "commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(status)}


def _loadscope_git(here: str) -> Optional[Dict[str, Any]]:
    """loadscope's own commit: from the checkout it runs from, else the one setup.py recorded
    when it built the installed package (_build_info.json; a build outside a checkout has none)."""
    found = _git(here)
    if found and found.get("commit"):
        return found
    try:
        with open(os.path.join(os.path.dirname(here), "_build_info.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return found
    if not info.get("commit"):
        return found
    return {"path": info.get("source"), "commit": info["commit"], "dirty": info.get("dirty"),
            "note": "recorded when this install was built"}


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpu() -> Dict[str, Any]:
    model = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    nodes = sorted(glob.glob("/sys/devices/system/node/node[0-9]*"))
    mem = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        k, _, v = line.partition(":")
        if k in ("MemTotal", "MemAvailable"):
            mem[k] = int(v.split()[0]) * 1024
    return {"model": model or platform.processor() or None, "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)), "numa_nodes": len(nodes) or None,
            "ram_bytes": mem.get("MemTotal"), "ram_available_bytes": mem.get("MemAvailable"),
            "kernel": platform.release()}


def gpus() -> Dict[str, Any]:
    if not torch.cuda.is_available():
        return {"available": False, "torch_cuda": torch.version.cuda}
    out: Dict[str, Any] = {"available": True, "torch_cuda": torch.version.cuda,
                           "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        out["nvidia_smi"] = smi.stdout.strip().splitlines() if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        out["nvidia_smi"] = None
    return out


def storage(path: str) -> Dict[str, Any]:
    """The filesystem and block device holding `path`: mount point, type, device, and whether
    the device is rotational, NVMe or a network filesystem."""
    path = os.path.realpath(path)
    best = None
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        # id parent major:minor root mount-point options ... - fstype source super-options
        left, _, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        if len(f) < 5 or len(r) < 2:
            continue
        mount = f[4].replace("\\040", " ")
        if (path == mount or path.startswith(mount.rstrip("/") + "/")) and (best is None or len(mount) > len(best[0])):
            best = (mount, r[0], r[1], f[2])
    out: Dict[str, Any] = {"path": path}
    if best is None:
        return out
    mount, fstype, source, majmin = best
    out.update(mount=mount, fstype=fstype, source=source)
    network = fstype in ("nfs", "nfs4", "cifs", "smb3", "ceph", "glusterfs", "lustre", "9p") or fstype.startswith("fuse.")
    out["network"] = network
    # The block device: st_dev of the path -> /sys/dev/block/MAJ:MIN -> the disk (parent of a partition).
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = os.path.realpath(f"/sys/dev/block/{dev}")
    if not os.path.exists(sys_dev):
        out["block_device"] = None
        out["note"] = f"{fstype} has no block device of its own (e.g. overlay, tmpfs, network)"
        return out
    disk = sys_dev if os.path.exists(os.path.join(sys_dev, "queue")) else os.path.dirname(sys_dev)
    name = os.path.basename(disk)
    rot = _read(os.path.join(disk, "queue", "rotational"))
    out.update(block_device=name, rotational=None if rot is None else rot == "1", nvme=name.startswith("nvme"),
               model=_read(os.path.join(disk, "device", "model")))
    return out


def dataset(root: str, layout_files: List[str], max_headers: int = 4000) -> Dict[str, Any]:
    """Scale and mix: sample count, bytes, the distribution of image sizes (read from the
    headers of up to `max_headers` images, evenly spread) and of video frames, rates and shapes
    (from the stream index of up to 200 videos)."""
    from PIL import Image

    image_ext = (".jpg", ".jpeg", ".png")
    images = [p for p in layout_files if p.lower().endswith(image_ext)]
    total = sum(os.path.getsize(p) for p in layout_files)
    step = max(1, len(images) // max_headers)
    widths, heights, unreadable = [], [], []

    def header(name: str, opener) -> None:
        try:
            with opener() as im:
                widths.append(im.width)
                heights.append(im.height)
        except (OSError, SyntaxError, ValueError) as e:  # a damaged file: the loader will say so; counted here
            unreadable.append(f"{name}: {e}")

    for p in images[::step]:
        header(p, lambda p=p: Image.open(p))
    tar_images = 0
    for p in layout_files:  # images inside tar shards: every k-th member's header
        if p.endswith((".tar", ".tar.gz", ".tgz")):
            import io
            import tarfile

            with tarfile.open(p) as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.lower().endswith(image_ext)]
                tar_images += len(members)
                for m in members[:: max(1, len(members) // 200)]:
                    f = tar.extractfile(m)
                    if f is None:
                        continue
                    data = f.read()
                    header(f"{p}:{m.name}", lambda data=data: Image.open(io.BytesIO(data)))
    images_total = len(images) + tar_images

    def dist(xs: Sequence[float]) -> Optional[Dict[str, float]]:
        if not xs:
            return None
        qs = statistics.quantiles(xs, n=10) if len(xs) > 1 else [xs[0]] * 9
        return {"min": min(xs), "p10": qs[0], "median": statistics.median(xs), "p90": qs[-1], "max": max(xs)}

    info: Dict[str, Any] = {"root": os.path.abspath(root), "files": len(layout_files), "bytes": total,
                            "images": images_total, "image_width": dist(widths), "image_height": dist(heights),
                            "headers_read": len(widths), "unreadable_headers": len(unreadable),
                            "unreadable_examples": unreadable[:5]}
    videos = [p for p in layout_files if p.lower().endswith((".mp4", ".mkv", ".webm", ".mov", ".avi"))]
    if videos:
        # Frames, shape and rate from loadscope's own index of each stream (evenly spread sample).
        frames: List[int] = []
        fps: List[float] = []
        shapes: Dict[str, int] = {}
        for p in videos[:: max(1, len(videos) // 200)]:
            v = _native.video_index(p)
            frames.append(len(v["pts"]))
            fps.append(v["fps"])
            shape = f"{v['width']}x{v['height']}"
            shapes[shape] = shapes.get(shape, 0) + 1
        info.update(videos=len(videos), video_frames=dist(frames), video_fps=dist(fps), video_shapes=shapes,
                    videos_indexed=len(frames))
    meta = _read(os.path.join(root, "dataset.json"))
    if meta:
        info["generator"] = json.loads(meta)
    # Samples per epoch: the images (files and shard members) and videos the layout reads.
    info["samples"] = images_total + len(videos) or (info.get("generator") or {}).get("images")
    return info


# The peer loaders the benchmarks can run beside loadscope (installed from PyPI into the
# benchmark environment, requirements-dev.txt; none is a dependency of loadscope).
PEERS = ("simplejpeg", "av", "decord", "eva-decord", "torchcodec", "spdl-io", "nvidia-dali-cuda130")


def peer_versions() -> Dict[str, Optional[str]]:
    """The installed version of every peer (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out: Dict[str, Optional[str]] = {}
    for name in PEERS:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def record(data_root: Optional[str], layout_files: List[str], training_repo: Optional[str] = None,
           stage_dir: Optional[str] = None) -> Dict[str, Any]:
    from .. import __version__
    from .._version import carried_libraries

    def version_of(module: str) -> Optional[str]:  # optional for a user pipeline: recorded when there
        try:
            return str(__import__(module).__version__)
        except ImportError:
            return None

    here = os.path.dirname(os.path.abspath(__file__))  # a source checkout has the commit; an install, its build's
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "loadscope": {"version": __version__, "path": os.path.dirname(here), "git": _loadscope_git(here),
                      "wheel": carried_libraries()},  # None: built from source, the system's libraries
        "training_repo": _git(training_repo),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "torchvision": version_of("torchvision"), "pillow": version_of("PIL"),
                     **_native.library_versions(), "peers": peer_versions()},
        "cpu": cpu(),
        "gpu": gpus(),
        # A user pipeline's data is known only when its experiment declares [dataset] path.
        "storage": storage(data_root) if data_root else None,
        "staging_storage": storage(stage_dir) if stage_dir else None,  # where staging arms copy to
        "dataset": dataset(data_root, layout_files) if data_root else None,
        "torch_threads": torch.get_num_threads(),
        # Where s3:// would be read from: endpoint, region, the credentials' source (never a secret).
        "object_storage": _native.remote_environment(),
    }


def require() -> None:
    """What the harness needs beyond torch, checked before it writes anything: psutil (the
    memory, CPU and I/O of every process of a repetition). A ConfigError that says how to get it."""
    from .._errors import ConfigError
    from ..telemetry.watcher import PSUTIL_MISSING

    try:
        import psutil  # noqa: F401
    except ImportError:
        raise ConfigError(PSUTIL_MISSING) from None
