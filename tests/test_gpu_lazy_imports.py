"""GPU-only packages are imported lazily: with torch, tensorrt, pycuda and pynvml made
unimportable, the package, the CLI and every module that a CPU render touches still import
and work, and asking for a GPU backend is a clear exit-2 message."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest
from media import make_clip

from facefusion_batch.runtime import backends

_spec = importlib.util.spec_from_file_location(
    "ffbatch_bench_startup", Path(__file__).resolve().parents[1] / "scripts" / "bench_startup.py"
)
bench_startup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_startup)

BLOCKED = ("torch", "tensorrt", "pycuda", "pynvml", "nvidia")

SCRIPT = textwrap.dedent(
    f"""
    import sys

    BLOCKED = {BLOCKED!r}
    for name in BLOCKED:  # `import torch` now raises ImportError; find_spec says "not installed"
        sys.modules[name] = None

    import pkgutil, importlib
    import facefusion_batch
    # every module of the package imports (those of the GPU kernel set and the GPU backends too,
    # which import torch only when used)
    for info in pkgutil.walk_packages(facefusion_batch.__path__, "facefusion_batch."):
        if info.name.endswith((".__main__", ".torch_ops", ".torch_paint", ".torch_kernels", ".onnx_torch")):
            continue  # torch's own modules: imported only by the GPU kernel set or backend
        importlib.import_module(info.name)
    import facefusion_batch.runtime.backends as backends
    import facefusion_batch.tools.doctor
    from facefusion_batch.config import resolve_device

    assert backends.nvidia_gpu_count() == 0
    device = resolve_device(backend="auto").device
    cpu = backends.select_backend(device, threads=1)
    assert cpu.name == "cpu"
    lines = facefusion_batch.tools.doctor.report_lines()
    assert any(line.startswith("auto backend  cpu") for line in lines), lines
    for argv in (["render", "x.mp4", "-s", "y.png", "-o", "z.mp4", "--backend", "cuda"],
                 ["engines", "build"]):
        try:
            facefusion_batch.cli.main(argv)
        except SystemExit as exit_:
            assert exit_.code == 2, (argv, exit_.code)
    loaded = sorted(m for m, mod in sys.modules.items() if m.split(".")[0] in BLOCKED and mod is not None)
    assert not loaded, loaded
    print("LAZY-OK")
    """
)


def test_package_and_cli_work_without_gpu_packages(tmp_path):
    make_clip(tmp_path / "x.mp4", size=(64, 48), frames=2)
    cv2.imwrite(str(tmp_path / "y.png"), np.zeros((8, 8, 3), np.uint8))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=480, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "LAZY-OK" in proc.stdout
    # the GPU refusals are messages, not tracebacks
    assert "Traceback" not in proc.stderr
    assert "--backend cuda: no NVIDIA GPU" in proc.stderr
    assert "ffbatch engines build: needs torch with CUDA" in proc.stderr


def test_a_render_with_backend_auto_never_imports_torch_without_a_driver(tmp_path):
    """torch installed, no NVIDIA driver (CI): `--backend auto` decides from the driver's device
    files and renders on the CPU without importing torch (scripts/bench_startup.py measures the
    cost; this is its import check on one run)."""
    if backends.nvidia_driver_present():
        pytest.skip("an NVIDIA driver is present: auto may rightly import torch here")
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: nothing to show")
    clip = bench_startup.one_frame_clip(tmp_path / "one.mp4")
    run = bench_startup.run_once(clip, tmp_path / "out.mp4", "auto")
    assert run["torch"] is False
    assert (tmp_path / "out.mp4").is_file()
