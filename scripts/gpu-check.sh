#!/usr/bin/env bash
# The GPU machine's check, in one call (docs/gpu.md): builds loadscope there against its own
# torch with the Debian libraries from .gpu/prefix.tar.xz (made here by scripts/gpu-prefix.sh,
# with the videos of .gpu/data.tar), runs the CUDA tests (NVDEC and NCCL included), measures the
# copies, runs the crossover matrix (CPU decode at 2/4/8/16 threads against GPU decode, images
# and clips at two sizes, benchmarks/crossover.py) and the pinned-memory experiment, and prints
# a table last. Writes everything to $OUT (default results/gpu-check): log.txt, env.txt,
# cuda-tests.txt, probe.json, crossover.md, summary.md, results.tar.gz. Sized for 8 minutes
# (the crossover runs the budgets' extremes first; a rerun of the stage fills in the rest).
#
#   scripts/gpu-check.sh                                   # carry .gpu
#   GPU_CHECK_ONLY=crossover scripts/gpu-check.sh          # a rerun of some stages (after the build):
#                                        cuda, probe, data, crossover, pin_memory, decode, suite
#   GPU_CHECK_S (the whole call, default 540), GPU_CHECK_REPS, GPU_CHECK_SAMPLES (pin_memory, decode),
#   GPU_CHECK_CROSSOVER_S, GPU_CHECK_SUITE_S
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
PY=${PYTHON:-python3}
REPS=${GPU_CHECK_REPS:-3}
SAMPLES=${GPU_CHECK_SAMPLES:-1024}
RES=results/gpu
T0=$(date +%s)
# One deadline for the whole call (a device call is killed at its limit, and then no summary
# is written): each stage gets its own limit or what is left before the deadline, less 20 s
# for the summary, whichever is shorter.
DEADLINE=$(( T0 + ${GPU_CHECK_S:-540} ))
left() { local l=$(( DEADLINE - $(date +%s) - 20 )); [ "$l" -lt "$1" ] || l=$1; [ "$l" -gt 1 ] || l=1; echo "$l"; }
step() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
want() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ ",$GPU_CHECK_ONLY," == *",$1,"* ]]; }
finish() {
  step "summary"
  tar -czf "$OUT/results.tar.gz" "$RES" 2>/dev/null
  cp "$RES/probe.json" "$OUT/" 2>/dev/null
  $PY benchmarks/bench_gpu.py summary "$RES" > "$OUT/summary.md" 2>&1
  { echo "build: ${BUILD:-not reached}"; echo "CUDA tests: ${CUDA_TESTS:-not reached}";
    echo "Python suite (torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)): ${SUITE:-not reached}"; } >> "$OUT/summary.md"
  cat "$OUT/summary.md"
}
trap finish EXIT
rm -rf "$RES" && mkdir -p "$RES"

step "environment"
{
  uname -srm; grep PRETTY_NAME /etc/os-release
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  $PY -c "import sys, torch, torchvision, numpy, PIL; print('python', sys.version.split()[0], '| torch', torch.__version__, 'cuda', torch.version.cuda, '| torchvision', torchvision.__version__, '| numpy', numpy.__version__, '| pillow', PIL.__version__)"
  echo "cores $(nproc), $(free -g | awk '/Mem:/{print $2}') GiB"; g++ --version | head -1; cmake --version | head -1
  echo "ninja: $(command -v ninja || echo none); ffmpeg CLI: $(command -v ffmpeg || echo none)"
  $PY -c "import sysconfig, os; h=sysconfig.get_paths()['include']; print('Python.h:', os.path.exists(h + '/Python.h'), h)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step "unpack the Debian prefix"
P=$PWD/.gpu/prefix
L=$P/usr/lib/x86_64-linux-gnu
rm -rf "$P" && mkdir -p "$P" && tar -C "$P" -xJf .gpu/prefix.tar.xz || { BUILD="no .gpu/prefix.tar.xz (run scripts/gpu-prefix.sh here and carry it)"; exit 1; }
# Where the machine has a library of the same soname, its own (newer) copy is used: Debian's
# are for what it lacks. The linker still finds the unversioned names it links against.
kept=0; dropped=0
for f in "$L"/*.so.*; do
  [ -L "$f" ] && continue
  soname=$(objdump -p "$f" 2>/dev/null | awk '/SONAME/{print $2}')
  case "$soname" in libav*|libsw*|libjpeg*|libturbojpeg*|libtbb*|libpkgconf*|libcurl*|libwebp*|libsharpyuv*) kept=$((kept + 1)); continue;; esac
  if [ -z "${GPU_CHECK_KEEP_ALL:-}" ] && [ -n "$soname" ] && ldconfig -p | grep -q "^[[:space:]]$soname "; then
    rm -f "$L/$soname"; dropped=$((dropped + 1))
  else
    kept=$((kept + 1))
  fi
done
echo "prefix: $kept libraries carried in use, $dropped replaced by the machine's own"
export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_LIBDIR=$L/pkgconfig PKG_CONFIG_PATH=

step "build"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
zlib=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/{print $NF; exit}')
if cmake -S . -B build/gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLOADSCOPE_TESTS=OFF -DLOADSCOPE_PYTHON=ON \
     -DPython3_EXECUTABLE="$($PY -c 'import sys; print(sys.executable)')" -Dpybind11_DIR="$($PY -m pybind11 --cmakedir)" \
     -DPKG_CONFIG_EXECUTABLE="$P/usr/bin/pkgconf" -DCMAKE_PREFIX_PATH="$P/usr" \
     -DZLIB_INCLUDE_DIR="$P/usr/include" -DZLIB_LIBRARY="$zlib" \
     -DLOADSCOPE_MODULE_DIR="$PWD/python/loadscope" > "$RES/cmake.txt" 2>&1 \
   && cmake --build build/gpu -j "$(nproc)" >> "$RES/cmake.txt" 2>&1; then
  BUILD="ok"
else
  BUILD="FAILED (results.tar.gz: results/gpu/cmake.txt)"; tail -40 "$RES/cmake.txt"; exit 1
fi
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
missing=$(ldd python/loadscope/_native*.so | grep "not found")
[ -z "$missing" ] || { BUILD="built, but libraries are missing: $missing"; exit 1; }
$PY -c "import loadscope, loadscope._native as n; print('loadscope', loadscope.__version__, n.library_versions())" || { BUILD="built, import FAILED"; exit 1; }

if want cuda || want data || want crossover; then
  step "data: the carried videos, the images made here (PIL; no ffmpeg CLI on this machine)"
  mkdir -p data && tar -C data -xf .gpu/data.tar || echo "no .gpu/data.tar: NVDEC tests and clips cells will fail"
fi

if want cuda; then
  step "CUDA tests"
  LOADSCOPE_GPU_VIDEOS=$PWD/data/nvdec timeout "$(left 300)" $PY -m pytest tests/python -m cuda -v -s -rs -p no:cacheprovider \
    > "$OUT/cuda-tests.txt" 2>&1
  rc=$?
  if [ $rc -gt 128 ] && [ $rc != 137 ]; then  # killed by a signal: name the test it was in
    CUDA_TESTS="CRASHED (signal $((rc - 128))) in $(grep -oE 'test_[a-z_]+\.py::[^ ]+' "$OUT/cuda-tests.txt" | tail -1)"
  else
    CUDA_TESTS="$(tail -1 "$OUT/cuda-tests.txt")"
  fi
  grep -E "PASSED|FAILED|SKIPPED|ERROR|GPU vs CPU|NVDEC against|CommTimer on NCCL" "$OUT/cuda-tests.txt"
fi

if want probe; then
  step "copies and NVDEC probe"
  timeout "$(left 120)" $PY benchmarks/bench_gpu.py probe "$RES/probe.json" > /dev/null 2>&1 || echo "probe failed"
fi

if want data || want crossover || want decode || want pin_memory; then
  step "demo images (ImageNet sizes) and 1080p photos"
  timeout "$(left 300)" $PY -m loadscope.datasets --out data/demo --images 1000 --videos 0 || echo "data generation failed"
  timeout "$(left 300)" $PY -m loadscope.datasets --out data/photos-1080p --images 256 --videos 0 --image-short 1080 \
    || echo "1080p photo generation failed"
fi

if want crossover; then
  # The budgets' extremes first, every workload; then the middle ones, while time is left.
  # Cells already done are kept (benchmarks/crossover.py resumes), so a rerun fills in the rest.
  step "crossover matrix (${GPU_CHECK_CROSSOVER_S:-210} s at most)"
  end=$(( $(date +%s) + $(left "${GPU_CHECK_CROSSOVER_S:-210}") ))
  for t in 2,16 4,8; do
    cells=$(( end - $(date +%s) )); [ "$cells" -gt 20 ] || break
    timeout "$cells" $PY benchmarks/crossover.py --out "$RES/crossover" --threads "$t" --repetitions "${GPU_CHECK_CROSSOVER_REPS:-3}" \
      > "$RES/crossover-$t.txt" 2>&1 || echo "crossover ($t threads) exited $? (cells done are kept)"
  done
  cp "$RES/crossover/crossover.md" "$OUT/" 2>/dev/null
fi

for exp in pin_memory decode; do
  want "$exp" || continue
  # decode alone is the crossover's images cell at 4 threads: only when asked for by name.
  [ "$exp" = decode ] && [ -z "${GPU_CHECK_ONLY:-}" ] && continue
  step "experiment $exp ($REPS repetitions of $SAMPLES samples)"
  timeout "$(left "${GPU_CHECK_EXP_S:-60}")" $PY -m loadscope bench run "benchmarks/experiments/$exp.toml" --out "$RES/$exp" \
    --repetitions "$REPS" --samples "$SAMPLES" --quiet > "$RES/$exp.txt" 2>&1 || echo "experiment $exp exited $?"
  tail -5 "$RES/$exp.txt"
done

if want suite && [ -n "${GPU_CHECK_ONLY:-}" ]; then  # a torch-version check: only when asked for by name
  step "the whole Python suite under this torch"
  timeout "$(left "${GPU_CHECK_SUITE_S:-120}")" $PY -m pytest tests/python -q -rfE -p no:cacheprovider > "$OUT/suite.txt" 2>&1
  rc=$?
  if [ $rc = 124 ]; then
    SUITE="stopped at ${GPU_CHECK_SUITE_S:-120} s: $(grep -E '^[.FEsxX]+ *(\[|$)' "$OUT/suite.txt" | tr -cd '.FEs' | awk '{print gsub(/\./,"") " passed, " gsub(/F/,"") " failed, " gsub(/E/,"") " errors, " gsub(/s/,"") " skipped so far"}')"
  else
    SUITE="$(tail -1 "$OUT/suite.txt")"
  fi
fi
