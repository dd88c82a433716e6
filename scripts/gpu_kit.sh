#!/usr/bin/env bash
# Prepare, on this machine, what one GPU session needs beside the working tree (make gpu-kit):
#   .whl/      PyAV for the GPU machine's Python (it has torch with CUDA, onnxruntime, OpenCV,
#              typer, tqdm, NVML, pytest, but no PyAV), fetched with `pip download`;
#   .gpu-kit/  a copy of the model store (default models and test photos, already converted and
#              verified here, so the GPU machine needs no network), and with CALIBRATION_DIR=DIR
#              16 crops of that calibration set in .gpu-kit/crops.
# Both are git-ignored. Then run scripts/gpu_session.sh there, carrying .whl and .gpu-kit.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
GPU_PYTHON_VERSION=${GPU_PYTHON_VERSION:-3.12}
AV_VERSION=$($PY -c 'import av; print(av.__version__)' 2>/dev/null || echo 18.1.0)
mkdir -p .whl
if ! ls .whl/av-"$AV_VERSION"-*.whl >/dev/null 2>&1; then
  $PY -m pip download --quiet --no-deps --only-binary=:all: --python-version "$GPU_PYTHON_VERSION" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "av==$AV_VERSION"
fi
HOME_DIR=${FFBATCH_HOME:-$HOME/.cache/ffbatch}
rm -rf .gpu-kit && mkdir -p .gpu-kit/home
cp -r "$HOME_DIR/models" "$HOME_DIR/assets" .gpu-kit/home/
cp "$HOME_DIR"/*.json .gpu-kit/home/ 2>/dev/null || true
rm -f .gpu-kit/home/models/*.tflite .gpu-kit/home/models/*.tflite.verified.json
# a calibration set of real faces (`ffbatch models calibration-crops -o DIR`), when given: its first
# 16 crops with the manifest and embeddings, for bench_precisions.py in the session (.gpu-kit/crops)
if [ -n "${CALIBRATION_DIR:-}" ]; then
  mkdir -p .gpu-kit/crops
  cp "$CALIBRATION_DIR"/manifest.json "$CALIBRATION_DIR"/embeddings.npy .gpu-kit/crops/
  find "$CALIBRATION_DIR" -maxdepth 1 -name 'crop_*.png' | sort | head -n 16 | xargs -r cp -t .gpu-kit/crops/
fi
du -sh .whl .gpu-kit
