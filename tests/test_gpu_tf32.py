"""The cuda backend's fp32 is fp32: cuDNN's TF32 (on by default) and TF32 matmuls are off once the
backend starts. Checked with CPU torch, where the flags exist too."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_the_cuda_backend_turns_tf32_off():
    from facefusion_batch.runtime.torch_backend import TorchBackend

    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    before = cudnn.allow_tf32, matmul.allow_tf32
    cudnn.allow_tf32 = matmul.allow_tf32 = True  # cuDNN's default, and the matmul setting's opt-in
    try:
        TorchBackend(device="cpu")
        assert cudnn.allow_tf32 is False and matmul.allow_tf32 is False
    finally:
        cudnn.allow_tf32, matmul.allow_tf32 = before
