#!/usr/bin/env bash
# Installs loadscope as a user building from source does — from the sdist with `pip install`
# (build isolation: the declared build requirements come from PyPI; the sdist must hold
# everything the build needs) — into a fresh virtual environment that sees the system's torch,
# then uses it from outside the source tree. Catches a missing file in the package, a broken
# setup.py, an undeclared build requirement or a missing build step. (`pip wheel
# --no-build-isolation` on the sources is scripts/build-wheel.sh's build, checked by
# scripts/check-wheel.sh; `pip install -e` is the development venv's, `make build`.)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
# pip builds in the tree it is given and leaves loadscope.egg-info there, which would register
# the pytest plugin in the development venv too: build from a copy of the sources.
mkdir "$tmp/src"
tar -c --exclude=./.venv --exclude=./.venv-compat --exclude=./build --exclude=./data --exclude=./results --exclude=./.git \
  --exclude='./examples/*/data' --exclude='./examples/*/results' --exclude='*.so' . | tar -x -C "$tmp/src"
quiet() { grep -v "^WARNING: Location 'file:" >&2 || true; }  # this machine's pip config names missing folders
echo "check-install: the sdist, then pip wheel on it + pip install (isolated build; builds the extension; about a minute)"
(cd "$tmp/src" && /usr/bin/python3 setup.py -q sdist -d "$tmp/sdist" >/dev/null 2>&1) \
  || { echo "check-install: setup.py sdist failed" >&2; exit 1; }
"$tmp/venv/bin/pip" wheel -q --no-deps -w "$tmp/dist" "$tmp"/sdist/loadscope-*.tar.gz 2> >(quiet)
"$tmp/venv/bin/pip" install -q --no-deps "$tmp"/dist/loadscope-*.whl 2> >(quiet)
cd "$tmp"
"$tmp/venv/bin/python" - "$src" <<'PY'
import os, sys
import loadscope as ls
src = sys.argv[1]
assert not ls.__file__.startswith(src), f"imported the source tree, not the install: {ls.__file__}"
from loadscope import datasets
datasets.generate("demo", images=8, quiet=True)
b = next(iter(ls.Loader(ls.Folder("demo/folder"), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=8)))
assert b["jpg"].shape == (8, 3, 32, 32) and b["cls"].shape == (8,)
from loadscope import bench  # the harness runs its repetitions as `python -m loadscope.bench.rep`
s = bench.run(bench.from_dict({"name": "install", "dataset": {"path": "demo", "generate": False},
                               "pipeline": {"batch_size": 4, "size": 32}, "factor": {"name": "threads", "values": [1, 2]},
                               "run": {"repetitions": 2, "samples": 8, "warmup_samples": 4, "check_samples": 4,
                                       "warmup_round": False}}), "exp", quiet=True)
assert s["status"] == "ok" and s["correctness"]["arms"]["threads=2"]["ok"], s
print(f"check-install: ok ({ls.__file__})")
PY
"$tmp/venv/bin/loadscope" --help >/dev/null
# The pytest plugin registers itself (pytest11 entry point): experiment TOMLs are collected
# with nothing to configure.
mkdir -p "$tmp/repo/experiments"
printf 'name = "x"\n[pipeline]\nfactory = "m:f"\n[factor]\nname = "n"\nvalues = [1, 2]\n' > "$tmp/repo/experiments/x.toml"
(cd "$tmp/repo" && "$tmp/venv/bin/python" -m pytest --collect-only -q -p no:cacheprovider experiments) \
  > "$tmp/collect.txt" 2>&1 || true
grep -q "experiments/x.toml::x" "$tmp/collect.txt" \
  || { echo "check-install: the pytest plugin did not collect an experiment TOML:" >&2; tail -20 "$tmp/collect.txt" >&2; exit 1; }
# A fresh environment with nothing but torch and the self-contained wheel: scripts/check-wheel.sh.
