"""Rewrite models for batching and precision: a fixed batch dimension becomes a symbolic one;
float16 and INT8 (explicit Q/DQ) variants of the learned models.

onnxruntime refuses inputs whose batch differs from the declared shape, so a
model published with batch 1 is rewritten once, checked (a batch of N must
equal N single runs) and kept beside the original.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import lazy
from ..cores import usable_cores
from . import onnx_stream, store
from .calibration import feeds_for, identity_for, load_for, output_levels
from .catalog import CATALOG, Derived, ModelSpec
from .convert import (
    ValidationError,
    _graph_inputs,
    float16_file,
    int8_file,
    make_batch_dynamic,
    tool_versions,
)
from .facefusion import MODELS

if TYPE_CHECKING:
    import onnx

    from .sources import DeriveContext
else:
    onnx = lazy.module("onnx")  # imported at its first use

# --- prepared variants of learned models -------------------------------------------------
#
# `NAME@batch` (a dynamic batch dim), `NAME@fp16` and `NAME@int8` (both with a dynamic
# batch) are catalogue entries made on demand by `variant_catalog`: derived by the store
# like any other entry, validated, and recorded with their own sha256 in their sidecar,
# beside the original in the store.

BATCH_RTOL = 1e-3  # |batched − single| ≤ BATCH_RTOL · max(1, max |single|)
PROBE_BATCH = 2
# the batch copy's metadata key for the extent its probe gives a symbolic non-batch dim (a
# detector's height and width: insightface's retinaface/scrfd take [1, 3, ?, ?])
PROBE_EXTENT = "ffbatch.probe_extent"
# the symbol an output's first dim gets when the file declares it as a fixed count other than 1
# (insightface's detector outputs [anchors, values]: a batch folds into the anchors, item-major)
FOLDED = "batch_folded"
DEVIATION_ITEMS = 16  # calibration items on which a variant's deviation is measured
# `--precision int8` on the CPU runs a model's INT8 variant only while its deviation from float32 on
# real face crops (levels of the output crop, 0–255) stays within both bounds; beyond, it runs in float32.
INT8_MAX_LEVELS = 32.0
INT8_MEAN_LEVELS = 2.0
AUTOCAST_ITEMS = 4  # crops for AutoCast's range check (it keeps every activation of every item)
CALIBRATION_ITEMS = 64  # crops INT8 calibration sees at most (entropy histograms of every activation)


def variant_name(name: str, variant: str) -> str:
    return f"{name}@{variant}"


def variant_catalog(
    name: str,
    *,
    calibration_dir: Path | None = None,
    catalog: Mapping[str, ModelSpec] | None = None,
) -> Mapping[str, ModelSpec]:
    """The catalogue plus `name`'s prepared variants (`name` may itself name a variant)."""

    base_name = name.split("@", 1)[0]
    cat = dict(CATALOG if catalog is None else catalog)
    base = cat[base_name]
    stem = base.file[: -len(".onnx")] if base.file.endswith(".onnx") else base.file
    options = (("calibration_dir", str(Path(calibration_dir).absolute())),) if calibration_dir else ()
    batch = variant_name(base_name, "batch")
    common: dict[str, Any] = dict(sha256=None, size=None, licence=base.licence, kind="model")
    cat[batch] = ModelSpec(
        name=batch,
        file=f"{stem}.batch.onnx",
        sources=(Derived("dynamic_batch"),),
        derived_from=base_name,
        validator="batch_equality",
        note=f"{base_name} with a dynamic batch dim; a batch equals single runs (checked when made)",
        **common,
    )
    for variant, recipe, how in (
        ("fp16", "fp16", "float16 weights and compute, float32 inputs and outputs"),
        ("int8", "int8_qdq", "INT8 with explicit Q/DQ nodes, calibrated on aligned face crops"),
    ):
        cat[variant_name(base_name, variant)] = ModelSpec(
            name=variant_name(base_name, variant),
            file=f"{stem}.batch.{variant}.onnx",
            sources=(Derived(recipe),),
            derived_from=batch,
            note=f"{base_name}: {how}; its deviation from float32 is in the sidecar",
            options=options,
            **common,
        )
    return MappingProxyType(cat)


def _fixed_batch_reshapes(model: onnx.ModelProto) -> int:
    """Rewrite Reshape targets that pin the batch to 1 into 0 ("copy the input's dim").

    Only Reshapes of tensors computed from the graph inputs are touched (a weight
    reshaped to [1, C, 1, 1] is left alone); the batch-equality check is the judge.
    """
    from onnx import numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    live = {i.name for i in graph.input if i.name not in inits}
    rewritten = 0
    for node in graph.node:
        if any(name in live for name in node.input):
            live.update(node.output)
        if node.op_type != "Reshape" or node.input[0] not in live or len(node.input) < 2:
            continue
        shape_name = node.input[1]
        if shape_name in inits:
            shape = numpy_helper.to_array(inits[shape_name])
            if shape.ndim == 1 and len(shape) >= 2 and shape[0] == 1:
                fixed = shape.copy()
                fixed[0] = 0
                inits[shape_name].CopyFrom(numpy_helper.from_array(fixed, shape_name))
                rewritten += 1
        elif shape_name in consts:
            attr = next(a for a in consts[shape_name].attribute if a.name == "value")
            shape = numpy_helper.to_array(attr.t)
            if shape.ndim == 1 and len(shape) >= 2 and shape[0] == 1:
                fixed = shape.copy()
                fixed[0] = 0
                attr.t.CopyFrom(numpy_helper.from_array(fixed, attr.t.name))
                rewritten += 1
    return rewritten


def make_dynamic_batch(model: onnx.ModelProto, *, check: bool = True) -> tuple[onnx.ModelProto, int]:
    """A copy with a symbolic batch on every input and output of rank ≥ 2, and batch-pinning
    Reshape targets rewritten; returns it and how many Reshapes were rewritten."""

    ranked = [v.name for v in _graph_inputs(model) if len(v.type.tensor_type.shape.dim) >= 2]
    # rank ≥ 2, or a single value per item (a classifier's class ids, [1] at batch 1)
    outputs = [v.name for v in model.graph.output if _per_item(v.type.tensor_type.shape.dim)]
    folded = {v.name for v in model.graph.output if _folded(v.type.tensor_type.shape.dim)}
    out = make_batch_dynamic(model, "batch", inputs=ranked, outputs=outputs, check=False)
    for value in out.graph.output:
        if value.name in folded:
            value.type.tensor_type.shape.dim[0].dim_param = FOLDED
    rewritten = _fixed_batch_reshapes(out)
    if check:
        onnx.checker.check_model(out)
    return out, rewritten


def _folded(dims) -> bool:
    """A first dim the file fixes at a count other than 1: not a batch, a batch folds into it."""
    return len(dims) >= 2 and dims[0].HasField("dim_value") and dims[0].dim_value > 1


def symbolic_extent(model: onnx.ModelProto) -> bool:
    """Whether an input of rank ≥ 2 has a symbolic dim after the batch (a detector's height)."""
    return any(
        len(dims) >= 2 and any(not d.HasField("dim_value") for d in dims[1:])
        for dims in (v.type.tensor_type.shape.dim for v in _graph_inputs(model))
    )


def _per_item(dims) -> bool:
    return len(dims) >= 2 or (len(dims) == 1 and dims[0].HasField("dim_value") and dims[0].dim_value == 1)


def _session(path: Path | str, threads: int = 0):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads  # 0: onnxruntime's default (the cores)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


def probe_feeds(
    session, batch: int, rng: np.random.Generator, extent: int | None = None
) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: values in 0–1, the batch axis `batch` long, a
    symbolic dim after it `extent` long (the model's working size)."""
    feeds = {}
    for i in session.get_inputs():
        shape = list(i.shape)
        if len(shape) <= 1:  # not batched (codeformer's fidelity weight)
            feeds[i.name] = np.full([d if isinstance(d, int) else 1 for d in shape], 0.5, _NP[i.type])
            continue
        if any(not isinstance(d, int) for d in shape[1:]):
            if extent is None:
                raise ValidationError(
                    f"input {i.name} has a symbolic non-batch dim {shape} and the model's working "
                    "size is not known; cannot probe it"
                )
            shape = [shape[0], *(d if isinstance(d, int) else extent for d in shape[1:])]
        feeds[i.name] = rng.uniform(0, 1, [batch, *shape[1:]]).astype(_NP.get(i.type, np.float32))
    return feeds


def check_batch_equality(path: Path, batch: int = PROBE_BATCH) -> float:
    """Largest |batched − single| relative to max(1, max |single|) over the batch's last item;
    raises above BATCH_RTOL.

    A graph that still pins the batch somewhere mixes or drops the items after the first, so the
    last one is compared with its single run (every item would cost a model run each: inswapper's
    take seconds apiece on a CPU). The batched run and the single one run at once, each on half
    the cores: one face a call gains little from a second intra-op thread on the CPU (scripts/
    bench_cpu_rate.py), so the single run takes the core the batch would hardly use."""
    from concurrent.futures import ThreadPoolExecutor

    session = _session(path, threads=max(1, usable_cores() // 2))
    extent = session.get_modelmeta().custom_metadata_map.get(PROBE_EXTENT)
    feeds = probe_feeds(session, batch, np.random.default_rng(0), int(extent) if extent else None)
    names = [o.name for o in session.get_outputs()]
    k = batch - 1
    with ThreadPoolExecutor(1) as pool:  # onnxruntime's run releases the GIL, and is thread-safe
        pending = pool.submit(session.run, names, feeds)
        single = session.run(names, {n: (v[k : k + 1] if v.ndim > 1 else v) for n, v in feeds.items()})
        batched = pending.result()
    worst = 0.0
    for b, s in zip(batched, single, strict=True):
        # an item's rows: one, or a folded output's n (its rows item after item)
        n = s.shape[0]
        if b.shape[0] != batch * n:
            raise ValidationError(
                f"fed a batch of {batch}, an output has {b.shape[0]} rows against {n} for one"
            )
        scale = max(1.0, float(np.abs(s).max()))
        worst = max(worst, float(np.abs(b[k * n : (k + 1) * n].astype(np.float64) - s).max()) / scale)
    if worst > BATCH_RTOL:
        raise ValidationError(f"a batch of {batch} deviates from single runs by {worst:.3g} (relative)")
    return worst


def derive_dynamic_batch(ctx: DeriveContext) -> dict[str, Any]:
    """Recipe "dynamic_batch"."""

    assert ctx.base_path is not None
    rewritten = 0

    def change(model: onnx.ModelProto) -> onnx.ModelProto:
        nonlocal rewritten
        out, rewritten = make_dynamic_batch(model, check=False)
        size = working_size(ctx.spec.derived_from)
        if size is not None and symbolic_extent(model):  # the probe's height and width
            kept = [(p.key, p.value) for p in out.metadata_props if p.key != PROBE_EXTENT]
            del out.metadata_props[:]
            for key, value in [*kept, (PROBE_EXTENT, str(size))]:
                out.metadata_props.add(key=key, value=value)
        return out

    # the weights are streamed from the file, never parsed (inswapper's are 530 MiB)
    # and checked as written (onnx's checker on the graph, the weights' records by their sizes)
    sha = onnx_stream.rewrite_graph(
        ctx.base_path, ctx.out_path, change, what=f"{ctx.spec.name}: writing its batch copy", check=True
    )
    return {
        "made": "dynamic batch dim on inputs and outputs of rank >= 2 (ffbatch prepare)",
        "reshapes_rewritten": rewritten,
        "tools": tool_versions("onnx", "onnxruntime", "numpy"),
        store.WRITTEN_SHA256: sha,
    }


def working_size(name: str | None) -> int | None:
    """The side of the square picture a catalogued learned model works at (a detector's 640)."""
    model = MODELS.get(name.split("@", 1)[0]) if name else None
    return model.size if model is not None and model.size else None


def validate_batch_equality(path: Path, cached: Any = None) -> dict[str, Any]:
    """Validator "batch_equality"."""
    worst = check_batch_equality(Path(path))
    probe = f"{PROBE_BATCH} seeded inputs, the last against its single run"
    return {"batch_max_rel_diff": worst, "batch_rtol": BATCH_RTOL, "probe": probe}


def _calibration_dir(ctx: DeriveContext) -> Path | None:
    value = dict(ctx.spec.options).get("calibration_dir")
    return Path(value) if value else None


def _calibration_feeds(ctx: DeriveContext, directory: Path, limit: int | None) -> dict[str, np.ndarray]:
    """The model's inputs from `limit` crops of the calibration set (identity inputs of real faces)."""
    crops = load_for(ctx.spec.name, directory, limit)
    identity = identity_for(ctx.spec.name, directory, len(crops))
    assert ctx.base_path is not None
    session = _session(ctx.base_path)
    return feeds_for(ctx.spec.name, session, crops, np.random.default_rng(2), len(crops), identity)


def measure_deviation(
    name: str, reference: Path, variant: Path, calibration_dir: Path | None, items: int = DEVIATION_ITEMS
) -> dict[str, Any]:
    """|variant − float32| over real face crops of the calibration set (seeded probes without one):
    largest and mean, raw and, for an image output, in levels (0–255)."""

    ref, var = _session(reference), _session(variant)
    crops = load_for(name, calibration_dir, items) if calibration_dir else None
    identity = identity_for(name, calibration_dir, len(crops)) if crops is not None else None
    feeds = feeds_for(name, ref, crops, np.random.default_rng(1), items, identity)
    names = [o.name for o in ref.get_outputs()]
    worst, total, count = 0.0, 0.0, 0
    worst_levels, total_levels, count_levels = 0.0, 0.0, 0
    n = len(next(v for v in feeds.values() if v.ndim > 1))
    for i in range(0, n, 4):  # a few items per call keeps memory flat on large models
        chunk = {k: (v[i : i + 4] if v.ndim > 1 else v) for k, v in feeds.items()}
        for a, b in zip(ref.run(names, chunk), var.run(names, chunk), strict=True):
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            worst = max(worst, float(d.max()))
            total += float(d.sum())
            count += d.size
            la, lb = output_levels(name, a), output_levels(name, b)
            if la is not None and lb is not None:
                dl = np.abs(la - lb)
                worst_levels = max(worst_levels, float(dl.max()))
                total_levels += float(dl.sum())
                count_levels += dl.size
    if crops is not None:
        probe = f"{n} real face crops of the calibration set {calibration_dir}"
        if identity is not None:
            probe += ", each swapped with the next crop's face (its recogniser embedding)"
    else:
        probe = f"{n} seeded probes (no calibration set given)"
    out: dict[str, Any] = {
        "max_abs_deviation": worst,
        "mean_abs_deviation": total / max(count, 1),
        "measured_on": probe,
        "real_faces": crops is not None,
    }
    if count_levels:
        out["max_levels"] = worst_levels
        out["mean_levels"] = total_levels / count_levels
    return out


def derive_fp16(ctx: DeriveContext) -> dict[str, Any]:
    """Recipe "fp16": `convert.float16_file` of the dynamic-batch model (ModelOpt AutoCast where it
    is at hand), deviation measured on real face crops."""

    assert ctx.base_path is not None
    calibration_dir = _calibration_dir(ctx)
    feeds = _calibration_feeds(ctx, calibration_dir, AUTOCAST_ITEMS) if calibration_dir else None
    made = float16_file(ctx.base_path, ctx.out_path, feeds)
    info = measure_deviation(ctx.spec.name, ctx.base_path, ctx.out_path, calibration_dir)
    return {**made, "deviation_from_fp32": info}


def derive_int8(ctx: DeriveContext) -> dict[str, Any]:
    """Recipe "int8_qdq": `convert.int8_file` (explicit Q/DQ, what TensorRT builds INT8 engines
    from; ModelOpt where it is at hand) calibrated on the calibration set's real face crops."""

    assert ctx.base_path is not None
    calibration_dir = _calibration_dir(ctx)
    if calibration_dir is None:
        raise ValidationError(
            f"{ctx.spec.name} needs a calibration set: "
            "ffbatch models prepare NAME --int8 --calibration-dir DIR (see ffbatch models calibration-crops)"
        )
    feeds = _calibration_feeds(ctx, calibration_dir, CALIBRATION_ITEMS)
    made = int8_file(ctx.base_path, ctx.out_path, feeds)
    info = measure_deviation(ctx.spec.name, ctx.base_path, ctx.out_path, calibration_dir)
    n = len(next(v for v in feeds.values() if v.ndim > 1))
    return {
        **made,
        "calibration_items": n,
        "calibration_dir": str(calibration_dir),
        "deviation_from_fp32": info,
    }


def int8_refusal(record: Mapping[str, Any]) -> str | None:
    """Why an INT8 variant (its sidecar `record`) must not run in place of float32 on the CPU, or
    None: float32 outside its Q/DQ pairs, and its deviation measured on real face crops, in levels,
    within the INT8 bounds."""
    deviation = record.get("deviation_from_fp32") or {}
    if record.get("high_precision") == "fp16":
        # onnxruntime's CPU provider computes float16 in float32 behind casts: slower than fp32 there
        return "its file is float16 outside the Q/DQ pairs (made for TensorRT), slower than fp32 on the CPU"
    if not deviation.get("real_faces"):
        return "its deviation from float32 was not measured on real face crops"
    if "max_levels" not in deviation:
        return "its output is no image, so it has no deviation in levels"
    worst, mean = float(deviation["max_levels"]), float(deviation["mean_levels"])
    if worst > INT8_MAX_LEVELS or mean > INT8_MEAN_LEVELS:
        return (
            f"it deviates from float32 by up to {worst:.1f} levels, {mean:.2f} on average, on real face "
            f"crops (bounds {INT8_MAX_LEVELS:g} and {INT8_MEAN_LEVELS:g})"
        )
    return None


def usable_int8(name: str, models_dir: Path | None = None) -> tuple[Path | None, str]:
    """(the verified INT8 variant of `name`, "") where one was made and holds `int8_refusal`'s
    bounds, else (None, why). Never makes one: that needs a calibration set."""
    import json

    catalog = variant_catalog(name)
    target = variant_name(name, "int8")
    result = store.verify(target, models_dir=models_dir, catalog=catalog, validate=False)
    if not result.ok or result.path is None:
        return None, (
            f"no INT8 variant is made ({result.reason}); make one with: ffbatch models prepare {name} "
            "--int8 --calibration-dir DIR (ffbatch models calibration-crops makes DIR)"
        )
    record = json.loads(store.sidecar_path(result.path).read_text(encoding="utf-8"))
    why = int8_refusal(record)
    return (None, why) if why else (result.path, "")


def prepared_path(
    name: str, *, models_dir: Path | None = None, catalog: Mapping[str, ModelSpec] | None = None
) -> Path:
    """The verified file of variant `name` (``NAME@batch`` …), made if missing and made again
    when the file it was made from has changed since (its sidecar records that file's sha256)."""
    import json

    catalog = catalog if catalog is not None else variant_catalog(name)
    base = catalog[name].derived_from
    assert base is not None
    if "@" in base:
        prepared_path(base, models_dir=models_dir, catalog=catalog)
    path = store.model_path(name, models_dir=models_dir, catalog=catalog)
    base_sha = store.verify(base, models_dir=models_dir, catalog=catalog).actual
    try:
        made_from = json.loads(store.sidecar_path(path).read_text(encoding="utf-8")).get("source_sha256")
    except (OSError, ValueError):
        made_from = None
    if made_from != base_sha:
        path = store.fetch(name, force=True, models_dir=models_dir, catalog=catalog)
    return path
