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
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=${PY:-$root/.venv/bin/python}
work=$root/build/wheel
scripts/build-ffmpeg.sh build/ffmpeg
ffmpeg=$root/build/ffmpeg/prefix

rm -rf "$work/src" "$work/raw" "$work/repaired"
mkdir -p "$work/src" "$work/raw" "$work/repaired" dist
# The sources as git sees them (committed or not, never ignored files): what a clone builds.
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c --ignore-failed-read 2>/dev/null | tar -x -C "$work/src"
quiet() { grep -v "^WARNING: Location 'file:" >&2 || true; }  # this machine's pip config names missing folders

echo "wheel: building the extension against the carried FFmpeg (about a minute)"
PKG_CONFIG_PATH=$ffmpeg/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} \
CXXFLAGS="-include $root/scripts/wheel-compat.h ${CXXFLAGS:-}" \
  "$py" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$work/raw" "$work/src" 2> >(quiet)

echo "wheel: auditwheel repair"
PATH=$(dirname "$py"):$PATH LD_LIBRARY_PATH=$ffmpeg/lib "$py" -m auditwheel repair -w "$work/repaired" "$work"/raw/loadscope-*.whl >"$work/repair.log" 2>&1 \
  || { cat "$work/repair.log" >&2; exit 1; }
raw=$(ls "$work"/raw/loadscope-*.whl)
repaired=$(ls "$work"/repaired/loadscope-*.whl)

"$py" scripts/wheel-notice.py "$repaired" --ffmpeg "$ffmpeg" --raw "$raw"
rm -f dist/loadscope-*.whl
cp "$repaired" dist/
"$py" -m auditwheel show "dist/$(basename "$repaired")" > "$work/show.txt"

echo "wheel: sdist"
rm -f dist/loadscope-*.tar.gz
(cd "$work/src" && "$py" setup.py -q sdist -d "$root/dist" >/dev/null 2>&1) \
  || { echo "wheel: the sdist failed" >&2; (cd "$work/src" && "$py" setup.py sdist -d "$root/dist") >&2; exit 1; }
ls -l dist/ | sed 1d
