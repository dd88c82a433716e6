"""A strict stand-in of TensorRT's Python API (10.x and 11.x), put in place of `tensorrt` in tests.

`make("10.16.1.11")` or `make("11.4.0.106")` returns a module with the part of the
API ffbatch uses, and the rules of that version:

- the ONNX parser reads the file with the real `onnx` package: its inputs, their
  declared element types and shapes (-1 for a symbolic dim); a DOUBLE network input
  is refused (TensorRT has no DOUBLE network input, `DataType` has no member for it);
- `BuilderFlag` has FP16/INT8/BF16/FP8 in 10.x (deprecated since 10.12) and not in
  11.x; `IBuilderConfig.int8_calibrator` exists in 10.x only;
  `NetworkDefinitionCreationFlag.STRONGLY_TYPED` is 1 in 10.x (0 is the deprecated
  EXPLICIT_BATCH) and 0 in 11.x (deprecated, ignored: every network is strongly
  typed; there is no EXPLICIT_BATCH); precision flags on a strongly typed network are
  an error; `TF32` is set by default;
- `build_serialized_network` returns None and logs an error when an input has a
  dynamic dim and no profile, when a profile misses an input, has another rank, is
  not min <= opt <= max, or gives a static dim anything but that value as min, opt
  and max (FaceFusion's files fix the batch at 1);
- the engine reports each layer's precision as the file declares it (one layer per
  ONNX node; a node fed by a DequantizeLinear of INT8 data, or feeding a
  QuantizeLinear, has INT8 tensors, as TensorRT fuses them) through
  `IEngineInspector.get_engine_information(LayerInformationFormat.JSON)`, detailed only
  when built with `ProfilingVerbosity.DETAILED`: 10.x spells each tensor's type in
  "Format/Datatype" and lists "Bindings", 11.x splits it into "Format" and "DataType"
  and lists "I/O Tensors"; a weakly typed 10.x network built with FP16 reports its
  FLOAT layers as Half (what the builder may choose);
- execution contexts: `set_input_shape` within profile 0, `set_tensor_address` for
  every input and output before `execute_async_v3`; `ExecutionContextAllocationStrategy.
  USER_MANAGED` contexts need `set_device_memory(ptr, size)` with at least
  `update_device_memory_size_for_shapes()` bytes (that needs every input shape set);
  `get_device_memory_size_for_profile_v2` / `device_memory_size_v2` (the unsuffixed ones
  are 10.x only); a STATIC context reserves the largest profile's memory at creation,
  and `create_execution_context` returns None when that exceeds `DEVICE.budget_bytes`
  (a test's stand-in for the GPU's free memory);
- an engine serialised by another version is refused by `deserialize_cuda_engine`.

Execution reads the inputs from the raw addresses given (CPU memory: torch CPU tensors
in tests), runs the ONNX with onnxruntime and writes the outputs to their addresses in
the engine's types. Activation memory is a made-up linear function of the batch.

What it proves: that ffbatch uses the documented API of both versions in the documented
order, with profiles, types, flags and memory handling that the rules above accept,
and that it reads the precision report. What it does not prove: that TensorRT builds or
runs these models, which tactics or fusions it picks, the real layer names, memory
sizes or speed, the exact error texts, or how the real parser treats internal DOUBLE
tensors (here: as FLOAT). Only a GPU run shows those (scripts/gpu_session.sh).

Written from: NVIDIA's "Migrating from TensorRT 10.x to 11.x" pages (docs.nvidia.com/
deeplearning/tensorrt/11.4.0/api/migration/tensorrt-10x-to-11x.html, …/11.0.0/api/
migration/tensorrt-10x-to-11x-python-api.html, …/11.3.0/api/migration/
tensorrt-10x-to-11x-IEngineInspector.html); "Engine Inspector" (…/10.16.1/
inference-library/engine-tools.html) and the EngineInspector Python page (…/11.4.0/
_static/python-api/infer/Core/EngineInspector.html); NVIDIA/TensorRT include/NvInfer.h,
NvInferRuntime.h, NvInferRuntimeBase.h, python/src/infer/pyCore.cpp and python/
docstrings/infer/pyCoreDoc.h at tags v10.16 and v11.1 (the newest 11.x headers
published; 11.4's Python migration page lists the same removals).
"""

from __future__ import annotations

import base64
import ctypes
import json
import types
from typing import Any

import numpy as np

MAGIC = b"STANDIN-TRT\0"
ACTIVATION_FACTOR = 8  # activation bytes per item = 8 × the item's I/O bytes (a made-up model)


class _Device:
    """The GPU's free memory, as far as the stand-in knows (None: unlimited)."""

    budget_bytes: int | None = None


DEVICE = _Device()


class EnumMember:
    def __init__(self, enum: str, name: str, value: int) -> None:
        self.enum, self.name, self.value = enum, name, value

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EnumMember) and (other.enum, other.value) == (self.enum, self.value)

    def __hash__(self) -> int:
        return hash((self.enum, self.value))

    def __repr__(self) -> str:
        return f"<{self.enum}.{self.name}: {self.value}>"


def _enum(name: str, members: dict[str, int]) -> type:
    made = {k: EnumMember(name, k, v) for k, v in members.items()}
    return type(name, (), {**made, "__members__": made})


class _Strict:
    """Attributes are the documented ones only: assigning another raises, as pybind11 does."""

    _settable: tuple[str, ...] = ()

    def __setattr__(self, key: str, value: Any) -> None:
        if not key.startswith("_") and key not in self._settable:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{key}'")
        object.__setattr__(self, key, value)


def make(version: str) -> types.ModuleType:  # noqa: C901 - one closure per version keeps the rules together
    """A `tensorrt` module of `version` ("10.16.1.11", "11.4.0.106")."""
    import onnx

    major = int(version.split(".")[0])
    if major not in (10, 11):
        raise ValueError(f"the stand-in models TensorRT 10.x and 11.x, not {version}")
    v10 = major == 10
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.__doc__ = f"stand-in of TensorRT {version} (tests/trt_standin.py)"

    data_types = {"FLOAT": 0, "HALF": 1, "INT8": 2, "INT32": 3, "BOOL": 4, "UINT8": 5, "FP8": 6}
    data_types |= {"BF16": 7, "INT64": 8, "INT4": 9, "FP4": 10}
    DataType = _enum("DataType", data_types)
    trt.DataType = DataType
    for alias, member in (
        ("float32", "FLOAT"),
        ("float16", "HALF"),
        ("int8", "INT8"),
        ("int32", "INT32"),
        ("bool", "BOOL"),
        ("uint8", "UINT8"),
        ("fp8", "FP8"),
        ("bfloat16", "BF16"),
        ("int64", "INT64"),
        ("int4", "INT4"),
    ):
        setattr(trt, alias, getattr(DataType, member))
    # the inspector's spelling of each type
    type_names = {"FLOAT": "Float", "HALF": "Half", "INT8": "Int8", "INT32": "Int32", "BOOL": "Bool"}
    type_names |= {"UINT8": "UInt8", "BF16": "BFloat16", "INT64": "Int64", "FP8": "FP8"}
    format_names = {"FLOAT": "FP32", "HALF": "FP16", "INT8": "Int8", "BF16": "BF16"}
    np_types = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32}
    np_types |= {"BOOL": np.bool_, "UINT8": np.uint8, "INT64": np.int64}
    P = onnx.TensorProto
    from_onnx = {P.FLOAT: "FLOAT", P.FLOAT16: "HALF", P.BFLOAT16: "BF16", P.INT8: "INT8"}
    from_onnx |= {P.UINT8: "UINT8", P.INT32: "INT32", P.INT64: "INT64", P.BOOL: "BOOL"}

    Severity = _enum("Severity", {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 2, "INFO": 3, "VERBOSE": 4})

    class Logger:
        INTERNAL_ERROR, ERROR, WARNING = Severity.INTERNAL_ERROR, Severity.ERROR, Severity.WARNING
        INFO, VERBOSE = Severity.INFO, Severity.VERBOSE

        def __init__(self, min_severity: EnumMember = Severity.WARNING) -> None:
            self.min_severity = min_severity
            self.messages: list[tuple[EnumMember, str]] = []

        def log(self, severity: EnumMember, msg: str) -> None:
            self.messages.append((severity, msg))
            trt.MESSAGES.append((severity.name, msg))

    Logger.Severity = Severity
    trt.Logger = Logger
    trt.MESSAGES = []  # every logger's messages, for tests

    def error(logger: Logger, msg: str) -> None:
        logger.log(Severity.ERROR, msg)

    if v10:
        network_flags = {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1, "PREFER_JIT_PYTHON_PLUGINS": 2}
        network_flags["PREFER_AOT_PYTHON_PLUGINS"] = 3
    else:
        network_flags = {"STRONGLY_TYPED": 0, "PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
    trt.NetworkDefinitionCreationFlag = _enum("NetworkDefinitionCreationFlag", network_flags)
    builder_flags = {"DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6}
    builder_flags["SPARSE_WEIGHTS"] = 7
    if v10:
        builder_flags |= {"FP16": 0, "INT8": 1, "OBEY_PRECISION_CONSTRAINTS": 9, "FP8": 15, "BF16": 17}
        builder_flags |= {"PREFER_PRECISION_CONSTRAINTS": 10, "INT4": 22, "FP4": 26}
    BuilderFlag = _enum("BuilderFlag", builder_flags)
    trt.BuilderFlag = BuilderFlag
    precision_flags = {"FP16", "INT8", "FP8", "BF16", "INT4", "FP4"} & set(builder_flags)
    trt.MemoryPoolType = _enum("MemoryPoolType", {"WORKSPACE": 0, "DLA_MANAGED_SRAM": 1})
    trt.ProfilingVerbosity = _enum("ProfilingVerbosity", {"LAYER_NAMES_ONLY": 0, "NONE": 1, "DETAILED": 2})
    trt.LayerInformationFormat = _enum("LayerInformationFormat", {"ONELINE": 0, "JSON": 1})
    trt.TensorIOMode = _enum("TensorIOMode", {"NONE": 0, "INPUT": 1, "OUTPUT": 2})
    Strategy = _enum("ExecutionContextAllocationStrategy", {"STATIC": 0, "ON_PROFILE_CHANGE": 1})
    Strategy.USER_MANAGED = EnumMember("ExecutionContextAllocationStrategy", "USER_MANAGED", 2)
    trt.ExecutionContextAllocationStrategy = Strategy

    def nptype(dtype: EnumMember):
        return np_types[dtype.name]

    trt.nptype = nptype

    # --- network and parser -----------------------------------------------------------------------

    class ITensor:
        def __init__(self, name: str, dtype: EnumMember, shape: tuple[int, ...]) -> None:
            self.name, self.dtype, self.shape = name, dtype, shape

    class INetworkDefinition(_Strict):
        def __init__(self, flags: int) -> None:
            self._flags = flags
            self._inputs: list[ITensor] = []
            self._outputs: list[ITensor] = []
            self._model = None

        @property
        def num_inputs(self) -> int:
            return len(self._inputs)

        def get_input(self, index: int) -> ITensor:
            return self._inputs[index]

        @property
        def num_outputs(self) -> int:
            return len(self._outputs)

        def get_output(self, index: int) -> ITensor:
            return self._outputs[index]

        def get_flag(self, flag: EnumMember) -> bool:
            return bool(self._flags & (1 << int(flag)))

        @property
        def strongly_typed(self) -> bool:
            return (not v10) or self.get_flag(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)

    class ParserError:
        def __init__(self, text: str, node: int = -1) -> None:
            self._text, self._node = text, node

        def desc(self) -> str:
            return self._text

        def node(self) -> int:
            return self._node

        def __str__(self) -> str:
            return f"In node {self._node}: {self._text}"

    class OnnxParser(_Strict):
        def __init__(self, network: INetworkDefinition, logger: Logger) -> None:
            self._network, self._logger = network, logger
            self._errors: list[ParserError] = []

        @property
        def num_errors(self) -> int:
            return len(self._errors)

        def get_error(self, index: int) -> ParserError:
            return self._errors[index]

        def clear_errors(self) -> None:
            self._errors.clear()

        def parse_from_file(self, model: str) -> bool:
            try:
                proto = onnx.load(str(model))
            except Exception as exc:
                self._errors.append(ParserError(f"Failed to parse ONNX model from file: {model}: {exc}"))
                return False
            return self._parse(proto)

        def parse(self, model: bytes, path: str | None = None) -> bool:
            return self._parse(onnx.load_from_string(bytes(model)))

        def _parse(self, proto) -> bool:
            init = {t.name for t in proto.graph.initializer}
            net = self._network
            for i, v in enumerate(x for x in proto.graph.input if x.name not in init):
                t = v.type.tensor_type
                kind = from_onnx.get(t.elem_type)
                if kind is None:
                    name = P.DataType.Name(t.elem_type)
                    self._errors.append(
                        ParserError(
                            f"Unsupported ONNX data type: {name} ({t.elem_type}) for input {v.name}", i
                        )
                    )
                    error(self._logger, f"ModelImporter: input {v.name}: unsupported data type {name}")
                    return False
                shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
                net._inputs.append(ITensor(v.name, getattr(DataType, kind), shape))
            for v in proto.graph.output:
                t = v.type.tensor_type
                kind = from_onnx.get(t.elem_type, "FLOAT")
                shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
                net._outputs.append(ITensor(v.name, getattr(DataType, kind), shape))
            net._model = proto
            return True

    # --- builder --------------------------------------------------------------------------------

    class IOptimizationProfile(_Strict):
        def __init__(self) -> None:
            self._shapes: dict[str, tuple[tuple[int, ...], ...]] = {}

        def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:  # noqa: A002
            self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

        def get_shape(self, input: str):  # noqa: A002
            return [list(s) for s in self._shapes.get(input, ((), (), ()))]

    class ITimingCache:
        def __init__(self, data: bytes) -> None:
            self._data = data

        def serialize(self) -> bytes:
            return f"STANDIN-TIMING {version}".encode()

    config_settable = ("profiling_verbosity", "builder_optimization_level", "max_aux_streams")
    if v10:
        config_settable += ("int8_calibrator",)

    class IBuilderConfig(_Strict):
        _settable = config_settable

        def __init__(self) -> None:
            self._flags = {BuilderFlag.TF32}
            self._profiles: list[IOptimizationProfile] = []
            self._pools: dict[EnumMember, int] = {}
            self._timing: ITimingCache | None = None
            self.profiling_verbosity = trt.ProfilingVerbosity.LAYER_NAMES_ONLY
            if v10:
                self.int8_calibrator = None

        def set_flag(self, flag: EnumMember) -> None:
            self._flags.add(flag)

        def clear_flag(self, flag: EnumMember) -> None:
            self._flags.discard(flag)

        def get_flag(self, flag: EnumMember) -> bool:
            return flag in self._flags

        def set_memory_pool_limit(self, pool: EnumMember, pool_size: int) -> None:
            self._pools[pool] = int(pool_size)

        def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
            self._profiles.append(profile)
            return len(self._profiles) - 1

        @property
        def num_optimization_profiles(self) -> int:
            return len(self._profiles)

        def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache:
            return ITimingCache(bytes(serialized_timing_cache))

        def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
            self._timing = cache
            return True

        def get_timing_cache(self) -> ITimingCache | None:
            return self._timing

    class Builder(_Strict):
        def __init__(self, logger: Logger) -> None:
            self._logger = logger

        @property
        def logger(self) -> Logger:
            return self._logger

        def create_network(self, flags: int = 0) -> INetworkDefinition:
            known = 0
            for member in trt.NetworkDefinitionCreationFlag.__members__.values():
                known |= 1 << int(member)
            if int(flags) & ~known:
                raise TypeError(f"create_network: unknown NetworkDefinitionCreationFlag bits {flags:#x}")
            return INetworkDefinition(int(flags))

        def create_builder_config(self) -> IBuilderConfig:
            return IBuilderConfig()

        def create_optimization_profile(self) -> IOptimizationProfile:
            return IOptimizationProfile()

        def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig):
            problem = _build_problem(network, config)
            if problem:
                error(self._logger, problem)
                return None
            return MAGIC + json.dumps(_plan(network, config)).encode()

    def _build_problem(network: INetworkDefinition, config: IBuilderConfig) -> str:
        if network._model is None:
            return "Error Code 4: API Usage Error (network has no inputs: was the ONNX parsed?)"
        if network.strongly_typed:
            weak = sorted(f.name for f in config._flags if f.name in precision_flags)
            if weak:
                return f"Error Code 3: API Usage Error (precision flags {weak} with strong typing)"
        dynamic = [t.name for t in network._inputs if -1 in t.shape]
        if dynamic and not config._profiles:
            return (
                "Error Code 4: API Usage Error (Network has dynamic or shape inputs, but no optimization "
                f"profile has been defined: {dynamic})"
            )
        for index, profile in enumerate(config._profiles):
            for t in network._inputs:
                if t.name not in profile._shapes:
                    return f"Error Code 4: API Usage Error (profile {index} has no shapes for input {t.name})"
                lo, mid, hi = profile._shapes[t.name]
                if not len(lo) == len(mid) == len(hi) == len(t.shape):
                    return f"Error Code 4: API Usage Error ({t.name}: profile rank differs from {t.shape})"
                for axis, dim in enumerate(t.shape):
                    a, b, c = lo[axis], mid[axis], hi[axis]
                    if not 0 <= a <= b <= c:
                        return (
                            f"Error Code 4: API Usage Error ({t.name}: need min <= opt <= max on axis {axis})"
                        )
                    if dim >= 0 and not a == b == c == dim:
                        return (
                            f"Error Code 4: Internal Error ({t.name}: for dimension number {axis} in profile "
                            f"{index} does not match network definition (got min={a}, opt={b}, max={c}), "
                            f"expected min=opt=max={dim}.)"
                        )
            for name in profile._shapes:
                if name not in {t.name for t in network._inputs}:
                    return (
                        f"Error Code 4: API Usage Error (profile {index} names {name}, not a network input)"
                    )
        return ""

    def _plan(network: INetworkDefinition, config: IBuilderConfig) -> dict[str, Any]:
        model = network._model
        profile = config._profiles[0]._shapes if config._profiles else {}
        io = []
        for t in network._inputs:
            shapes = profile.get(t.name, (t.shape, t.shape, t.shape))
            io.append(
                {"name": t.name, "mode": "INPUT", "dtype": t.dtype.name, "shape": t.shape, "profile": shapes}
            )
        for t in network._outputs:
            io.append({"name": t.name, "mode": "OUTPUT", "dtype": t.dtype.name, "shape": t.shape})
        weak_fp16 = not network.strongly_typed and BuilderFlag.FP16 in config._flags
        return {
            "version": version,
            "verbosity": config.profiling_verbosity.name,
            "tf32": BuilderFlag.TF32 in config._flags,
            "strongly_typed": network.strongly_typed,
            "io": io,
            "layers": _layers(model, weak_fp16),
            "onnx": base64.b64encode(model.SerializeToString()).decode(),
        }

    def _layers(model, weak_fp16: bool) -> list[dict[str, Any]]:
        inferred = onnx.shape_inference.infer_shapes(model)
        g = inferred.graph
        types_of = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]}
        types_of |= {t.name: t.data_type for t in g.initializer}
        init = {t.name for t in g.initializer}
        producer = {o: n for n in g.node for o in n.output}
        consumers: dict[str, list] = {}
        for n in g.node:
            for i in n.input:
                consumers.setdefault(i, []).append(n)

        def kind(name: str) -> str:
            elem = types_of.get(name, P.FLOAT)
            k = "FLOAT" if elem == P.DOUBLE else from_onnx.get(elem, "FLOAT")  # DOUBLE runs as FLOAT here
            return "HALF" if weak_fp16 and k == "FLOAT" else k

        layers = []
        for index, n in enumerate(g.node):
            if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
                continue  # fused into their neighbours
            ins = []
            for i in n.input:
                if not i or i in init:
                    continue
                src = producer.get(i)
                fused_int8 = (
                    src is not None
                    and src.op_type == "DequantizeLinear"
                    and types_of.get(src.input[0]) == P.INT8
                )
                ins.append((i, "INT8" if fused_int8 else kind(i)))
            outs = []
            for o in n.output:
                quantized = any(c.op_type == "QuantizeLinear" for c in consumers.get(o, []))
                outs.append((o, "INT8" if quantized else kind(o)))
            layers.append(
                {"name": n.name or f"node_{index}", "type": n.op_type, "inputs": ins, "outputs": outs}
            )
        return layers

    # --- engine, context, inspector -----------------------------------------------------------------

    def per_item_bytes(io: list[dict[str, Any]], shapes: dict[str, tuple[int, ...]]) -> int:
        total = 0
        for t in io:
            if t["mode"] == "INPUT":
                shape = shapes[t["name"]]
                total += int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(np_types[t["dtype"]]).itemsize
        return ACTIVATION_FACTOR * total

    class ICudaEngine(_Strict):
        def __init__(self, plan: dict[str, Any]) -> None:
            self._plan = plan
            self._io = {t["name"]: t for t in plan["io"]}
            self._names = [t["name"] for t in plan["io"]]

        @property
        def num_io_tensors(self) -> int:
            return len(self._names)

        def get_tensor_name(self, index: int) -> str:
            return self._names[index]

        def get_tensor_mode(self, name: str) -> EnumMember:
            t = self._io.get(name)
            return getattr(trt.TensorIOMode, t["mode"]) if t else trt.TensorIOMode.NONE

        def get_tensor_dtype(self, name: str) -> EnumMember:
            return getattr(DataType, self._io[name]["dtype"])

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            return tuple(self._io[name]["shape"])

        def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
            t = self._io.get(name)
            if profile_index != 0 or t is None or t["mode"] != "INPUT":
                raise RuntimeError(f"get_tensor_profile_shape: no profile {profile_index} for {name}")
            return [tuple(s) for s in t["profile"]]

        @property
        def num_optimization_profiles(self) -> int:
            return 1

        @property
        def profiling_verbosity(self) -> EnumMember:
            return getattr(trt.ProfilingVerbosity, self._plan["verbosity"])

        @property
        def num_layers(self) -> int:
            return len(self._plan["layers"])

        def _inputs(self) -> list[dict[str, Any]]:
            return [t for t in self._plan["io"] if t["mode"] == "INPUT"]

        def get_device_memory_size_for_profile_v2(self, profile_index: int) -> int:
            shapes = {t["name"]: tuple(t["profile"][2]) for t in self._inputs()}
            batch = max((s[0] for s in shapes.values() if s), default=1)
            return per_item_bytes(self._plan["io"], shapes) * batch

        @property
        def device_memory_size_v2(self) -> int:
            return self.get_device_memory_size_for_profile_v2(0)

        def create_execution_context(self, strategy: EnumMember = Strategy.STATIC):
            if strategy not in Strategy.__members__.values() and strategy != Strategy.USER_MANAGED:
                raise TypeError(
                    f"create_execution_context: not an ExecutionContextAllocationStrategy: {strategy}"
                )
            if strategy != Strategy.USER_MANAGED:
                need = self.device_memory_size_v2
                if DEVICE.budget_bytes is not None and need > DEVICE.budget_bytes:
                    trt.MESSAGES.append(
                        ("ERROR", f"Requested amount of GPU memory ({need} bytes) could not be allocated")
                    )
                    return None
            return IExecutionContext(self, strategy)

        def create_engine_inspector(self) -> EngineInspector:
            return EngineInspector(self)

    if v10:
        ICudaEngine.device_memory_size = property(lambda self: self.device_memory_size_v2)
        ICudaEngine.get_device_memory_size_for_profile = ICudaEngine.get_device_memory_size_for_profile_v2

    class IExecutionContext(_Strict):
        engine = property(lambda self: self._engine)

        def __init__(self, engine: ICudaEngine, strategy: EnumMember) -> None:
            self._engine = engine
            self._strategy = strategy
            self._shapes: dict[str, tuple[int, ...]] = {}
            self._addresses: dict[str, int] = {}
            self._memory: tuple[int, int] | None = None

        def _fail(self, msg: str) -> bool:
            trt.MESSAGES.append(("ERROR", msg))
            return False

        def set_input_shape(self, name: str, shape: Any) -> bool:
            t = self.engine._io.get(name)
            if t is None or t["mode"] != "INPUT":
                return self._fail(f"setInputShape: {name} is not an input tensor")
            shape = tuple(int(s) for s in shape)
            lo, _, hi = t["profile"]
            if len(shape) != len(lo) or not all(a <= s <= b for a, s, b in zip(lo, shape, hi, strict=True)):
                return self._fail(
                    f"setInputShape: {name} {shape} is outside profile 0 ({tuple(lo)} .. {tuple(hi)})"
                )
            self._shapes[name] = shape
            return True

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            t = self.engine._io[name]
            if t["mode"] == "INPUT":
                return self._shapes.get(name, tuple(t["shape"]))
            return self._output_shapes().get(name, tuple(t["shape"]))

        def _output_shapes(self) -> dict[str, tuple[int, ...]]:
            model = _model(self.engine)
            known: dict[str, int] = {}
            for v in model.graph.input:
                shape = self._shapes.get(v.name)
                for axis, d in enumerate(v.type.tensor_type.shape.dim):
                    if shape is not None and d.dim_param:
                        known[d.dim_param] = shape[axis]
            out = {}
            for v in model.graph.output:
                dims = v.type.tensor_type.shape.dim
                out[v.name] = tuple(
                    d.dim_value if d.HasField("dim_value") else known.get(d.dim_param, -1) for d in dims
                )
            return out

        def set_tensor_address(self, name: str, memory: int) -> bool:
            if name not in self.engine._io:
                return self._fail(f"setTensorAddress: {name} is not an I/O tensor")
            self._addresses[name] = int(memory)
            return True

        def _all_inputs_set(self) -> bool:
            return all(t["name"] in self._shapes for t in self.engine._inputs())

        def update_device_memory_size_for_shapes(self) -> int:
            if not self._all_inputs_set():
                self._fail("updateDeviceMemorySizeForShapes: not every input shape is set")
                return 0
            batch = max(s[0] for s in self._shapes.values() if s)
            return per_item_bytes(self.engine._plan["io"], self._shapes) * batch

        def set_device_memory(self, memory: int, size: int) -> None:
            self._memory = (int(memory), int(size))

        def _set_device_memory_v1(self, memory: int) -> None:
            self._memory = (int(memory), -1)

        device_memory = property(None, _set_device_memory_v1)

        def execute_async_v3(self, stream_handle: int) -> bool:
            if not self._all_inputs_set():
                return self._fail("enqueueV3: not every input shape is set (set_input_shape)")
            missing = [n for n in self.engine._names if not self._addresses.get(n)]
            if missing:
                return self._fail(f"enqueueV3: no address for {missing} (set_tensor_address)")
            if self._strategy == Strategy.USER_MANAGED:
                need = self.update_device_memory_size_for_shapes()
                if self._memory is None:
                    return self._fail(
                        "enqueueV3: USER_MANAGED context without device memory (set_device_memory)"
                    )
                if self._memory[1] < need:
                    return self._fail(f"enqueueV3: device memory of {self._memory[1]} bytes, need {need}")
                if need and not self._memory[0]:
                    return self._fail("enqueueV3: device memory is a null pointer")
            _run(self.engine, self._shapes, self._addresses, self.get_tensor_shape)
            return True

    def _model(engine: ICudaEngine):
        if not hasattr(engine, "_proto"):
            object.__setattr__(
                engine, "_proto", onnx.load_from_string(base64.b64decode(engine._plan["onnx"]))
            )
        return engine._proto

    def _run(engine: ICudaEngine, shapes, addresses, shape_of) -> None:
        import onnxruntime as ort

        def view(name: str, shape: tuple[int, ...]) -> np.ndarray:
            dtype = np.dtype(np_types[engine._io[name]["dtype"]])
            n = int(np.prod(shape, dtype=np.int64))
            buf = (ctypes.c_char * (n * dtype.itemsize)).from_address(addresses[name])
            return np.frombuffer(buf, dtype=dtype, count=n).reshape(shape)

        session = getattr(engine, "_session", None)
        if session is None:
            options = ort.SessionOptions()
            options.log_severity_level = 3
            session = ort.InferenceSession(
                _model(engine).SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
            object.__setattr__(engine, "_session", session)
        feeds = {t["name"]: view(t["name"], shapes[t["name"]]).copy() for t in engine._inputs()}
        names = [o.name for o in session.get_outputs()]
        for name, value in zip(names, session.run(names, feeds), strict=True):
            out = view(name, tuple(shape_of(name)))
            out[...] = value.astype(out.dtype)

    class EngineInspector(_Strict):
        _settable = ("execution_context",)

        def __init__(self, engine: ICudaEngine) -> None:
            self._engine = engine
            self.execution_context = None

        def _tensor(self, name: str, kind: str) -> dict[str, Any]:
            shape = self._engine._io.get(name, {}).get("shape", [])
            layout = f"Row major linear {format_names.get(kind, type_names.get(kind, kind))} format"
            if v10:
                return {"Name": name, "Location": "Device", "Dimensions": shape, "Format/Datatype": layout}
            return {
                "Name": name,
                "Location": "Device",
                "Dimensions": shape,
                "Format": f"{layout} (kLINEAR)",
                "DataType": type_names.get(kind, kind),
            }

        def _layer(self, layer: dict[str, Any]) -> dict[str, Any] | str:
            if self._engine._plan["verbosity"] != "DETAILED":
                return layer["name"]
            return {
                "Name": layer["name"],
                "LayerType": layer["type"],
                "Inputs": [self._tensor(n, k) for n, k in layer["inputs"]],
                "Outputs": [self._tensor(n, k) for n, k in layer["outputs"]],
            }

        def get_layer_information(self, layer_index: int, format: EnumMember) -> str:  # noqa: A002
            return json.dumps(self._layer(self._engine._plan["layers"][layer_index]))

        def get_engine_information(self, format: EnumMember) -> str:  # noqa: A002
            plan = self._engine._plan
            if plan["verbosity"] == "NONE":
                return json.dumps({"Layers": []})
            info: dict[str, Any] = {"Layers": [self._layer(layer) for layer in plan["layers"]]}
            if v10:
                info["Bindings"] = [t["name"] for t in plan["io"]]
            else:
                info["I/O Tensors"] = [
                    {
                        "Name": t["name"],
                        "IOMode": t["mode"].title(),
                        "DataType": type_names[t["dtype"]],
                        "Dimensions": t["shape"],
                        "Location": "Device",
                    }
                    for t in plan["io"]
                ]
            return json.dumps(info)

    class Runtime(_Strict):
        def __init__(self, logger: Logger) -> None:
            self._logger = logger

        def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None:
            data = bytes(serialized_engine)
            if not data.startswith(MAGIC):
                error(self._logger, "Error Code 1: Serialization (Magic tag does not match)")
                return None
            plan = json.loads(data[len(MAGIC) :])
            if plan["version"] != version:
                error(
                    self._logger,
                    "Error Code 6: API Usage Error (The engine plan file is not compatible with this version "
                    f"of TensorRT, expecting library version {version} got {plan['version']})",
                )
                return None
            return ICudaEngine(plan)

    trt.Builder = Builder
    trt.OnnxParser = OnnxParser
    trt.Runtime = Runtime
    trt.IOptimizationProfile = IOptimizationProfile
    trt.ICudaEngine = ICudaEngine
    trt.IExecutionContext = IExecutionContext
    trt.EngineInspector = EngineInspector
    return trt


def parsed_plan(serialized: bytes) -> dict[str, Any]:
    """What the stand-in put in an engine (for tests that look inside)."""
    return json.loads(bytes(serialized)[len(MAGIC) :])
