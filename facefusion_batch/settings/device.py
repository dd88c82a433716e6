"""Device resolution, the runtime side of the settings: `--backend auto` becomes the backend
chosen on this machine (so the settings say what ran and their digest covers it), with the
streams, workers and frame batch it implies."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from facefusion_batch.errors import InputError
from facefusion_batch.runtime.backends import choose_backend
from facefusion_batch.runtime.batching import CPU_BATCH, BatchPolicy
from facefusion_batch.runtime.device import (
    GPU_RUNTIMES,
    DeviceSettings,
    GpuRuntime,
    Precision,
    default_streams,
    parse_gpu_list,
)
from facefusion_batch.runtime.nvml import list_gpus
from facefusion_batch.settings.checks import validate_choices
from facefusion_batch.settings.types import BACKENDS, BackendChoice, RenderSettings
from facefusion_batch.video.decode.hwaccel import HWACCELS, Hwaccel

log = logging.getLogger("ffbatch")


@dataclass(frozen=True)
class DeviceRequest:
    """The device as the command line asks for it (`--backend auto`, `--precision auto`, streams
    from the GPU's memory): `resolve_device` turns it into DeviceSettings on this machine."""

    backend: BackendChoice = "auto"
    precision: Precision = "auto"
    streams: int | None = None  # None: from the GPU's memory
    max_batch: int | None = None  # None: GPU_BATCH
    gpus: str | None = None  # several: one process each (None: this process, GPU 0)
    hwaccel: Hwaccel = "none"
    gpu_runtime: GpuRuntime = "torch"


@dataclass(frozen=True)
class DevicePlan:
    """The device as resolved, with what it implies: batch workers and frames per batch, and the
    GPUs of a several-GPU render (one process each; None: this process only)."""

    device: DeviceSettings
    workers: int
    batch_size: int
    gpus: tuple[int, ...] | None = None


def resolve_device(
    *,
    backend: BackendChoice = DeviceRequest.backend,
    precision: Precision = DeviceRequest.precision,
    streams: int | None = DeviceRequest.streams,
    max_batch: int | None = DeviceRequest.max_batch,
    gpus: str | None = DeviceRequest.gpus,
    hwaccel: Hwaccel = DeviceRequest.hwaccel,
    workers: int = RenderSettings.workers,
    batch_size: int | None = None,
    resolve: bool = True,
    gpu_runtime: GpuRuntime = DeviceRequest.gpu_runtime,
) -> DevicePlan:
    """`--backend auto` → the backend chosen (said once in the log, with why); on a GPU the
    streams (default from the GPU's memory) become the batch workers and the frame batch
    defaults to --max-batch (else GPU_BATCH). `batch_size`/`streams` None: not given.
    `resolve=False` (plan, on a submit host without the farm's GPUs) validates the same
    options without looking at this machine's devices."""
    validate_choices("--backend", backend, BACKENDS)
    validate_choices("--hwaccel", hwaccel, HWACCELS)
    validate_choices("--gpu-runtime", gpu_runtime, GPU_RUNTIMES)
    chosen: str = backend
    if backend == "auto":
        chosen = "cpu"
        if resolve:
            chosen, why = choose_backend()
            log.info("backend auto: %s (%s)", chosen, why)
    gpu_ids: tuple[int, ...] | None = None
    if gpus is not None:
        if backend == "cpu":
            raise InputError("--gpus needs --backend cuda, tensorrt or auto (not cpu)")
        gpu_ids = parse_gpu_list(gpus)
        if resolve:
            _check_gpus(gpu_ids)
    index = gpu_ids[0] if gpu_ids and len(gpu_ids) == 1 else 0
    fan_out = gpu_ids if gpu_ids and len(gpu_ids) > 1 else None
    auto = backend == "auto"
    if chosen == "cpu":
        # int8 on the CPU: learned models whose INT8 variant holds its bound (models/prepare.py)
        cpu_precision: Precision = "int8" if precision == "int8" else "fp32"
        device = DeviceSettings(backend="cpu", precision=cpu_precision, hwaccel=hwaccel, auto=auto)
        if precision not in ("auto", "fp32", "int8"):
            DeviceSettings(precision=precision).validated()  # an unknown word is still refused
        # --streams on the CPU means what --workers does: batches processed at once
        return DevicePlan(device.validated(), streams or workers, _or(batch_size, CPU_BATCH), fan_out)
    if streams is None and resolve:
        present = {g.index: g for g in list_gpus()}
        if index in present:
            streams = default_streams(present[index].total_bytes)
    device = DeviceSettings(
        backend=chosen,
        precision=precision,
        streams=streams or workers,
        max_batch=max_batch,
        gpu=index,
        hwaccel=hwaccel,
        auto=auto,
        gpu_runtime=gpu_runtime,
    ).validated()
    return DevicePlan(
        device, device.streams, _or(batch_size, BatchPolicy.default_frames(True, max_batch)), fan_out
    )


def _or(value, default):
    return default if value is None else value


def _check_gpus(gpus: tuple[int, ...]) -> None:
    """Every listed GPU exists (exit 2 with what does, otherwise)."""
    present = {g.index for g in list_gpus()}
    if not present:
        raise InputError("--gpus: no NVIDIA GPU found on this machine; use --backend cpu without --gpus")
    missing = [g for g in gpus if g not in present]
    if missing:
        raise InputError(
            f"--gpus: no GPU {', '.join(map(str, missing))} here (GPUs present: {sorted(present)})"
        )
