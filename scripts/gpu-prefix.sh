#!/usr/bin/env bash
# Packs the Debian packages loadscope needs into .gpu/prefix.tar.xz, for a machine that has
# none of them and no package registry (the GPU machine: scripts/gpu-check.sh unpacks it there),
# and the videos its checks read into .gpu/data.tar (it has no ffmpeg CLI to make them).
# Run here, on Debian 12 with `make build` done: the runtime packages are those whose libraries
# the built extension loads (ldd), less the C and C++ runtimes and zlib, which every Linux with
# a Python has; the build needs the -dev packages' headers, pkg-config files and TBB's CMake
# files, and pkgconf itself.
#
# Why one archive rather than the .deb files: the ~130 packages are ~70 MB as .debs, over the
# 64 MiB a device call can carry; most of that is static archives (libavcodec.a alone is 21 MB)
# and documentation, which neither the build nor the loader reads.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu
ext=$(ls python/loadscope/_native*.so 2>/dev/null | head -1)
[ -n "$ext" ] || { echo "gpu-prefix: build the extension first (make build)" >&2; exit 1; }

owner() {  # the package that owns a library path (Debian 12 is usr-merged: try both spellings)
  local p=$1
  for q in "$p" "${p#/usr}" "/usr$p" "$(readlink -f "$p")" "$(readlink -f "$p" | sed 's#^/usr##')"; do
    dpkg -S "$q" 2>/dev/null | head -1 | cut -d: -f1 && return 0
  done
  echo "gpu-prefix: no package owns $p" >&2
  return 1
}

runtime=$(ldd "$ext" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do owner "$lib"; done |
          sort -u | grep -vx -e libc6 -e libstdc++6 -e libgcc-s1 -e zlib1g)
dev="libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev libjpeg62-turbo-dev
     libturbojpeg0-dev libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 zlib1g-dev pkgconf-bin libpkgconf3
     libcurl4-openssl-dev libwebp-dev"

rm -rf "$out/debs" "$out/root"
mkdir -p "$out/debs" "$out/root"
(cd "$out/debs" && apt-get download $runtime $dev >/dev/null)
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$out/root"; done
echo "gpu-prefix: $(ls "$out"/debs | wc -l) packages, $(du -sm "$out/debs" | cut -f1) MB of .debs"

# Keep what the build and the dynamic loader read: headers, shared libraries, pkg-config and
# CMake files, pkgconf. The .pc files name /usr: make them relative to where they lie.
root=$out/root
find "$root" -name '*.a' -delete
# Intel Media SDK's hardware plugins: libmfx loads them only on Intel GPUs (25 MB unpacked).
rm -rf "$root"/usr/lib/x86_64-linux-gnu/mfx "$root"/usr/lib/x86_64-linux-gnu/libmfxhw64.so*
rm -rf "$root/usr/share" "$root/etc"
if [ -d "$root/lib" ]; then cp -a "$root/lib/." "$root/usr/lib/" && rm -rf "$root/lib"; fi
for pc in "$root"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
  sed -i -E 's#^([A-Za-z_]+)=/usr(/|$)#\1=${pcfiledir}/../../..\2#' "$pc"
done
(cd "$root" && { printf '%s\n' $runtime $dev | sort -u > PACKAGES; })
tar -C "$root" -cf - . | xz -T0 -6 > "$out/prefix.tar.xz"
echo "gpu-prefix: $out/prefix.tar.xz, $(du -m "$out/prefix.tar.xz" | cut -f1) MB ($(du -sm "$root" | cut -f1) MB unpacked)"
rm -rf "$out/debs" "$out/root"

# The videos (about 8 MB: with the prefix and the tree, under the 64 MiB a device call carries): the NVDEC
# checks' set (tests/python/test_cuda.py) and the crossover's clips at 360p and 1080p
# (benchmarks/crossover.py). The clips' shards are left out: the experiments read the files.
PY=${PYTHON:-.venv/bin/python}
data=$out/data
rm -rf "$data" && mkdir -p "$data"
$PY -c "import sys; from loadscope import datasets; datasets.gpu_check_videos(sys.argv[1])" "$data/nvdec"
$PY -m loadscope.datasets --out "$data/video-360p" --images 1 --videos 12 --video-profile 360p >/dev/null
$PY -m loadscope.datasets --out "$data/video-1080p" --images 1 --videos 8 --video-profile 1080p >/dev/null
rm -rf "$data"/video-*/shards "$data"/video-*/video_shards
tar -C "$data" -cf "$out/data.tar" .
rm -rf "$data"
# What a device call sends: the tracked and untracked-not-ignored files, and .gpu.
bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | { xargs -0 stat -c %s 2>/dev/null || true; } |
        awk '{s+=$1} END {print s+0}')
bytes=$(( bytes + $(stat -c %s "$out/prefix.tar.xz") + $(stat -c %s "$out/data.tar") ))
echo "gpu-prefix: $out/data.tar, $(( $(stat -c %s "$out/data.tar") >> 20 )) MiB; a device call carrying .gpu sends $(( bytes >> 20 )) MiB of 64"
[ "$bytes" -le $(( 64 << 20 )) ] || { echo "gpu-prefix: over the 64 MiB a device call carries" >&2; exit 1; }
