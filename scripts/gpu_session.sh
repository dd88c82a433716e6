#!/usr/bin/env bash
# One prepared run on a machine with an NVIDIA GPU, about 10 minutes: environment, `ffbatch doctor`,
# the GPU tests, scripts/bench_gpu.py, then the cuda backend's two runtimes timed model by model
# (`bench_gpu.py --runtimes`: torch's ONNX interpreter against onnxruntime's CUDA provider with I/O
# binding; an onnxruntime-gpu wheel in .whl/ort-gpu/ is used for it where the machine's onnxruntime
# has no CUDA provider). Logs, the benchmark JSONs and the chart land in $OUT
# (default out/gpu-session). Prepare with `make gpu-kit` where there is network; carry .whl and
# .gpu-kit. Each step has its own time limit, so one that hangs cannot eat the others' time.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu-session}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ffbatch-site \
    .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/ffbatch-site:$PWD
else
  export PYTHONPATH=$PWD
fi
if [ -d .gpu-kit/home ]; then
  export FFBATCH_HOME=$PWD/.gpu-kit/home
fi
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c 'import sys, torch, av, cv2, onnxruntime as o; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "av", av.__version__, "cv2", cv2.__version__, "onnxruntime", o.__version__, o.get_available_providers()); print("cpus", __import__("os").cpu_count())'
} 2>&1 | tee "$OUT/env.txt"
timeout "${DOCTOR_S:-60}" $PY -m facefusion_batch doctor 2>&1 | tee "$OUT/doctor.txt"
timeout "${TESTS_S:-240}" $PY -m pytest -q -p no:cacheprovider -o addopts="" -rs \
  tests/test_gpu_on_cuda.py tests/test_gpu_planes.py tests/test_kernels_pipeline.py tests/test_kernels_torch_ops.py \
  tests/test_gpu_ort_runtime.py 2>&1 | tee "$OUT/pytest.txt"
timeout "${BENCH_S:-300}" $PY scripts/bench_gpu.py --budget "${BUDGET:-270}" --out "$OUT/gpu.json" 2>&1 \
  | tee "$OUT/bench.txt"
ORT_PATH=$PYTHONPATH
if ls .whl/ort-gpu/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ffbatch-ort-gpu \
    .whl/ort-gpu/*.whl && ORT_PATH=/tmp/ffbatch-ort-gpu:$PYTHONPATH
fi
PYTHONPATH=$ORT_PATH timeout "${RUNTIMES_S:-180}" $PY scripts/bench_gpu.py --runtimes --budget "${RUNTIMES_BUDGET:-150}" \
  --out "$OUT/gpu-runtimes.json" 2>&1 | tee "$OUT/runtimes.txt"
ls -la "$OUT"
