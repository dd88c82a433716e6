"""What precision a built TensorRT engine really runs in, from its engine inspector's JSON.

An engine asked for as FP16 or INT8 can come out FP32: TensorRT 11 has no FP16/INT8
builder flags, so precision comes only from the types in the ONNX, and a converter
that left most of the graph in float32 gives an FP32 engine without a word. The
inspector (`ProfilingVerbosity.DETAILED`) lists each layer's input and output types:
10.x in "Format/Datatype" ("Row major linear FP16 format"), 11.x in "DataType" ("Half").

Pure Python: no TensorRT needed to read a report.
"""

from __future__ import annotations

import json
from collections import Counter

PRECISIONS = ("int8", "fp16", "bf16", "fp32")
MOSTLY_FP32 = 0.5  # an fp16/int8 engine with more than this share of its layers in fp32 is refused
BOOKKEEPING = ("Reformat", "NoOp")  # layout copies: no compute of their own


def tensor_precision(tensor: dict) -> str:
    """'int8', 'fp16', 'bf16', 'fp32' or 'other' for one tensor of a layer."""
    text = str(tensor.get("DataType") or tensor.get("Format/Datatype") or "").upper()
    if "INT8" in text:
        return "int8"
    if "BF16" in text or "BFLOAT16" in text:
        return "bf16"
    if "FP16" in text or "HALF" in text:
        return "fp16"
    if "FP32" in text or "FLOAT" in text:
        return "fp32"
    return "other"


def layer_precision(layer: dict | str) -> str:
    """The lowest precision among a layer's tensors (an INT8 convolution has an fp32 bias)."""
    if not isinstance(layer, dict):
        return "unknown"  # built without ProfilingVerbosity.DETAILED: names only
    found = {tensor_precision(t) for t in [*layer.get("Inputs", []), *layer.get("Outputs", [])]}
    return next((p for p in PRECISIONS if p in found), "other")


def count_layers(engine_information: str) -> dict[str, int]:
    """Layers per precision in `IEngineInspector.get_engine_information(JSON)`."""
    layers = json.loads(engine_information).get("Layers", [])
    counts = Counter(
        layer_precision(layer)
        for layer in layers
        if not (isinstance(layer, dict) and layer.get("LayerType") in BOOKKEEPING)
    )
    return {k: counts[k] for k in (*PRECISIONS, "other", "unknown") if counts[k]}


def shares(counts: dict[str, int]) -> dict[str, float]:
    """Share of the compute layers (fp32, fp16, bf16, int8) in each precision."""
    total = sum(counts.get(p, 0) for p in PRECISIONS)
    return {p: round(counts.get(p, 0) / total, 3) for p in PRECISIONS} if total else {}


def describe(counts: dict[str, int]) -> str:
    """'fp16 92%, int8 0%, fp32 8% of 25 layers' (bf16 only when there is some)."""
    share = shares(counts)
    if not share:
        return "layer precisions unknown (no detailed inspector report)"
    parts = [f"{p} {share[p]:.0%}" for p in ("fp16", "int8", "fp32")]
    if share["bf16"]:
        parts.insert(1, f"bf16 {share['bf16']:.0%}")
    total = sum(counts.get(p, 0) for p in PRECISIONS)
    return f"{', '.join(parts)} of {total} layers"


def precision_problem(asked: str, counts: dict[str, int]) -> str:
    """Why an engine asked for as `asked` did not come out that way ('' when it did)."""
    if asked not in ("fp16", "int8"):
        return ""
    share = shares(counts)
    if not share:
        return "the engine inspector reported no layer precisions, so the precision cannot be checked"
    if share["fp32"] > MOSTLY_FP32:
        return f"it came out mostly FP32 ({describe(counts)})"
    if asked == "int8" and not share["int8"]:
        return f"it has no INT8 layer ({describe(counts)})"
    return ""
