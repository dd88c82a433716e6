"""onnxruntime on the CPU: the backend every machine has."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from facefusion_batch.errors import Interrupted, ModelError
from facefusion_batch.runtime.session import TensorInfo

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

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads if threads is not None else max(1, (os.cpu_count() or 2))

    def load(self, model_path: Path, *, label: str) -> OrtSession:
        return OrtSession(model_path, label=label, threads=self.threads, providers=["CPUExecutionProvider"])

    def describe(self) -> str:
        import onnxruntime as ort

        return f"cpu (onnxruntime {ort.__version__}, {self.threads} threads)"
