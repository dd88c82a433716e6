"""Rewrite models for batching: a fixed batch dimension becomes a symbolic one.

onnxruntime refuses inputs whose batch differs from the declared shape, so a
model published with batch 1 is rewritten once, checked (a batch of N must
equal N single runs) and kept beside the original.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

BATCH_EQUALITY_ATOL = 1e-4


def _set_dim(value: onnx.ValueInfoProto, axis: int, name: str) -> None:
    dim = value.type.tensor_type.shape.dim[axis]
    dim.ClearField("dim_value")
    dim.dim_param = name


def make_yunet_batchable(model: onnx.ModelProto) -> onnx.ModelProto:
    """YuNet folds the batch into the anchor axis: input batch and size, and output dim 1 go symbolic.

    The network is fully convolutional, so any input size that is a multiple of 32
    works; a 16:9 frame letterboxed to 640×384 costs 40% less than 640×640.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in out.graph.input:
        _set_dim(value, 0, "batch")
        _set_dim(value, 2, "height")
        _set_dim(value, 3, "width")
    for value in out.graph.output:
        _set_dim(value, 1, "batch_anchors")
    del out.graph.value_info[:]
    return out


def check_yunet_batch_equality(path: Path, batch: int = 3, size: int = 640) -> float:
    """Largest |batched − single| over all outputs on a seeded input; raises if above tolerance."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (batch, 3, size, size)).astype(np.float32)
    names = [o.name for o in session.get_outputs()]
    batched = session.run(names, {"input": x})
    worst = 0.0
    for i in range(batch):
        single = session.run(names, {"input": x[i : i + 1]})
        for b, s in zip(batched, single, strict=True):
            part = b.reshape(batch, -1, b.shape[-1])[i]
            worst = max(worst, float(np.abs(part - s[0]).max()))
    if worst > BATCH_EQUALITY_ATOL:
        raise ValueError(f"batched YuNet deviates from single runs by {worst:.3g}")
    return worst


def write_model_atomically(model: onnx.ModelProto, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def prepare_yunet(src: Path, dst: Path) -> float:
    """Write the batchable YuNet to `dst` (atomically) and return its batch deviation."""
    write_model_atomically(make_yunet_batchable(onnx.load(str(src))), dst)
    try:
        return check_yunet_batch_equality(dst)
    except Exception:
        dst.unlink(missing_ok=True)
        raise
