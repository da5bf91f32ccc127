#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets (clang, ASan + UBSan) into build/fuzz and runs each
# for FUZZ_SECONDS (default 60), building on what earlier campaigns found:
#   - each target's corpus is kept between runs in $LOADSCOPE_FUZZ_CORPUS/<target> (default
#     ~/.cache/loadscope/fuzz-corpus, outside the build tree: a clean or a fresh clone keeps it),
#     seeded once from ../shared/data/real (files under 1 MiB; the image, video and audio targets
#     take an options byte first) and from tests/fuzz/regressions/<target>;
#   - after each run the corpus is merged (-merge=1: only inputs that add coverage are kept, the
#     smallest of equals), so it grows with what was learned, not with every mutation;
#   - a slow or large input is a finding, not a pass: -timeout and -rss_limit_mb come from the
#     bounds of decode/limits.h (a sample costs at most a second and a GiB in the release
#     build; ASan and UBSan make it several times slower), see docs/reliability.md.
# Per target it reports the executions, the coverage before and after, the corpus kept and the
# findings (build/fuzz/artifacts/<target>/), also in build/fuzz/summary.md; exit 1 on a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
TARGETS=${FUZZ_TARGETS:-jpeg png webp tar video audio manifest}
TIMEOUT_S=${FUZZ_TIMEOUT:-5}     # seconds per input under ASan: the release build's 1 s bound, sanitized
RSS_MB=${FUZZ_RSS_MB:-1024}      # a GiB per input, the memory bound of one loader thread
B=build/fuzz
KEEP=${LOADSCOPE_FUZZ_CORPUS:-${XDG_CACHE_HOME:-$HOME/.cache}/loadscope/fuzz-corpus}
REAL=../shared/data/real
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -g -O1"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DLOADSCOPE_PYTHON=OFF -DLOADSCOPE_TESTS=OFF \
  -DLOADSCOPE_FUZZ=ON >/dev/null
cmake --build $B -j "$(nproc)"

seed() {  # seed TARGET PREFIX(yes|no) PATTERN...: the seeds, refreshed every run (cheap)
  local t=$1 prefix=$2; shift 2
  rm -rf $B/seeds/$t
  mkdir -p $B/seeds/$t $B/artifacts/$t "$KEEP/$t"
  if [ -d "$REAL" ]; then
    find "$REAL" -type f \( "$@" \) -size -1024k -print0 | while IFS= read -r -d '' f; do
      out=$B/seeds/$t/seed-$(basename "$f" | tr -c 'A-Za-z0-9._-' '_')
      if [ "$prefix" = yes ]; then { printf '\x05'; cat "$f"; } > "$out"; else cp "$f" "$out"; fi
    done
  else
    echo "fuzz: no $REAL; $t starts from its kept corpus and regressions only"
  fi
  cp tests/fuzz/regressions/$t/* $B/seeds/$t/ 2>/dev/null || true
}
seed jpeg yes -iname '*.jpg' -o -iname '*.jpeg'
seed png yes -iname '*.png' -o -iname '*.bmp' -o -iname '*.gif' -o -iname '*.tif' -o -iname '*.tiff'
seed webp yes -iname '*.webp'
seed tar no -iname '*.tar' -o -iname '*.tgz' -o -iname '*.tar.gz' -o -iname '*.idx'
seed manifest no -iname '*.jsonl' -o -iname '*.csv'
seed audio yes -iname '*.wav' -o -iname '*.mp3' -o -iname '*.mp4' -o -iname '*.mkv' -o -iname '*.webm'
seed video yes -iname '*.mp4' -o -iname '*.avi' -o -iname '*.mkv' -o -iname '*.webm' -o -iname '*.mov' -o -iname '*.flv' -o -iname '*.ts'

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:quarantine_size_mb=64
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
stat() { grep -oE "$1: *[0-9]+" "$2" | tail -1 | grep -oE '[0-9]+$' || echo 0; }
# The coverage libFuzzer reports: when the corpus was loaded (INITED), and the last it saw.
cov() { grep -oE "#[0-9]+[[:space:]]+$1[[:space:]]+cov: [0-9]+" "$2" | tail -1 | grep -oE '[0-9]+$' || echo 0; }
last_cov() { grep -oE "cov: [0-9]+" "$1" | tail -1 | grep -oE '[0-9]+$' || echo 0; }
status=0
summary="| target | seconds | executions | coverage before | after | corpus kept | findings |\n|---|---|---|---|---|---|---|\n"
for t in $TARGETS; do
  before=$(ls "$KEEP/$t" | wc -l)
  echo "== fuzz_$t for ${SECONDS_EACH}s (kept corpus: $before inputs; $(ls $B/seeds/$t | wc -l) seeds)"
  # New inputs go to the kept corpus (the first folder); -max_len: inputs up to 1 MiB (the
  # seeds' size); -timeout / -rss_limit_mb (and malloc_limit_mb, the same): a slow or large
  # input is a finding.
  if ! $B/fuzz_$t -max_total_time="$SECONDS_EACH" -max_len=1048576 -timeout="$TIMEOUT_S" -rss_limit_mb="$RSS_MB" \
       -artifact_prefix=$B/artifacts/$t/ -print_final_stats=1 "$KEEP/$t" $B/seeds/$t > $B/fuzz_$t.log 2>&1; then :; fi
  grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units|ERROR|SUMMARY|Test unit written" \
    $B/fuzz_$t.log || true
  # Merge: the kept corpus becomes the smallest set with the coverage of it and the seeds.
  rm -rf "$KEEP/$t.merged" && mkdir -p "$KEEP/$t.merged"
  # (A unit that times out or crashes while merging is a finding too: into the artifacts, not the cwd.)
  if $B/fuzz_$t -merge=1 -timeout="$TIMEOUT_S" -rss_limit_mb="$RSS_MB" -artifact_prefix=$B/artifacts/$t/ \
       "$KEEP/$t.merged" "$KEEP/$t" $B/seeds/$t \
       > $B/merge_$t.log 2>&1; then
    rm -rf "$KEEP/$t" && mv "$KEEP/$t.merged" "$KEEP/$t"
  else
    echo "fuzz_$t: the merge failed (kept the corpus as it was): $B/merge_$t.log"; rm -rf "$KEEP/$t.merged"
  fi
  findings=$(ls $B/artifacts/$t 2>/dev/null | wc -l)
  row="| $t | $SECONDS_EACH | $(stat stat::number_of_executed_units $B/fuzz_$t.log) | $(cov INITED $B/fuzz_$t.log) | $(last_cov $B/fuzz_$t.log) | $(ls "$KEEP/$t" | wc -l) (was $before) | $findings |"
  echo "$row"
  summary+="$row\n"
  if [ "$findings" -gt 0 ]; then echo "fuzz_$t: FINDINGS in $B/artifacts/$t"; status=1; fi
done
printf "fuzz: -timeout=%s -rss_limit_mb=%s, corpora in %s\n\n$summary" "$TIMEOUT_S" "$RSS_MB" "$KEEP" | tee $B/summary.md
exit $status
