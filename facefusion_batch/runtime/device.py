"""Device settings: which backend runs the models, at what precision, on which GPU, with how
many streams. One frozen dataclass, part of the render settings (and of their digest).

Imports nothing heavy, so config and CLI code can hold it on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from facefusion_batch.errors import InputError

BACKENDS = ("cpu", "cuda", "tensorrt")  # as chosen; the user may also ask for "auto"
Precision = Literal["auto", "fp32", "fp16", "int8"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
ENGINE_POLICIES = ("build", "refuse")
# what runs the models on `--backend cuda`: the ONNX interpreter on torch (runtime/onnx_torch.py),
# or onnxruntime's CUDA provider with I/O binding (needs onnxruntime-gpu); docs/gpu.md says why
# torch is the default
GpuRuntime = Literal["torch", "onnxruntime"]
GPU_RUNTIMES: tuple[GpuRuntime, ...] = get_args(GpuRuntime)


@dataclass(frozen=True)
class DeviceSettings:
    """Where and how models run, as resolved at the edge (never `auto` for the backend).

    `precision`: auto = fp16 where the model allows it (checked against fp32 on a probe
    input), else fp32; int8 only with a Q/DQ ONNX (TensorRT; on the CPU, a learned model's INT8
    variant where its deviation on real faces holds, fp32 otherwise). Else always fp32 on the CPU.
    `streams`: CUDA streams, one batch worker each (1 on the CPU, where `--workers` counts).
    `max_batch`: largest frame batch a model call takes on the device (the TensorRT
    optimisation profile's max; the memory guard may choose less).
    `engine_policy`: what to do when no engine matches this GPU and TensorRT: build, or refuse.
    `hwaccel`: none, or cuda to decode on the GPU's video decoder (NVDEC).
    `gpu_runtime`: on the cuda backend, torch (the ONNX interpreter) or onnxruntime (its CUDA
    provider with I/O binding); unused elsewhere.
    """

    backend: str = "cpu"
    precision: Precision = "fp32"
    streams: int = 1
    max_batch: int | None = None
    gpu: int = 0
    hwaccel: str = "none"
    engines_dir: Path | None = None
    engine_policy: str = "build"
    memory_fraction: float = 0.8  # share of free device memory the memory guard plans with
    auto: bool = False  # the user asked for `--backend auto`; `backend` is what it chose here
    gpu_runtime: GpuRuntime = "torch"

    @property
    def on_gpu(self) -> bool:
        return self.backend != "cpu"

    def validated(self) -> DeviceSettings:
        if self.backend not in BACKENDS:
            raise InputError(f"--backend must be one of auto, {', '.join(BACKENDS)} (got {self.backend!r})")
        if self.precision not in PRECISIONS:
            raise InputError(f"--precision must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")
        if self.gpu_runtime not in GPU_RUNTIMES:
            raise InputError(
                f"--gpu-runtime must be one of {', '.join(GPU_RUNTIMES)} (got {self.gpu_runtime!r})"
            )
        if self.engine_policy not in ENGINE_POLICIES:
            raise InputError(f"engine policy must be one of {', '.join(ENGINE_POLICIES)}")
        if self.max_batch is not None and not 1 <= self.max_batch <= 4096:
            raise InputError(f"--max-batch must be between 1 and 4096 (got {self.max_batch})")
        if not 1 <= self.streams <= 64:
            raise InputError(f"--streams must be between 1 and 64 (got {self.streams})")
        if self.gpu < 0:
            raise InputError(f"GPU index must not be negative (got {self.gpu})")
        if not 0.05 <= self.memory_fraction <= 1.0:
            raise InputError("memory fraction must be between 0.05 and 1")
        return self


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """`--gpus 0,1,3` → (0, 1, 3)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise InputError("--gpus needs GPU indices such as 0 or 0,1")
    try:
        ids = tuple(int(p) for p in parts)
    except ValueError:
        raise InputError(f"--gpus must be comma-separated GPU indices such as 0,1 (got {text!r})") from None
    if any(i < 0 for i in ids):
        raise InputError(f"--gpus indices must not be negative (got {text!r})")
    if len(set(ids)) != len(ids):
        raise InputError(f"--gpus lists a GPU twice ({text!r})")
    return ids


def default_streams(total_bytes: int) -> int:
    """Streams (= batch workers) for a GPU: 2 overlap copies with compute; larger GPUs keep
    more batches in flight so the host-side work of one batch hides behind another's kernels."""
    gib = total_bytes / 2**30
    return 2 if gib < 16 else 3 if gib < 40 else 4
