"""Model conversion helpers, and the face-mesh derivation and its numeric validation.

Generic: `tflite_to_onnx`, `make_batch_dynamic`, `check_signature`.
Face mesh: `derive_face_mesh` (recipe "face_mesh_onnx") converts MediaPipe's
`face_landmark.tflite` and makes its batch dimension symbolic;
`validate_face_mesh` (validator "face_mesh_onnx") checks the result against the
TFLite interpreter when one is usable, else against the fingerprint recorded in
the catalogue, and checks that a batch of 3 equals 3 single runs.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import io
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import fsutil, lazy
from . import catalog, modelopt_run

if TYPE_CHECKING:
    import onnx

    from .sources import DeriveContext
else:
    onnx = lazy.module("onnx")  # imported at its first use

log = logging.getLogger(__name__)

MESH_INPUT = "input_1"
MESH_OUTPUTS = ("conv2d_20", "conv2d_30")
MESH_SIZE = 192
BATCH_TOLERANCE = 1e-4  # max abs difference between a batch of 3 and 3 single runs
# Window of astronaut.png (512x512) holding the face, used as a real-face probe.
ASTRONAUT_WINDOW = (10, 130)  # (top, left) of a 192x192 crop


class ValidationError(Exception):
    """A converted model does not behave like its source."""


def tool_versions(*names: str) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            out[n] = "not installed"
    return out


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence stderr, Python-level and file-descriptor-level (native libraries chat on fd 2)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            if sys.__stderr__ is not None:
                sys.__stderr__.flush()
            saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError):
            yield
            return
        try:
            os.dup2(devnull, 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)


# --- generic helpers -------------------------------------------------------------------


def tflite_to_onnx(tflite_path: Path | str, onnx_path: Path | str) -> Path:
    """Convert a .tflite file with tflite2onnx and check the result with `onnx.checker`."""
    import tflite2onnx

    tflite_path, onnx_path = Path(tflite_path), Path(onnx_path)
    # tflite2onnx logs and prints freely; keep that out of the user's terminal.
    logger = logging.getLogger("tflite2onnx")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            tflite2onnx.convert(str(tflite_path), str(onnx_path))
    finally:
        logger.setLevel(level)
    onnx.checker.check_model(str(onnx_path))
    return onnx_path


def _graph_inputs(model: onnx.ModelProto) -> list[Any]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def make_batch_dynamic(
    model: onnx.ModelProto,
    dim_name: str = "batch",
    inputs: Iterable[str] | None = None,
    outputs: Iterable[str] | None = None,
    *,
    check: bool = True,
) -> onnx.ModelProto:
    """A copy of `model` whose dim 0 is the symbol `dim_name` on the named inputs/outputs.

    `inputs`/`outputs` default to all graph inputs (initializers excluded) and
    all graph outputs. The graph's `value_info` is dropped: its shapes still
    carry the old fixed batch and would mislead runtimes. This only relabels
    the declared shapes; graphs whose nodes hard-code the batch (Reshape
    constants, as in YuNet) need those rewritten as well. The result passes
    `onnx.checker` (checked unless `check` is False: a graph whose weights are
    placeholders, see `onnx_stream`, is checked as the file written).
    """

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for values, wanted, what in (
        (_graph_inputs(out), inputs, "input"),
        (list(graph.output), outputs, "output"),
    ):
        by_name = {v.name: v for v in values}
        names = list(by_name) if wanted is None else list(wanted)
        for n in names:
            if n not in by_name:
                raise ValueError(f"the graph has no {what} named {n!r} (it has {sorted(by_name)})")
            dims = by_name[n].type.tensor_type.shape.dim
            if len(dims) == 0:
                raise ValueError(f"{what} {n!r} has no shape to make dynamic")
            dims[0].Clear()
            dims[0].dim_param = dim_name
    del graph.value_info[:]
    if check:
        onnx.checker.check_model(out)
    return out


def _dtype_name(elem_type: int) -> str:

    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def check_signature(
    model: onnx.ModelProto | Path | str,
    inputs: Sequence[catalog.TensorSig],
    outputs: Sequence[catalog.TensorSig],
) -> None:
    """Raise `ValidationError` unless the graph declares these inputs and outputs.

    Every declared tensor must be present with the given dtype and rank; int
    dims must match exactly, str dims must be symbolic (any symbol name).
    """

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    problems = []
    for sigs, values, what in (
        (inputs, _graph_inputs(model), "input"),
        (outputs, model.graph.output, "output"),
    ):
        by_name = {v.name: v for v in values}
        for sig in sigs:
            v = by_name.get(sig.name)
            if v is None:
                problems.append(f"no {what} {sig.name!r} (has {sorted(by_name)})")
                continue
            tt = v.type.tensor_type
            dtype = _dtype_name(tt.elem_type)
            if dtype != np.dtype(sig.dtype).name:
                problems.append(f"{what} {sig.name!r} is {dtype}, expected {sig.dtype}")
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
            ok = len(dims) == len(sig.shape) and all(
                (isinstance(want, str) and isinstance(have, str)) or want == have
                for want, have in zip(sig.shape, dims, strict=True)
            )
            if not ok:
                problems.append(f"{what} {sig.name!r} has shape {dims}, expected {list(sig.shape)}")
    if problems:
        raise ValidationError("signature mismatch: " + "; ".join(problems))


# --- face mesh ------------------------------------------------------------------------


def mesh_probe_images(cached: Callable[[str], Path | None] | None = None) -> dict[str, np.ndarray]:
    """Deterministic RGB float32 [192, 192, 3] inputs in 0..1 for validating the mesh.

    "smooth" is a closed-form pattern (no RNG, identical everywhere); "astronaut"
    is a face crop of the astronaut.png asset, added only when it is cached.
    """
    y, x = np.mgrid[0:MESH_SIZE, 0:MESH_SIZE].astype(np.float32) / (MESH_SIZE - 1)
    smooth = np.stack(
        [
            0.5 + 0.4 * np.sin(6 * x + 2 * y),
            0.5 + 0.4 * np.cos(4 * y - 3 * x),
            0.5 + 0.3 * np.sin(5 * x * y),
        ],
        axis=-1,
    ).astype(np.float32)
    probes = {"smooth": smooth}
    path = cached("astronaut.png") if cached is not None else None
    if path is not None:
        import cv2

        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is not None and bgr.shape[:2] == (512, 512):
            top, left = ASTRONAUT_WINDOW
            crop = bgr[top : top + MESH_SIZE, left : left + MESH_SIZE, ::-1]
            probes["astronaut"] = np.ascontiguousarray(crop, dtype=np.float32) / 255.0
    return probes


def _nchw(images: Sequence[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(np.stack(images).transpose(0, 3, 1, 2), dtype=np.float32)


def _interpreter(factory: Any, model_path: str) -> Any:
    return factory(model_path=model_path)


def _tflite_interpreter_factories() -> list[tuple[str, Callable[[str], Any]]]:
    out: list[tuple[str, Callable[[str], Any]]] = []
    for module, dist in (
        ("ai_edge_litert.interpreter", "ai-edge-litert"),
        ("tflite_runtime.interpreter", "tflite-runtime"),
        ("tensorflow.lite", "tensorflow"),
    ):
        try:
            with _quiet_stderr():
                mod = __import__(module, fromlist=["Interpreter"])
            factory = mod.Interpreter
        except Exception:  # not installed, or broken (e.g. built for numpy 1)
            continue
        version = tool_versions(dist)[dist]
        out.append((f"{dist} {version}", functools.partial(_interpreter, factory)))
    return out


def tflite_reference(
    tflite_path: Path, probes: Mapping[str, np.ndarray]
) -> tuple[str, dict[str, dict[str, np.ndarray]]] | None:
    """Run the .tflite on each probe with the first usable interpreter; None if none is.

    Returns (interpreter description, {probe: {onnx output name: flat array}}).
    tflite_runtime 2.14 imports under numpy 2 but fails when used: such
    failures only mean "no interpreter".
    """
    for engine, make in _tflite_interpreter_factories():
        try:
            with _quiet_stderr():
                interp = make(str(tflite_path))
                interp.allocate_tensors()
                (inp,) = interp.get_input_details()
                results: dict[str, dict[str, np.ndarray]] = {}
                for name, img in probes.items():
                    interp.set_tensor(inp["index"], img[None].astype(np.float32))
                    interp.invoke()
                    outs = {}
                    for d in interp.get_output_details():
                        arr = np.array(interp.get_tensor(d["index"]), dtype=np.float32).ravel()
                        outs[MESH_OUTPUTS[0] if arr.size == 1404 else MESH_OUTPUTS[1]] = arr
                    results[name] = outs
        except Exception as exc:
            log.debug("TFLite interpreter %s unusable: %s", engine, exc)
            continue
        return engine, results
    return None


def _rel_dev(a: np.ndarray, ref: np.ndarray) -> float:
    scale = max(1.0, float(np.abs(ref).max()))
    return float(np.abs(a.ravel() - ref.ravel()).max()) / scale


def _mesh_session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def _run_mesh(sess: Any, batch: np.ndarray) -> dict[str, np.ndarray]:
    outs = sess.run(list(MESH_OUTPUTS), {MESH_INPUT: batch})
    return {
        n: np.asarray(o, dtype=np.float32).reshape(batch.shape[0], -1)
        for n, o in zip(MESH_OUTPUTS, outs, strict=True)
    }


def validate_face_mesh(path: Path, cached: Callable[[str], Path | None] | None = None) -> dict[str, Any]:
    """Check a converted face mesh numerically; raise `ValidationError` if it is off.

    (a) single-image outputs match the TFLite interpreter (when one is usable)
    within `catalog.MESH_TOLERANCE` relative, and the catalogue's fingerprint
    within the same tolerance; (b) a batch of 3 equals 3 single runs within
    `BATCH_TOLERANCE`. Returns a summary for the store's sidecar.
    """
    cached = cached or (lambda _n: None)
    probes = mesh_probe_images(cached)
    sess = _mesh_session(path)
    single = {name: _run_mesh(sess, _nchw([img])) for name, img in probes.items()}
    tol = catalog.MESH_TOLERANCE
    summary: dict[str, Any] = {"probes": sorted(probes), "tolerance_rel": tol}

    # (a1) the recorded fingerprint
    fp_dev = 0.0
    checked = 0
    for probe, per_output in catalog.MESH_FINGERPRINT.items():
        if probe not in single:
            continue
        for out_name, (scale, pairs) in per_output.items():
            got = single[probe][out_name][0]
            for idx, value in pairs:
                fp_dev = max(fp_dev, abs(float(got[idx]) - value) / scale)
                checked += 1
    if checked == 0:
        raise ValidationError("no fingerprint value could be checked")
    summary["fingerprint_values"] = checked
    summary["fingerprint_max_rel_deviation"] = fp_dev
    if fp_dev > tol:
        raise ValidationError(
            f"outputs differ from the recorded fingerprint: {fp_dev:.3g} > {tol:g} relative"
        )

    # (a2) the TFLite interpreter itself, when one is usable and the source is at hand
    tflite_path = cached("face_landmark_tflite")
    ref = tflite_reference(tflite_path, probes) if tflite_path is not None else None
    if ref is None:
        summary["reference"] = "catalogue fingerprint (no usable TFLite interpreter)"
        summary["max_rel_deviation"] = fp_dev
    else:
        engine, results = ref
        dev = max(
            _rel_dev(single[p][n][0], results[p][n]) for p in probes for n in MESH_OUTPUTS if n in results[p]
        )
        summary["reference"] = f"TFLite interpreter ({engine})"
        summary["max_rel_deviation"] = max(dev, fp_dev)
        if dev > tol:
            raise ValidationError(f"outputs differ from TFLite by {dev:.3g} relative (> {tol:g})")

    # (b) batch of 3 == 3 single runs
    smooth = probes["smooth"]
    third = probes.get("astronaut", np.ascontiguousarray(smooth[::-1]))
    trio = [smooth, np.ascontiguousarray(smooth[:, ::-1]), third]
    batched = _run_mesh(sess, _nchw(trio))
    diff = 0.0
    for i, img in enumerate(trio):
        one = _run_mesh(sess, _nchw([img]))
        for n in MESH_OUTPUTS:
            diff = max(diff, float(np.abs(batched[n][i] - one[n][0]).max()))
    summary["batch_max_abs_diff"] = diff
    if diff > BATCH_TOLERANCE:
        raise ValidationError(f"a batch of 3 differs from single runs by {diff:.3g} (> {BATCH_TOLERANCE:g})")

    if "astronaut" in single:
        presence = float(single["astronaut"][MESH_OUTPUTS[1]][0, 0])
        summary["astronaut_presence_logit"] = presence
        if presence <= 0:
            raise ValidationError(f"no face found on the astronaut probe (presence logit {presence:.2f})")
    summary["tools"] = tool_versions("onnxruntime", "numpy")
    return summary


def derive_face_mesh(ctx: DeriveContext) -> dict[str, Any]:
    """Recipe "face_mesh_onnx": tflite2onnx, then a symbolic batch dim on input and outputs."""

    assert ctx.base_path is not None
    with tempfile.TemporaryDirectory(prefix="ffbatch-convert-") as tmp:
        raw = tflite_to_onnx(ctx.base_path, Path(tmp) / "raw.onnx")
        model = onnx.load(str(raw))
    model = make_batch_dynamic(model, "batch", inputs=[MESH_INPUT], outputs=list(MESH_OUTPUTS))
    onnx.save(model, str(ctx.out_path))
    return {"tools": tool_versions("tflite2onnx", "onnx", "onnxruntime", "numpy")}


# --- batchable YuNet -------------------------------------------------------------------

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
    with fsutil.AtomicFile(dst, make_parent=True) as out:
        onnx.save(model, str(out.temp))


def derive_yunet_batch(ctx: DeriveContext) -> dict[str, Any]:
    """Recipe "yunet_batch": YuNet with a symbolic batch (`make_yunet_batchable`)."""

    assert ctx.base_path is not None
    model = make_yunet_batchable(onnx.load(str(ctx.base_path)))
    onnx.checker.check_model(model)
    onnx.save(model, str(ctx.out_path))
    return {"tools": tool_versions("onnx", "onnxruntime", "numpy")}


def validate_yunet_batch(path: Path, cached: Callable[[str], Path | None] | None = None) -> dict[str, Any]:
    """Validator "yunet_batch": a batch of 3 equals 3 single runs (`check_yunet_batch_equality`)."""
    try:
        worst = check_yunet_batch_equality(Path(path))
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    return {"batch_max_abs_diff": worst, "tools": tool_versions("onnxruntime", "numpy")}


# --- float16 ---------------------------------------------------------------------------

# Ops every float16 converter (ours and ModelOpt's) keeps in float32: normalisation statistics,
# softmax, reductions and exponentials overflow float16 or lose the small differences they divide
# by, and a strongly typed TensorRT engine runs each op in the type the file gives it.
FP32_OPS = frozenset(
    """InstanceNormalization BatchNormalization LayerNormalization GroupNormalization
    Softmax LogSoftmax ReduceMean ReduceSum ReduceSumSquare ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
    ReduceProd Exp Pow Log Sqrt Reciprocal""".split()
)
# Ops computed in float16 by `to_float16`; the rest stay float32 behind Cast nodes.
FP16_OPS = frozenset(
    """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Relu LeakyRelu PRelu Sigmoid Tanh Elu
    MaxPool AveragePool GlobalAveragePool Concat Reshape Transpose Flatten Pad Slice Split Squeeze
    Unsqueeze Identity Clip Neg Abs Max Min Resize DepthToSpace SpaceToDepth HardSigmoid Erf""".split()
)
assert not FP16_OPS & FP32_OPS
# Float inputs that keep float32 even on a float16 node (Resize's roi and scales).
_FP32_POSITIONS = {"Resize": {1, 2}}


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` computing in float16 with float32 inputs and outputs kept.

    Nodes in `FP16_OPS` run in float16; their float32 initializers are converted
    in place (a copy is added when a float32 node also reads one); every other
    float tensor crossing between the two precisions gets a Cast. Initializers
    no node reads (such as inswapper's emap) are left untouched, in their place.
    """
    from onnx import TensorProto, helper, numpy_helper

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    elem = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
    inits = {i.name: i for i in graph.initializer}
    for name, init in inits.items():
        elem[name] = init.data_type
    is_float = {n for n, t in elem.items() if t == TensorProto.FLOAT}

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    produced = {name for node in g.node for name in node.output}
    outputs = [o.name for o in g.output if o.name in is_float and o.name in produced]
    rename = {o: f"{o}__fp16" for o in outputs}  # internal name of each float output
    consumers_fp16: dict[str, set[bool]] = {}
    for node in g.node:
        half = node.domain in ("", "ai.onnx") and node.op_type in FP16_OPS
        for idx, name in enumerate(node.input):
            if name in inits and name in is_float:
                keep32 = idx in _FP32_POSITIONS.get(node.op_type, ())
                consumers_fp16.setdefault(name, set()).add(half and not keep32)

    precision: dict[str, int] = {i.name: 32 for i in g.input}
    new_inits: dict[str, str] = {}  # an fp16 copy's name -> the initialiser it copies
    for name, uses in consumers_fp16.items():
        if uses == {True}:
            precision[name] = 16
        else:
            precision[name] = 32
            if True in uses:
                new_inits[f"{name}__fp16"] = name
    casts: dict[tuple[str, int], str] = {}
    nodes: list[onnx.NodeProto] = []

    def as_precision(name: str, bits: int) -> str:
        if not name or name not in is_float or precision.get(name, 32) == bits:
            return name
        if bits == 16 and f"{name}__fp16" in new_inits:
            return f"{name}__fp16"
        key = (name, bits)
        if key not in casts:
            casts[key] = f"{name}__as{bits}"
            to = TensorProto.FLOAT16 if bits == 16 else TensorProto.FLOAT
            nodes.append(helper.make_node("Cast", [name], [casts[key]], to=to, name=f"{casts[key]}_cast"))
        return casts[key]

    for node in g.node:
        half = node.domain in ("", "ai.onnx") and node.op_type in FP16_OPS
        fixed = onnx.NodeProto()
        fixed.CopyFrom(node)
        for idx, name in enumerate(node.input):
            keep32 = idx in _FP32_POSITIONS.get(node.op_type, ())
            fixed.input[idx] = as_precision(rename.get(name, name), 16 if half and not keep32 else 32)
        for idx, name in enumerate(node.output):
            name = rename.get(name, name)
            fixed.output[idx] = name
            if name in is_float or name in rename.values():
                is_float.add(name)
                precision[name] = 16 if half else 32
        nodes.append(fixed)
    for o in outputs:
        src = rename[o]
        if precision.get(src, 32) == 16:
            nodes.append(helper.make_node("Cast", [src], [o], to=TensorProto.FLOAT, name=f"{o}_out_cast"))
        else:
            nodes.append(helper.make_node("Identity", [src], [o], name=f"{o}_out_identity"))

    for init in g.initializer:
        if precision.get(init.name) == 16 and init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    extra = [
        numpy_helper.from_array(numpy_helper.to_array(inits[base]).astype(np.float16), name)
        for name, base in new_inits.items()
    ]
    kept = list(g.initializer)
    del g.initializer[:]
    g.initializer.extend(extra + kept)  # the original order, last one included, is kept at the end
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    onnx.checker.check_model(out)
    return out


# --- converters: NVIDIA ModelOpt where it is at hand, ffbatch's own pass and onnxruntime's otherwise ---

MODELOPT_PYTHON_ENV = "FFBATCH_MODELOPT_PYTHON"  # an interpreter whose environment has nvidia-modelopt[onnx]
CONVERTERS = ("auto", "modelopt", "builtin")


class ConverterUnavailable(ValidationError):
    """The converter asked for cannot run here."""


def modelopt_python() -> tuple[str | None, str]:
    """(interpreter, why): "" to run ModelOpt in this process, a path to run it in another, or
    None with the reason it is not at hand."""
    import importlib.util

    if importlib.util.find_spec("modelopt") is not None:
        return "", "imports in this interpreter"
    python = os.environ.get(MODELOPT_PYTHON_ENV, "")
    if python:
        if Path(python).is_file() and os.access(python, os.X_OK):
            return python, f"${MODELOPT_PYTHON_ENV}={python}"
        return None, f"${MODELOPT_PYTHON_ENV}={python} is not an executable file"
    return None, (
        f"nvidia-modelopt is not installed here and ${MODELOPT_PYTHON_ENV} names no interpreter that has it"
    )


def run_modelopt(
    mode: str, src: Path, dst: Path, calibration: Mapping[str, np.ndarray] | None
) -> dict[str, Any]:
    """`modelopt_run.run` on `src` → `dst`, in this process or the interpreter of `modelopt_python`."""
    import json
    import subprocess

    python, why = modelopt_python()
    if python is None:
        raise ConverterUnavailable(f"ModelOpt: {why}")
    with tempfile.TemporaryDirectory(prefix="ffbatch-modelopt-") as tmp:
        npz = None
        if calibration:
            npz = str(Path(tmp) / "calibration.npz")
            arrays: dict[str, Any] = {k: np.asarray(v) for k, v in calibration.items()}
            np.savez(npz, **arrays)
        # ModelOpt rewrites its input in place (shape inference) and leaves intermediate copies
        # beside its output: it works on a copy, in the temporary folder
        work, out = Path(tmp) / "model.onnx", Path(tmp) / "out.onnx"
        shutil.copyfile(src, work)
        request = {
            "mode": mode,
            "src": str(work),
            "dst": str(out),
            "calibration": npz,
            "fp32_ops": sorted(FP32_OPS),
        }
        if python == "":
            with contextlib.redirect_stdout(io.StringIO()), _quiet_stderr():
                info = modelopt_run.run(request)
        else:
            request_path = Path(tmp) / "request.json"
            request_path.write_text(json.dumps(request), encoding="utf-8")
            proc = subprocess.run(
                [python, modelopt_run.__file__, str(request_path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                raise ValidationError(f"ModelOpt ({python}) failed: " + " | ".join(tail))
            info = json.loads(proc.stdout.strip().splitlines()[-1])
        shutil.copyfile(out, dst)
        return info


def _choose(converter: str) -> tuple[bool, str]:
    """(use ModelOpt, why) for a `CONVERTERS` choice; raises when "modelopt" is asked and absent."""
    if converter not in CONVERTERS:
        raise ValueError(f"converter {converter!r} is not one of {CONVERTERS}")
    if converter == "builtin":
        return False, "asked for the built-in converter"
    python, why = modelopt_python()
    if python is None and converter == "modelopt":
        raise ConverterUnavailable(f"ModelOpt: {why}")
    return python is not None, why


def float16_file(
    src: Path,
    dst: Path,
    calibration: Mapping[str, np.ndarray] | None = None,
    converter: str = "auto",
) -> dict[str, Any]:
    """`src` with float16 compute into `dst`, `FP32_OPS` and the I/O types kept float32: ModelOpt's
    AutoCast (its data-range check on `calibration`) where it is at hand, else `to_float16`."""
    use, why = _choose(converter)
    if use:
        info = run_modelopt("fp16", src, dst, calibration)
        _keep_unread_initializers(src, dst)
    else:
        onnx.save(to_float16(onnx.load(str(src))), str(dst))
        info = {
            "made": "ffbatch cast pass (convert.to_float16), float32 inputs and outputs kept",
            "fp32_ops": sorted(FP32_OPS),
            "tool": f"ffbatch (ModelOpt not used: {why})",
        }
    onnx.checker.check_model(str(dst))
    return {**info, "tools": tool_versions("onnx", "onnxruntime", "numpy")}


def int8_file(
    src: Path, dst: Path, calibration: Mapping[str, np.ndarray], converter: str = "auto"
) -> dict[str, Any]:
    """`src` quantised to INT8 with explicit Q/DQ into `dst`, calibrated on `calibration` (input name
    → items on axis 0): ModelOpt (entropy, float16 outside the Q/DQ pairs, `FP32_OPS` in float32)
    where it is at hand, else onnxruntime's `quantize_static` (MinMax, float32 outside)."""
    use, why = _choose(converter)
    if use:
        info = run_modelopt("int8", src, dst, calibration)
        if not _has_qdq(dst):  # it leaves layers it deems too small to gain unquantised
            use, why = False, "ModelOpt quantised no layer of this model"
    if not use:
        info = _ort_quantize(src, dst, calibration)
        info["tool"] = f"onnxruntime (ModelOpt not used: {why})"
    _keep_unread_initializers(src, dst)
    return {**info, "tools": tool_versions("onnx", "onnxruntime", "numpy")}


def _has_qdq(path: Path) -> bool:
    model = onnx.load(str(path), load_external_data=False)
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


def _keep_unread_initializers(src: Path, dst: Path) -> None:
    """Put back at the end of `dst` the initializers of `src` that no node reads, as they were
    (inswapper's emap must stay its last initializer; converters drop or reorder them)."""
    source = onnx.load(str(src))
    read = {name for node in source.graph.node for name in node.input}
    unread = [i for i in source.graph.initializer if i.name not in read]
    if not unread:
        return
    model = onnx.load(str(dst))
    tail = list(model.graph.initializer)[-len(unread) :]
    if [(i.name, i.data_type) for i in tail] == [(i.name, i.data_type) for i in unread]:
        return
    names = {i.name for i in unread}
    kept = [i for i in model.graph.initializer if i.name not in names]
    del model.graph.initializer[:]
    model.graph.initializer.extend([*kept, *unread])
    onnx.save(model, str(dst))


def _ort_quantize(src: Path, dst: Path, calibration: Mapping[str, np.ndarray]) -> dict[str, Any]:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    n = len(next(v for v in calibration.values() if np.ndim(v) > 1))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.i = 0

        def get_next(self) -> dict[str, np.ndarray] | None:
            if self.i >= n:
                return None
            item = {k: (v[self.i : self.i + 1] if np.ndim(v) > 1 else v) for k, v in calibration.items()}
            self.i += 1
            return item

    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
    )
    return {
        "made": "onnxruntime quantize_static, QuantFormat.QDQ, symmetric QInt8 activations (MinMax) "
        "and per-channel QInt8 weights, float32 outside the Q/DQ pairs",
        "high_precision": "fp32",
    }
