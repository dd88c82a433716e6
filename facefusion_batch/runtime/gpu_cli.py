"""The render command's GPU options (`--streams`, `--gpus`, `--max-batch`, `--precision`),
validated at the edge and turned into `DeviceOptions` and a worker count.

Kept out of cli.py so the command stays a thin parser; imports nothing heavy
unless a GPU question has to be answered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from facefusion_batch.errors import InputError
from facefusion_batch.runtime.options import DeviceOptions, parse_gpu_list

log = logging.getLogger("ffbatch")

GPU_BACKENDS = ("cuda", "tensorrt")
GPU_BATCH = 16  # frames per batch on a GPU when --batch-size is not given (the CPU's default is 8)


def default_streams(total_bytes: int) -> int:
    """Streams (= batch workers) for a GPU: 2 overlap copies with compute; larger GPUs keep
    more batches in flight so the host-side work of one batch hides behind another's kernels."""
    gib = total_bytes / 2**30
    return 2 if gib < 16 else 3 if gib < 40 else 4


@dataclass(frozen=True)
class DevicePlan:
    options: DeviceOptions
    workers: int
    gpus: tuple[int, ...] | None  # several GPUs: one process each; None: this process only
    batch_size: int | None = None  # frames per batch for a GPU backend; None: keep the render's


def device_plan(
    *,
    backend: str,
    workers: int,
    workers_given: bool,
    streams: int | None,
    gpus: str | None,
    max_batch: int | None,
    precision: str,
    batch_given: bool = True,
) -> DevicePlan:
    """Streams → workers (default from the GPU), GPU list → device or fan-out, and on a GPU
    backend a batch size from --max-batch (else 16) unless --batch-size was given."""
    plan = _plan(backend, workers, workers_given, streams, gpus, max_batch, precision)
    if batch_given or backend == "cpu" or (backend == "auto" and not _torch_cuda()):
        return plan
    return replace(plan, batch_size=max_batch or GPU_BATCH)


def _plan(backend, workers, workers_given, streams, gpus, max_batch, precision) -> DevicePlan:
    options = DeviceOptions(precision=precision, max_batch=max_batch, streams=streams).validated()
    gpu_ids: tuple[int, ...] | None = None
    if gpus is not None:
        if backend == "cpu":
            raise InputError("--gpus needs --backend cuda, tensorrt or auto (not cpu)")
        from facefusion_batch.runtime.multi_gpu import check_gpus

        gpu_ids = parse_gpu_list(gpus)
        check_gpus(gpu_ids)
        if len(gpu_ids) == 1:
            options = replace(options, device_index=gpu_ids[0])
            gpu_ids = None
    if streams is not None:
        return DevicePlan(options, streams, gpu_ids)
    if backend == "cpu" or workers_given:
        return DevicePlan(replace(options, streams=workers if backend != "cpu" else None), workers, gpu_ids)
    from facefusion_batch.runtime.nvml import list_gpus

    present = {g.index: g for g in list_gpus()}
    gpu = present.get(options.device_index)
    if gpu is None or (backend == "auto" and not _torch_cuda()):
        return DevicePlan(options, workers, gpu_ids)
    n = default_streams(gpu.total_bytes)
    log.debug("--streams %d (default for %s)", n, gpu.describe())
    return DevicePlan(replace(options, streams=n), n, gpu_ids)


def _torch_cuda() -> bool:
    from facefusion_batch.runtime.backends import nvidia_gpu_count

    return nvidia_gpu_count() > 0


def render_on_several_gpus(
    settings,
    plan: DevicePlan,
    *,
    inputs: list[Path],
    output: Path | None,
    frames: str | None,
    ray: str | None,
) -> None:
    """`render --gpus A,B,…`: one input, one output, rendered over the GPUs and joined."""
    import typer

    from facefusion_batch.runtime.multi_gpu import render_on_gpus

    if len(inputs) != 1 or output is None:
        raise InputError("--gpus renders one input to one -o/--output")
    if frames is not None or ray is not None:
        raise InputError("--gpus does not combine with --frames or --ray (each makes its own segments)")
    result = render_on_gpus(settings, plan.gpus, plan.options)
    log.info(
        "done: %d frames on %d GPUs in %.1f s (%.1f fps), %d faces swapped, audio %s",
        result["frames_out"],
        len(plan.gpus),
        result["wall_seconds"],
        result["fps"],
        result["faces_swapped"],
        result["audio"],
    )
    typer.echo(str(output))
