"""The torch ONNX interpreter (the cuda backend's engine) against onnxruntime, on the CPU.

Tolerances: float32 agrees with onnxruntime to 1e-4 of each output's range
(max(1, max |ref|)); fp16 to 1e-2, the bound the backend uses to accept fp16.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")

import onnxruntime as ort  # noqa: E402

from facefusion_batch.models.store import model_path  # noqa: E402
from facefusion_batch.runtime.onnx_torch import OnnxModule, UnsupportedGraph, missing_ops  # noqa: E402
from facefusion_batch.runtime.torch_backend import (  # noqa: E402
    FP16_TOLERANCE,
    TorchBackend,
    output_batch_axes,
    relative_deviation,
)

FP32_TOLERANCE = 1e-4


def _ort(model: onnx.ModelProto, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, feeds), strict=True))


def _torch(model, feeds, dtype=None):
    module = OnnxModule(model).eval()
    if dtype is not None:
        module.to_precision(dtype)
    with torch.inference_mode():
        out = module(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return {k: v.numpy() for k, v in out.items()}


def _graph(nodes, inputs, outputs, inits=(), opset=13):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in inits],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


rng = np.random.default_rng(0)
X = rng.normal(size=(2, 4, 9, 11)).astype(np.float32)
W = rng.normal(size=(6, 4, 3, 3)).astype(np.float32)
C4 = rng.uniform(0.5, 1.5, size=(4,)).astype(np.float32)

CASES = {
    "conv_asymmetric_pads": (
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[0, 0, 1, 1], strides=[2, 2])],
        [("w", W), ("b", C4[:2].repeat(3))],
    ),
    "conv_same_upper_grouped": (
        [helper.make_node("Conv", ["x", "wd"], ["y"], auto_pad="SAME_UPPER", group=4, strides=[2, 2])],
        [("wd", rng.normal(size=(4, 1, 3, 3)).astype(np.float32))],
    ),
    "relu_prelu_add": (
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("PRelu", ["x", "slope"], ["p"]),
            helper.make_node("Add", ["r", "p"], ["y"]),
        ],
        [("slope", C4.reshape(4, 1, 1))],
    ),
    "maxpool_valid_and_padded": (
        [
            helper.make_node("MaxPool", ["x"], ["a"], kernel_shape=[2, 2], strides=[2, 2], auto_pad="VALID"),
            helper.make_node("MaxPool", ["a"], ["y"], kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[1, 1]),
        ],
        [],
    ),
    "avgpool_globalpool": (
        [
            helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("GlobalAveragePool", ["a"], ["y"]),
        ],
        [],
    ),
    "pad_channels": (
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")],
        [("pads", np.array([0, 0, 0, 0, 0, 3, 0, 0], np.int64))],
    ),
    "pad_reflect": (
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")],
        [("pads", np.array([0, 0, 2, 1, 0, 0, 1, 3], np.int64))],
    ),
    "resize_nearest_floor": (
        [
            helper.make_node(
                "Resize",
                ["x", "roi", "scales"],
                ["y"],
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        ],
        [("roi", np.zeros((0,), np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32))],
    ),
    "resize_linear_half_pixel_sizes": (
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
        [("sizes", np.array([2, 4, 14, 5], np.int64))],
    ),
    "transpose_reshape_folded_batch": (
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
            helper.make_node("Reshape", ["t", "shape"], ["y"]),
        ],
        [("shape", np.array([1, -1, 4], np.int64))],
    ),
    "reshape_zero_copies_dim_flatten": (
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Flatten", ["r"], ["y"], axis=2),
        ],
        [("shape", np.array([0, 0, -1], np.int64))],
    ),
    "sigmoid_softmax_concat": (
        [
            helper.make_node("Sigmoid", ["x"], ["s"]),
            helper.make_node("Softmax", ["x"], ["m"], axis=1),
            helper.make_node("Concat", ["s", "m"], ["y"], axis=1),
        ],
        [],
    ),
    "batchnorm_instancenorm": (
        [
            helper.make_node("BatchNormalization", ["x", "g", "b", "mean", "var"], ["n"]),
            helper.make_node("InstanceNormalization", ["n", "g", "b"], ["y"], epsilon=1e-5),
        ],
        [("g", C4), ("b", C4 - 1), ("mean", C4 * 0.1), ("var", C4)],
    ),
    "slice_split_concat": (
        [
            helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
            helper.make_node("Split", ["s", "split"], ["a", "b"], axis=1),
            helper.make_node("Concat", ["b", "a"], ["y"], axis=1),
        ],
        [
            ("st", np.array([1, -8], np.int64)),
            ("en", np.array([100, -1], np.int64)),
            ("ax", np.array([2, 3], np.int64)),
            ("sp", np.array([2, 1], np.int64)),
            ("split", np.array([1, 3], np.int64)),
        ],
    ),
    "gather_unsqueeze_squeeze": (
        [
            helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
            helper.make_node("Unsqueeze", ["g", "axes"], ["u"]),
            helper.make_node("Squeeze", ["u", "axes"], ["y"]),
        ],
        [("idx", np.array([3, -4], np.int64)), ("axes", np.array([0], np.int64))],
    ),
    "clip_mul_sub_div": (
        [
            helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
            helper.make_node("Mul", ["c", "k"], ["m"]),
            helper.make_node("Sub", ["m", "k"], ["s"]),
            helper.make_node("Div", ["s", "k"], ["y"]),
        ],
        [("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.7, np.float32)), ("k", C4.reshape(4, 1, 1))],
    ),
    "reduce_mean_pow_sqrt": (
        [
            helper.make_node("Pow", ["x", "two"], ["p"]),
            helper.make_node("ReduceMean", ["p"], ["r"], axes=[2, 3], keepdims=1),
            helper.make_node("Sqrt", ["r"], ["y"]),
        ],
        [("two", np.array(2.0, np.float32))],
    ),
    "depth_to_space": (
        [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="DCR")],
        [],
    ),
    "qdq": (
        [
            helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["y"]),
        ],
        [("qs", np.array(0.02, np.float32)), ("qz", np.array(0, np.int8))],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_agrees_with_onnxruntime(case):
    nodes, inits = CASES[case]
    model = _graph(nodes, [("x", list(X.shape))], ["y"], inits, opset=13)
    ref = _ort(model, {"x": X})
    got = _torch(model, {"x": X})
    assert got["y"].shape == ref["y"].shape
    assert relative_deviation(ref, got) <= FP32_TOLERANCE


def test_gemm_matmul_legacy_softmax():
    a = rng.normal(size=(3, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("MatMul", ["g", "m"], ["mm"]),
        helper.make_node("Softmax", ["mm"], ["y"], axis=1),
    ]
    inits = [
        ("w", rng.normal(size=(7, 5)).astype(np.float32)),
        ("c", rng.normal(size=(7,)).astype(np.float32)),
        ("m", rng.normal(size=(7, 4)).astype(np.float32)),
    ]
    model = _graph(nodes, [("x", [3, 5])], ["y"], inits, opset=11)
    assert relative_deviation(_ort(model, {"x": a}), _torch(model, {"x": a})) <= FP32_TOLERANCE


def test_unsupported_ops_are_named_at_load():
    model = _graph([helper.make_node("NonMaxSuppression", ["x", "x"], ["y"])], [("x", [1, 2, 4])], ["y"])
    assert missing_ops(model) == ["NonMaxSuppression"]
    with pytest.raises(UnsupportedGraph, match="NonMaxSuppression"):
        OnnxModule(model)


@pytest.fixture(scope="module")
def real_models():
    return {name: model_path(name) for name in ("yunet_2023mar_batch", "face_mesh_468")}


def _real_feeds(name):
    r = np.random.default_rng(1)
    if name.startswith("yunet"):
        return {"input": r.uniform(0, 255, (3, 3, 96, 160)).astype(np.float32)}
    return {"input_1": r.uniform(0, 1, (4, 3, 192, 192)).astype(np.float32)}


@pytest.mark.parametrize(
    "name", ["yunet_2023mar_batch", pytest.param("face_mesh_468", marks=pytest.mark.slow)]
)
def test_real_models_agree_with_onnxruntime_fp32_and_fp16(real_models, name):
    model = onnx.load(str(real_models[name]))
    feeds = _real_feeds(name)
    ref = _ort(model, feeds)
    assert relative_deviation(ref, _torch(model, feeds)) <= FP32_TOLERANCE
    assert relative_deviation(ref, _torch(model, feeds, torch.float16)) <= FP16_TOLERANCE


@pytest.mark.slow
def test_fp16_onnx_file_runs(real_models):
    from facefusion_batch.models.convert import to_float16

    model = onnx.load(str(real_models["face_mesh_468"]))
    feeds = _real_feeds("face_mesh_468")
    half_file = to_float16(model)
    assert relative_deviation(_ort(model, feeds), _torch(half_file, feeds)) <= FP16_TOLERANCE


def test_backend_session_on_cpu_matches_onnxruntime_and_chunks(real_models):
    backend = TorchBackend(device="cpu")
    session = backend.load(real_models["yunet_2023mar_batch"], label="yunet_2023mar_batch")
    assert [(i.name, i.dtype) for i in session.inputs] == [("input", "tensor(float)")]  # as onnxruntime
    assert session.output_axes["cls_8"] == 1  # YuNet folds the batch into axis 1
    feeds = _real_feeds("yunet_2023mar_batch")
    ref = _ort(onnx.load(str(real_models["yunet_2023mar_batch"])), feeds)
    assert relative_deviation(ref, session.run(feeds)) <= FP32_TOLERANCE
    session.guard.set_limit(2)  # as if memory allowed only 2 frames: 3 frames run as 2 + 1
    assert relative_deviation(ref, session.run(feeds)) <= FP32_TOLERANCE
    assert dict(session.guard.sizes) == {3: 1, 2: 1, 1: 1}
    out = session.run_device({"input": torch.from_numpy(feeds["input"])})
    assert isinstance(out["cls_8"], torch.Tensor)
    report = backend.report()
    assert report["memory_guard"]["yunet_2023mar_batch"]["batch_sizes"] == {"1": 2, "2": 2, "3": 1}
    assert report["device_seconds"]["yunet_2023mar_batch"] > 0


def test_session_oom_is_halved_without_losing_items(real_models):
    from facefusion_batch.runtime.memory import DeviceOutOfMemory

    backend = TorchBackend(device="cpu")
    session = backend.load(real_models["face_mesh_468"], label="face_mesh_468")
    feeds = {"input_1": np.random.default_rng(2).uniform(0, 1, (7, 3, 192, 192)).astype(np.float32)}
    expected = session.run(feeds)
    real_forward = session.module.forward

    def forward(**inputs):
        if inputs["input_1"].shape[0] > 2:
            raise DeviceOutOfMemory("injected: more than 2 crops")
        return real_forward(**inputs)

    session.module.forward = forward
    got = session.run(feeds)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-4)
    assert session.guard.oom_events >= 2 and session.guard.limit <= 2


def test_output_batch_axes():
    from facefusion_batch.runtime.session import TensorInfo

    outs = (TensorInfo("a", (1, "batch_anchors", 4), ""), TensorInfo("b", ("batch", 1404, 1, 1), ""))
    assert output_batch_axes(outs) == {"a": 1, "b": 0}


def test_int8_precision_is_refused_on_the_cuda_backend(real_models):
    from facefusion_batch.errors import BackendUnavailableError
    from facefusion_batch.runtime.device import DeviceSettings

    backend = TorchBackend(DeviceSettings(backend="cuda", precision="int8"), device="cpu")
    with pytest.raises(BackendUnavailableError, match="tensorrt"):
        backend.load(real_models["face_mesh_468"], label="face_mesh_468")


def test_bucketed_batch_sizes():
    from facefusion_batch.runtime.batching import BatchPolicy

    bucket_batch = BatchPolicy.bucket

    assert [bucket_batch(n) for n in (1, 2, 3, 5, 8, 9, 16, 17, 90, 96)] == [
        1,
        2,
        4,
        8,
        8,
        16,
        16,
        32,
        96,
        96,
    ]
    assert bucket_batch(20, limit=24) == 24 and bucket_batch(30, limit=24) == 30  # the guard's limit caps
    assert len({bucket_batch(n) for n in range(1, 257)}) == 4 + 16  # few shapes for cuDNN to tune


@pytest.mark.parametrize(
    "name", ["yunet_2023mar_batch", pytest.param("face_mesh_468", marks=pytest.mark.slow)]
)
def test_padded_batches_give_the_unpadded_outputs(real_models, name):
    """On a GPU a call of 3 items runs as 4 (the last repeated) and is trimmed back: same outputs,
    also where the batch is folded into another axis (YuNet)."""
    plain = TorchBackend(device="cpu")
    padded = TorchBackend(device="cpu")
    padded.pad_batches = True
    feeds = _real_feeds(name)
    feeds = {k: v[:3] for k, v in feeds.items()}
    a = plain.load(real_models[name], label=name).run(feeds)
    b = padded.load(real_models[name], label=name).run(feeds)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape
        np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-4)
    assert padded.sessions[0].guard.sizes == {3: 1}  # the guard counts the real items
