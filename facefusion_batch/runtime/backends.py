"""Choosing a backend: `auto` takes the best one present and says why; loading it.

GPU backends are imported lazily so that this module, and everything that
uses it, imports on a machine without CUDA, torch or TensorRT. Asking whether
there is a GPU at all is cheap (the driver's device files): a machine without
an NVIDIA driver never imports torch to find out.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
from dataclasses import dataclass

from facefusion_batch.errors import BackendUnavailableError
from facefusion_batch.models.catalog import DEFAULT_DETECTOR, DEFAULT_MESH
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.runtime.engine_cache import EngineCache, MachineKey
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend, OnnxRuntimeCudaBackend
from facefusion_batch.runtime.session import Backend
from facefusion_batch.runtime.tensorrt_backend import TensorRTBackend
from facefusion_batch.runtime.torch_backend import TorchBackend

log = logging.getLogger("ffbatch")


def nvidia_driver_present() -> bool:
    """Whether an NVIDIA driver exposes any GPU here (its /dev and /proc entries): no imports."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*") or glob.glob("/proc/driver/nvidia/gpus/*"))


def nvidia_gpu_count() -> int:
    """Number of CUDA devices torch can see; 0 without torch, a driver or a GPU (torch is only
    imported where a driver is present)."""
    if importlib.util.find_spec("torch") is None or not nvidia_driver_present():
        return 0
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken CUDA install must not crash a CPU render
        return 0


@dataclass(frozen=True)
class Availability:
    """What each GPU backend needs and whether it is here: the facts `auto` and `doctor` use."""

    torch: str | None  # version, or None when not installed
    torch_cuda: str | None  # CUDA version torch was built with
    gpus: int  # CUDA devices torch sees
    tensorrt: str | None  # version, or None
    tensorrt_problem: str  # why TensorRT cannot be used ('' when it can be imported)
    engines_ready: bool  # engines for the default models exist for this GPU and TensorRT

    @property
    def cuda_ok(self) -> bool:
        return self.torch is not None and self.gpus > 0

    @property
    def tensorrt_ok(self) -> bool:
        return self.cuda_ok and self.tensorrt is not None and not self.tensorrt_problem


def _tensorrt_version() -> tuple[str | None, str]:
    if importlib.util.find_spec("tensorrt") is None:
        return None, "not installed"
    try:
        import tensorrt as trt

        return str(trt.__version__), ""
    except Exception as exc:  # the stub packages and broken installs fail here
        return None, f"cannot be imported ({type(exc).__name__}: {exc})"


def availability(check_engines: bool = True) -> Availability:
    """What the GPU backends need and whether it is here. Imports torch (to read its version)
    only where an NVIDIA driver is present; elsewhere torch is reported as installed or not."""
    torch_version = cuda_version = None
    gpus = 0
    if importlib.util.find_spec("torch") is not None and not nvidia_driver_present():
        torch_version = "installed"
    elif importlib.util.find_spec("torch") is not None:
        try:
            import torch

            torch_version = torch.__version__
            cuda_version = torch.version.cuda
            gpus = nvidia_gpu_count()
        except Exception:
            pass
    trt_version, trt_problem = _tensorrt_version()
    ready = False
    if check_engines and gpus and trt_version:
        ready = _default_engines_ready(trt_version)
    return Availability(torch_version, cuda_version, gpus, trt_version, trt_problem, ready)


def _default_engines_ready(trt_version: str) -> bool:
    """Whether the engine directory already holds engines of the default models for GPU 0."""
    try:
        import torch

        p = torch.cuda.get_device_properties(0)
        machine = MachineKey(gpu=p.name, sm=f"sm_{p.major}{p.minor}", tensorrt=trt_version)
        models = {
            e.key.model for e in EngineCache().entries() if e.key is not None and e.key.machine == machine
        }
        return {DEFAULT_DETECTOR, DEFAULT_MESH} <= models
    except Exception:
        return False


def choose_auto(avail: Availability) -> tuple[str, str]:
    """(backend, reason). TensorRT only when its engines are built: `auto` never starts a
    build that takes minutes; torch-CUDA when there is a GPU; else the CPU."""
    if avail.tensorrt_ok and avail.engines_ready:
        return "tensorrt", "an NVIDIA GPU, TensorRT and engines built for it are present"
    if avail.cuda_ok:
        why = "an NVIDIA GPU and torch with CUDA are present"
        if avail.tensorrt_ok:
            why += "; TensorRT is too, but its engines are not built yet (ffbatch engines build)"
        return "cuda", why
    if avail.torch is None:
        return "cpu", "no torch with CUDA installed (pip install 'facefusion-batch[cuda]' on a GPU machine)"
    return "cpu", "no NVIDIA GPU visible to torch"


def choose_backend() -> tuple[str, str]:
    """What `--backend auto` becomes here, and why: without an NVIDIA driver, the CPU at once."""
    if not nvidia_driver_present():
        return "cpu", "no NVIDIA GPU driver on this machine"
    return choose_auto(availability())


def select_backend(device: DeviceSettings, *, threads: int | None = None) -> Backend:
    """The backend of `device` (resolved: cpu, cuda or tensorrt), loaded."""
    device = device.validated()
    if device.backend == "cpu":
        return OnnxRuntimeCpuBackend(threads, precision=device.precision)
    if nvidia_gpu_count() == 0:
        what = "torch with CUDA" if device.backend == "cuda" else "TensorRT and torch with CUDA"
        raise BackendUnavailableError(
            f"--backend {device.backend}: no NVIDIA GPU available (needs an NVIDIA GPU and {what}); "
            "use --backend cpu or auto"
        )
    if device.backend == "cuda" and device.gpu_runtime == "onnxruntime":
        return OnnxRuntimeCudaBackend(device, threads=threads)
    if device.backend == "cuda":
        return TorchBackend(device)
    return TensorRTBackend(device)
