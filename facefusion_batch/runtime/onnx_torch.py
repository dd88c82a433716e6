"""Run an ONNX graph with torch: a small interpreter for the ops our models use.

The graph is read once; every node becomes a torch call, float weights become
module buffers (so `.to(device)` and `.half()` move and cast them), and integer
constants stay on the host as shape parameters, so shapes never make the
device synchronise. Nodes run in the file's order (ONNX files are
topologically sorted); a value is dropped right after its last use.

Supported: the ops of YuNet and the face mesh (Conv, Relu, PRelu, Add,
MaxPool, Pad, Resize, Transpose, Reshape, Sigmoid) and the common ones of
convolutional face models (Gemm, MatMul, BatchNormalization,
InstanceNormalization, Softmax, Concat, Slice, Split, Gather, Clip, reductions,
Q/DQ emulated in float, ...). Anything else is refused when the model is
loaded, with the list of missing ops, never at the first frame.

Imports torch at module level: import this module only from GPU-backend code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

ONNX_DTYPES: dict[int, torch.dtype] = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}

Tensor = torch.Tensor


class UnsupportedGraph(ValueError):
    """The graph uses an op (or an op variant) this interpreter does not implement."""


@dataclass
class NodeInfo:
    """What an op builder sees: the node, its attributes, its constant inputs, the opset."""

    node: onnx.NodeProto
    attrs: dict[str, Any]
    consts: dict[str, np.ndarray]
    opset: int

    @property
    def name(self) -> str:
        return self.node.name or f"{self.node.op_type}->{self.node.output[0]}"

    def attr(self, key: str, default: Any = None) -> Any:
        value = self.attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value

    def has_input(self, i: int) -> bool:
        return len(self.node.input) > i and self.node.input[i] != ""

    def const(self, i: int, what: str) -> np.ndarray | None:
        """Input i as a constant known when the graph is read; None if absent."""
        if not self.has_input(i):
            return None
        name = self.node.input[i]
        if name not in self.consts:
            raise UnsupportedGraph(
                f"{self.name}: {what} (input {name!r}) must be a constant in this interpreter"
            )
        return self.consts[name]

    def unsupported(self, why: str) -> UnsupportedGraph:
        return UnsupportedGraph(f"{self.node.op_type} node {self.name}: {why}")


Builder = Callable[[NodeInfo], Callable[..., Any]]
OPS: dict[str, Builder] = {}


def op(*names: str):
    def register(builder: Builder) -> Builder:
        for name in names:
            OPS[name] = builder
        return builder

    return register


# --- elementwise --------------------------------------------------------------------------

_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "Relu": torch.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Exp": torch.exp,
    "Log": torch.log,
    "Sqrt": torch.sqrt,
    "Neg": torch.neg,
    "Abs": torch.abs,
    "Reciprocal": torch.reciprocal,
    "Floor": torch.floor,
    "Ceil": torch.ceil,
    "Erf": torch.erf,
    "Softplus": F.softplus,
    "HardSwish": F.hardswish,
    "Identity": lambda x: x,
}


@op(*_UNARY)
def _unary(n: NodeInfo):
    fn = _UNARY[n.node.op_type]
    return lambda x: fn(x)


@op("Dropout")
def _dropout(n: NodeInfo):
    return lambda x, *_: x


_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": torch.div,
    "Pow": torch.pow,
}


def _same_kind(a: Any, b: Any) -> tuple[Any, Any]:
    """Integer/float mixes (host shape constants against data) follow the data's dtype and device."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.dtype != b.dtype and a.is_floating_point() != b.is_floating_point():
            if a.is_floating_point():
                b = b.to(device=a.device, dtype=a.dtype)
            else:
                a = a.to(device=b.device, dtype=b.dtype)
        elif a.is_floating_point() and b.is_floating_point() and a.dtype != b.dtype:
            b = b.to(a.dtype)
        if a.device != b.device:  # a host scalar constant against device data
            b = b.to(a.device) if b.numel() <= a.numel() else b
            a = a.to(b.device)
    return a, b


@op(*_BINARY)
def _binary(n: NodeInfo):
    fn = _BINARY[n.node.op_type]
    integer_div = n.node.op_type == "Div"

    def run(a, b):
        a, b = _same_kind(a, b)
        if integer_div and not a.is_floating_point():
            return torch.div(a, b, rounding_mode="trunc")
        return fn(a, b)

    return run


@op("Max", "Min", "Sum", "Mean")
def _variadic(n: NodeInfo):
    kind = n.node.op_type

    def run(*xs):
        out = xs[0]
        for x in xs[1:]:
            out, x = _same_kind(out, x)
            out = (
                torch.maximum(out, x)
                if kind == "Max"
                else torch.minimum(out, x)
                if kind == "Min"
                else out + x
            )
        return out / len(xs) if kind == "Mean" else out

    return run


@op("PRelu")
def _prelu(n: NodeInfo):
    def run(x, slope):
        return torch.where(x >= 0, x, x * slope.to(x.dtype))

    return run


@op("LeakyRelu")
def _leaky(n: NodeInfo):
    alpha = float(n.attr("alpha", 0.01))
    return lambda x: F.leaky_relu(x, alpha)


@op("Elu")
def _elu(n: NodeInfo):
    alpha = float(n.attr("alpha", 1.0))
    return lambda x: F.elu(x, alpha)


@op("HardSigmoid")
def _hard_sigmoid(n: NodeInfo):
    alpha, beta = float(n.attr("alpha", 0.2)), float(n.attr("beta", 0.5))
    return lambda x: torch.clamp(alpha * x + beta, 0.0, 1.0)


@op("Clip")
def _clip(n: NodeInfo):
    if n.opset < 11:
        lo, hi = n.attr("min", None), n.attr("max", None)
    else:
        c_lo, c_hi = n.const(1, "min"), n.const(2, "max")
        lo = None if c_lo is None else float(c_lo)
        hi = None if c_hi is None else float(c_hi)
    return lambda x, *_: torch.clamp(x, lo, hi)


@op("Cast")
def _cast(n: NodeInfo):
    to = int(n.attr("to"))
    if to not in ONNX_DTYPES:
        raise n.unsupported(f"cast to ONNX type {to}")
    target = ONNX_DTYPES[to]

    def run(x, _state=None):
        # a float graph run in fp16 keeps computing in fp16: casts to float follow the data
        if target.is_floating_point and x.is_floating_point():
            return x
        return x.to(target)

    return run


# --- convolution, pooling, normalisation -------------------------------------------------------


def _same_pads(in_sizes: Sequence[int], kernel, strides, dilations, upper: bool) -> list[int]:
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begins.append(small if upper else total - small)
        ends.append(total - small if upper else small)
    return begins + ends


def _torch_pad(pads: Sequence[int]) -> list[int]:
    """ONNX [b1, b2, ..., e1, e2, ...] over the spatial dims → F.pad's (last dim first) pairs."""
    k = len(pads) // 2
    out: list[int] = []
    for d in reversed(range(k)):
        out += [int(pads[d]), int(pads[d + k])]
    return out


def _spatial_pads(n: NodeInfo, x: Tensor, kernel, strides, dilations) -> list[int]:
    auto_pad = n.attr("auto_pad", "NOTSET")
    rank = len(kernel)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return _same_pads(x.shape[2:], kernel, strides, dilations, auto_pad == "SAME_UPPER")
    if auto_pad == "VALID":
        return [0] * (2 * rank)
    return list(n.attr("pads", [0] * (2 * rank)))


@op("Conv")
def _conv(n: NodeInfo):
    group = int(n.attr("group", 1))

    def run(x, w, b=None):
        kernel = list(n.attr("kernel_shape", w.shape[2:]))
        rank = len(kernel)
        strides = list(n.attr("strides", [1] * rank))
        dilations = list(n.attr("dilations", [1] * rank))
        pads = _spatial_pads(n, x, kernel, strides, dilations)
        conv = (F.conv1d, F.conv2d, F.conv3d)[rank - 1]
        begins, ends = pads[:rank], pads[rank:]
        if begins == ends:
            return conv(x, w, b, strides, begins, dilations, group)
        return conv(F.pad(x, _torch_pad(pads)), w, b, strides, 0, dilations, group)

    return run


@op("ConvTranspose")
def _conv_transpose(n: NodeInfo):
    group = int(n.attr("group", 1))
    if n.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or n.attr("output_shape") is not None:
        raise n.unsupported("auto_pad/output_shape")

    def run(x, w, b=None):
        kernel = list(n.attr("kernel_shape", w.shape[2:]))
        rank = len(kernel)
        strides = list(n.attr("strides", [1] * rank))
        dilations = list(n.attr("dilations", [1] * rank))
        pads = list(n.attr("pads", [0] * (2 * rank)))
        out_pad = list(n.attr("output_padding", [0] * rank))
        if pads[:rank] != pads[rank:]:
            raise n.unsupported("asymmetric pads")
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[rank - 1]
        return fn(x, w, b, strides, pads[:rank], out_pad, group, dilations)

    return run


@op("MaxPool", "AveragePool")
def _pool(n: NodeInfo):
    is_max = n.node.op_type == "MaxPool"
    kernel = list(n.attr("kernel_shape"))
    rank = len(kernel)
    strides = list(n.attr("strides", [1] * rank))
    dilations = list(n.attr("dilations", [1] * rank))
    ceil = bool(n.attr("ceil_mode", 0))
    count_pad = bool(n.attr("count_include_pad", 0))
    if len(n.node.output) > 1:
        raise n.unsupported("MaxPool indices output")
    if rank != 2:
        raise n.unsupported(f"{rank}-d pooling")

    def run(x):
        pads = _spatial_pads(n, x, kernel, strides, dilations)
        begins, ends = pads[:rank], pads[rank:]
        if is_max:
            if any(pads):
                x = F.pad(x, _torch_pad(pads), value=float("-inf"))
            return F.max_pool2d(x, kernel, strides, 0, dilations, ceil_mode=ceil)
        if begins == ends and all(p <= k // 2 for p, k in zip(begins, kernel, strict=True)):
            return F.avg_pool2d(x, kernel, strides, begins, ceil_mode=ceil, count_include_pad=count_pad)
        if not count_pad and any(pads):
            ones = F.pad(torch.ones_like(x[:, :1]), _torch_pad(pads))
            total = F.avg_pool2d(F.pad(x, _torch_pad(pads)), kernel, strides, 0, ceil_mode=ceil)
            return total / F.avg_pool2d(ones, kernel, strides, 0, ceil_mode=ceil)
        return F.avg_pool2d(F.pad(x, _torch_pad(pads)), kernel, strides, 0, ceil_mode=ceil)

    return run


@op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(n: NodeInfo):
    is_max = n.node.op_type == "GlobalMaxPool"

    def run(x):
        dims = tuple(range(2, x.dim()))
        return x.amax(dim=dims, keepdim=True) if is_max else x.mean(dim=dims, keepdim=True)

    return run


def _channel_view(v: Tensor, rank: int) -> Tensor:
    return v.reshape([1, -1] + [1] * (rank - 2))


@op("BatchNormalization")
def _batch_norm(n: NodeInfo):
    eps = float(n.attr("epsilon", 1e-5))
    if len(n.node.output) > 1:
        raise n.unsupported("training-mode outputs")

    def run(x, scale, bias, mean, var):
        r = x.dim()
        inv = torch.rsqrt(_channel_view(var, r).float() + eps).to(x.dtype)
        return (x - _channel_view(mean, r)) * inv * _channel_view(scale, r) + _channel_view(bias, r)

    return run


@op("InstanceNormalization")
def _instance_norm(n: NodeInfo):
    eps = float(n.attr("epsilon", 1e-5))

    def run(x, scale, bias):
        dims = tuple(range(2, x.dim()))
        xf = x.float()  # statistics in fp32 even when the graph runs in fp16
        mean = xf.mean(dim=dims, keepdim=True)
        var = xf.var(dim=dims, keepdim=True, unbiased=False)
        y = ((xf - mean) * torch.rsqrt(var + eps)).to(x.dtype)
        return y * _channel_view(scale, x.dim()) + _channel_view(bias, x.dim())

    return run


# --- linear algebra ---------------------------------------------------------------------------


@op("MatMul")
def _matmul(n: NodeInfo):
    return lambda a, b: torch.matmul(*_same_kind(a, b))


@op("Gemm")
def _gemm(n: NodeInfo):
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    ta, tb = bool(n.attr("transA", 0)), bool(n.attr("transB", 0))

    def run(a, b, c=None):
        a = a.t() if ta else a
        b = b.t() if tb else b
        y = torch.matmul(a, b)
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return y

    return run


@op("Softmax", "LogSoftmax")
def _softmax(n: NodeInfo):
    legacy = n.opset < 13
    axis = int(n.attr("axis", 1 if legacy else -1))
    fn = torch.softmax if n.node.op_type == "Softmax" else torch.log_softmax

    def run(x):
        if legacy:  # opset < 13: the input is coerced to 2-D at `axis`
            a = axis % x.dim()
            shape = x.shape
            return fn(x.reshape(math.prod(shape[:a]), -1), dim=1).reshape(shape)
        return fn(x, dim=axis)

    return run


# --- shape and layout -------------------------------------------------------------------------


def _as_ints(values: Any) -> list[int]:
    if isinstance(values, Tensor):
        values = values.tolist()  # host tensors only: shape values never live on the device
    return [int(v) for v in np.asarray(values).reshape(-1)]


@op("Reshape")
def _reshape(n: NodeInfo):
    allow_zero = bool(n.attr("allowzero", 0))
    static = n.consts.get(n.node.input[1])
    shape_c = None if static is None else _as_ints(static)

    def run(x, shape=None):
        target = shape_c if shape_c is not None else _as_ints(shape)
        if not allow_zero:
            target = [x.shape[i] if v == 0 else v for i, v in enumerate(target)]
        return x.reshape(target)

    return run


@op("Flatten")
def _flatten(n: NodeInfo):
    axis = int(n.attr("axis", 1))

    def run(x):
        a = axis % x.dim() if axis < 0 else axis
        return x.reshape(math.prod(x.shape[:a]), -1)

    return run


@op("Transpose")
def _transpose(n: NodeInfo):
    perm = n.attr("perm")

    def run(x):
        return x.permute(*(perm if perm is not None else reversed(range(x.dim()))))

    return run


def _axes(n: NodeInfo, index: int) -> list[int] | None:
    if n.has_input(index):
        return _as_ints(n.const(index, "axes"))
    axes = n.attr("axes")
    return None if axes is None else [int(a) for a in axes]


@op("Unsqueeze")
def _unsqueeze(n: NodeInfo):
    axes = _axes(n, 1)

    def run(x, *_):
        rank = x.dim() + len(axes)
        for a in sorted(a % rank for a in axes):
            x = x.unsqueeze(a)
        return x

    return run


@op("Squeeze")
def _squeeze(n: NodeInfo):
    axes = _axes(n, 1)

    def run(x, *_):
        if axes is None:
            return x.squeeze()
        dims = sorted((a % x.dim() for a in axes), reverse=True)
        for a in dims:
            x = x.squeeze(a)
        return x

    return run


@op("Concat")
def _concat(n: NodeInfo):
    axis = int(n.attr("axis"))

    def run(*xs):
        first = xs[0]
        xs = [x.to(device=first.device, dtype=first.dtype) for x in xs]
        return torch.cat(xs, dim=axis)

    return run


@op("Split")
def _split(n: NodeInfo):
    axis = int(n.attr("axis", 0))
    outputs = len(n.node.output)
    sizes = _as_ints(n.const(1, "split")) if n.has_input(1) else n.attr("split")

    def run(x, *_):
        if sizes is None:
            size = x.shape[axis]
            chunk = -(-size // outputs)
            parts = [chunk] * (outputs - 1) + [size - chunk * (outputs - 1)]
        else:
            parts = list(sizes)
        return tuple(torch.split(x, parts, dim=axis))

    return run


@op("Slice")
def _slice(n: NodeInfo):
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends = _as_ints(n.const(1, "starts")), _as_ints(n.const(2, "ends"))
        axes = _as_ints(n.const(3, "axes")) if n.has_input(3) else None
        steps = _as_ints(n.const(4, "steps")) if n.has_input(4) else None
    steps = steps or [1] * len(starts)
    if any(s <= 0 for s in steps):
        raise n.unsupported("non-positive steps")

    def run(x, *_):
        index = [slice(None)] * x.dim()
        for i, (s, e, st) in enumerate(zip(starts, ends, steps, strict=True)):
            a = (axes[i] if axes is not None else i) % x.dim()
            size = x.shape[a]
            s = max(0, min(size, s + size if s < 0 else s))
            e = max(0, min(size, e + size if e < 0 else e))
            index[a] = slice(s, e, st)
        return x[tuple(index)]

    return run


@op("Gather")
def _gather(n: NodeInfo):
    axis = int(n.attr("axis", 0))

    def run(x, idx):
        a = axis % x.dim()
        idx = idx.to(device=x.device, dtype=torch.int64)
        idx = torch.where(idx < 0, idx + x.shape[a], idx)
        out = torch.index_select(x, a, idx.reshape(-1))
        return out.reshape(tuple(x.shape[:a]) + tuple(idx.shape) + tuple(x.shape[a + 1 :]))

    return run


@op("Shape")
def _shape(n: NodeInfo):
    start, end = n.attr("start", 0), n.attr("end", None)
    return lambda x: torch.tensor(list(x.shape)[start:end], dtype=torch.int64)


@op("DepthToSpace")
def _depth_to_space(n: NodeInfo):
    block = int(n.attr("blocksize"))
    mode = n.attr("mode", "DCR")

    def run(x):
        if mode == "CRD":
            return F.pixel_shuffle(x, block)
        b, c, h, w = x.shape
        y = x.reshape(b, block, block, c // (block * block), h, w).permute(0, 3, 4, 1, 5, 2)
        return y.reshape(b, c // (block * block), h * block, w * block)

    return run


@op("Pad")
def _pad(n: NodeInfo):
    mode = n.attr("mode", "constant")
    if n.opset < 11:
        pads, value = list(n.attr("pads")), float(n.attr("value", 0.0))
    else:
        pads = _as_ints(n.const(1, "pads"))
        c = n.const(2, "constant_value")
        value = 0.0 if c is None or c.size == 0 else float(c.reshape(-1)[0])
        if n.has_input(3):
            raise n.unsupported("axes input")
    torch_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}.get(mode)
    if torch_mode is None:
        raise n.unsupported(f"mode {mode!r}")
    rank = len(pads) // 2
    spec = _torch_pad(pads)
    # trailing pairs of zeros (leading dims untouched) are dropped: F.pad's reflect and
    # replicate accept only the last few dims
    while len(spec) > 2 and spec[-1] == 0 and spec[-2] == 0:
        spec = spec[:-2]
    if torch_mode != "constant" and len(spec) // 2 > rank - 2:
        raise n.unsupported(f"{mode} padding of the batch or channel dims")

    def run(x, *_):
        if torch_mode == "constant":
            return F.pad(x, spec, value=value)
        return F.pad(x, spec, mode=torch_mode)

    return run


_RESIZE_MODES = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}


@op("Resize", "Upsample")
def _resize(n: NodeInfo):
    mode = n.attr("mode", "nearest")
    if mode not in _RESIZE_MODES:
        raise n.unsupported(f"mode {mode!r}")
    coord = n.attr("coordinate_transformation_mode", "half_pixel" if n.opset >= 11 else "asymmetric")
    if n.node.op_type == "Upsample" or n.opset < 11:
        scales, sizes = n.const(1, "scales"), None
    else:
        scales, sizes = n.const(2, "scales"), n.const(3, "sizes")
    factors = None if scales is None or scales.size == 0 else [float(s) for s in scales.reshape(-1)]
    shape = None if sizes is None or sizes.size == 0 else _as_ints(sizes)
    if factors is not None and (factors[0] != 1 or factors[1] != 1):
        raise n.unsupported("scaling the batch or channel dim")
    kw: dict[str, Any]
    if mode == "nearest":
        nearest = n.attr("nearest_mode", "round_prefer_floor")
        if coord == "asymmetric" and nearest == "floor":
            kw = {"mode": "nearest"}
        elif coord in ("half_pixel", "pytorch_half_pixel") and nearest.startswith("round"):
            kw = {"mode": "nearest-exact"}  # ties at exactly .5 may round the other way
        else:
            raise n.unsupported(f"nearest with {coord}/{nearest}")
    elif coord in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        if mode == "cubic" and float(n.attr("cubic_coeff_a", -0.75)) != -0.75:
            raise n.unsupported("cubic_coeff_a other than -0.75")
        if n.attr("antialias", 0):
            raise n.unsupported("antialias")
        kw = {"mode": _RESIZE_MODES[mode], "align_corners": coord == "align_corners"}
    else:
        raise n.unsupported(f"{mode} with {coord}")

    def run(x, *_):
        if shape is not None:
            out = shape[2:]
        else:
            assert factors is not None  # a Resize gives its scales or its sizes
            out = [int(math.floor(d * s)) for d, s in zip(x.shape[2:], factors[2:], strict=True)]
        return F.interpolate(x, size=out, **kw)

    return run


# --- reductions -----------------------------------------------------------------------------------


_REDUCE = {
    "ReduceMean": lambda x, d, k: x.mean(dim=d, keepdim=k),
    "ReduceSum": lambda x, d, k: x.sum(dim=d, keepdim=k),
    "ReduceMax": lambda x, d, k: x.amax(dim=d, keepdim=k),
    "ReduceMin": lambda x, d, k: x.amin(dim=d, keepdim=k),
    "ReduceL2": lambda x, d, k: torch.linalg.vector_norm(x, dim=d, keepdim=k),
    "ReduceSumSquare": lambda x, d, k: (x * x).sum(dim=d, keepdim=k),
}


@op(*_REDUCE)
def _reduce(n: NodeInfo):
    fn = _REDUCE[n.node.op_type]
    keep = bool(n.attr("keepdims", 1))
    axes = _axes(n, 1)
    noop_empty = bool(n.attr("noop_with_empty_axes", 0))

    def run(x, *_):
        if not axes:
            if noop_empty:
                return x
            dims = tuple(range(x.dim()))
        else:
            dims = tuple(a % x.dim() for a in axes)
        return fn(x, dims, keep)

    return run


# --- explicit quantisation (Q/DQ), emulated in float ---------------------------------------------------


def _qparams(n: NodeInfo, x: Tensor, scale: Tensor, zero: Tensor | None) -> tuple[Tensor, Tensor]:
    axis = int(n.attr("axis", 1))
    if scale.dim() == 1 and scale.numel() > 1:
        shape = [1] * x.dim()
        shape[axis % x.dim()] = -1
        scale = scale.reshape(shape)
        zero = zero.reshape(shape) if zero is not None else None
    z = torch.zeros((), device=x.device) if zero is None else zero
    return scale.to(device=x.device, dtype=torch.float32), z.to(device=x.device, dtype=torch.float32)


@op("QuantizeLinear")
def _quantize(n: NodeInfo):
    zp = n.consts.get(n.node.input[2]) if n.has_input(2) else None
    lo, hi = (-128.0, 127.0) if zp is not None and zp.dtype == np.int8 else (0.0, 255.0)

    def run(x, scale, zero=None):
        s, z = _qparams(n, x, scale, zero)
        return torch.clamp(torch.round(x.float() / s) + z, lo, hi).to(x.dtype)

    return run


@op("DequantizeLinear")
def _dequantize(n: NodeInfo):
    def run(x, scale, zero=None):
        s, z = _qparams(n, x, scale, zero)
        dtype = x.dtype if x.is_floating_point() else torch.float32
        return ((x.float() - z) * s).to(dtype)

    return run


# --- the module -------------------------------------------------------------------------------------


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.asarray(a.f, np.float32)
        if a.name == "value_floats":
            return np.asarray(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.asarray(a.i, np.int64)
        if a.name == "value_ints":
            return np.asarray(list(a.ints), np.int64)
    raise UnsupportedGraph(f"Constant node {node.name}: unsupported value attribute")


def missing_ops(model: onnx.ModelProto) -> list[str]:
    """Ops of the graph this interpreter cannot run (sorted); empty when it can run all of them."""
    missing = set()
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            missing.add(f"{node.domain}.{node.op_type}")
        elif node.op_type != "Constant" and node.op_type not in OPS:
            missing.add(node.op_type)
    return sorted(missing)


class OnnxModule(torch.nn.Module):
    """An ONNX graph as a torch module: `forward(**inputs) -> {output name: tensor}`.

    `compute_dtype` is the float type the graph runs in: float inputs are cast
    to it on entry, float outputs back to float32 on exit.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        super().__init__()
        missing = missing_ops(model)
        if missing:
            raise UnsupportedGraph(f"ops not implemented by the torch backend: {', '.join(missing)}")
        graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant":
                consts[node.output[0]] = _constant_value(node)
        self.input_names = [i.name for i in graph.input if i.name not in consts]
        self.output_names = [o.name for o in graph.output]
        self.compute_dtype = torch.float32

        # float constants become buffers (moved and cast with the module); others stay host tensors
        self._buffer_of: dict[str, str] = {}
        self._host: dict[str, Tensor] = {}
        for i, (name, value) in enumerate(consts.items()):
            t = torch.from_numpy(np.array(value, copy=True))
            if t.is_floating_point():
                t = t.float()  # an fp16 file computes in float32 until `to_precision` says otherwise
                key = f"c{i}"
                self.register_buffer(key, t, persistent=False)
                self._buffer_of[name] = key
            else:
                self._host[name] = t

        self._steps: list[tuple[Callable[..., Any], list[str], list[str]]] = []
        for node in graph.node:
            if node.op_type == "Constant":
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            info = NodeInfo(node, attrs, consts, self.opset)
            fn = OPS[node.op_type](info)
            info.consts = {}  # constants are read while building; the host copy of the weights can go
            inputs = list(node.input)
            while inputs and inputs[-1] == "":
                inputs.pop()
            self._steps.append((fn, inputs, list(node.output)))

        # free each intermediate value after its last use
        last_use: dict[str, int] = {}
        for i, (_, inputs, _) in enumerate(self._steps):
            for name in inputs:
                last_use[name] = i
        keep = set(self.output_names) | set(consts)
        self._free_after: list[list[str]] = [[] for _ in self._steps]
        for name, i in last_use.items():
            if name not in keep:
                self._free_after[i].append(name)

    def to_precision(self, dtype: torch.dtype) -> OnnxModule:
        """Run the graph's float math in `dtype` (float32 or float16)."""
        self.compute_dtype = dtype
        for key in self._buffer_of.values():
            setattr(self, key, getattr(self, key).to(dtype))
        return self

    def forward(self, **inputs: Tensor) -> dict[str, Tensor]:
        env: dict[str, Any] = {}
        for name, key in self._buffer_of.items():
            env[name] = getattr(self, key)
        env.update(self._host)
        for name in self.input_names:
            x = inputs[name]
            env[name] = x.to(self.compute_dtype) if x.is_floating_point() else x
        for (fn, names, outputs), free in zip(self._steps, self._free_after, strict=True):
            args = [env[name] if name else None for name in names]
            result = fn(*args)
            if len(outputs) == 1:
                env[outputs[0]] = result
            else:
                for name, value in zip(outputs, result, strict=False):
                    env[name] = value
            for name in free:
                env.pop(name, None)
        out = {}
        for name in self.output_names:
            value = env[name]
            out[name] = value.float() if value.is_floating_point() else value
        return out
