"""The base of the sessions that run on device tensors (torch, onnxruntime with I/O binding, TensorRT).

Each such session implements `run_device(tensors) -> tensors`; the base gives it the numpy
contract every stage speaks (`run`, one upload and one download) and the join of the outputs of
several memory-bounded calls. torch is imported only when a session runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from facefusion_batch.runtime.memory import merge_outputs
from facefusion_batch.runtime.streams import download, on_thread_stream, upload


class DeviceSession:
    """`run(numpy) -> numpy` over the subclass's `run_device`, on this thread's stream."""

    device: Any  # the torch.device the session's tensors live on
    output_axes: dict[str, int]  # each output's batch axis

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """numpy in, numpy out (the onnxruntime contract): one upload, one download."""
        import torch

        with torch.inference_mode(), on_thread_stream(self.device):
            dev = {k: upload(v, self.device) for k, v in feeds.items()}
            return download(self.run_device(dev))

    def run_device(self, feeds: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def merge(self, parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The outputs of several calls joined along each output's batch axis."""
        return merge_outputs(parts, self.output_axes, _cat)


def _cat(parts: list[Any], axis: int) -> Any:
    import torch

    return torch.cat(parts, dim=axis)
