#!/usr/bin/env bash
# Device check on a CUDA machine (run by the lead through the device tool; at most 7.5 minutes):
#   1. the lossless, generation-config and sampling tests on CUDA in fp32 (must pass)
#        RECAP_TEST_DEVICE=cuda pytest tests/test_lossless.py tests/test_generation_config.py tests/test_sampling.py
#   2. the same tests on CUDA in bf16 (RECAP_TEST_DTYPE=bfloat16): measured, not promised;
#      the pass / fail counts go to the summary and do not fail the check
#   2b. sampling agreement in bf16: the quick suite at temperature 0.7 / top-p 0.9, every row
#      beside HF generate(do_sample=True) under shared seeds; its "lossless" column counts the
#      outputs identical to HF's (a bf16 draw near a tie can move: counted, not promised)
#   3. verify time against tree size (1-128 nodes) at the real Qwen2.5-VL-7B dimensions,
#      random weights, bf16 (scripts/verify_curve_7b.py -> verify-curve-7b.json)
#   4. the autobudget verify-time curve and the budget it picks, fp32 and bf16
#   5. the quick bench suite on the embedded shapes model, fp32 and bf16
# Results go to $1, else $OUT, else ./device-check: summary.txt, *.log, verify-curve-7b.json,
# bench-fp32/, bench-bf16/. Every part has its own timeout and the script always continues;
# the exit code is non-zero when any fatal part failed.
#
# Usage: bash scripts/device_check.sh [OUTDIR]
set -u
cd "$(dirname "$0")/.."
OUTDIR="${1:-${OUT:-device-check}}"
mkdir -p "$OUTDIR"
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
FAILED=0
START=$(date +%s)
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$SUMMARY"; }

# step NAME TIMEOUT_S CMD...: run with a timeout, log to $OUTDIR/NAME.log, record the exit code.
# The whole script stays under DEADLINE seconds (default 450): a step gets at most what is left.
# FATAL=0 step ...: a measurement; its failure is logged but does not fail the check.
DEADLINE=${DEADLINE:-450}
FATAL=1
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( DEADLINE - ($(date +%s) - START) ))
  if [ "$left" -lt 20 ]; then log "SKIP  $name (only ${left}s left)"; FAILED=1; return 0; fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "start $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then log "ok    $name"
  elif [ "$FATAL" = 1 ]; then log "FAIL  $name (exit $rc; 124 = timeout)"; FAILED=1
  else log "NOTE  $name (exit $rc; measured, not fatal)"; fi
  tail -n 25 "$OUTDIR/$name.log" | sed 's/^/    /' >> "$SUMMARY"
  return 0
}

# --- environment ------------------------------------------------------------------------
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUTDIR/nvidia-smi.txt" 2>&1 || true
python - > "$OUTDIR/env.txt" 2>&1 <<'PY'
import importlib, platform
print("python", platform.python_version())
for m in ("torch", "transformers", "plotly", "tqdm", "PIL", "safetensors", "networkx", "pytest", "hypothesis"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        print(m, "MISSING", exc)
import torch
print("cuda", torch.cuda.is_available(), torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY
cat "$OUTDIR/env.txt" >> "$SUMMARY"

# Install only what is missing, never torch (the preinstalled CUDA build must stay).
missing=$(python - <<'PY'
import importlib, re
names = {"pillow": "PIL", "plotly": "plotly", "tqdm": "tqdm", "safetensors": "safetensors",
         "networkx": "networkx", "transformers": "transformers"}
out = []
for line in open("requirements.txt"):
    line = line.strip()
    pkg = re.split(r"[<>=!~ ]", line, maxsplit=1)[0].lower()
    if pkg in names:
        try:
            importlib.import_module(names[pkg])
        except Exception:  # noqa: BLE001
            out.append(line)
print(" ".join(out))
PY
)
if [ -n "$missing" ]; then
  log "installing missing packages: $missing"
  timeout 120 pip install -q $missing >> "$OUTDIR/pip.log" 2>&1 || log "pip install failed (offline?): see pip.log"
fi
python -c "import pytest" 2>/dev/null || { timeout 60 pip install -q pytest >> "$OUTDIR/pip.log" 2>&1 || log "pytest missing"; }
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || { log "FAIL  no CUDA device visible"; exit 1; }

# --- 1. lossless + generation-config tests on CUDA, fp32 --------------------------------------
step lossless-cuda 230 env RECAP_TEST_DEVICE=cuda python -m pytest -q -x -p no:cacheprovider \
  tests/test_lossless.py tests/test_generation_config.py tests/test_sampling.py

# --- 2. the same in bf16: how many stay exact (a bf16 argmax tie can flip) ----------------------
FATAL=0 step lossless-cuda-bf16 110 env RECAP_TEST_DEVICE=cuda RECAP_TEST_DTYPE=bfloat16 \
  python -m pytest -q -rf -p no:cacheprovider tests/test_lossless.py tests/test_generation_config.py \
  tests/test_sampling.py

# --- 2b. sampling agreement in bf16 (the bench exits 1 on a mismatch: measured, not fatal) ---------
FATAL=0 step sampling-bf16 90 python -m recap bench --suite quick --limit 9 --repeats 1 --device cuda \
  --dtype bfloat16 --temperature 0.7 --top-p 0.9 --out "$OUTDIR/sampling-bf16" --no-progress

# --- 3. verify time vs tree size at the real Qwen2.5-VL-7B dimensions, bf16 --------------------
step verify-curve-7b 120 python scripts/verify_curve_7b.py --device cuda --dtype bfloat16 --out "$OUTDIR"

# --- 4. autobudget curve --------------------------------------------------------------------
step autobudget 45 python - <<'PY'
import json, time
import torch
import recap
from recap.engine import autobudget
for dtype in (torch.float32, torch.bfloat16):
    t = recap.load_target(None, device="cuda", dtype=dtype)
    t0 = time.perf_counter()
    b = autobudget.auto_budget(t, recap.RecapConfig(budget="auto"))
    dt = time.perf_counter() - t0
    curve = {k: round(v * 1e3, 3) for k, v in autobudget.verify_curve(t).items()}
    print(json.dumps({"dtype": str(dtype), "budget": b, "measure_s": round(dt, 3), "verify_ms": curve}))
PY

# --- 5. quick bench suite, fp32 and bf16 --------------------------------------------------------
for dt in float32 bfloat16; do
  short=$([ "$dt" = float32 ] && echo fp32 || echo bf16)
  step "bench-$short" 120 python -m recap bench --suite quick --device cuda --dtype "$dt" \
    --out "$OUTDIR/bench-$short" --no-progress
done

log "done in $(( $(date +%s) - START ))s; failed=$FAILED"
exit $FAILED
