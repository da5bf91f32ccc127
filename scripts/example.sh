#!/usr/bin/env bash
# The worked example (examples/image-classifier) end to end, as docs/getting-started.md walks it:
# its data, `loadscope bench baseline` on its DataLoader and model step, then pytest over its
# experiments and tests through loadscope's plugin. Small by default (what `make test` runs);
# FULL=1 runs the experiments at their declared size (the figures in docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/../examples/image-classifier"
PY=${PY:-../../.venv/bin/python}
[ -f data/demo/dataset.json ] || "$PY" -m loadscope.datasets --out data/demo --images 2000 --videos 0 >/dev/null
"$PY" -m loadscope bench baseline classifier.data:make_loader --step classifier.train:step \
  --setup classifier.train:build --sample-ids classifier.data:sample_ids --repo . --data data/demo/folder \
  --samples "${BASELINE_SAMPLES:-256}" --warmup-samples 128 --repetitions "${BASELINE_REPETITIONS:-2}" \
  --out results/baseline --quiet >/dev/null
"$PY" -m loadscope bench run results/baseline/next-experiment.toml --repetitions 2 --samples 128 \
  --out results/next --quiet >/dev/null  # the suggestion is a valid experiment that runs
echo "example: baseline in examples/image-classifier/results/baseline/diagnosis.md"
# bench tune on the loadscope pipeline of the example, by its own keyword for a knob: one knob,
# two arms, small, to show the path works end to end (experiments/tune.toml itself, run by
# pytest below, is auto against 2 threads; docs/benchmarks.md has a full tune of both knobs).
"$PY" -m loadscope bench tune experiments/tune.toml --knobs prefetch=prefetch_factor --prefetch auto \
  --repetitions 2 --samples 128 --warmup-samples 64 --check-samples 16 --out results/tune --quiet >/dev/null
grep -q "The auto controller settled at threads" results/tune/recommendation.md
echo "example: bench tune in examples/image-classifier/results/tune/recommendation.md"
# The dev build has no installed entry point, hence -p (an installed loadscope needs nothing).
# Small runs report their gates instead of enforcing them: in `make test` a speed verdict from a
# few hundred samples on a busy 2-core machine must not decide pass or fail (a gate's failure is
# tested on an impossible criterion in tests/python/test_bench_user.py). FULL=1 enforces them.
GATES=report
[ -n "${FULL:-}" ] && GATES=enforce
"$PY" -m pytest -p no:cacheprovider -q ${FULL:+--loadscope-full} "--loadscope-gates=$GATES"
