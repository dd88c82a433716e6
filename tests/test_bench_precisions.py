"""scripts/bench_precisions.py (issue 34 item 6), run here as its dry run: a narrow inswapper stand-in
on the CPU, TensorRT played by the strict stand-in of its API (tests/trt_standin.py, as 11.x), so
that the GPU session's first real run does not die in code no machine here has run. What the
stand-in proves and what it does not is in its docstring: here, that the script builds the three
engines through the backend, reads their layer shares, and reports timings and deviations."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import trt_standin

torch = pytest.importorskip("torch")

from facefusion_batch.runtime import tensorrt_backend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GPU = ("NVIDIA H100 80GB HBM3", "sm_90")
DRY_RUN = ["--device", "cpu", "--width", "16", "--batch", "2", "--calls", "1", "--count", "8"]


def load_script():
    spec = importlib.util.spec_from_file_location(
        "bench_precisions", ROOT / "scripts" / "bench_precisions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def standin_trt(monkeypatch):
    module = trt_standin.make("11.4.0.106")
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.setattr(trt_standin.DEVICE, "budget_bytes", None)
    monkeypatch.setattr(tensorrt_backend, "open_gpu", lambda index, purpose: ("cpu", *GPU))
    monkeypatch.setattr(
        tensorrt_backend,
        "device_scratch",
        lambda nbytes, device: torch.empty(nbytes, dtype=torch.uint8) if nbytes else None,
    )
    return module


@pytest.mark.slow
def test_the_dry_run_reports_each_engines_precision_timing_and_deviation(standin_trt, tmp_path, capsys):
    out = tmp_path / "precisions.json"
    assert load_script().main([*DRY_RUN, "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    runs = results["runs"]
    assert runs["tensorrt"]["version"] == "11.4.0.106"
    assert "faces of the embedded photos" in results["crops"]
    fp32 = runs["tensorrt fp32"]
    assert fp32["layer_shares"]["fp32"] == 1.0 and fp32["layers_line"].startswith("fp16 0%")
    assert fp32["max_levels"] < 0.01 and fp32["ms_per_call"] > 0  # the stand-in computes in fp32
    fp16 = runs["tensorrt fp16"]
    assert fp16["layer_shares"]["fp16"] > 0.5 and 0 < fp16["max_levels"] < 5
    int8 = runs["tensorrt int8"]  # built, or refused with the reason when it came out mostly FP32
    assert ("int8" in int8.get("layers", {})) or "mostly FP32" in int8["refused"]
    for label in ("torch fp32", "torch fp16 file", "torch int8 file"):
        assert runs[label]["ms_per_call"] > 0 and runs[label]["max_levels"] >= 0
    assert runs["torch fp16 file"]["max_levels"] > 0  # the fp16 file is not the fp32 one
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "tensorrt: 11.4.0.106" in printed and "tensorrt fp16" in printed and "fp16 " in printed


@pytest.mark.slow
def test_a_failed_run_is_reported_and_exits_1(tmp_path, monkeypatch, capsys):
    """Without TensorRT the engines are skipped (not a failure); a runtime that breaks is one."""
    from facefusion_batch.runtime.torch_backend import TorchBackend

    real = TorchBackend.load

    def load(self, path, *, label):
        if "int8" in Path(path).name:
            raise RuntimeError("no kernel for this")
        return real(self, path, label=label)

    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import fails: not installed
    monkeypatch.setattr(TorchBackend, "load", load)
    out = tmp_path / "precisions.json"
    assert load_script().main([*DRY_RUN, "--out", str(out)]) == 1
    runs = json.loads(out.read_text())["runs"]
    assert "not installed" in runs["tensorrt"]["skipped"]
    assert runs["torch int8 file"] == {"error": "RuntimeError: no kernel for this"}
    assert runs["torch fp32"]["ms_per_call"] > 0
    assert "failed: torch int8 file" in capsys.readouterr().err


def test_bad_arguments_exit_2(tmp_path):
    with pytest.raises(SystemExit) as stop:
        load_script().main(["--device", "cpu", "--width", "12", "--out", str(tmp_path / "p.json")])
    assert stop.value.code == 2
    with pytest.raises(SystemExit) as stop:
        load_script().main(["--device", "cpu", "--crops", str(tmp_path), "--out", str(tmp_path / "p.json")])
    assert stop.value.code == 2
