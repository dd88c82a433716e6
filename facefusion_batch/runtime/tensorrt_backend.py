"""The `tensorrt` backend: engines built per GPU from the ONNX files, run on torch's streams.

Precision is explicit in the ONNX file, which works on TensorRT 10 and 11
alike (11 has no FP16/INT8 builder flags and only strongly typed networks):

- fp32: the ONNX as it is;
- fp16: the ONNX converted to float16 compute (`models.convert.to_float16`,
  float32 inputs and outputs kept), built strongly typed;
- int8: an explicitly quantized ONNX (QuantizeLinear/DequantizeLinear nodes,
  e.g. the store's `NAME@int8` variant or `--onnx FILE`), built strongly typed.
- auto: fp16 if its engine agrees with onnxruntime's fp32 on a probe input,
  else fp32 (decided once, when the engine is built, recorded in its sidecar).

One optimisation profile covers the batch dim (1 … max batch; TensorRT tunes
for the max, which is what full batches use) and YuNet's height and width.
The timing cache is kept per GPU and TensorRT version beside the engines.

A profile never gives a static dimension a range: FaceFusion's files fix the
batch at 1 and get (1, 1, 1); they run batched from their `@batch` copy. An
input TensorRT cannot take (float64: CodeFormer's fidelity weight) is declared
float32 in the copy TensorRT builds from, cast back inside the graph.

Every engine is built with `ProfilingVerbosity.DETAILED`, and its inspector's
layer precisions are kept in the sidecar: an engine asked for as fp16 or int8
that came out mostly fp32 is refused (`engine_precision.py`). fp32 engines are
built without TF32, as the reference they are.

At run time every executor worker thread has its own execution context and
its own CUDA stream (torch's); tensors are torch tensors whose addresses go to
`set_tensor_address`, and `execute_async_v3` runs on the thread's stream.
Contexts hold no activation memory of their own (`USER_MANAGED`): each call
allocates what its shapes need (`update_device_memory_size_for_shapes`) from
torch, so an out-of-memory is an allocation failure the memory guard halves,
not a context that cannot be created. There is no second CUDA context:
TensorRT uses torch's.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from facefusion_batch.errors import BackendUnavailableError, ModelError
from facefusion_batch.models import store
from facefusion_batch.models.convert import to_float16, write_model_atomically
from facefusion_batch.models.prepare import variant_catalog, variant_name
from facefusion_batch.models.records import trusted_sha256
from facefusion_batch.runtime.batching import BatchPolicy
from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.runtime.device_session import DeviceSession
from facefusion_batch.runtime.engine_cache import (
    EngineCache,
    EngineKey,
    MachineKey,
    _write_atomic,
    input_profiles,
    slug,
)
from facefusion_batch.runtime.engine_precision import count_layers, precision_problem
from facefusion_batch.runtime.memory import MemoryGuard, batch_of, split_feeds
from facefusion_batch.runtime.nvml import NvmlSampler
from facefusion_batch.runtime.session import TensorInfo
from facefusion_batch.runtime.streams import (
    DeviceTimer,
    ExclusiveGate,
    is_cuda,
    on_thread_stream,
)
from facefusion_batch.runtime.torch_backend import (
    graph_signature,
    output_batch_axes,
    probe_feeds,
    relative_deviation,
)

log = logging.getLogger("ffbatch")

WORKSPACE_BYTES = 2 << 30
# faces per frame a face-level model is profiled for (its batch is faces, not frames)
FACES_PER_FRAME = {"face_mesh_468": 4}
# symbolic spatial dims by name: (min, opt, max); YuNet's canvas is at most 640², 640×384 for 16:9
SPATIAL_RANGES = {"height": (32, 384, 640), "width": (32, 640, 640)}
FP16_TOLERANCE = 1e-2  # as the cuda backend: max |engine − onnxruntime fp32| / max(1, max |ref|)


def import_tensorrt() -> ModuleType:
    """The tensorrt module, or a clear exit-2 error."""
    try:
        import tensorrt as trt
    except ImportError:
        raise BackendUnavailableError(
            "--backend tensorrt: TensorRT is not installed (pip install 'facefusion-batch[tensorrt]', "
            "needs an NVIDIA GPU and driver); use --backend cuda or cpu"
        ) from None
    except Exception as exc:  # a broken install: libraries missing, wrong CUDA
        raise BackendUnavailableError(f"--backend tensorrt: TensorRT cannot be imported: {exc}") from None
    return trt


class PrecisionMismatchError(ModelError):
    """An engine asked for as fp16 or int8 came out mostly fp32 (exit 2)."""


def require_cuda_torch(purpose: str = "--backend tensorrt"):
    try:
        import torch
    except ImportError:
        raise BackendUnavailableError(
            f"{purpose}: needs torch with CUDA for streams and buffers (pip install 'facefusion-batch[cuda]')"
        ) from None
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            f"{purpose}: no NVIDIA GPU available (torch.cuda.is_available() is False); "
            "TensorRT engines are built on, and for, the GPU that runs them"
        )
    return torch


def open_gpu(index: int, purpose: str) -> tuple[str, str, str]:
    """(torch device, GPU name, sm tag) of GPU `index`, with torch's CUDA context current
    (TensorRT attaches to it)."""
    torch = require_cuda_torch(purpose)
    if index >= torch.cuda.device_count():
        raise BackendUnavailableError(f"GPU {index} does not exist (torch sees {torch.cuda.device_count()})")
    torch.cuda.set_device(index)
    torch.cuda.init()
    p = torch.cuda.get_device_properties(index)
    return f"cuda:{index}", p.name, f"sm_{p.major}{p.minor}"


def machine_key(trt: ModuleType, device_index: int) -> MachineKey:
    import torch

    p = torch.cuda.get_device_properties(device_index)
    return MachineKey(gpu=p.name, sm=f"sm_{p.major}{p.minor}", tensorrt=str(trt.__version__))


def device_scratch(nbytes: int, device: str):
    """Activation memory for one call, from torch's allocator on the current stream (None for 0 bytes);
    too little free memory raises torch's OutOfMemoryError, which the memory guard halves."""
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None


def has_qdq(path: Path) -> bool:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


def double_inputs(path: Path) -> list[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    double = onnx.TensorProto.DOUBLE
    inputs = [v for v in model.graph.input if v.name not in init]
    return [v.name for v in inputs if v.type.tensor_type.elem_type == double]


def without_double_inputs(src: Path, work_dir: Path) -> Path:
    """`src`, or a copy whose float64 inputs are declared float32 and cast to float64 inside the graph:
    TensorRT takes no DOUBLE network input (CodeFormer's fidelity weight is one)."""
    names = double_inputs(src)
    if not names:
        return src
    import onnx
    from onnx import helper

    dst = work_dir / "onnx" / f"{slug(src.stem)}-{trusted_sha256(src)[:12]}-float-inputs.onnx"
    if dst.is_file():
        return dst
    log.info(
        "%s: input(s) %s are float64, which TensorRT cannot take; building from a copy that "
        "takes float32 and casts inside the graph",
        src.name,
        ", ".join(names),
    )
    model = onnx.load(str(src))
    casts = []
    for v in model.graph.input:
        if v.name in names:
            inner = f"{v.name}__float64"
            for node in model.graph.node:
                for index, name in enumerate(node.input):
                    if name == v.name:
                        node.input[index] = inner
            for out in model.graph.output:
                if out.name == v.name:
                    raise ModelError(f"{src}: input {v.name} is also an output; cannot cast it for TensorRT")
            v.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            casts.append(helper.make_node("Cast", [v.name], [inner], to=onnx.TensorProto.DOUBLE))
    nodes = casts + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    write_model_atomically(model, dst)
    return dst


def fp16_onnx(src: Path, sha256: str, work_dir: Path) -> Path:
    """`src` converted to float16 compute (inputs/outputs float32), cached beside the engines."""
    import onnx

    dst = work_dir / "onnx" / f"{slug(src.stem)}-{sha256[:12]}-fp16.onnx"
    if not dst.is_file():
        write_model_atomically(to_float16(onnx.load(str(src))), dst)
    return dst


def profiles_for(label: str, inputs: tuple[TensorInfo, ...], max_batch: int):
    factor = FACES_PER_FRAME.get(label, 1)
    return input_profiles(inputs, max_batch * factor, dynamic=SPATIAL_RANGES)


def build_engine(
    trt: ModuleType,
    onnx_path: Path,
    key: EngineKey,
    *,
    timing_cache: Path,
    workspace_bytes: int = WORKSPACE_BYTES,
) -> tuple[bytes, dict[str, Any]]:
    """Serialise an engine for `key` from `onnx_path`. Strongly typed (precision from the file);
    the timing cache is read before and written back after."""
    started = time.perf_counter()
    logger = trt.Logger(trt.Logger.WARNING)
    try:
        builder = trt.Builder(logger)
    except Exception as exc:
        raise BackendUnavailableError(f"TensorRT cannot start a builder (no NVIDIA GPU?): {exc}") from None
    # 10.x: STRONGLY_TYPED is 1 (0 is the old explicit-batch flag); 11.x: it is 0, deprecated and
    # ignored, as every network is strongly typed. The enum gives the bit either way.
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if strongly_typed is None:
        raise BackendUnavailableError(
            f"TensorRT {trt.__version__} has no strongly typed networks; ffbatch needs TensorRT 10 or 11"
        )
    network = builder.create_network(1 << int(strongly_typed))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    # precision comes from the file's types (no FP16/INT8 builder flags: gone in 11.x); the inspector
    # below says what came out
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if key.precision == "fp32":
        config.clear_flag(trt.BuilderFlag.TF32)  # TF32 is on by default; fp32 is the reference
    cached = timing_cache.read_bytes() if timing_cache.is_file() else b""
    cache = config.create_timing_cache(cached)
    config.set_timing_cache(cache, False)
    profile = builder.create_optimization_profile()
    for p in key.profiles:
        profile.set_shape(p.name, p.min, p.opt, p.max)
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ModelError(f"TensorRT could not build an engine from {onnx_path} (see its log above)")

    _write_atomic(timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))
    engine_bytes = bytes(memoryview(serialized))
    layers = inspect_layers(trt, logger, engine_bytes)
    problem = precision_problem(key.precision, layers)
    if problem:
        raise PrecisionMismatchError(
            f"{key.model}: the engine asked for as {key.precision} was not kept: {problem}. TensorRT "
            f"takes each layer's precision from the types in the ONNX it builds from ({onnx_path.name}; "
            "no FP16/INT8 builder flags since 11.x), and that file computes mostly in float32"
        )
    meta = {
        "onnx": str(onnx_path),
        "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build_seconds": round(time.perf_counter() - started, 1),
        "strongly_typed": True,
        "tf32": key.precision != "fp32",
        "layers": layers,
    }
    return engine_bytes, meta


def inspect_layers(trt: ModuleType, logger: Any, engine_bytes: bytes) -> dict[str, int]:
    """Layers per precision of a serialised engine, from its inspector (built DETAILED)."""
    engine = trt.Runtime(logger).deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise ModelError("TensorRT cannot load the engine it just built (see its log above)")
    info = engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)
    return count_layers(info)


def _torch_dtype(trt: ModuleType, dtype: Any):
    import torch

    table = {
        trt.float32: torch.float32,
        trt.float16: torch.float16,
        trt.int32: torch.int32,
        trt.int8: torch.int8,
        trt.bool: torch.bool,
    }
    for name, t in (("int64", torch.int64), ("bfloat16", torch.bfloat16), ("uint8", torch.uint8)):
        if hasattr(trt, name):
            table[getattr(trt, name)] = t
    return table[dtype]


class TensorRTSession(DeviceSession):
    """One engine. Each thread that runs it gets its own execution context (one per stream)."""

    def __init__(self, backend: TensorRTBackend, engine_path: Path, *, label: str, outputs, inputs) -> None:
        self.backend = backend
        self.device = backend.device
        self.label = label
        self.engine_path = engine_path
        trt = backend.trt
        self.engine = backend.runtime.deserialize_cuda_engine(Path(engine_path).read_bytes())
        if self.engine is None:
            raise ModelError(
                f"TensorRT cannot load the engine {engine_path} (rebuild it: ffbatch engines build)"
            )
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if n not in self.input_names]
        self.dtypes = {n: _torch_dtype(trt, self.engine.get_tensor_dtype(n)) for n in names}
        self.inputs = inputs
        self.outputs = outputs

        self.output_axes = output_batch_axes(outputs)
        # the widest batch of any input (a fixed-size input such as a fidelity weight has max 1)
        self.max_batch = max(
            int(self.engine.get_tensor_profile_shape(n, 0)[2][0] if self.engine.get_tensor_shape(n) else 1)
            for n in self.input_names
        )
        self.guard = MemoryGuard(self.max_batch, label=label, on_oom=backend.release_cached)
        self._local = threading.local()
        self.precision = ""

    def _context(self):
        ctx = getattr(self._local, "context", None)
        if ctx is None:
            # no memory reserved for the largest profile: each call brings what its shapes need
            strategy = self.backend.trt.ExecutionContextAllocationStrategy.USER_MANAGED
            ctx = self._local.context = self.engine.create_execution_context(strategy)
            if ctx is None:
                raise ModelError(f"{self.label}: TensorRT cannot create an execution context")
        return ctx

    def _execute(self, feeds: dict[str, Any]) -> dict[str, Any]:
        import torch

        ctx = self._context()
        device = self.backend.device
        keep = []
        for name in self.input_names:
            t = feeds[name].to(device=device, dtype=self.dtypes[name]).contiguous()
            keep.append(t)
            if not ctx.set_input_shape(name, tuple(t.shape)):
                raise ModelError(
                    f"{self.label}: input {name} {tuple(t.shape)} is outside the engine's profile "
                    f"({self.engine_path.name})"
                )
            ctx.set_tensor_address(name, t.data_ptr())
        # activation memory for these shapes only, allocated on this thread's stream
        size = int(ctx.update_device_memory_size_for_shapes())
        scratch = device_scratch(size, device)
        keep.append(scratch)
        ctx.set_device_memory(scratch.data_ptr() if scratch is not None else 0, size)
        out = {}
        for name in self.output_names:
            shape = tuple(ctx.get_tensor_shape(name))
            t = torch.empty(shape, dtype=self.dtypes[name], device=device)
            ctx.set_tensor_address(name, t.data_ptr())
            out[name] = t
        # this thread's stream (on_thread_stream made it current); 0 only for CPU fakes in tests
        handle = torch.cuda.current_stream(device).cuda_stream if is_cuda(device) else 0
        if not ctx.execute_async_v3(handle):
            raise RuntimeError(f"{self.label}: TensorRT execution failed")
        # inputs and outputs were allocated on this stream: the caching allocator will not
        # hand their memory to other work before the engine is done with it
        return {k: v.float() if v.is_floating_point() else v for k, v in out.items()}

    def run_device(self, feeds: dict[str, Any]) -> dict[str, Any]:
        import torch

        n = batch_of(feeds)

        def call(start: int, stop: int) -> dict[str, Any]:
            part = split_feeds(feeds, start, stop) if (start, stop) != (0, n) else feeds
            with self.backend.timer.stage(self.label, self.backend.device):
                return self._execute(part)

        with torch.inference_mode(), on_thread_stream(self.backend.device):
            return self.guard.run(n, call, self.merge)


class TensorRTBackend:
    """`--backend tensorrt`."""

    name = "tensorrt"

    def __init__(
        self,
        options: DeviceSettings | None = None,
        *,
        trt: ModuleType | None = None,
        purpose: str = "--backend tensorrt",
    ) -> None:
        self.options = (options or DeviceSettings(backend=self.name, precision="auto")).validated()
        index = self.options.gpu
        self.device, gpu_name, sm = open_gpu(index, purpose)
        self.trt = trt or import_tensorrt()
        self.logger = self.trt.Logger(self.trt.Logger.WARNING)
        try:
            self.runtime = self.trt.Runtime(self.logger)
        except Exception as exc:
            raise BackendUnavailableError(
                f"--backend tensorrt: TensorRT cannot start (no NVIDIA GPU?): {exc}"
            ) from None
        self.machine = MachineKey(gpu=gpu_name, sm=sm, tensorrt=str(self.trt.__version__))
        self.cache = EngineCache(self.options.engines_dir)
        self.max_batch = BatchPolicy(on_gpu=True, max_batch=self.options.max_batch).profile_max()
        self.gate = ExclusiveGate()
        self.timer = DeviceTimer()
        self.sessions: list[TensorRTSession] = []

        self._sampler = NvmlSampler([index], names={index: self.machine.gpu}).start()

    # -- engines ------------------------------------------------------------------------------------

    def engine_for(self, model_path: Path, label: str, precision: str, onnx_override: Path | None = None):
        """(engine path, key, inputs, outputs) for one model at one precision: found or built."""
        import onnx

        model_path = Path(model_path)
        # the sha256 the store recorded while the file is unchanged (size, mtime, inode): no
        # re-hash of a large model at every load
        sha = trusted_sha256(model_path)
        source = model_path
        if precision == "fp16":
            source = fp16_onnx(model_path, sha, self.cache.directory)
        elif precision == "int8":
            source = Path(onnx_override) if onnx_override else int8_onnx(label)
            if not has_qdq(source):
                raise ModelError(
                    f"{source} has no QuantizeLinear/DequantizeLinear nodes; INT8 engines are built from an "
                    "explicitly quantized ONNX (onnxruntime.quantization.quantize_static, QuantFormat.QDQ)"
                )
            sha = trusted_sha256(source)
        source = without_double_inputs(source, self.cache.directory)
        inputs, outputs = graph_signature(onnx.load(str(model_path), load_external_data=False))
        key = EngineKey(
            model=label,
            model_sha256=sha,
            precision=precision,
            profiles=profiles_for(label, inputs, self.max_batch),
            machine=self.machine,
        )
        path = self.cache.resolve(
            key,
            policy=self.options.engine_policy,
            build=lambda: build_engine(
                self.trt, source, key, timing_cache=self.cache.timing_cache_path(self.machine)
            ),
        )
        return path, key, inputs, outputs

    def load(self, model_path: Path, *, label: str) -> TensorRTSession:
        wanted = self.options.precision
        precision = "fp16" if wanted == "auto" else wanted
        try:
            path, key, inputs, outputs = self.engine_for(model_path, label, precision)
        except PrecisionMismatchError as exc:
            if wanted != "auto":
                raise
            log.warning("%s; using an fp32 engine", exc)
            path, key, inputs, outputs = self.engine_for(model_path, label, "fp32")
            precision = "fp32"
        session = TensorRTSession(self, path, label=label, inputs=inputs, outputs=outputs)
        session.precision = precision
        if wanted == "auto" and precision == "fp16":
            deviation = engine_deviation(session, Path(model_path))
            if deviation > FP16_TOLERANCE:
                log.info(
                    "%s: the fp16 engine deviates by %.3g from fp32; using an fp32 engine", label, deviation
                )
                path, key, inputs, outputs = self.engine_for(model_path, label, "fp32")
                session = TensorRTSession(self, path, label=label, inputs=inputs, outputs=outputs)
                session.precision = "fp32"
        self.sessions.append(session)
        return session

    def release_cached(self) -> None:
        if is_cuda(self.device):
            import torch

            torch.cuda.empty_cache()

    def describe(self) -> str:
        precisions = sorted({s.precision for s in self.sessions}) or [self.options.precision]
        m = self.machine
        return f"tensorrt ({m.tensorrt} on {m.gpu} {m.sm}, {'/'.join(precisions)})"

    def report(self) -> dict[str, Any]:
        return {
            "backend": self.describe(),
            "engines": {s.label: s.engine_path.name for s in self.sessions},
            "device_seconds": {k: round(v, 4) for k, v in sorted(self.timer.seconds().items())},
            "memory_guard": {s.label: s.guard.summary() for s in self.sessions},
            "nvml": self._sampler.summary(),
        }

    def close(self) -> None:
        self._sampler.stop()


def int8_onnx(label: str) -> Path:
    """The store's explicitly quantized variant of `label` (`NAME@int8`), made on demand."""

    try:
        return store.model_path(variant_name(label, "int8"), catalog=variant_catalog(label))
    except Exception as exc:
        raise ModelError(
            f"no INT8 (Q/DQ) ONNX for {label}: {exc}; pass one with `ffbatch engines build {label} "
            "--precision int8 --onnx FILE`"
        ) from exc


def engine_deviation(session: TensorRTSession, onnx_path: Path) -> float:
    """max |engine − onnxruntime fp32| relative to each output's range, on a seeded probe."""
    import onnxruntime as ort

    feeds = probe_feeds(session.inputs)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    ref_session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref_session.get_outputs()]
    ref = dict(zip(names, ref_session.run(names, feeds), strict=True))
    return relative_deviation(ref, session.run(feeds))
