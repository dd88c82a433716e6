"""The small interface every backend implements: load an ONNX file, run a batch.

Stages only ever see `Session.run(feeds) -> outputs`; whether that is
onnxruntime on a CPU, torch on CUDA or a TensorRT engine is the backend's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | str | None, ...]
    dtype: str


class Session(Protocol):
    """One loaded model. `run` takes and returns whole batches."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class Backend(Protocol):
    """Creates sessions; one backend object per render job."""

    name: str

    def load(self, model_path: Path, *, label: str) -> Session: ...

    def describe(self) -> str: ...


_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def cast_feeds(session: Session, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each input in the dtype the graph declares (an fp16 model may take fp16 inputs)."""
    declared = {t.name: _DTYPES.get(t.dtype) for t in session.inputs}
    return {k: np.ascontiguousarray(v, declared.get(k) or v.dtype) for k, v in feeds.items()}


def run_chunked(
    session: Session, feeds: dict[str, np.ndarray], max_batch: int | None
) -> dict[str, np.ndarray]:
    """The model's outputs (as float32) for all items, in calls of at most `max_batch` items
    (None: one call).

    A batch of frames can hold many faces (and pixel boost multiplies them by 4 or 16), so a
    stage's items are split into calls bounded by memory (runtime/batching.py). Inputs whose
    first axis is not the item axis (such as codeformer's weight) go whole into every call:
    pass them with a leading axis of 1 and they are broadcast.
    """
    n = max(len(v) for v in feeds.values())
    feeds = cast_feeds(session, feeds)
    names = [o.name for o in session.outputs]
    step = n if not max_batch else max(1, max_batch)
    parts = []
    for i in range(0, n, max(1, step)):
        chunk = {k: (v if len(v) != n else v[i : i + step]) for k, v in feeds.items()} if step < n else feeds
        out = session.run(chunk)
        parts.append([np.asarray(out[name], np.float32) for name in names])
    if len(parts) == 1:
        return dict(zip(names, parts[0], strict=True))
    return {name: np.concatenate([p[j] for p in parts]) for j, name in enumerate(names)}
