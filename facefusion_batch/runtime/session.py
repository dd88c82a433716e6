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
