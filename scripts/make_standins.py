"""Architecture-faithful stand-ins for benchmarks: inswapper_128 and an IResNet-50 ArcFace, random weights.

The layer structure follows models.md (inswapper as re-implemented by ReSwapper:
encoder, six AdaIN style blocks at 32x32x1024, decoder; about 138 M parameters and
175 G multiply-adds per face) and the usual IResNet-50 (units 3-4-14-3, 64-512
channels, about 43 M parameters and 6 GFLOP per face; batch norms are folded into
the conv biases, as an inference export does). The weights are seeded random, so
the outputs mean nothing: these files give honest compute figures, not faces.

    python scripts/make_standins.py OUT_DIR   # writes inswapper_128.onnx, arcface_w600k_r50.onnx (+ .hash)

The files are generated, never committed (inswapper's is about 550 MB).
"""

from __future__ import annotations

import argparse
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Graph:
    """A tiny builder: unique names, seeded He-initialised weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def const(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None) -> str:
        pad = k // 2 if pad is None else pad
        w = self.rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.float32(
            np.sqrt(2.0 / (cin * k * k))
        )
        b = np.zeros(cout, np.float32)
        return self.op(
            "Conv",
            [x, self.const(w, "w"), self.const(b, "b")],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
        )

    def linear(self, x: str, cin: int, cout: int, bias: float = 0.0) -> str:
        w = self.rng.standard_normal((cin, cout), dtype=np.float32) * np.float32(np.sqrt(1.0 / cin))
        return self.op("Gemm", [x, self.const(w, "w"), self.const(np.full(cout, bias, np.float32), "b")])

    def lrelu(self, x: str) -> str:
        return self.op("LeakyRelu", [x], alpha=0.2)

    def reflect(self, x: str, p: int) -> str:
        return self.op(
            "Pad", [x, self.const(np.array([0, 0, p, p, 0, 0, p, p], np.int64), "pads")], mode="reflect"
        )


def inswapper(seed: int = 0, width: int = 1024) -> onnx.ModelProto:
    """inswapper_128's structure; `width` < 1024 narrows every layer (a small copy for dry runs)."""
    c1, c2, c3, c4 = width // 8, width // 4, width // 2, width
    g = Graph(seed)
    x = g.lrelu(g.conv(g.reflect("target", 3), 3, c1, 7, pad=0))
    x = g.lrelu(g.conv(x, c1, c2, 3))
    x = g.lrelu(g.conv(x, c2, c3, 3, stride=2))
    x = g.lrelu(g.conv(x, c3, c4, 3, stride=2))  # 32x32xwidth
    style_shape = g.const(np.array([1, 2 * c4, 1, 1], np.int64), "style_shape")  # batch pinned, as exported
    for _ in range(6):
        h = x
        for second in (False, True):
            h = g.conv(h, c4, c4, 3)
            h = g.op(
                "InstanceNormalization",
                [h, g.const(np.ones(c4, np.float32)), g.const(np.zeros(c4, np.float32))],
            )
            style = g.op("Reshape", [g.linear("source", 512, 2 * c4), style_shape])
            gamma = g.op(
                "Slice", [style, g.const(np.array([0])), g.const(np.array([c4])), g.const(np.array([1]))]
            )
            beta = g.op(
                "Slice", [style, g.const(np.array([c4])), g.const(np.array([2 * c4])), g.const(np.array([1]))]
            )
            h = g.op("Add", [g.op("Mul", [h, gamma]), beta])
            if not second:
                h = g.op("Relu", [h])
        x = g.op("Add", [x, h])
    up = g.const(np.array([1, 1, 2, 2], np.float32), "scales")
    x = g.lrelu(g.conv(g.op("Resize", [x, "", up], mode="linear"), c4, c3, 3))
    x = g.lrelu(g.conv(g.op("Resize", [x, "", up], mode="linear"), c3, c2, 3))
    x = g.lrelu(g.conv(x, c2, c1, 3))
    x = g.op("Tanh", [g.conv(g.reflect(x, 3), c1, 3, 7, pad=0)])
    half = g.const(np.float32(0.5), "half")
    g.nodes.append(helper.make_node("Mul", [g.op("Add", [x, g.const(np.float32(1.0))]), half], ["output"]))
    emap = g.rng.standard_normal((512, 512), dtype=np.float32) / np.float32(np.sqrt(512))
    g.inits.append(numpy_helper.from_array(emap, "emap"))  # the last initializer
    graph = helper.make_graph(
        g.nodes,
        "inswapper_128_standin",
        [
            helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, 128, 128]),
            helper.make_tensor_value_info("source", TensorProto.FLOAT, [1, 512]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 128, 128])],
        g.inits,
    )
    return _finish(graph)


def iresnet50(seed: int = 1) -> onnx.ModelProto:
    g = Graph(seed)
    x = g.op("PRelu", [g.conv("input", 3, 64, 3), g.const(np.full((64, 1, 1), 0.25, np.float32))])
    cin = 64
    for cout, units in ((64, 3), (128, 4), (256, 14), (512, 3)):
        for u in range(units):
            stride = 2 if u == 0 else 1
            h = g.conv(x, cin, cout, 3)
            h = g.op("PRelu", [h, g.const(np.full((cout, 1, 1), 0.25, np.float32))])
            h = g.conv(h, cout, cout, 3, stride=stride)
            short = x if (stride == 1 and cin == cout) else g.conv(x, cin, cout, 1, stride=stride, pad=0)
            x = g.op("Add", [h, short])
            cin = cout
    x = g.op("Flatten", [x], axis=1)  # 512 x 7 x 7
    g.nodes.append(
        helper.make_node(
            "Gemm",
            [
                x,
                g.const(
                    g.rng.standard_normal((512 * 49, 512), dtype=np.float32)
                    * np.float32(np.sqrt(1 / (512 * 49))),
                    "fc",
                ),
                g.const(np.zeros(512, np.float32)),
            ],
            ["embedding"],
        )
    )
    graph = helper.make_graph(
        g.nodes,
        "arcface_iresnet50_standin",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 112, 112])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 512])],
        g.inits,
    )
    return _finish(graph)


def _finish(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write(model: onnx.ModelProto, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = model.SerializeToString()
    (directory / f"{name}.onnx").write_bytes(data)
    (directory / f"{name}.hash").write_text(f"{zlib.crc32(data):08x}")
    return directory / f"{name}.onnx"


def parameters(model: onnx.ModelProto) -> int:
    return sum(int(np.prod(i.dims)) for i in model.graph.initializer)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    for name, make in (("inswapper_128", inswapper), ("arcface_w600k_r50", iresnet50)):
        model = make()
        path = write(model, args.out, name)
        mib = path.stat().st_size / 2**20
        print(f"{path}: {parameters(model) / 1e6:.1f} M parameters, {mib:.0f} MiB (stand-in)")


if __name__ == "__main__":
    main()
