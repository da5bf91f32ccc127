#!/usr/bin/env bash
# Builds the FFmpeg that the wheel carries (`make wheel`, docs/install.md "What the wheel carries"):
# the same release as the system's libavcodec (Debian's source package, with Debian's patches),
# configured LGPL-only with just the decoders, demuxers and parsers loadscope uses. Debian's own
# libavcodec links GPL encoders (x264, x265), so it cannot be carried in a wheel that is not GPL.
# AV1 decodes through libdav1d (BSD-2-Clause), as in Debian's build.
#
# Usage: scripts/build-ffmpeg.sh OUT     (prefix OUT/prefix; a no-op when OUT is up to date)
# Needs no root: apt runs with a private list of deb-src entries, in OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: scripts/build-ffmpeg.sh OUT}")
version=$(dpkg-query -W -f='${source:Version}' libavcodec-dev)
# What the build depends on: the source version and this script (its configure line).
key="$version $(sha256sum "$0" | cut -c1-16)"
if [ -f "$out/prefix/.built" ] && [ "$(cat "$out/prefix/.built")" = "$key" ]; then
  exit 0
fi
rm -rf "$out"
# A build is kept per key in a cache outside the tree (as pip keeps the wheels it built), so a
# fresh clone on the same machine copies it instead of building again; LOADSCOPE_BUILD_CACHE=
# (empty) turns that off. The .pc files name the prefix they were built for: rewritten on the way out.
cache=${LOADSCOPE_BUILD_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/loadscope}
cached=${cache:+$cache/ffmpeg-$(echo "$key" | sha256sum | cut -c1-16)}
if [ -n "$cached" ] && [ -f "$cached/prefix/.built" ] && [ "$(cat "$cached/prefix/.built")" = "$key" ]; then
  mkdir -p "$out"
  cp -a "$cached/prefix" "$out/prefix.tmp"
  sed -i "s|$(cat "$cached/origin")|$out/prefix|g" "$out"/prefix.tmp/lib/pkgconfig/*.pc
  mv "$out/prefix.tmp" "$out/prefix"
  echo "build-ffmpeg: $out/prefix copied from the build cache ($cached)"
  exit 0
fi
mkdir -p "$out/apt/lists/partial" "$out/apt/cache/archives/partial" "$out/src"

# deb-src entries for the suites the system's deb entries name (the security suite carries the
# point releases), in a private apt state: the system's configuration is not touched.
sed -n 's/^Types:.*deb\b.*$/Types: deb-src/;p' /etc/apt/sources.list.d/*.sources > "$out/apt/sources.sources" 2>/dev/null || true
if [ ! -s "$out/apt/sources.sources" ]; then
  sed -n 's/^deb /deb-src /p' /etc/apt/sources.list > "$out/apt/sources.list"
fi
apt_opts=(-o "Dir::Etc::SourceList=$out/apt/sources.list" -o "Dir::Etc::SourceParts=$out/apt"
          -o "Dir::State::Lists=$out/apt/lists" -o "Dir::Cache=$out/apt/cache" -o "Debug::NoLocking=1"
          -o "APT::Sandbox::User=$(id -un)")
touch "$out/apt/sources.list"
echo "build-ffmpeg: Debian's ffmpeg $version (source package; about 10 MB)"
apt-get -q "${apt_opts[@]}" update >"$out/apt.log" 2>&1 || { cat "$out/apt.log" >&2; exit 1; }
(cd "$out/src" && apt-get -q "${apt_opts[@]}" source --download-only "ffmpeg=${version#*:}" >>"$out/apt.log" 2>&1) \
  || (cd "$out/src" && apt-get -q "${apt_opts[@]}" source --download-only "ffmpeg=$version" >>"$out/apt.log" 2>&1) \
  || { cat "$out/apt.log" >&2; exit 1; }
(cd "$out/src" && dpkg-source --no-check -x ffmpeg_*.dsc ffmpeg >/dev/null)

echo "build-ffmpeg: configure + build, decoders only, LGPL (about 2 minutes on 2 cores)"
cd "$out/src/ffmpeg"
# glibc 2.35 gave hypot() a new symbol version, and FFmpeg is the only part of the wheel that
# calls it: bound to the old one, the wheel needs glibc 2.34 (the extension's and Debian's
# libraries' floor), so it installs on RHEL/Rocky/Alma 9 too, not only from Ubuntu 22.04 on.
echo '__asm__(".symver hypot,hypot@GLIBC_2.2.5");' > "$out/glibc-compat.h"
# Every format of the format table (csrc/loadscope/decode/formats.h): its containers' demuxers
# (check-wheel fails when one is missing: _native.formats()["missing_demuxers"]) and the codecs
# they usually carry, and nothing that encodes or reaches
# the network. --disable-gpl/--disable-nonfree are the defaults, written out because they are
# the point.
./configure --prefix="$out/prefix" --extra-cflags="-include $out/glibc-compat.h" --enable-shared --disable-static --enable-pic \
  --disable-programs --disable-doc --disable-gpl --disable-nonfree --disable-version3 \
  --disable-everything --disable-network --disable-avdevice --disable-avfilter --disable-postproc \
  --enable-swscale --enable-swresample --enable-zlib --enable-libdav1d \
  --enable-protocol=file,pipe \
  --enable-decoder=h264,hevc,vp8,vp9,libdav1d,mpeg4,mpeg2video,mpeg1video,mjpeg,png,apng,gif,tiff,bmp,webp,ppm,pgm,pbm \
  --enable-decoder=flv,h263,msmpeg4v1,msmpeg4v2,msmpeg4v3,wmv1,wmv2,wmv3,vc1,dvvideo,rawvideo,theora,rv10,rv20,rv30,rv40 \
  --enable-decoder=aac,aac_latm,mp3,mp3float,mp2,opus,vorbis,flac,alac,wmav1,wmav2,cook,pcm_alaw,pcm_mulaw \
  --enable-decoder=pcm_s16le,pcm_s24le,pcm_s32le,pcm_f32le,pcm_u8,pcm_s16be,pcm_s24be,pcm_s32be,pcm_f32be,pcm_f64le,pcm_s8 \
  --enable-demuxer=mov,matroska,avi,ogg,wav,mp3,flac,aac,image2,gif,mpegts,mpegps,h264,hevc,ivf,obu \
  --enable-demuxer=flv,asf,mpegvideo,m4v,mxf,nut,rm,yuv4mpegpipe,dv,w64,aiff,caf,au \
  --enable-parser=h264,hevc,vp8,vp9,av1,mpeg4video,mpegvideo,aac,mpegaudio,opus,vorbis,flac,png,gif,mjpeg \
  --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb,vp9_superframe_split,aac_adtstoasc,av1_frame_split \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log" >&2; exit 1; }
make -j "$(nproc)" >"$out/make.log" 2>&1 || { tail -30 "$out/make.log" >&2; exit 1; }
make install >>"$out/make.log" 2>&1
# The licence and the exact source, for the wheel's THIRD-PARTY notice (scripts/wheel-notice.py).
cp COPYING.LGPLv2.1 "$out/prefix/COPYING.LGPLv2.1"
{ echo "source: Debian source package ffmpeg $version (https://sources.debian.org/src/ffmpeg/${version#*:}/)"
  echo "configure: $(sed -n "s/^# *//;s/ --prefix=[^ ]*//;s/ --extra-cflags=[^ ]*//;1p" ffbuild/config.log)"; } > "$out/prefix/SOURCE"
echo "$key" > "$out/prefix/.built"
if [ -n "$cached" ] && mkdir -p "$cache" 2>/dev/null; then
  rm -rf "$cached" "$cached.tmp"
  mkdir "$cached.tmp"
  cp -a "$out/prefix" "$cached.tmp/prefix"
  echo "$out/prefix" > "$cached.tmp/origin"
  mv "$cached.tmp" "$cached"
fi
echo "build-ffmpeg: $out/prefix ($(du -sh "$out/prefix/lib" | cut -f1) of libraries)"
