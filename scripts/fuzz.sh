#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets (clang, ASan + UBSan) into build/fuzz, seeds each
# from ../shared/data/real (files under 1 MiB; the image and video targets take an options
# byte first, so their seeds get one), and runs each target for FUZZ_SECONDS (default 60).
# Findings go to build/fuzz/artifacts/<target>/; see tests/fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
TARGETS=${FUZZ_TARGETS:-jpeg png webp tar video audio manifest}
B=build/fuzz
REAL=../shared/data/real
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -g -O1"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DLOADSCOPE_PYTHON=OFF -DLOADSCOPE_TESTS=OFF \
  -DLOADSCOPE_FUZZ=ON >/dev/null
cmake --build $B -j "$(nproc)"

seed() {  # seed TARGET PREFIX(yes|no) PATTERN...
  local t=$1 prefix=$2; shift 2
  mkdir -p $B/corpus/$t $B/artifacts/$t
  [ -d "$REAL" ] || { echo "fuzz: no $REAL; $t starts from an empty corpus"; return; }
  find "$REAL" -type f \( "$@" \) -size -1024k -print0 | while IFS= read -r -d '' f; do
    out=$B/corpus/$t/seed-$(basename "$f" | tr -c 'A-Za-z0-9._-' '_')
    if [ "$prefix" = yes ]; then { printf '\x05'; cat "$f"; } > "$out"; else cp "$f" "$out"; fi
  done
  cp tests/fuzz/regressions/$t/* $B/corpus/$t/ 2>/dev/null || true
}
seed jpeg yes -iname '*.jpg' -o -iname '*.jpeg'
seed png yes -iname '*.png' -o -iname '*.bmp' -o -iname '*.gif' -o -iname '*.tif' -o -iname '*.tiff'
seed webp yes -iname '*.webp'
seed tar no -iname '*.tar' -o -iname '*.tgz' -o -iname '*.tar.gz' -o -iname '*.idx'
seed manifest no -iname '*.jsonl' -o -iname '*.csv'
seed audio yes -iname '*.wav' -o -iname '*.mp3' -o -iname '*.mp4' -o -iname '*.mkv' -o -iname '*.webm'
seed video yes -iname '*.mp4' -o -iname '*.avi' -o -iname '*.mkv' -o -iname '*.webm' -o -iname '*.mov' -o -iname '*.flv' -o -iname '*.ts'

status=0
for t in $TARGETS; do
  echo "== fuzz_$t for ${SECONDS_EACH}s ($(ls $B/corpus/$t | wc -l) seeds)"
  # -max_len: inputs up to 1 MiB (the seeds' size); -timeout: a hang is a finding too.
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
       $B/fuzz_$t -max_total_time="$SECONDS_EACH" -max_len=1048576 -timeout=20 -rss_limit_mb=4096 \
       -artifact_prefix=$B/artifacts/$t/ -print_final_stats=1 $B/corpus/$t 2>&1 | tee $B/fuzz_$t.log | \
       grep -E "^#[0-9]+ +(DONE|pulse)|stat::|ERROR|SUMMARY|Test unit written"; then :; fi
  if ls $B/artifacts/$t/* >/dev/null 2>&1; then echo "fuzz_$t: FINDINGS in $B/artifacts/$t"; status=1; fi
done
exit $status
