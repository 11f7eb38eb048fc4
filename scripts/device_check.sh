#!/usr/bin/env bash
# Device check on a CUDA machine (run by the lead through the device tool; at most 7 minutes):
#   1. the lossless, generation-config and sampling tests on CUDA in fp32 (must pass)
#        RECAP_TEST_DEVICE=cuda pytest tests/test_lossless.py tests/test_generation_config.py tests/test_sampling.py
#   2. the reduced-precision guarantee on CUDA in bf16 (must pass): every tiny family x every method,
#      each output checked token by token with recap.verification.ties.check_greedy, every token the
#      model's greedy choice within the tie tolerance (scripts/device_measure.py precision ->
#      precision-bf16.json: outputs identical to generate(), outputs with ties, errors)
#   3. the default's speed against generate() at the real Qwen2.5-VL-7B text sizes, random weights built
#      on the device in bf16: generate(), ar and recap under the default RecapConfig, one 512-token
#      prompt, 128 tokens, interleaved; recap's output checked as in 2 (scripts/device_measure.py speed
#      -> speed-7b.json; a speed is measured, not promised: not fatal, a non-lossless output is)
#   4. verify time against tree size (1-128 nodes) at the same sizes, bf16
#      (scripts/verify_curve_7b.py -> verify-curve-7b.json)
#   5. the quick bench suite on the embedded shapes model in bf16 (measured, not fatal)
# Dropped to stay within 7 minutes (the earlier check had them): the bf16 pytest run (2 replaces it:
# a mismatch there is a tie or an error, and only an error fails), sampling in bf16, the autobudget
# curve of the embedded model and its fp32 quick suite.
# Results go to $1, else $OUT, else ./device-check: summary.txt, *.log, precision-bf16.json,
# speed-7b.json, verify-curve-7b.json, bench-bf16/. Every part has its own timeout and the script
# always continues; the exit code is non-zero when any fatal part failed (or was skipped for time).
# Each Python part runs on a CPU with tiny sizes too (tests/test_device_check.py):
#   python scripts/device_measure.py precision --dry-run; python scripts/device_measure.py speed --dry-run
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
# The whole script stays under DEADLINE seconds (default 420: 7 minutes): a step gets at most what is left.
# FATAL=0 step ...: a measurement; its failure (or skip) is logged but does not fail the check.
DEADLINE=${DEADLINE:-420}
FATAL=1
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( DEADLINE - ($(date +%s) - START) ))
  if [ "$left" -lt 20 ]; then
    log "SKIP  $name (only ${left}s left)"; [ "$FATAL" = 1 ] && FAILED=1; return 0
  fi
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

# --- 1. lossless + generation-config + sampling tests on CUDA, fp32 --------------------------------
step lossless-cuda 150 env RECAP_TEST_DEVICE=cuda python -m pytest -q -x -p no:cacheprovider \
  tests/test_lossless.py tests/test_generation_config.py tests/test_sampling.py

# --- 2. the reduced-precision guarantee in bf16: every token a greedy choice within the tie tolerance --
step precision-bf16 70 python scripts/device_measure.py precision --device cuda --dtype bfloat16 --out "$OUTDIR"

# --- 3. the default's speed against generate() at Qwen2.5-VL-7B sizes, bf16 ---------------------------
step speed-7b 100 python scripts/device_measure.py speed --device cuda --dtype bfloat16 --out "$OUTDIR"

# --- 4. verify time vs tree size at the real Qwen2.5-VL-7B dimensions, bf16 --------------------------
FATAL=0 step verify-curve-7b 70 python scripts/verify_curve_7b.py --device cuda --dtype bfloat16 \
  --repeats 3 --max-seconds 8 --out "$OUTDIR"

# --- 5. quick bench suite on the embedded model, bf16 ------------------------------------------------
FATAL=0 step bench-bf16 60 python -m recap bench --suite quick --device cuda --dtype bfloat16 \
  --out "$OUTDIR/bench-bf16" --no-progress

log "done in $(( $(date +%s) - START ))s; failed=$FAILED"
exit $FAILED
