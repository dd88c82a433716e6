"""Small ONNX stand-ins for FaceFusion's learned models, built with onnx.helper.

Each has the real model's input and output names, shapes (batch fixed at 1 where
the publisher's file has it), dtypes and value ranges, so the learned path —
fetch, CRC check, batch preparation, the pipeline — runs end to end without the
real files (which only their publishers' hosts serve). Weights are seeded
random; what the models compute is only shaped like the real thing:

- inswapper_128: target [1,3,128,128] 0–1, source [1,512] → output [1,3,128,128] 0–1; its last
  initializer is a 512×512 `emap`; a Reshape pins the batch to 1 (as exported graphs often do);
- hyperswap_1a_256: target [1,3,256,256] in [-1,1], source [1,512] → [1,3,256,256] in [-1,1];
- arcface_w600k_r50: input [1,3,112,112] → [1,512], a fixed random projection of the centred,
  8×8-pooled crop: deterministic, and a face's crop is closest to another crop of itself;
- gfpgan_1.4: input [1,3,512,512] in [-1,1] → output in [-1,1];
- xseg_1: input [1,256,256,3] NHWC 0–1 → [1,256,256,1]: visible everywhere except a known
  rectangle (`XSEG_HOLE`), whatever the picture;
- bisenet_resnet_34: input [1,3,512,512] → logits [1,19,512,512]: skin in a known central
  box (`SKIN_BOX`), hair above it, background elsewhere.

`write_standins(dir)` writes them under FaceFusion's file names with a `.hash`
(CRC32) beside each, like FaceFusion's `.assets/models`.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
XSEG_HOLE = (160, 256, 64, 192)  # rows y0:y1, cols x0:x1 of the 256² crop reported occluded
SKIN_BOX = (16, 56, 12, 52)  # rows, cols of the 64² class map (×8 at 512) labelled skin


def _model(nodes, inputs, outputs, inits, name) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _t(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _init(name, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _swapper(size: int, out_op: str, seed: int, batch: int | str = 1) -> onnx.ModelProto:
    """conv(target) · scale(source) + shift(source) → out_op; scale/shift via a batch-pinned Reshape."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w_conv", rng.normal(0, 0.5, (3, 3, 3, 3)).astype(np.float32)),
        _init("w_scale", rng.normal(0, 0.1, (512, 3)).astype(np.float32)),
        _init("b_scale", np.ones(3, np.float32)),
        _init("w_shift", rng.normal(0, 0.1, (512, 3)).astype(np.float32)),
        _init("b_shift", np.zeros(3, np.float32)),
        _init("style_shape", np.array([1, 3, 1, 1], np.int64)),  # pins the batch, as exports often do
    ]
    nodes = [
        helper.make_node("Conv", ["target", "w_conv"], ["feat"], pads=[1, 1, 1, 1]),
        helper.make_node("Gemm", ["source", "w_scale", "b_scale"], ["scale_flat"]),
        helper.make_node("Reshape", ["scale_flat", "style_shape"], ["scale"]),
        helper.make_node("Gemm", ["source", "w_shift", "b_shift"], ["shift_flat"]),
        helper.make_node("Reshape", ["shift_flat", "style_shape"], ["shift"]),
        helper.make_node("Mul", ["feat", "scale"], ["styled"]),
        helper.make_node("Add", ["styled", "shift"], ["pre"]),
        helper.make_node(out_op, ["pre"], ["output"]),
    ]
    return _model(
        nodes,
        [_t("target", [batch, 3, size, size]), _t("source", [batch, 512])],
        [_t("output", [batch, 3, size, size])],
        inits,
        f"standin_swapper_{size}",
    )


def inswapper(seed: int = 0) -> onnx.ModelProto:
    model = _swapper(128, "Sigmoid", seed)
    emap = np.random.default_rng(seed + 100).normal(0, 1 / np.sqrt(512), (512, 512)).astype(np.float32)
    model.graph.initializer.append(_init("emap", emap))  # the last initializer, read by no node
    return model


def hyperswap(seed: int = 1) -> onnx.ModelProto:
    return _swapper(256, "Tanh", seed)


def arcface(seed: int = 2) -> onnx.ModelProto:
    proj = np.random.default_rng(seed).normal(0, 1, (3 * 14 * 14, 512)).astype(np.float32)
    nodes = [
        helper.make_node("AveragePool", ["input"], ["pooled"], kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("ReduceMean", ["pooled"], ["mean"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Sub", ["pooled", "mean"], ["centred"]),
        helper.make_node("Flatten", ["centred"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "proj"], ["embedding"]),
    ]
    return _model(
        nodes,
        [_t("input", [1, 3, 112, 112])],
        [_t("embedding", [1, 512])],
        [_init("proj", proj)],
        "standin_arcface",
    )


def gfpgan(seed: int = 3) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (0.8 * np.eye(3) + rng.normal(0, 0.05, (3, 3))).astype(np.float32).reshape(3, 3, 1, 1)
    nodes = [
        helper.make_node("Conv", ["input", "w"], ["c"]),
        helper.make_node("Tanh", ["c"], ["output"]),
    ]
    return _model(
        nodes, [_t("input", [1, 3, 512, 512])], [_t("output", [1, 3, 512, 512])], [_init("w", w)], "gfpgan"
    )


def _input_zeros(nodes: list, axis: int) -> str:
    """A [N,...,1,...] tensor of zeros that carries the input's batch (so any batch runs)."""
    nodes.append(helper.make_node("ReduceMean", ["input"], ["m"], axes=[axis], keepdims=1))
    nodes.append(helper.make_node("Mul", ["m", "zero"], ["zeros"]))
    return "zeros"


def xseg() -> onnx.ModelProto:
    logit = np.full((1, 256, 256, 1), 12.0, np.float32)
    y0, y1, x0, x1 = XSEG_HOLE
    logit[0, y0:y1, x0:x1, 0] = -12.0
    nodes: list = []
    zeros = _input_zeros(nodes, 3)
    nodes += [
        helper.make_node("Add", [zeros, "logit"], ["l"]),
        helper.make_node("Sigmoid", ["l"], ["output"]),
    ]
    inits = [_init("zero", np.float32(0)), _init("logit", logit)]
    return _model(nodes, [_t("input", [1, 256, 256, 3])], [_t("output", [1, 256, 256, 1])], inits, "xseg")


def bisenet() -> onnx.ModelProto:
    labels = np.zeros((64, 64), np.int64)
    y0, y1, x0, x1 = SKIN_BOX
    labels[:y0, :] = 17  # hair
    labels[y0:y1, x0:x1] = 1  # skin
    logits = np.eye(19, dtype=np.float32)[labels].transpose(2, 0, 1)[None] * 10.0  # [1,19,64,64]
    nodes: list = []
    zeros = _input_zeros(nodes, 1)
    nodes += [
        helper.make_node("Resize", ["small", "", "scales"], ["big"], mode="nearest"),
        helper.make_node("Add", [zeros, "big"], ["output"]),
    ]
    inits = [
        _init("zero", np.float32(0)),
        _init("small", logits),
        _init("scales", np.array([1, 1, 8, 8], np.float32)),
    ]
    return _model(nodes, [_t("input", [1, 3, 512, 512])], [_t("output", [1, 19, 512, 512])], inits, "bisenet")


def converter(seed: int) -> onnx.ModelProto:
    """crossface_*: input [1,512] raw ArcFace embedding → [1,512], a fixed near-identity map
    scaled so that its output is not unit length (what FaceFusion's normalising is for)."""
    rng = np.random.default_rng(seed)
    w = (3.0 * np.eye(512) + rng.normal(0, 0.2, (512, 512))).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["input", "w"], ["output"])]
    return _model(nodes, [_t("input", [1, 512])], [_t("output", [1, 512])], [_init("w", w)], "crossface")


def enhancer(size: int, seed: int = 3) -> onnx.ModelProto:
    """GFPGAN / GPEN / RestoreFormer++ signature at `size`: input [1,3,S,S] in [-1,1] → same."""
    model = gfpgan(seed)
    for v in (model.graph.input[0], model.graph.output[0]):
        v.type.tensor_type.shape.dim[2].dim_value = size
        v.type.tensor_type.shape.dim[3].dim_value = size
    return model


def codeformer(seed: int = 4) -> onnx.ModelProto:
    """codeformer: input [1,3,512,512] and weight float64 [1] (fidelity) → output; the weight
    shifts the output, so a test can see that it is fed."""
    rng = np.random.default_rng(seed)
    w = (0.8 * np.eye(3) + rng.normal(0, 0.05, (3, 3))).astype(np.float32).reshape(3, 3, 1, 1)
    nodes = [
        helper.make_node("Conv", ["input", "w"], ["c"]),
        helper.make_node("Cast", ["weight"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["wf", "half"], ["centred"]),
        helper.make_node("Add", ["c", "centred"], ["shifted"]),
        helper.make_node("Tanh", ["shifted"], ["output"]),
    ]
    return _model(
        nodes,
        [_t("input", [1, 3, 512, 512]), _t("weight", [1], TensorProto.DOUBLE)],
        [_t("output", [1, 3, 512, 512])],
        [_init("w", w), _init("half", np.array([0.5], np.float32))],
        "codeformer",
    )


def xseg_seeing(seed: int = 5) -> onnx.ModelProto:
    """xseg_2: like xseg_1's signature, but its mask follows the picture (brightness through a
    steep sigmoid), so how a crop is resized for it shows in the mask."""
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["m"], axes=[3], keepdims=1),
        helper.make_node("Sub", ["m", "mid"], ["c"]),
        helper.make_node("Mul", ["c", "gain"], ["l"]),
        helper.make_node("Sigmoid", ["l"], ["output"]),
    ]
    inits = [_init("mid", np.float32(0.3)), _init("gain", np.float32(12.0))]
    return _model(nodes, [_t("input", [1, 256, 256, 3])], [_t("output", [1, 256, 256, 1])], inits, "xseg2")


def bisenet_seeing(seed: int = 6) -> onnx.ModelProto:
    """bisenet_resnet_18: 19 logits from a fixed 1×1 colour projection of the crop, so the classes
    (and the region mask) follow the picture."""
    w = np.random.default_rng(seed).normal(0, 3, (19, 3, 1, 1)).astype(np.float32)
    bias = np.zeros(19, np.float32)
    bias[1] = 3.0  # skin wins about half the picture, the other classes share the rest
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["output"])]
    inits = [_init("w", w), _init("b", bias)]
    return _model(
        nodes, [_t("input", [1, 3, 512, 512])], [_t("output", [1, 19, 512, 512])], inits, "bisenet18"
    )


def fairface() -> onnx.ModelProto:
    """FaceFusion's gender-age-race classifier's signature: input [1,3,224,224] (ImageNet-normalised
    RGB) → race_id, gender_id, age_id, int64 [1] each (class ids, as FaceFusion reads them).
    What it computes is known: gender 1 (female) where the crop's mean red exceeds its mean blue,
    age band floor(clip(4 + 4·mean, 0, 8)) from the mean over all channels, race 0."""
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["channel_mean"], axes=[2, 3], keepdims=0),  # [1,3]
        helper.make_node("Gather", ["channel_mean", "zero"], ["red"], axis=1),  # [1]
        helper.make_node("Gather", ["channel_mean", "two"], ["blue"], axis=1),
        helper.make_node("Greater", ["red", "blue"], ["is_female"]),
        helper.make_node("Cast", ["is_female"], ["gender_id"], to=TensorProto.INT64),
        helper.make_node("ReduceMean", ["channel_mean"], ["all_mean"], axes=[1], keepdims=0),  # [1]
        helper.make_node("Mul", ["all_mean", "four"], ["scaled"]),
        helper.make_node("Add", ["scaled", "four"], ["shifted"]),
        helper.make_node("Clip", ["shifted", "lo", "hi"], ["clipped"]),
        helper.make_node("Floor", ["clipped"], ["band"]),
        helper.make_node("Cast", ["band"], ["age_id"], to=TensorProto.INT64),
        helper.make_node("Mul", ["gender_id", "zero_i"], ["race_id"]),
    ]
    inits = [
        _init("zero", np.array(0, np.int64)),
        _init("two", np.array(2, np.int64)),
        _init("four", np.array(4.0, np.float32)),
        _init("lo", np.array(0.0, np.float32)),
        _init("hi", np.array(8.0, np.float32)),
        _init("zero_i", np.array(0, np.int64)),
    ]
    outputs = [_t(n, [1], TensorProto.INT64) for n in ("race_id", "gender_id", "age_id")]
    return _model(nodes, [_t("input", [1, 3, 224, 224])], outputs, inits, "standin_fairface")


STANDINS = {
    "inswapper_128": inswapper,
    "hyperswap_1a_256": hyperswap,
    "arcface_w600k_r50": arcface,
    "gfpgan_1.4": gfpgan,
    "xseg_1": xseg,
    "bisenet_resnet_34": bisenet,
}

# the rest of the catalogue, written only when named (so the default set stays small)
MORE_STANDINS = {
    "simswap_256": lambda: _swapper(256, "Sigmoid", 11),
    "simswap_unofficial_512": lambda: _swapper(512, "Sigmoid", 12),
    "ghost_1_256": lambda: _swapper(256, "Tanh", 13),
    "hififace_unofficial_256": lambda: _swapper(256, "Tanh", 14),
    "crossface_simswap": lambda: converter(21),
    "crossface_ghost": lambda: converter(22),
    "crossface_hififace": lambda: converter(23),
    "gfpgan_1.2": lambda: enhancer(512, 31),
    "gfpgan_1.3": lambda: enhancer(512, 32),
    "gpen_bfr_256": lambda: enhancer(256, 33),
    "gpen_bfr_512": lambda: enhancer(512, 34),
    "gpen_bfr_1024": lambda: enhancer(1024, 35),
    "gpen_bfr_2048": lambda: enhancer(2048, 36),
    "restoreformer_plus_plus": lambda: enhancer(512, 37),
    "codeformer": codeformer,
    "xseg_2": xseg_seeing,
    "bisenet_resnet_18": bisenet_seeing,
    "fairface": fairface,
}


def crc32_hex(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


def write_standin(directory: Path, name: str, model: onnx.ModelProto | None = None) -> Path:
    """`name`.onnx and `name`.hash (its CRC32) in `directory`, as FaceFusion keeps them."""
    directory.mkdir(parents=True, exist_ok=True)
    data = (model or {**STANDINS, **MORE_STANDINS}[name]()).SerializeToString()
    path = directory / f"{name}.onnx"
    path.write_bytes(data)
    (directory / f"{name}.hash").write_text(crc32_hex(data))
    return path


def write_standins(directory: Path, names=tuple(STANDINS)) -> Path:
    for name in names:
        write_standin(directory, name)
    return directory


def copy_store(real_home: Path, new_home: Path) -> Path:
    """A private $FFBATCH_HOME holding copies of the real store's files (default models, assets),
    so tests that make prepared variants from stand-ins never write into the real store."""
    import shutil

    for sub in ("models", "assets"):
        src = real_home / sub
        if src.is_dir():
            # another test process may be writing a temporary file there (a prepared copy's
            # .partial): it is no model and may be gone before it is copied
            temps = shutil.ignore_patterns("*.partial*", "*.lock")
            shutil.copytree(src, new_home / sub, copy_function=shutil.copy2, dirs_exist_ok=True, ignore=temps)
    return new_home
