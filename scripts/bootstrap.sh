#!/usr/bin/env bash
# Installs what loadscope needs on Debian 12 (idempotent, fast when everything is there),
# makes .venv from Debian's Python with system site packages plus requirements-dev.txt from
# PyPI (torch 2.x), and .venv-compat with Debian's torch 1.13 only.
# Usage: scripts/bootstrap.sh            (packages + venv)
#        scripts/bootstrap.sh --fuzz     (also clang with libFuzzer, for `make fuzz`)
#        scripts/bootstrap.sh --check    (exit 1 if anything is missing, install nothing)
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compilers, CMake, pybind11, the codecs and oneTBB. Runtime/test: Debian's torch 1.13
# and torchvision (the compatibility lane; .venv has torch 2.x from PyPI over them), PIL, numpy,
# pytest, PyAV (the video baseline's decoder);
# ffmpeg and djpeg CLIs as independent references; clang-format for `make lint`;
# scikit-image for the real photographs the demo data is cut from.
PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  python3-dev python3-venv python3-pip python3-setuptools python3-wheel
  pybind11-dev python3-pybind11
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev
  libjpeg62-turbo-dev libturbojpeg0-dev libwebp-dev zlib1g-dev libtbb-dev catch2 libcurl4-openssl-dev nginx-light openssl
  python3-torch python3-torchvision python3-numpy python3-pil python3-psutil
  python3-pytest python3-pytest-timeout python3-skimage python3-scipy python3-matplotlib python3-av
  ffmpeg libjpeg-turbo-progs
  clang-format
  # `make wheel`: the carried FFmpeg is built from Debian's source package (scripts/build-ffmpeg.sh).
  nasm libdav1d-dev dpkg-dev
)

# `make fuzz` only: clang, its libFuzzer and sanitizer runtimes, llvm-symbolizer for reports.
[ "${1:-}" = "--fuzz" ] && PACKAGES+=(clang libclang-rt-14-dev llvm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${1:-}" = "--check" ]; then
  [ ${#missing[@]} -eq 0 ] && { echo "all packages present"; exit 0; }
  echo "missing: ${missing[*]}"; exit 1
fi

if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "loadscope bootstrap: these Debian packages are missing and there is no apt-get here:" >&2
    echo "  ${missing[*]}" >&2
    echo "Install their equivalents by hand, or see docs/install.md for a pip-installed torch." >&2
    exit 1
  fi
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "loadscope bootstrap: installing ${#missing[@]} Debian packages: ${missing[*]}"
  # Package lists may be absent on a fresh machine; refresh once if a package is unknown.
  if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    $SUDO apt-get update -q
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# Debian's interpreter, with its packages (PyAV built against the same FFmpeg as the
# extension, scikit-image's photographs for the demo data, pytest, psutil, numpy, Pillow),
# and on top of them from PyPI what Debian has too old (requirements-dev.txt: torch 2.x,
# torchvision). The python3 first on PATH is another interpreter that sees none of Debian's.
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
# Installed only when a pinned version is missing (pip's own check takes seconds).
if ! .venv/bin/python - requirements-dev.txt <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, _, want = line.partition("==")
        try:
            if version(name).split("+")[0] != want:
                sys.exit(1)
        except PackageNotFoundError:
            sys.exit(1)
PY
then
  echo "loadscope bootstrap: installing requirements-dev.txt into .venv (torch 2.x from PyPI; about a minute)"
  # (this machine's pip configuration names local package folders that may be missing: not news)
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt \
    2> >(grep -v "^WARNING: Location 'file:" >&2)
fi
# The compatibility lane: Debian's own torch 1.13, nothing from PyPI (`make test-compat`).
if [ ! -x .venv-compat/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv-compat
fi
