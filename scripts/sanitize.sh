#!/usr/bin/env bash
# `make asan` / `make tsan`: the C++ tests built and run under sanitizers (docs/reliability.md).
#   scripts/sanitize.sh address,undefined   all C++ tests + a Python smoke run (ASan preloaded)
#   scripts/sanitize.sh thread              the engine's and telemetry's tests (threads)
set -euo pipefail
cd "$(dirname "$0")/.."
SAN=${1:?usage: scripts/sanitize.sh address,undefined|thread}
NAME=$([ "$SAN" = thread ] && echo tsan || echo asan)
B=build/$NAME
PY=$(pwd)/.venv/bin/python
python_too=$([ "$NAME" = asan ] && echo ON || echo OFF)
# The Python package beside the sanitized extension module (built into the same folder).
rm -rf $B/py/loadscope  # no module of an older layout left beside the package
mkdir -p $B/py
tar -C python -cf - --exclude='*.so' --exclude=__pycache__ loadscope | tar -C $B/py -xf -
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOADSCOPE_SANITIZE="$SAN" -DLOADSCOPE_TESTS=ON \
  -DLOADSCOPE_PYTHON=$python_too -DPython3_EXECUTABLE="$PY" -DLOADSCOPE_MODULE_DIR="$(pwd)/$B/py/loadscope" >/dev/null
cmake --build $B -j "$(nproc)" $([ "$NAME" = tsan ] && echo --target loadscope_thread_tests)
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [ "$NAME" = asan ]; then
  # detect_leaks: every allocation of a test must be freed (FFmpeg's and TBB's process-wide
  # state is not a leak: it is reachable at exit).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 $B/loadscope_tests
  # Python smoke: the extension built with ASan, loaded into the venv's Python with the ASan
  # runtime preloaded; Python's own allocations are not checked for leaks.
  LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 PYTHONPATH=$B/py $PY scripts/sanitize_smoke.py
else
  # The engine hands samples between the planner, oneTBB's workers and the consumer.
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$(pwd)/scripts/tsan.supp" \
    $B/loadscope_thread_tests "[engine],[telemetry],[tar],[tuner]"
fi
echo "sanitize ($SAN): clean"
