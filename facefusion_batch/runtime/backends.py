"""Choosing a backend: `auto` takes the best one present and says which, and why, once.

GPU backends are imported lazily so that this module, and everything that
uses it, imports on a machine without CUDA, torch or TensorRT.
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from facefusion_batch.errors import BackendUnavailableError
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend
from facefusion_batch.runtime.options import DeviceOptions
from facefusion_batch.runtime.session import Backend

log = logging.getLogger("ffbatch")

BACKENDS = ("auto", "cpu", "cuda", "tensorrt")

# Until RenderSettings carries DeviceOptions, the CLI scopes them around a render with
# `device_options(...)`; an explicit `options=` argument always wins.
_SCOPED_OPTIONS: contextvars.ContextVar[DeviceOptions | None] = contextvars.ContextVar(
    "ffbatch_device_options", default=None
)


@contextmanager
def device_options(options: DeviceOptions) -> Iterator[DeviceOptions]:
    token = _SCOPED_OPTIONS.set(options.validated())
    try:
        yield options
    finally:
        _SCOPED_OPTIONS.reset(token)


def scoped_options() -> DeviceOptions:
    return _SCOPED_OPTIONS.get() or DeviceOptions()


def nvidia_gpu_count() -> int:
    """Number of CUDA devices torch can see; 0 without torch or without a GPU."""
    if importlib.util.find_spec("torch") is None:
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
    torch_version = cuda_version = None
    gpus = 0
    if importlib.util.find_spec("torch") is not None:
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

        from facefusion_batch.runtime.engine_cache import EngineCache, MachineKey

        p = torch.cuda.get_device_properties(0)
        machine = MachineKey(gpu=p.name, sm=f"sm_{p.major}{p.minor}", tensorrt=trt_version)
        models = {
            e.key.model for e in EngineCache().entries() if e.key is not None and e.key.machine == machine
        }
        from facefusion_batch.pipeline.build import DETECTOR_MODEL, MESH_MODEL

        return {DETECTOR_MODEL, MESH_MODEL} <= models
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


def device_pipeline_for(pipeline, backend):
    """The device-resident twin of a classical pipeline on a GPU backend; `pipeline` itself on the
    CPU (and for pipelines without a twin, whose sessions still run on the device).

    Imports torch only when the backend has a device.
    """
    if getattr(backend, "device", None) is None:
        return pipeline
    from facefusion_batch.runtime.device_pipeline import device_pipeline_for as resident

    return resident(pipeline, backend)


def select_backend(name: str, *, threads: int | None = None, options: DeviceOptions | None = None) -> Backend:
    options = (options or scoped_options()).validated()
    if name == "auto":
        chosen, why = choose_auto(availability())
        log.info("backend auto: %s (%s)", chosen, why)
        if chosen == "cpu":
            return OnnxRuntimeCpuBackend(threads)
        try:
            return select_backend(chosen, threads=threads, options=options)
        except BackendUnavailableError as exc:
            log.warning("backend auto: %s failed (%s); using cpu", chosen, exc)
            return OnnxRuntimeCpuBackend(threads)
    if name == "cpu":
        return OnnxRuntimeCpuBackend(threads)
    if name in ("cuda", "tensorrt"):
        if nvidia_gpu_count() == 0:
            what = "torch with CUDA" if name == "cuda" else "TensorRT and torch with CUDA"
            raise BackendUnavailableError(
                f"--backend {name}: no NVIDIA GPU available (needs an NVIDIA GPU and {what}); "
                "use --backend cpu or auto"
            )
        if name == "cuda":
            from facefusion_batch.runtime.torch_backend import TorchBackend

            return TorchBackend(options)
        from facefusion_batch.runtime.tensorrt_backend import TensorRTBackend

        return TensorRTBackend(options)
    raise BackendUnavailableError(f"--backend must be one of {', '.join(BACKENDS)} (got {name!r})")
