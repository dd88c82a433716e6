"""onnxruntime: the CPU backend every machine has, and a runtime of the cuda backend.

`OnnxRuntimeCpuBackend` is `--backend cpu`. `OnnxRuntimeCudaBackend` is `--backend cuda
--gpu-runtime onnxruntime`: onnxruntime's CUDA provider with I/O binding (onnxruntime-gpu),
behind the same session contract as the torch runtime (runtime/torch_backend.py). torch is
imported only when that backend is made.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from facefusion_batch.cores import usable_cores
from facefusion_batch.errors import BackendUnavailableError, Interrupted, ModelError
from facefusion_batch.runtime.batching import BatchPolicy
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.runtime.device_session import DeviceSession
from facefusion_batch.runtime.memory import (
    DeviceOutOfMemory,
    MemoryGuard,
    batch_of,
    split_feeds,
)
from facefusion_batch.runtime.session import TensorInfo
from facefusion_batch.runtime.streams import DeviceTimer, is_cuda, on_thread_stream
from facefusion_batch.runtime.torch_backend import output_batch_axes, pad_feeds, trim_outputs

log = logging.getLogger("ffbatch")


class OrtSession:
    def __init__(self, model_path: Path, *, label: str, threads: int, providers: list[str]) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # YuNet declares batch 1 but runs any batch; its shape warnings are noise.
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(model_path), options, providers=providers)
        except Interrupted:  # SIGTERM / SIGHUP while loading: the job stops (143 / 129), no model fault
            raise
        except Exception as exc:  # onnxruntime raises several unrelated types
            raise ModelError(f"model {label!r} at {model_path} cannot be loaded: {exc}") from exc
        self.label = label
        self.inputs = tuple(TensorInfo(i.name, tuple(i.shape), i.type) for i in self._session.get_inputs())
        self.outputs = tuple(TensorInfo(o.name, tuple(o.shape), o.type) for o in self._session.get_outputs())
        self._output_names = [o.name for o in self.outputs]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._session.run(self._output_names, feeds)
        return dict(zip(self._output_names, values, strict=True))


class OnnxRuntimeCpuBackend:
    """CPU backend. `threads` is onnxruntime's intra-op pool per session."""

    name = "cpu"

    def __init__(self, threads: int | None = None, precision: str = "fp32") -> None:
        self.threads = threads if threads is not None else usable_cores()
        self.precision = precision  # int8: learned models run their INT8 variant where it holds

    def load(self, model_path: Path, *, label: str) -> OrtSession:
        return OrtSession(model_path, label=label, threads=self.threads, providers=["CPUExecutionProvider"])

    def describe(self) -> str:
        import onnxruntime as ort

        int8 = ", int8 where it holds" if self.precision == "int8" else ""
        return f"cpu (onnxruntime {ort.__version__}, {self.threads} threads{int8})"


# --- the cuda backend's onnxruntime runtime (`--gpu-runtime onnxruntime`) ---------------------

CUDA_PROVIDER = "CUDAExecutionProvider"
# what onnxruntime's BFC arena says when device memory runs out (bfc_arena.cc)
_ARENA_FULL = ("Failed to allocate memory for requested buffer", "is smaller than requested bytes")

_NUMPY_OF_TORCH = {
    "torch.float32": np.float32,
    "torch.float16": np.float16,
    "torch.float64": np.float64,
    "torch.int64": np.int64,
    "torch.int32": np.int32,
    "torch.int8": np.int8,
    "torch.uint8": np.uint8,
    "torch.bool": np.bool_,
}
_TORCH_OF_ONNX = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def cuda_provider_problem() -> str:
    """Why onnxruntime cannot run on CUDA here ('' when its CUDA provider is built in)."""
    try:
        import onnxruntime as ort
    except Exception as exc:  # a broken install must not crash a CPU render
        return f"onnxruntime cannot be imported ({type(exc).__name__}: {exc})"
    available = ort.get_available_providers()
    if CUDA_PROVIDER in available:
        return ""
    return (
        f"onnxruntime {ort.__version__} has no CUDA provider (providers: {', '.join(available)}); "
        "install onnxruntime-gpu in place of onnxruntime"
    )


class OrtDeviceSession(DeviceSession):
    """One model on onnxruntime with I/O binding: the cuda backend's session contract.

    `run(numpy) -> numpy` (one upload, one download) and `run_device(tensors) -> tensors`: each
    torch tensor's memory is bound as the input by its data_ptr and each output is a torch
    tensor allocated here and bound by its data_ptr, so on CUDA nothing crosses to the host. On
    a CPU device the same code binds host memory (device type "cpu"): that is how the tests run it.

    Output shapes are learnt once per input shape (one run with onnxruntime's own output
    buffers, read and dropped); later calls bind preallocated outputs. onnxruntime runs on its
    own CUDA stream, so a call waits for this thread's stream first (the inputs are ready) and
    returns when onnxruntime has finished (its Run synchronises its provider).
    """

    def __init__(self, backend: OnnxRuntimeCudaBackend, model_path: Path, *, label: str) -> None:
        import torch

        self.backend = backend
        self.label = label
        self.device = torch.device(backend.device)
        self.device_type = "cuda" if is_cuda(self.device) else "cpu"
        self.device_id = self.device.index or 0
        self.precision = "fp32"  # the file as it is: onnxruntime converts nothing
        inner = OrtSession(model_path, label=label, threads=backend.threads, providers=backend.providers)
        self._session = inner._session
        self.inputs, self.outputs = inner.inputs, inner.outputs
        self.providers = tuple(self._session.get_providers())
        if self.device_type == "cuda" and CUDA_PROVIDER not in self.providers:
            raise BackendUnavailableError(
                f"model {label!r}: onnxruntime fell back to {', '.join(self.providers)} although the CUDA "
                "provider was asked for (its CUDA or cuDNN libraries did not load; onnxruntime's log says "
                "which). Use --gpu-runtime torch, or fix the onnxruntime-gpu install"
            )
        self.output_axes = output_batch_axes(self.outputs)
        self._input_types = {i.name: _TORCH_OF_ONNX.get(i.dtype, "float32") for i in self.inputs}
        self._output_shapes: dict[tuple, dict[str, tuple[int, ...]]] = {}
        self._output_dtypes = {o.name: _TORCH_OF_ONNX.get(o.dtype, "float32") for o in self.outputs}
        self.guard = MemoryGuard(backend.options.max_batch, label=label, on_oom=backend.release_cached)

    def run_device(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """Device tensors in, device tensors out; float32 outputs (as the torch runtime's)."""
        import torch

        n = batch_of(feeds)

        def call(start: int, stop: int) -> dict[str, Any]:
            part = split_feeds(feeds, start, stop) if (start, stop) != (0, n) else feeds
            rows = stop - start
            padded = BatchPolicy.bucket(rows, self.guard.limit) if self.backend.pad_batches else rows
            if padded != rows:
                part = pad_feeds(part, rows, padded)
            with self.backend.timer.stage(self.label, self.device):
                out = self._bound_run(part)
            return out if padded == rows else trim_outputs(out, self.output_axes, rows, padded)

        with torch.inference_mode(), on_thread_stream(self.device):
            out = self.guard.run(n, call, self.merge)
        return {k: v.float() for k, v in out.items()}

    def _bound_run(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """One onnxruntime run over `feeds` (torch tensors on this session's device), I/O bound."""
        import torch

        inputs = {}
        for name, value in feeds.items():
            wanted = getattr(torch, self._input_types.get(name, "float32"))
            inputs[name] = value.to(self.device, wanted).contiguous()
        key = tuple((k, tuple(v.shape)) for k, v in sorted(inputs.items()))
        if key not in self._output_shapes:
            self._output_shapes[key] = self._learn_output_shapes(inputs)
        outputs = {
            name: torch.empty(shape, dtype=getattr(torch, self._output_dtypes[name]), device=self.device)
            for name, shape in self._output_shapes[key].items()
        }
        binding = self._session.io_binding()
        for name, value in inputs.items():
            binding.bind_input(name, *self._where(value), tuple(value.shape), value.data_ptr())
        for name, value in outputs.items():
            binding.bind_output(name, *self._where(value), tuple(value.shape), value.data_ptr())
        self._wait_for_inputs()
        self._run(binding)
        return outputs

    def _learn_output_shapes(self, inputs: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        binding = self._session.io_binding()
        for name, value in inputs.items():
            binding.bind_input(name, *self._where(value), tuple(value.shape), value.data_ptr())
        for o in self.outputs:
            binding.bind_output(o.name, self.device_type, self.device_id)
        self._wait_for_inputs()
        self._run(binding)
        values = binding.get_outputs()
        return {o.name: tuple(v.shape()) for o, v in zip(self.outputs, values, strict=True)}

    def _run(self, binding: Any) -> None:
        """One Run; onnxruntime's arena running out of device memory becomes `DeviceOutOfMemory`,
        so that the memory guard halves the batch (its text names no "out of memory")."""
        try:
            self._session.run_with_iobinding(binding)
        except Exception as exc:
            if any(marker in str(exc) for marker in _ARENA_FULL):
                raise DeviceOutOfMemory(f"{self.label}: onnxruntime is out of device memory ({exc})") from exc
            raise

    def _where(self, tensor: Any) -> tuple[str, int, Any]:
        return self.device_type, self.device_id, _NUMPY_OF_TORCH[str(tensor.dtype)]

    def _wait_for_inputs(self) -> None:
        """onnxruntime reads the inputs on its own stream: this thread's copies must be done."""
        if self.device_type == "cuda":
            import torch

            torch.cuda.current_stream(self.device).synchronize()


class OnnxRuntimeCudaBackend:
    """`--backend cuda --gpu-runtime onnxruntime`: onnxruntime's CUDA provider with I/O binding
    (needs onnxruntime-gpu). `device="cpu"` runs the same sessions on the CPU provider (tests)."""

    name = "cuda"

    def __init__(
        self, options: DeviceSettings | None = None, *, device: str | None = None, threads: int | None = None
    ) -> None:

        self.options = (options or DeviceSettings(backend="cuda", gpu_runtime="onnxruntime")).validated()
        if self.options.precision in ("fp16", "int8"):
            raise BackendUnavailableError(
                f"--precision {self.options.precision}: --gpu-runtime onnxruntime runs each model file as "
                "it is (fp32); use --gpu-runtime torch for fp16, or --backend tensorrt for int8"
            )
        if device is None:
            problem = cuda_provider_problem()
            if problem:
                raise BackendUnavailableError(f"--gpu-runtime onnxruntime: {problem}")
            device = f"cuda:{self.options.gpu}"
        self.device = device
        self.threads = threads if threads is not None else usable_cores()
        if is_cuda(device):
            # TF32 off: fp32 means fp32, as the torch runtime's (cudnn's own default is TF32)
            # arena grown as requested, not to the next power of two: torch's allocator shares the GPU
            cuda = {
                "device_id": str(self.options.gpu),
                "use_tf32": "0",
                "arena_extend_strategy": "kSameAsRequested",
            }
            self.providers: list[Any] = [(CUDA_PROVIDER, cuda), "CPUExecutionProvider"]
        else:
            self.providers = ["CPUExecutionProvider"]
        self.pad_batches = is_cuda(device)  # cuDNN's algorithm search runs once per input shape
        self.timer = DeviceTimer()
        self.sessions: list[OrtDeviceSession] = []

    def load(self, model_path: Path, *, label: str) -> OrtDeviceSession:
        session = OrtDeviceSession(self, Path(model_path), label=label)
        self.sessions.append(session)
        return session

    def release_cached(self) -> None:

        if is_cuda(self.device):
            import torch

            torch.cuda.empty_cache()

    def describe(self) -> str:
        import onnxruntime as ort

        where = "CUDA provider" if self.device != "cpu" else "CPU provider"
        return f"cuda (onnxruntime {ort.__version__}, {where} with I/O binding, on {self.device}, fp32)"

    def report(self) -> dict[str, Any]:
        return {
            "backend": self.describe(),
            "runtime": "onnxruntime",
            "providers": {s.label: list(s.providers) for s in self.sessions},
            "device_seconds": {k: round(v, 4) for k, v in sorted(self.timer.seconds().items())},
            "precision": {s.label: s.precision for s in self.sessions},
            "memory_guard": {s.label: s.guard.summary() for s in self.sessions},
        }

    def close(self) -> None:
        pass
