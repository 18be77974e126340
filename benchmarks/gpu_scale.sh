#!/usr/bin/env bash
# Real sizes on one GPU in under 8 minutes (issue #47): weight matching at GPT-2-124M, Pythia-410M and
# TinyLlama-1.1B shapes, a learned-matching step at 124M and 410M, a barrier curve at 410M; wall time, peak memory
# (resident and device) and max |Δlogits| of every transform, each step in its own process.
#
#   bash benchmarks/gpu_scale.sh                  # cuda; figures in benchmarks/results/gpu/gpu_scale.{json,md}
#   bash benchmarks/gpu_scale.sh cpu --quick      # the same steps at tiny shapes on the CPU (a test runs this)
#   OUT=/tmp/g bash benchmarks/gpu_scale.sh cuda  # elsewhere
#
# The random-weight pairs are built first (cached under CACHE, default runs/scale; building the 1.1B pair takes
# about a minute and 8.8 GB of disk) and are not timed. Needs glmc installed (bash scripts/setup.sh): PYTHON names
# the interpreter (default: .venv's when present). Exit status: the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
DEV=${1:-cuda}
shift $(( $# > 0 ? 1 : 0 ))
if [ -x .venv/bin/python ]; then PYTHON=${PYTHON:-.venv/bin/python}; fi
PYTHON=${PYTHON:-python}
exec "$PYTHON" benchmarks/gpu_scale.py --device "$DEV" --cache "${CACHE:-runs/scale}" \
  --out "${OUT:-benchmarks/results/gpu}" "$@"
