"""Choosing the kernel set: once, from the loaded backend's device."""

from __future__ import annotations

from typing import Any

from facefusion_batch.kernels.base import Kernels
from facefusion_batch.kernels.host import HostKernels


def make_kernels(backend: Any) -> Kernels:
    """The kernel set for a loaded backend, chosen once from its device: the host set for the
    CPU, the torch set (frames resident on the GPU) for a backend with a device. Call it on the
    worker thread that will use the instance: on a GPU it owns that thread's CUDA stream.
    Imports torch only for a backend with a device."""
    device = getattr(backend, "device", None)
    if device is None:
        return HostKernels()
    from facefusion_batch.kernels.torch_kernels import TorchKernels

    return TorchKernels(device, timer=getattr(backend, "timer", None))
