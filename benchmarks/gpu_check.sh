#!/usr/bin/env bash
# GPU check: the core commands end to end on one CUDA device, with the figures printed (issue #18).
#
#   bash benchmarks/gpu_check.sh            # cuda (the first GPU)
#   bash benchmarks/gpu_check.sh cuda:1     # another device; `cpu` runs the same script here, slowly
#   STEPS=20 SCALE=0 bash benchmarks/gpu_check.sh cpu   # a quick rehearsal on the CPU
#
# Needs glmc installed (bash scripts/setup.sh, or any environment with the pinned stack): GLMC and PYTHON name
# the command and interpreter (default: .venv's when present). Models and outputs go under CHECK_DIR (default
# runs/gpu_check; REPORT_DIR, if set, receives the JSON figures and the summary). Models are trained on the
# device first (GPT-2 and Llama, seeds 0 / 1 / 2, STEPS steps each, default 300), then: verify, align with each
# method, barrier in float32 and bfloat16, a 3-model merge, and (SCALE=1, the default) the 124M-class scale and
# learned-step benchmarks. A failing step is reported and the rest still run; the exit status is the number of
# failed steps. About 5 minutes on one H100-class GPU.
set -uo pipefail
DEV=${1:-cuda}
if [ -x .venv/bin/glmc ]; then GLMC=${GLMC:-.venv/bin/glmc}; PYTHON=${PYTHON:-.venv/bin/python}; fi
GLMC=${GLMC:-glmc}
PYTHON=${PYTHON:-python}
DIR=${CHECK_DIR:-runs/gpu_check}
STEPS=${STEPS:-300}
SCALE=${SCALE:-1}
REPORT=${REPORT_DIR:-$DIR}
mkdir -p "$DIR" "$REPORT"
SUMMARY="$REPORT/summary.tsv"
printf 'step\tstatus\tseconds\n' >"$SUMMARY"
FAILED=0

step() {  # step NAME COMMAND…: run, time, record; a failure does not stop the check
  local name=$1; shift
  printf '\n== %s\n' "$name"
  local t0 t1 code
  t0=$(date +%s.%N)
  "$@"
  code=$?
  t1=$(date +%s.%N)
  [ "$code" = 0 ] || FAILED=$((FAILED + 1))
  printf '%s\t%s\t%s\n' "$name" "$([ "$code" = 0 ] && echo ok || echo "FAILED ($code)")" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" >>"$SUMMARY"
}

step "device" "$PYTHON" - "$DEV" <<'PY'
import sys, torch, transformers
dev = sys.argv[1]
if dev.startswith("cuda"):
    assert torch.cuda.is_available(), "no CUDA device visible to torch"
    i = torch.device(dev).index or 0
    print(f"device {dev}: {torch.cuda.get_device_name(i)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"transformers {transformers.__version__}")
else:
    print(f"device {dev}, torch {torch.__version__}, transformers {transformers.__version__}")
PY

for fam in gpt2 llama; do
  for s in 0 1 2; do
    step "train $fam seed $s" "$GLMC" train "$fam" --data shakespeare --seed "$s" --steps "$STEPS" --device "$DEV" \
      --out "$DIR/$fam-s$s" --overwrite --quiet
  done
done

for fam in gpt2 llama; do
  step "verify $fam" "$GLMC" verify "$DIR/$fam-s0"
  for method in weight activation learned; do
    step "align $fam $method" "$GLMC" align "$DIR/$fam-s0" "$DIR/$fam-s1" --method "$method" \
      --out "$DIR/$fam-aligned-$method" --device "$DEV" --overwrite --no-progress
    [ -f "$DIR/$fam-aligned-$method/align.json" ] && cp "$DIR/$fam-aligned-$method/align.json" \
      "$REPORT/$fam-align-$method.json" 2>/dev/null
  done
  for dtype in float32 bfloat16; do
    step "barrier $fam $dtype" "$GLMC" barrier "$DIR/$fam-s0" "$DIR/$fam-s1" --align none,weight,learned \
      --dtype "$dtype" --device "$DEV" --json "$REPORT/$fam-barrier-$dtype.json" --no-progress
  done
  step "merge $fam 3 models" "$GLMC" merge "$DIR/$fam-s0" "$DIR/$fam-s1" "$DIR/$fam-s2" --out "$DIR/$fam-merged" \
    --device "$DEV" --overwrite --no-progress
done

if [ "$SCALE" = 1 ]; then
  step "scale: weight matching, GPT-2-124M pair" "$PYTHON" benchmarks/scale.py --device "$DEV" --out "$REPORT"
  step "learned step at 124M vs AdamW" "$PYTHON" benchmarks/learned_step.py --device "$DEV" --out "$REPORT"
fi

printf '\n== summary (%s)\n' "$SUMMARY"
column -t -s $'\t' "$SUMMARY" 2>/dev/null || cat "$SUMMARY"
exit "$FAILED"
