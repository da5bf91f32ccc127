#!/usr/bin/env bash
# Installs what loadscope needs on Debian 12 (idempotent, fast when everything is there)
# and makes .venv from Debian's Python with system site packages.
# Usage: scripts/bootstrap.sh            (packages + venv)
#        scripts/bootstrap.sh --fuzz     (also clang with libFuzzer, for `make fuzz`)
#        scripts/bootstrap.sh --check    (exit 1 if anything is missing, install nothing)
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compilers, CMake, pybind11, the codecs and oneTBB. Runtime/test: Debian's torch,
# torchvision, PIL, numpy, pytest, PyAV (torchvision.io.read_video, the video baseline);
# ffmpeg and djpeg CLIs as independent references;
# scikit-image for the real photographs the demo data is cut from.
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  python3-dev python3-venv python3-pip python3-setuptools python3-wheel
  pybind11-dev python3-pybind11
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev
  libjpeg62-turbo-dev libturbojpeg0-dev zlib1g-dev libtbb-dev catch2
  python3-torch python3-torchvision python3-numpy python3-pil python3-psutil
  python3-pytest python3-pytest-timeout python3-skimage python3-scipy python3-matplotlib python3-av
  ffmpeg libjpeg-turbo-progs
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

# The python3 first on PATH may not see Debian's torch: always use Debian's interpreter.
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
