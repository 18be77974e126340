#!/usr/bin/env bash
# GPU check: the core commands end to end on one CUDA device, with the figures printed (issue #18).
#
#   bash benchmarks/gpu_check.sh            # cuda (the first GPU)
#   bash benchmarks/gpu_check.sh cuda:1     # another device; `cpu` runs the same script here, slowly
#
# Needs glmc installed (bash scripts/setup.sh, or any environment with the pinned stack): GLMC and PYTHON name
# the command and interpreter (default: .venv's when present). Everything is written under OUT (default
# runs/gpu_check); models are trained on the device first (GPT-2 and Llama, seeds 0 / 1, 300 steps each), then:
# verify, align with each method, barrier in float32 and bfloat16, a 3-model merge, and the 124M-class scale and
# learned-step benchmarks. About 5 minutes on one H100-class GPU.
set -euo pipefail
DEV=${1:-cuda}
if [ -x .venv/bin/glmc ]; then GLMC=${GLMC:-.venv/bin/glmc}; PYTHON=${PYTHON:-.venv/bin/python}; fi
GLMC=${GLMC:-glmc}
PYTHON=${PYTHON:-python}
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
log() { printf '\n== %s\n' "$*"; }

"$PYTHON" - "$DEV" <<'PY'
import sys, torch
dev = sys.argv[1]
if dev.startswith("cuda"):
    assert torch.cuda.is_available(), "no CUDA device visible to torch"
    i = torch.device(dev).index or 0
    print(f"device {dev}: {torch.cuda.get_device_name(i)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
else:
    print(f"device {dev}, torch {torch.__version__}")
PY

for fam in gpt2 llama; do
  for s in 0 1 2; do
    d="$OUT/$fam-s$s"
    [ -f "$d/config.json" ] || { log "train $fam seed $s"; "$GLMC" train "$fam" --data shakespeare --seed "$s" \
      --steps 300 --device "$DEV" --out "$d" --overwrite --quiet; }
  done
done

for fam in gpt2 llama; do
  log "verify $fam"
  "$GLMC" verify "$OUT/$fam-s0"
  for method in weight activation learned; do
    log "align $fam --method $method"
    "$GLMC" align "$OUT/$fam-s0" "$OUT/$fam-s1" --method "$method" --out "$OUT/$fam-aligned-$method" \
      --device "$DEV" --overwrite --no-progress
  done
  for dtype in float32 bfloat16; do
    log "barrier $fam --dtype $dtype"
    "$GLMC" barrier "$OUT/$fam-s0" "$OUT/$fam-s1" --align none,weight,learned --dtype "$dtype" \
      --device "$DEV" --json "$OUT/$fam-barrier-$dtype.json" --no-progress
  done
  log "merge $fam (3 models)"
  "$GLMC" merge "$OUT/$fam-s0" "$OUT/$fam-s1" "$OUT/$fam-s2" --out "$OUT/$fam-merged" --device "$DEV" \
    --overwrite --no-progress
done

log "scale: weight matching of a GPT-2-124M-class pair"
"$PYTHON" benchmarks/scale.py --device "$DEV" --out "$OUT/scale"
log "learned-matching step at 124M against a plain AdamW step"
"$PYTHON" benchmarks/learned_step.py --device "$DEV" --out "$OUT/scale"
log "done: figures above; JSON under $OUT"
