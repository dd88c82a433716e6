"""Stand-ins for FaceFusion's face detector files, with their input and output signatures:

- yoloface_8n: input [1,3,640,640] (BGR /255) → output [1,20,8400]: per anchor of strides
  8/16/32, cx cy w h, score, and five (x, y, visibility) points;
- retinaface_10g, scrfd_2.5g: input [?,3,?,?] (BGR (x-127.5)/128) → nine outputs, scores [A,1],
  box distances [A,4] and point offsets [A,10] for strides 8/16/32 (A = 2 anchors per cell; the
  batch folds into A, batch-major, as insightface's exports do).

Weights are seeded random (each output a pooled 1×1 convolution of the picture), so what they
find is only shaped like faces: a test compares FaceFusion's reading of the same file with
ffbatch's, never with the truth. FaceFusion's yunet_2023_mar is OpenCV's YuNet, which ffbatch
already has: tests copy that file under FaceFusion's name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import standins
from onnx import helper

STRIDES = (8, 16, 32)


def _pooled(
    nodes: list, inits: list, stride: int, channels: int, rng, tag: str, scale, shift, bias: float = 0.0
) -> str:
    """input → AveragePool(stride) → 1×1 Conv → Sigmoid · scale + shift: [N,channels,h,w]."""
    nodes += [
        helper.make_node(
            "AveragePool", ["input"], [f"pool_{tag}"], kernel_shape=[stride] * 2, strides=[stride] * 2
        ),
        helper.make_node("Conv", [f"pool_{tag}", f"w_{tag}", f"b_{tag}"], [f"conv_{tag}"]),
        helper.make_node("Sigmoid", [f"conv_{tag}"], [f"sig_{tag}"]),
        helper.make_node("Mul", [f"sig_{tag}", f"scale_{tag}"], [f"scaled_{tag}"]),
        helper.make_node("Add", [f"scaled_{tag}", f"shift_{tag}"], [f"out_{tag}"]),
    ]
    inits += [
        standins._init(f"w_{tag}", rng.normal(0, 4.0, (channels, 3, 1, 1)).astype(np.float32)),
        standins._init(f"b_{tag}", rng.normal(bias, 1.0, channels).astype(np.float32)),
        standins._init(
            f"scale_{tag}",
            np.broadcast_to(np.asarray(scale, np.float32), channels).reshape(1, channels, 1, 1),
        ),
        standins._init(
            f"shift_{tag}",
            np.broadcast_to(np.asarray(shift, np.float32), channels).reshape(1, channels, 1, 1),
        ),
    ]
    return f"out_{tag}"


def yoloface(seed: int = 11) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = [standins._init("flat_shape", np.array([1, 20, -1], np.int64))]
    # cx cy anywhere on the canvas, w h 20-220 px, score -0.45-0.55 (few above 0.5), points
    # anywhere, visibility 0-1
    scale = [640, 640, 200, 200, 1.0] + [640, 640, 1] * 5
    shift = [0, 0, 20, 20, -0.45] + [0, 0, 0] * 5
    parts = []
    for stride in STRIDES:
        out = _pooled(nodes, inits, stride, 20, rng, f"s{stride}", scale, shift)
        nodes.append(helper.make_node("Reshape", [out, "flat_shape"], [f"flat_s{stride}"]))
        parts.append(f"flat_s{stride}")
    nodes.append(helper.make_node("Concat", parts, ["output"], axis=2))
    return standins._model(
        nodes,
        [standins._t("input", [1, 3, 640, 640])],
        [standins._t("output", [1, 20, 8400])],
        inits,
        "yoloface",
    )


def distances(seed: int) -> onnx.ModelProto:
    """retinaface / scrfd: 2 anchors a cell, outputs in FaceFusion's order (scores, boxes, points)."""
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = []
    outputs = []
    for what, channels, scale, shift, bias in (
        ("score", 1, 1.0, 0.0, -6.0),  # few above 0.5
        ("bbox", 4, 3.0, 0.5, 0.0),  # distances of 0.5-3.5 strides
        ("kps", 10, 4.0, -2.0, 0.0),  # point offsets of ±2 strides
    ):
        inits.append(standins._init(f"shape_{what}", np.array([-1, channels], np.int64)))
        for stride in STRIDES:
            tag = f"{what}{stride}"
            out = _pooled(nodes, inits, stride, 2 * channels, rng, tag, scale, shift, bias)
            nodes += [
                helper.make_node("Transpose", [out], [f"nhwc_{tag}"], perm=[0, 2, 3, 1]),
                helper.make_node("Reshape", [f"nhwc_{tag}", f"shape_{what}"], [tag]),
            ]
            outputs.append(standins._t(tag, ["anchors", channels]))
    return standins._model(
        nodes, [standins._t("input", ["batch", 3, "height", "width"])], outputs, inits, "distances"
    )


def insightface_signature(model: onnx.ModelProto, size: int = 640) -> onnx.ModelProto:
    """The same graph with the signature insightface's exported retinaface / scrfd files declare
    (a strict replica from insightface's and FaceFusion's readers, not from the files: neither may
    be fetched here): the batch fixed at 1, height and width symbolic ('?'; insightface's
    model_zoo tests `isinstance(shape[2], str)`), and every output declared with its fixed count
    at `size` (onnxruntime's 'Expected shape from model of {800,10}' when such a file runs at
    320: the anchors are the first dim, there is no batch dim; FaceFusion's detect_with_retinaface
    indexes `numpy.where(detection[index] >= score)[0]` as anchors)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    dims = out.graph.input[0].type.tensor_type.shape.dim
    dims[0].Clear()
    dims[0].dim_value = 1
    for axis in (2, 3):
        dims[axis].Clear()
        dims[axis].dim_param = "?"
    for value in out.graph.output:
        stride = int("".join(c for c in value.name if c.isdigit()))
        dims = value.type.tensor_type.shape.dim
        dims[0].Clear()
        dims[0].dim_value = 2 * (size // stride) ** 2
    onnx.checker.check_model(out)
    return out


DETECTOR_STANDINS = {
    "yoloface_8n": yoloface,
    "retinaface_10g": lambda: distances(12),
    "scrfd_2.5g": lambda: distances(13),
}


def write_detectors(directory: Path, yunet: Path | None = None) -> Path:
    """The three stand-ins with their `.hash` beside them in `directory`, and `yunet` (OpenCV's
    YuNet file) copied there as FaceFusion's yunet_2023_mar."""
    for name, make in DETECTOR_STANDINS.items():
        standins.write_standin(directory, name, make())
    if yunet is not None:
        data = Path(yunet).read_bytes()
        (directory / "yunet_2023_mar.onnx").write_bytes(data)
        (directory / "yunet_2023_mar.hash").write_text(standins.crc32_hex(data))
    return directory


def fan_68_5(seed: int = 14) -> onnx.ModelProto:
    """fan_68_5: five points [1,5,2] (double, as FaceFusion feeds them) → 68 points [1,68,2]: a fixed
    random linear map near a spread of the five."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(0, 0.05, (10, 136)) + np.tile(np.eye(10), (1, 14))[:, :136] * 0.8
    nodes = [
        helper.make_node("Reshape", ["input", "flat"], ["five"]),
        helper.make_node("MatMul", ["five", "w"], ["many"]),
        helper.make_node("Reshape", ["many", "points"], ["output"]),
    ]
    inits = [
        standins._init("flat", np.array([-1, 10], np.int64)),
        standins._init("points", np.array([-1, 68, 2], np.int64)),
        standins._init("w", weights.astype(np.float64)),
    ]
    return standins._model(
        nodes,
        [standins._t("input", [1, 5, 2], onnx.TensorProto.DOUBLE)],
        [standins._t("output", [1, 68, 2], onnx.TensorProto.DOUBLE)],
        inits,
        "fan_68_5",
    )


def _points(nodes: list, inits: list, rng, tag: str, columns: int) -> str:
    """The crop's mean colour → 68 × `columns` values in 0-1: [N,68·columns]."""
    nodes += [
        helper.make_node("GlobalAveragePool", ["input"], [f"mean_{tag}"]),
        helper.make_node("Conv", [f"mean_{tag}", f"w_{tag}"], [f"conv_{tag}"]),
        helper.make_node("Sigmoid", [f"conv_{tag}"], [f"sig_{tag}"]),
        helper.make_node("Reshape", [f"sig_{tag}", f"shape_{tag}"], [f"flat_{tag}"]),
    ]
    inits += [
        standins._init(f"w_{tag}", rng.normal(0, 3.0, (68 * columns, 3, 1, 1)).astype(np.float32)),
        standins._init(f"shape_{tag}", np.array([-1, 68 * columns], np.int64)),
    ]
    return f"flat_{tag}"


def fan2d4(seed: int = 15) -> onnx.ModelProto:
    """2dfan4: crop [1,3,256,256] RGB 0-1 → points [1,68,3] (x, y on the 64² heatmap grid, and a
    third value) and heatmaps [1,68,64,64]."""
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = [
        standins._init("scale", np.array([64.0, 64.0, 1.0], np.float32)),
        standins._init("shape3", np.array([-1, 68, 3], np.int64)),
        standins._init("w_heat", rng.normal(0, 2.0, (68, 3, 1, 1)).astype(np.float32)),
        standins._init("b_heat", rng.normal(-1.0, 1.0, 68).astype(np.float32)),
    ]
    flat = _points(nodes, inits, rng, "pts", 3)
    nodes += [
        helper.make_node("Reshape", [flat, "shape3"], ["unit"]),
        helper.make_node("Mul", ["unit", "scale"], ["points"]),
        helper.make_node("AveragePool", ["input"], ["small"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Conv", ["small", "w_heat", "b_heat"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["heatmaps"]),
    ]
    return standins._model(
        nodes,
        [standins._t("input", [1, 3, 256, 256])],
        [standins._t("points", [1, 68, 3]), standins._t("heatmaps", [1, 68, 64, 64])],
        inits,
        "2dfan4",
    )


def peppa_wutz(seed: int = 16) -> onnx.ModelProto:
    """peppa_wutz: crop [1,3,256,256] RGB 0-1 → [1,204]: 68 × (x, y on a 64 grid, confidence)."""
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = [standins._init("scale", np.tile(np.array([64.0, 64.0, 1.0], np.float32), 68))]
    flat = _points(nodes, inits, rng, "pts", 3)
    nodes.append(helper.make_node("Mul", [flat, "scale"], ["output"]))
    return standins._model(
        nodes,
        [standins._t("input", [1, 3, 256, 256])],
        [standins._t("output", [1, 204])],
        inits,
        "peppa_wutz",
    )


LANDMARKER_STANDINS = {"fan_68_5": fan_68_5, "2dfan4": fan2d4, "peppa_wutz": peppa_wutz}


def write_landmarkers(directory: Path) -> Path:
    for name, make in LANDMARKER_STANDINS.items():
        standins.write_standin(directory, name, make())
    return directory
