#!/usr/bin/env bash
# One prepared run on a machine with an NVIDIA GPU, under 8 minutes in all (SESSION_S, default 450 s):
#   env       the GPU, driver and Python packages;
#   doctor    `ffbatch doctor`;
#   tests     the GPU tests (they skip without a GPU);
#   precision scripts/bench_precisions.py: the inswapper stand-in as FP32, FP16 and INT8 files
#             (models/convert.py), each TensorRT engine's real precision (its inspector's layer
#             shares) where TensorRT is installed, ms per call and deviation from FP32 on face crops,
#             also on the cuda backend's runtimes;
#   runtimes  scripts/bench_gpu.py --runtimes: torch's ONNX interpreter against onnxruntime's CUDA
#             provider with I/O binding (an onnxruntime-gpu wheel in .whl/ort-gpu/ is used where the
#             machine's onnxruntime has no CUDA provider);
#   bench     scripts/bench_gpu.py: renders, floors, batches and streams, in the time left.
# Each step has its own time limit (DOCTOR_S, TESTS_S, PRECISION_S, RUNTIMES_S, BENCH_S), cut to what
# is left of the session, so one that hangs cannot eat the others' time. $OUT (default
# out/gpu-session) gets at most 8 files, what the device tool brings back: session.log (every
# step's output), summary.txt, gpu.json/.png, gpu-runtimes.json, precisions.json/.png. The script ends with one table of the steps, and exits 1 only when a step
# failed or ran out of its time (a step skipped for want of TensorRT, a GPU or time is no failure).
# Prepare with `make gpu-kit` where there is network; carry .whl and .gpu-kit.
#
#   scripts/gpu_session.sh              # on the GPU machine
#   PYTHON=.venv/bin/python scripts/gpu_session.sh --dry-run   # here, on the CPU: every step that
#                                       # can run without a GPU, small (tests collected, not run)
set -u
cd "$(dirname "$0")/.."
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: scripts/gpu_session.sh [--dry-run]" >&2; exit 2 ;;
esac
if [ "$DRY" = 1 ]; then OUT=${OUT:-out/gpu-session-dry}; else OUT=${OUT:-out/gpu-session}; fi
mkdir -p "$OUT"
LOG=$OUT/session.log
: >"$LOG"
export OUT PYTHONUNBUFFERED=1 PY=${PYTHON:-python3}
SESSION_S=${SESSION_S:-450}
START=$SECONDS
STEPS=/tmp/ffbatch-gpu-session.$$
mkdir -p "$STEPS"
ROWS=()
FAILED=0

# step NAME LIMIT_S NEED_S COMMAND: run COMMAND (a shell line; $LIMIT is its time limit in seconds)
# under the smaller of LIMIT_S and the session's time left; skipped when less than NEED_S is left.
step() {
  local name=$1 limit=$2 need=$3 cmd=$4 left rc status t0 note
  left=$((SESSION_S - (SECONDS - START)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt "$need" ]; then
    ROWS+=("$name|skipped|0|session time: ${left} s left, needs ${need} s")
    return
  fi
  echo "=== $name (limit ${limit} s) ===" | tee -a "$LOG"
  t0=$SECONDS
  LIMIT=$limit timeout -k 10 "$limit" bash -c "$cmd" 2>&1 | tee "$STEPS/$name" >>"$LOG"
  rc=${PIPESTATUS[0]}
  tail -n 40 "$STEPS/$name"
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out"; FAILED=1 ;;
    *) status="failed ($rc)"; FAILED=1 ;;
  esac
  note=$(grep -v '^\s*$' "$STEPS/$name" | tail -n 1 | cut -c1-90)
  ROWS+=("$name|$status|$((SECONDS - t0))|$note")
}

skip() { ROWS+=("$1|skipped|0|$2"); }

if ls .whl/*.whl >/dev/null 2>&1; then
  step wheels 60 5 '$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/ffbatch-site .whl/*.whl'
  export PYTHONPATH=/tmp/ffbatch-site:$PWD
else
  export PYTHONPATH=$PWD
fi
if [ -d .gpu-kit/home ]; then
  export FFBATCH_HOME=$PWD/.gpu-kit/home
fi
ORT_PATH=$PYTHONPATH
if [ "$DRY" = 0 ] && ls .whl/ort-gpu/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ffbatch-ort-gpu \
    .whl/ort-gpu/*.whl >>"$LOG" 2>&1 && ORT_PATH=/tmp/ffbatch-ort-gpu:$PYTHONPATH
fi
export ORT_PATH
CROPS=""
[ -f .gpu-kit/crops/manifest.json ] && CROPS="--crops .gpu-kit/crops"
export CROPS

step env 30 5 '{ command -v nvidia-smi >/dev/null \
    && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv \
    || echo "no nvidia-smi"; } ; $PY -c "import sys, os, torch, av, cv2, onnxruntime as o; \
print(sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"av\", av.__version__, \
\"cv2\", cv2.__version__, \"onnxruntime\", o.__version__, o.get_available_providers(), \"cpus\", os.cpu_count())" \
&& { $PY -c "import tensorrt; print(\"tensorrt\", tensorrt.__version__)" 2>/dev/null || echo "tensorrt: not installed"; }'
step doctor "${DOCTOR_S:-40}" 10 '$PY -m facefusion_batch doctor'
GPU_TESTS="tests/test_gpu_on_cuda.py tests/test_gpu_planes.py tests/test_kernels_pipeline.py \
tests/test_kernels_torch_ops.py tests/test_gpu_ort_runtime.py"
if [ "$DRY" = 1 ]; then
  step tests 120 20 "set -o pipefail; \$PY -m pytest -q -p no:cacheprovider -o addopts='' --collect-only $GPU_TESTS | tail -n 3"
  step precision 150 30 '$PY scripts/bench_precisions.py --device cpu --width 32 --batch 2 --calls 2 --count 8 \
    --budget $((LIMIT - 15)) $CROPS --out "$OUT/precisions.json"'
  step runtimes 180 20 '$PY scripts/bench_gpu.py --runtimes --device cpu --batches 1 --calls 1 \
    --budget $((LIMIT - 100)) --out "$OUT/gpu-runtimes.json"'
  skip bench "needs an NVIDIA GPU (dry run)"
else
  step tests "${TESTS_S:-120}" 30 "\$PY -m pytest -q -p no:cacheprovider -o addopts='' -rs $GPU_TESTS"
  step precision "${PRECISION_S:-130}" 45 'PYTHONPATH=$ORT_PATH $PY scripts/bench_precisions.py --budget $((LIMIT - 15)) $CROPS \
    --out "$OUT/precisions.json"'
  step runtimes "${RUNTIMES_S:-70}" 30 'PYTHONPATH=$ORT_PATH $PY scripts/bench_gpu.py --runtimes --budget $((LIMIT - 15)) \
    --out "$OUT/gpu-runtimes.json"'
  step bench "${BENCH_S:-170}" 60 '$PY scripts/bench_gpu.py --budget $((LIMIT - 25)) --out "$OUT/gpu.json"'
fi

{
  echo
  echo "ffbatch GPU session$([ "$DRY" = 1 ] && echo ' (dry run)'): $((SECONDS - START)) s of ${SESSION_S} s"
  printf '%-10s %-12s %6s  %s\n' step status seconds "last line"
  for row in "${ROWS[@]}"; do
    IFS='|' read -r name status secs note <<<"$row"
    printf '%-10s %-12s %6s  %s\n' "$name" "$status" "$secs" "$note"
  done
  if [ -f "$OUT/precisions.json" ]; then
    echo
    echo "inswapper stand-in by precision ($OUT/precisions.json):"
    $PY -c "import json, sys; sys.path.insert(0, 'scripts'); from bench_precisions import summary; \
print('\n'.join(summary(json.load(open('$OUT/precisions.json')))))" 2>&1
  fi
  echo
  ls -la "$OUT"
} | tee "$OUT/summary.txt"
cat "$OUT/summary.txt" >>"$LOG"
rm -rf "$STEPS"
exit $FAILED
