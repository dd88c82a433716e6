"""The `cuda` backend: the same ONNX graphs, executed by torch on the GPU.

Each model is read by the ONNX interpreter (`onnx_torch`) into a torch module
on the device, in fp16 where the model allows it (checked against fp32 on a
probe input when the model is loaded) and fp32 otherwise. Sessions speak
numpy (`run`, like onnxruntime, so every stage works unchanged) and torch
(`run_device`, so a device-resident pipeline keeps tensors on the GPU).

The same code runs with `device="cpu"`: that is how the tests check it against
onnxruntime on machines without a GPU.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from facefusion_batch import fsutil
from facefusion_batch.errors import BackendUnavailableError, ModelError
from facefusion_batch.models.records import trusted_sha256
from facefusion_batch.paths import ffbatch_home
from facefusion_batch.runtime.batching import BatchPolicy
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.runtime.device_session import DeviceSession
from facefusion_batch.runtime.memory import (
    CostCache,
    MemoryGuard,
    batch_of,
    measure_cost,
    split_feeds,
)
from facefusion_batch.runtime.nvml import NvmlSampler
from facefusion_batch.runtime.session import TensorInfo
from facefusion_batch.runtime.streams import (
    DeviceTimer,
    ExclusiveGate,
    download,
    is_cuda,
    on_thread_stream,
    upload,
)

log = logging.getLogger("ffbatch")

FP16_TOLERANCE = 1e-2  # max |fp16 − fp32| / max(1, max |fp32|) over every output on the probe
PROBE_SPATIAL = 96  # symbolic spatial dims of the probe input (a multiple of 32)


file_sha256 = fsutil.sha256_file


def _dim(value: Any) -> int | str | None:
    return value.dim_value if value.HasField("dim_value") else (value.dim_param or None)


def graph_signature(model) -> tuple[tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    import onnx

    init = {t.name for t in model.graph.initializer}

    def info(v) -> TensorInfo:
        t = v.type.tensor_type
        # onnxruntime's spelling: tensor(float), tensor(float16), tensor(int64), ...
        dtype = onnx.TensorProto.DataType.Name(t.elem_type).lower() if t.elem_type else "unknown"
        return TensorInfo(v.name, tuple(_dim(d) for d in t.shape.dim), f"tensor({dtype})")

    inputs = tuple(info(v) for v in model.graph.input if v.name not in init)
    return inputs, tuple(info(v) for v in model.graph.output)


def output_batch_axes(outputs: tuple[TensorInfo, ...]) -> dict[str, int]:
    """Where the batch is in each output: axis 0, or axis 1 when a fixed leading 1 folds it
    into the next axis (YuNet's [1, batch*anchors, C])."""
    axes = {}
    for o in outputs:
        fixed_one = len(o.shape) >= 2 and o.shape[0] == 1 and not isinstance(o.shape[1], int)
        axes[o.name] = 1 if fixed_one else 0
    return axes


def probe_feeds(inputs: tuple[TensorInfo, ...], batch: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """A seeded input for every graph input, of its declared type (CodeFormer's weight is float64):
    symbolic batch → `batch`, other symbolic dims → 96, fixed dims as declared (a fixed batch of 1
    too); floats uniform in [0, 1), integers 0."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in inputs:
        shape = [
            d if isinstance(d, int) and d > 0 else (batch if axis == 0 else PROBE_SPATIAL)
            for axis, d in enumerate(i.shape)
        ]
        dtype = declared_dtype(i.dtype)
        values = rng.uniform(0.0, 1.0, shape)
        feeds[i.name] = values.astype(dtype) if np.issubdtype(dtype, np.floating) else np.zeros(shape, dtype)
    return feeds


_ONNX_TYPES: dict[str, type[np.generic]] = {
    "float": np.float32,
    "float16": np.float16,
    "double": np.float64,
    "int64": np.int64,
}
_ONNX_TYPES |= {"int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def declared_dtype(onnx_type: str) -> np.dtype:
    """numpy's type for onnxruntime's spelling ("tensor(double)"); float32 when unknown."""
    return np.dtype(_ONNX_TYPES.get(onnx_type.removeprefix("tensor(").removesuffix(")"), np.float32))


def relative_deviation(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """max |b − a| / max(1, max |a|) over every output; inf when either holds a NaN or inf."""
    worst = 0.0
    for name, ref in a.items():
        if not ref.size:
            continue
        got = b[name].astype(np.float64)
        if not (np.isfinite(ref).all() and np.isfinite(got).all()):
            return float("inf")
        scale = max(1.0, float(np.abs(ref).max()))
        worst = max(worst, float(np.abs(got - ref).max()) / scale)
    return worst


class TorchSession(DeviceSession):
    """One ONNX model as a torch module on one device. Thread-safe: each thread uses its own stream."""

    def __init__(self, backend: TorchBackend, model_path: Path, *, label: str) -> None:
        import onnx
        import torch

        from facefusion_batch.runtime.onnx_torch import OnnxModule, UnsupportedGraph

        self.backend = backend
        self.label = label
        self.device = torch.device(backend.device)
        try:
            model = onnx.load(str(model_path))
        except Exception as exc:
            raise ModelError(f"model {label!r} at {model_path} cannot be read: {exc}") from exc
        self.inputs, self.outputs = graph_signature(model)
        self.output_axes = output_batch_axes(self.outputs)
        self.sha256 = trusted_sha256(Path(model_path))  # the store's record: no re-hash per run
        try:
            module = OnnxModule(model).eval()
        except UnsupportedGraph as exc:
            raise ModelError(f"model {label!r} cannot run on the cuda backend: {exc}") from exc
        self.module = module.to(self.device)
        self.precision = self._choose_precision(backend.options.precision)
        if self.precision == "fp16":
            self.module.to_precision(torch.float16)
        self.guard = MemoryGuard(backend.options.max_batch, label=label, on_oom=backend.release_cached)
        self._measured: set[tuple] = set()
        self._measure_lock = threading.Lock()

    # -- precision ------------------------------------------------------------------------------

    def _choose_precision(self, wanted: str) -> str:
        if wanted == "int8":
            raise BackendUnavailableError(
                "--precision int8 needs the tensorrt backend (engines from a Q/DQ ONNX); "
                "the cuda backend runs fp16 or fp32"
            )
        if wanted in ("fp32", "fp16"):
            return wanted
        if not is_cuda(self.device):
            return "fp32"  # auto on a CPU device: half is slow there
        deviation = self.fp16_deviation()
        if deviation <= FP16_TOLERANCE:
            return "fp16"
        log.info("%s: fp16 deviates by %.3g from fp32 on the probe; running fp32", self.label, deviation)
        return "fp32"

    def fp16_deviation(self) -> float:
        """max |fp16 − fp32| relative to each output's range, on a seeded probe input."""
        import copy

        import torch

        feeds = probe_feeds(self.inputs)
        with torch.inference_mode(), on_thread_stream(self.device):
            dev = {k: upload(v, self.device) for k, v in feeds.items()}
            ref = download(self.module(**dev))
            half = copy.deepcopy(self.module).to_precision(torch.float16)
            out = download(half(**dev))
            del half
        return relative_deviation(ref, out)

    # -- running ------------------------------------------------------------------------------------

    def run_device(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """Device tensors in, device tensors out, on this thread's stream; float32 outputs."""
        import torch

        n = batch_of(feeds)
        self._plan(feeds, n)

        def call(start: int, stop: int) -> dict[str, Any]:
            part = split_feeds(feeds, start, stop) if (start, stop) != (0, n) else feeds
            rows = stop - start
            padded = BatchPolicy.bucket(rows, self.guard.limit) if self.backend.pad_batches else rows
            if padded != rows:
                part = pad_feeds(part, rows, padded)
            with self.backend.gate.shared(), self.backend.timer.stage(self.label, self.device):
                out = self.module(**part)
            return out if padded == rows else trim_outputs(out, self.output_axes, rows, padded)

        with torch.inference_mode(), on_thread_stream(self.device):
            return self.guard.run(n, call, self.merge)

    def _plan(self, feeds: dict[str, Any], n: int) -> None:
        """Once per per-item input shape on a GPU: measure the cost, set the batch limit from free memory."""
        if not is_cuda(self.device):
            return
        key = tuple((k, tuple(v.shape[1:])) for k, v in sorted(feeds.items()))
        if key in self._measured:
            return
        with self._measure_lock:
            if key in self._measured:
                return
            limit = self.backend.plan_batch(self, feeds, key)
            self.guard.set_limit(limit)
            self._measured.add(key)


def pad_feeds(feeds: dict[str, Any], rows: int, padded: int) -> dict[str, Any]:
    """Repeat the last item of every per-item input up to `padded` rows (real data: no NaNs)."""
    import torch

    out = {}
    for name, v in feeds.items():
        if v.shape[0] == rows:
            v = torch.cat([v, v[-1:].expand(padded - rows, *v.shape[1:])], dim=0)
        out[name] = v
    return out


def trim_outputs(outputs: dict[str, Any], axes: dict[str, int], rows: int, padded: int) -> dict[str, Any]:
    """Drop the padding rows again, along each output's batch axis (which may fold the batch with
    another axis, as YuNet's [1, batch*anchors, C] does)."""
    out = {}
    for name, v in outputs.items():
        axis = axes.get(name, 0)
        size = v.shape[axis] if v.dim() > axis else 0
        out[name] = v.narrow(axis, 0, size // padded * rows) if size and size % padded == 0 else v
    return out


def keep_fp32(torch) -> None:
    """fp32 is fp32: cuDNN convolutions and matmuls may otherwise use TF32 (10-bit mantissas) on
    Ampere and later (cuDNN's TF32 is on by default), which the fp32 reference must not."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


class TorchBackend:
    """`--backend cuda`: torch on one CUDA device (or `device="cpu"` for tests)."""

    name = "cuda"

    def __init__(self, options: DeviceSettings | None = None, *, device: str | None = None) -> None:
        import torch

        self.options = (options or DeviceSettings(backend=self.name, precision="auto")).validated()
        self.policy = BatchPolicy(on_gpu=True, max_batch=self.options.max_batch)
        if device is None:
            if not torch.cuda.is_available():
                raise BackendUnavailableError(
                    "--backend cuda: no NVIDIA GPU visible to torch (torch.cuda.is_available() is False); "
                    "use --backend cpu or auto"
                )
            if self.options.gpu >= torch.cuda.device_count():
                raise BackendUnavailableError(
                    f"GPU {self.options.gpu} does not exist (torch sees {torch.cuda.device_count()} GPU(s))"
                )
            device = f"cuda:{self.options.gpu}"
        self.device = device
        # bucketed batch shapes (BatchPolicy.bucket) where cuDNN autotunes each new shape: on a GPU
        self.pad_batches = is_cuda(device)
        self.gate = ExclusiveGate()
        self.timer = DeviceTimer()
        self.sessions: list[TorchSession] = []
        self._sampler = None
        self._costs: CostCache | None = None
        keep_fp32(torch)
        if is_cuda(device):
            torch.backends.cudnn.benchmark = True  # fixed shapes per job: pick the fastest kernels once

            self._costs = CostCache(ffbatch_home() / "cache" / "memory-costs.json")
            index = torch.device(device).index or 0
            self._sampler = NvmlSampler([index], names={index: torch.cuda.get_device_name(index)}).start()

    def load(self, model_path: Path, *, label: str) -> TorchSession:
        session = TorchSession(self, Path(model_path), label=label)
        self.sessions.append(session)
        return session

    def release_cached(self) -> None:
        if is_cuda(self.device):
            import torch

            torch.cuda.empty_cache()

    def gpu_label(self) -> str:
        if not is_cuda(self.device):
            return "cpu"
        import torch

        p = torch.cuda.get_device_properties(torch.device(self.device))
        return f"{p.name} sm_{p.major}{p.minor}"

    def plan_batch(self, session: TorchSession, feeds: dict[str, Any], key: tuple) -> int | None:
        """Measure (or read) the per-item cost of `session` at this input shape; return the batch limit."""
        import torch

        device = torch.device(self.device)
        cost_key = f"{session.sha256}|{session.precision}|{key}|{self.gpu_label()}|torch {torch.__version__}"
        cost = self._costs.get(cost_key) if self._costs else None
        if cost is None:
            sample = {k: v[:1] for k, v in feeds.items()}

            def run(batch: int) -> None:
                rows = {k: v.expand(batch, *v.shape[1:]).contiguous() for k, v in sample.items()}
                with torch.inference_mode(), on_thread_stream(device):
                    session.module(**rows)
                    done = torch.cuda.Event()
                    done.record()
                    done.synchronize()

            with self.gate.exclusive():
                cost = measure_cost(
                    run,
                    peak_bytes=lambda: torch.cuda.max_memory_allocated(device),
                    reset_peak=lambda: torch.cuda.reset_peak_memory_stats(device),
                )
            if self._costs:
                self._costs.put(cost_key, cost)
        free, _total = torch.cuda.mem_get_info(device)
        # torch's cache counts as used by the driver, but this process can reuse it
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        streams = self.options.streams or 1
        limit = self.policy.device_items(
            free,
            cost.per_item_bytes,
            fixed_bytes=cost.fixed_bytes,
            fraction=self.options.memory_fraction,
            streams=streams,
        )
        log.debug(
            "%s: %.1f MiB per item + %.1f MiB fixed; batch limit %d (%.0f MiB free, %d streams)",
            session.label,
            cost.per_item_bytes / 2**20,
            cost.fixed_bytes / 2**20,
            limit,
            free / 2**20,
            streams,
        )
        return limit

    def describe(self) -> str:
        import torch

        precisions = sorted({s.precision for s in self.sessions}) or [self.options.precision]
        return f"cuda (torch {torch.__version__} on {self.gpu_label()}, {'/'.join(precisions)})"

    def report(self) -> dict[str, Any]:
        """Device facts for the job report: utilisation, per-stage device time, memory guard."""
        out: dict[str, Any] = {
            "backend": self.describe(),
            "device_seconds": {k: round(v, 4) for k, v in sorted(self.timer.seconds().items())},
            "precision": {s.label: s.precision for s in self.sessions},
            "memory_guard": {s.label: s.guard.summary() for s in self.sessions},
        }
        if self._sampler is not None:  # sampling goes on until close(): a renderer may serve more jobs
            out["nvml"] = self._sampler.summary()
        return out

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
