"""Choosing a backend: `auto` takes the best one present and says which, once.

GPU backends are imported lazily so that this module, and everything that
uses it, imports on a machine without CUDA, torch or TensorRT.
"""

from __future__ import annotations

import importlib.util
import logging

from facefusion_batch.errors import BackendUnavailableError
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend
from facefusion_batch.runtime.session import Backend

log = logging.getLogger("ffbatch")


def nvidia_gpu_count() -> int:
    """Number of CUDA devices torch can see; 0 without torch or without a GPU."""
    if importlib.util.find_spec("torch") is None:
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken CUDA install must not crash a CPU render
        return 0


def select_backend(name: str, *, threads: int | None = None) -> Backend:
    if name == "cpu":
        return OnnxRuntimeCpuBackend(threads)
    if name == "auto":
        if nvidia_gpu_count() > 0:
            log.info(
                "backend auto: an NVIDIA GPU is present, but the GPU backends are not built yet; using cpu"
            )
        else:
            log.info("backend auto: no NVIDIA GPU found; using cpu (onnxruntime)")
        return OnnxRuntimeCpuBackend(threads)
    if name in ("cuda", "tensorrt"):
        if nvidia_gpu_count() == 0:
            what = "torch with CUDA" if name == "cuda" else "TensorRT"
            raise BackendUnavailableError(
                f"--backend {name}: no NVIDIA GPU available (needs an NVIDIA GPU and {what}); "
                "use --backend cpu or auto"
            )
        raise BackendUnavailableError(
            f"--backend {name} is not implemented yet in this version of ffbatch; use --backend cpu"
        )
    raise BackendUnavailableError(f"--backend must be one of auto, cpu, cuda, tensorrt (got {name!r})")
