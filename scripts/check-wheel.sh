#!/usr/bin/env bash
# The self-contained wheel as a user gets it (part of `make test`; docs/install.md "The wheel"):
#   1. `make wheel` (dist/), then a fresh venv with nothing but torch from PyPI and the wheel;
#   2. the real files of ../shared/data/real decoded and two shards read from the tests' radosgw,
#      once by the source build (.venv) and once by the wheel, the wheel in a mount namespace in
#      which the system's codec, TBB, jpeg, webp and curl libraries are /dev/null: the same
#      pixels, samples and errors, and /proc/self/maps lists none of the system's copies
#      (tests/wheel/wheel_check.py);
#   3. there too, an A/B experiment and `loadscope bench baseline` on a torch-only pipeline;
#   4. the install's time, and `auditwheel show`, for docs/install.md.
# Needs root (the mount namespace); the rest of `make test` runs as root too.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
py=${PY:-$src/.venv/bin/python}
REAL=${LOADSCOPE_REAL:-$(realpath -m "$src/../shared/data/real")}
[ -f "$REAL/README.md" ] || { echo "check-wheel: the real test data is not at $REAL" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "check-wheel: needs root (a mount namespace hides the system's libraries)" >&2; exit 1; }
tmp=$(mktemp -d)
cleanup() { bash scripts/s3-server.sh stop "$tmp/s3" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
quiet() { grep -v "^WARNING: Location 'file:" >&2 || true; }  # this machine's pip config names missing folders

# WHEEL_PYTHON: the interpreter of the fresh venv, and so which wheel (default Debian's 3.11);
# e.g. WHEEL_PYTHON=python3.12 scripts/check-wheel.sh, after scripts/build-wheel.sh python3.12.
vpy=${WHEEL_PYTHON:-/usr/bin/python3}
tag=$("$vpy" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
[ -n "${WHEEL_PYTHON:-}" ] || scripts/build-wheel.sh
whl=$(ls dist/loadscope-*-"$tag"-*manylinux*.whl)

echo "check-wheel: a fresh venv with torch (PyPI's CPU build, from this machine's wheel store), then the wheel"
"$vpy" -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q torch==2.13.0 2> >(quiet)
start=$(date +%s%N)
"$tmp/venv/bin/pip" install -q "$src/$whl" 2> >(quiet)  # and psutil, its one dependency
install_ms=$(( ($(date +%s%N) - start) / 1000000 ))

echo "check-wheel: the tests' radosgw, with a real shard and a tar of real JPEGs"
bash scripts/s3-server.sh start "$tmp/s3" >"$tmp/s3.log" 2>&1 || { cat "$tmp/s3.log" >&2; exit 1; }
set -a; source "$tmp/s3/env"; set +a
export LOADSCOPE_REAL=$REAL LOADSCOPE_WHEEL_BUCKET=loadscope-wheel
"$py" - "$tmp/shards" <<'PY'
import os, sys
from pathlib import Path
sys.path[:0] = ["tests/python", "tests/wheel"]
import servers, wheel_check
out = Path(sys.argv[1]); out.mkdir()
local = wheel_check.shards(Path(os.environ["LOADSCOPE_REAL"]), out)
servers.put_bucket(dict(os.environ), os.environ["LOADSCOPE_WHEEL_BUCKET"], [(k, str(v)) for k, v in local.items()])
PY

echo "check-wheel: decoding with the source build, then with the wheel (system libraries hidden)"
(cd "$tmp" && PYTHONPATH= "$py" "$src/tests/wheel/wheel_check.py" decode "$tmp/source.pt")
# Every real file of the libraries the wheel must carry, in both library directories of a
# merged /usr: bind-mounting /dev/null over it makes any attempt to load it fail.
hide=$(find /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu -maxdepth 1 -type f \
  -regextype posix-extended -regex '.*/lib(avcodec|avformat|avutil|swscale|swresample|avfilter|postproc|dav1d|tbb|tbbmalloc|jpeg|turbojpeg|webp|webpdemux|webpmux|sharpyuv|curl|curl-gnutls)\.so\..*' | sort -u)
[ -n "$hide" ] || { echo "check-wheel: found none of the system's libraries to hide" >&2; exit 1; }
cat > "$tmp/hidden.sh" <<SH
set -e
for f in $(echo $hide); do mount --bind /dev/null "\$f"; done
# The hiding works: the loader cannot open the system's libavcodec any more.
"$tmp/venv/bin/python" -c "import ctypes
try:
    ctypes.CDLL('libavcodec.so.59')
except OSError:
    pass
else:
    raise SystemExit('check-wheel: the system libavcodec is still loadable')"
exec "\$@"
SH
hidden() { unshare -m --propagation private bash "$tmp/hidden.sh" "$@"; }
(cd "$tmp" && hidden "$tmp/venv/bin/python" "$src/tests/wheel/wheel_check.py" decode "$tmp/wheel.pt")
"$py" tests/wheel/wheel_check.py compare "$tmp/source.pt" "$tmp/wheel.pt"

echo "check-wheel: an experiment and a baseline with the wheel (system libraries hidden)"
PYTHONPATH= "$py" -c "from loadscope import datasets; datasets.generate('$tmp/demo', images=16, videos=0, quiet=True)"
mkdir -p "$tmp/repo/mine"
touch "$tmp/repo/mine/__init__.py"
cat > "$tmp/repo/mine/data.py" <<'PY'
import os

import loadscope as ls


def make_loader(root, batch_size=4, threads=1):
    return ls.Loader(ls.Folder(os.path.join(root, "folder")), fields={"jpg": ls.Image(32, crop="center", resize=32),
                     "cls": ls.Int()}, batch_size=batch_size, threads=threads)


def ids(batch):
    return batch["__index__"].tolist()
PY
(cd "$tmp/repo" && hidden "$tmp/venv/bin/python" - "$tmp/demo" <<'PY'
import json
import sys

import loadscope as ls
from loadscope import bench

assert "/venv/" in ls.__file__, ls.__file__
exp = bench.from_dict({"name": "wheel", "training_repo": ".",
                       "pipeline": {"factory": "mine.data:make_loader", "root": sys.argv[1], "sample_ids": "mine.data:ids"},
                       "factor": {"name": "threads", "values": [1, 2]},
                       "run": {"repetitions": 2, "samples": 8, "warmup_samples": 4, "check_samples": 4,
                               "warmup_round": False}})
s = bench.run(exp, "exp", quiet=True)
assert s["status"] == "ok" and s["correctness"]["arms"]["threads=2"]["ok"] is True, s["correctness"]
env = json.load(open("exp/env.json"))
assert env["loadscope"]["wheel"]["libraries"]["FFmpeg"], env["loadscope"]
print("check-wheel: experiment ok (threads 1 against 2, samples checked); env.json records", env["loadscope"]["wheel"]["wheel"])
PY
)

# A user's training repository with a torch-only pipeline: `loadscope bench baseline` runs with
# the wheel's declared dependencies alone (psutil), no torchvision, no PIL.
mkdir -p "$tmp/torchonly/mine"
touch "$tmp/torchonly/mine/__init__.py"
cat > "$tmp/torchonly/mine/train.py" <<'PY'
import torch


class Shapes(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        return torch.full((3, 16, 16), float(i % 7)), i % 3


def make_loader(batch_size=16, num_workers=1):
    return torch.utils.data.DataLoader(Shapes(), batch_size=batch_size, num_workers=num_workers)


def build(ctx):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(768, 3))
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1)}


def step(state, batch):
    x, y = batch
    torch.nn.functional.cross_entropy(state["model"](x), y).backward()
    state["opt"].step()
    state["opt"].zero_grad()
PY
(cd "$tmp/torchonly" && "$tmp/venv/bin/loadscope" bench baseline mine.train:make_loader --setup mine.train:build \
   --step mine.train:step --repo . --samples 64 --warmup-samples 32 --repetitions 1 --out results/b --quiet) \
  > "$tmp/baseline.txt" 2>&1 || { echo "check-wheel: bench baseline failed with only torch and the wheel:" >&2; tail -30 "$tmp/baseline.txt" >&2; exit 1; }
for f in diagnosis.md next-experiment.toml env.json; do
  [ -s "$tmp/torchonly/results/b/$f" ] || {
    echo "check-wheel: the baseline wrote no $f; its output and diagnosis:" >&2
    tail -30 "$tmp/baseline.txt" >&2
    grep -n -A3 -i "withheld\|could not\|failed" "$tmp/torchonly/results/b/diagnosis.md" >&2 || true
    exit 1
  }
done
"$tmp/venv/bin/python" -c "import importlib.util as u; assert u.find_spec('torchvision') is None and u.find_spec('PIL') is None"
"$tmp/venv/bin/loadscope" --version | tail -1
echo "check-wheel: ok: $(basename "$whl"), $(du -h "$whl" | cut -f1), installed in $((install_ms / 1000)).$(printf %03d $((install_ms % 1000))) s"
