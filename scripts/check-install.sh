#!/usr/bin/env bash
# Installs loadscope the ways users do — `pip install .` (build isolation: the declared build
# requirements come from PyPI) and `pip install --no-build-isolation .` (what is installed) —
# into fresh virtual environments that see the system's torch, then uses it from outside the
# source tree. Catches a missing file in the package, a broken setup.py, an undeclared build
# requirement or a missing build step.
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
echo "check-install: pip wheel . + pip install (isolated build; builds the extension; about a minute)"
"$tmp/venv/bin/pip" wheel -q --no-deps -w "$tmp/dist" "$tmp/src" 2> >(quiet)
"$tmp/venv/bin/pip" install -q --no-deps "$tmp"/dist/loadscope-*.whl 2> >(quiet)
echo "check-install: pip install --no-build-isolation . (another venv; about a minute)"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv2"
rm -rf "$tmp/src/build"  # the first build's CMake cache names the isolated environment's CMake
"$tmp/venv2/bin/pip" install -q --no-index --no-deps --no-build-isolation "$tmp/src" 2> >(quiet)
(cd "$tmp" && "$tmp/venv2/bin/python" -c "import loadscope, sys; assert loadscope.__file__.startswith('$tmp/venv2'), loadscope.__file__")
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

# A fresh environment with nothing but torch (PyPI's CPU build, from this machine's wheel store)
# and the wheel built above, as a user's training environment: its declared dependencies come
# with it (psutil), and `loadscope bench baseline` runs on a pipeline that uses torch only.
echo "check-install: a venv with only torch, then the wheel: bench baseline there"
/usr/bin/python3 -m venv "$tmp/fresh"
"$tmp/fresh/bin/pip" install -q torch==2.13.0 "$tmp"/dist/loadscope-*.whl 2> >(quiet)
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
(cd "$tmp/torchonly" && "$tmp/fresh/bin/loadscope" bench baseline mine.train:make_loader --setup mine.train:build \
   --step mine.train:step --repo . --samples 64 --warmup-samples 32 --repetitions 1 --out results/b --quiet) \
  > "$tmp/fresh.txt" 2>&1 || { echo "check-install: bench baseline failed with only torch installed:" >&2; tail -30 "$tmp/fresh.txt" >&2; exit 1; }
for f in diagnosis.md next-experiment.toml env.json; do
  [ -s "$tmp/torchonly/results/b/$f" ] || { echo "check-install: the baseline wrote no $f" >&2; exit 1; }
done
"$tmp/fresh/bin/python" -c "import importlib.util as u; assert u.find_spec('torchvision') is None and u.find_spec('PIL') is None"
echo "check-install: ok with only torch ($("$tmp/fresh/bin/python" -c 'import torch; print(torch.__version__)'))"
