"""The TensorRT engine build, cache, load and run logic against the strict stand-in of TensorRT's
Python API (tests/trt_standin.py), as 10.x and as 11.x, on the CPU: torch CPU tensors stand for
device memory and onnxruntime computes what the engine would. What this proves and what it
does not is in the stand-in's docstring."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import onnx
import pytest
import trt_standin
from onnx import TensorProto, helper, numpy_helper

from facefusion_batch.runtime.device import DeviceSettings
from facefusion_batch.runtime.engine_cache import EngineKey, MachineKey, input_profiles
from facefusion_batch.runtime.session import TensorInfo

torch = pytest.importorskip("torch")

from facefusion_batch.runtime import tensorrt_backend  # noqa: E402
from facefusion_batch.runtime.tensorrt_backend import (  # noqa: E402
    PrecisionMismatchError,
    TensorRTBackend,
    TensorRTSession,
    build_engine,
    engine_deviation,
)

VERSIONS = ("10.16.1.11", "11.4.0.106")
GPU = ("NVIDIA H100 80GB HBM3", "sm_90")


# --- test models (written here with onnx.helper) -----------------------------------------------------


def _conv(name: str, src: str, dst: str, c_in: int, c_out: int, seed: int):
    w = np.random.default_rng(seed).normal(0, 0.3, (c_out, c_in, 3, 3)).astype(np.float32)
    init = numpy_helper.from_array(w, f"{name}_w")
    return helper.make_node("Conv", [src, f"{name}_w"], [dst], pads=[1, 1, 1, 1], name=name), init


def conv_net(path, batch: int | str = "batch", layers: int = 2):
    """x [batch, 3, 8, 8] → (Conv, Relu) × layers → y [batch, 4, 8, 8]."""
    nodes, inits, src, c = [], [], "x", 3
    for i in range(layers):
        node, init = _conv(f"conv{i}", src, f"c{i}", c, 4, i)
        nodes += [node, helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        inits.append(init)
        src, c = f"r{i}", 4
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def weighted_net(path):
    """CodeFormer's shape of inputs: images and a float64 fidelity weight [1]."""
    node, init = _conv("conv", "x", "c", 3, 4, 0)
    nodes = [
        node,
        helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["c", "wf"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "weighted",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8]),
            helper.make_tensor_value_info("w", TensorProto.DOUBLE, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [init],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def partly_quantized(path):
    """The first of four convolutions behind a Q/DQ pair, the rest float32: an 'int8' file
    that runs mostly in fp32."""
    conv_net(path, layers=4)
    model = onnx.load(str(path))
    scale = numpy_helper.from_array(np.array(0.02, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    model.graph.initializer.extend([scale, zero])
    qdq = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
    ]
    model.graph.node[0].input[0] = "xd"
    nodes = qdq + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(path))
    return path


def reference(path, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


# --- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(params=VERSIONS)
def trt(request, monkeypatch):
    """The stand-in, installed as `tensorrt`, with the GPU replaced by the CPU for torch's tensors."""
    module = trt_standin.make(request.param)
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.setattr(trt_standin.DEVICE, "budget_bytes", None)
    monkeypatch.setattr(tensorrt_backend, "open_gpu", lambda index, purpose: ("cpu", *GPU))

    def scratch(nbytes, device):  # the GPU's free memory, as the stand-in's budget says
        budget = trt_standin.DEVICE.budget_bytes
        if budget is not None and nbytes > budget:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes} bytes")
        return torch.empty(nbytes, dtype=torch.uint8) if nbytes else None

    monkeypatch.setattr(tensorrt_backend, "device_scratch", scratch)
    return module


def make_backend(trt, tmp_path, precision="fp32", max_batch=8):
    options = DeviceSettings(
        backend="tensorrt", precision=precision, max_batch=max_batch, engines_dir=tmp_path / "engines"
    )
    return TensorRTBackend(options, trt=trt)


# --- the stand-in's own rules -----------------------------------------------------------------------


def test_standin_knows_each_versions_flags(trt):
    builder = trt.Builder(trt.Logger())
    config = builder.create_builder_config()
    flags = trt.NetworkDefinitionCreationFlag
    if trt.__version__.startswith("10."):
        assert int(flags.STRONGLY_TYPED) == 1 and int(flags.EXPLICIT_BATCH) == 0
        assert hasattr(trt.BuilderFlag, "FP16") and hasattr(trt.BuilderFlag, "INT8")
        config.int8_calibrator = None
    else:
        assert int(flags.STRONGLY_TYPED) == 0 and not hasattr(flags, "EXPLICIT_BATCH")
        for gone in ("FP16", "INT8", "BF16", "FP8"):
            assert not hasattr(trt.BuilderFlag, gone)
        with pytest.raises(AttributeError):
            config.int8_calibrator = None
    assert config.get_flag(trt.BuilderFlag.TF32)  # on by default in both


def test_standin_refuses_a_range_on_a_static_dim_and_double_inputs(trt, tmp_path):
    logger = trt.Logger()
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    assert trt.OnnxParser(network, logger).parse_from_file(str(conv_net(tmp_path / "b1.onnx", batch=1)))
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("x", (1, 3, 8, 8), (8, 3, 8, 8), (8, 3, 8, 8))
    config.add_optimization_profile(profile)
    assert builder.build_serialized_network(network, config) is None
    assert "does not match network definition" in logger.messages[-1][1]

    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert not parser.parse_from_file(str(weighted_net(tmp_path / "w.onnx")))
    assert "DOUBLE" in parser.get_error(0).desc()


# --- build, cache, load, run --------------------------------------------------------------------------


def test_a_fixed_batch_file_builds_with_a_fixed_profile_and_runs(trt, tmp_path):
    """Issue 34 item 1: FaceFusion's files fix the batch at 1; the profile must be (1, 1, 1)."""
    model = conv_net(tmp_path / "fixed.onnx", batch=1)
    backend = make_backend(trt, tmp_path, max_batch=8)
    path, key, inputs, outputs = backend.engine_for(model, "fixed", "fp32")
    assert key.profiles[0].min == key.profiles[0].max == (1, 3, 8, 8) and key.batch == (1, 1, 1)
    session = TensorRTSession(backend, path, label="fixed", inputs=inputs, outputs=outputs)
    x = np.random.default_rng(1).uniform(0, 1, (3, 3, 8, 8)).astype(np.float32)
    got = session.run({"x": x})["y"]  # three items, one call each within the profile
    want = np.concatenate([reference(model, {"x": x[i : i + 1]}) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # the same engine is found again, and its bytes and key check out
    assert backend.engine_for(model, "fixed", "fp32")[0] == path


def test_the_loader_goes_to_the_batch_copy_before_building_for_a_fixed_batch(tmp_path, monkeypatch):
    """Issue 34 item 1: on tensorrt, `load_learned` must not build an engine for the batch-1 file first."""
    from facefusion_batch.pipeline import build

    base = conv_net(tmp_path / "ff.onnx", batch=1)
    batched = conv_net(tmp_path / "ff@batch.onnx")
    loads = []
    backend = types.SimpleNamespace(
        name="tensorrt",
        load=lambda path, label: (
            loads.append(path)
            or types.SimpleNamespace(inputs=(TensorInfo("x", (1, 3, 8, 8), "tensor(float)"),))
        ),
    )
    monkeypatch.setattr(build, "learned_file", lambda models, name: base)
    monkeypatch.setattr(build, "variant_catalog", lambda name: {})
    monkeypatch.setattr(build.store, "verify", lambda *a, **k: types.SimpleNamespace(ok=False))
    monkeypatch.setattr(build, "prepared_path", lambda *a, **k: batched)
    models = types.SimpleNamespace(backend=backend, models_dir=None, paths={})
    build.load_learned(models, "ff")
    assert loads == [batched]


def test_engines_are_strongly_typed_detailed_and_fp32_without_tf32(trt, tmp_path):
    model = conv_net(tmp_path / "m.onnx")
    timing = tmp_path / "timing.cache"
    profiles = input_profiles((TensorInfo("x", ("batch", 3, 8, 8), "tensor(float)"),), 4)
    key = EngineKey("m", "ab" * 32, "fp32", profiles, MachineKey(*GPU, trt.__version__))
    engine, meta = build_engine(trt, model, key, timing_cache=timing)
    plan = trt_standin.parsed_plan(engine)
    assert plan["strongly_typed"] and plan["verbosity"] == "DETAILED" and not plan["tf32"]
    assert plan["io"][0]["profile"] == [[1, 3, 8, 8], [4, 3, 8, 8], [4, 3, 8, 8]]
    assert (
        meta["layers"] == {"fp32": 4} and timing.read_bytes() == f"STANDIN-TIMING {trt.__version__}".encode()
    )


def test_out_of_memory_halves_the_batch_instead_of_failing(trt, tmp_path):
    """Issue 34 item 6: activation memory per call (USER_MANAGED), so an OOM is the guard's to halve."""
    model = conv_net(tmp_path / "m.onnx")
    backend = make_backend(trt, tmp_path, max_batch=8)
    path, _, inputs, outputs = backend.engine_for(model, "m", "fp32")
    session = TensorRTSession(backend, path, label="m", inputs=inputs, outputs=outputs)
    per_item = trt_standin.ACTIVATION_FACTOR * 3 * 8 * 8 * 4
    trt_standin.DEVICE.budget_bytes = 2 * per_item  # the largest profile (8 items) does not fit
    x = np.random.default_rng(2).uniform(0, 1, (8, 3, 8, 8)).astype(np.float32)
    got = session.run({"x": x})["y"]
    np.testing.assert_allclose(got, reference(model, {"x": x}), rtol=1e-6, atol=1e-6)
    summary = session.guard.summary()
    assert summary["oom_retries"] == 3 and summary["final_limit"] == 2
    assert summary["batch_sizes"] == {"2": 4}


def test_each_thread_has_its_own_user_managed_context(trt, tmp_path, monkeypatch):
    import threading

    model = conv_net(tmp_path / "m.onnx")
    backend = make_backend(trt, tmp_path, max_batch=4)
    path, _, inputs, outputs = backend.engine_for(model, "m", "fp32")
    session = TensorRTSession(backend, path, label="m", inputs=inputs, outputs=outputs)
    strategies = []
    engine_class = type(session.engine)
    create = engine_class.create_execution_context

    def counted(engine, strategy=trt.ExecutionContextAllocationStrategy.STATIC):
        strategies.append(strategy)
        return create(engine, strategy)

    monkeypatch.setattr(engine_class, "create_execution_context", counted)
    x = np.random.default_rng(3).uniform(0, 1, (6, 3, 8, 8)).astype(np.float32)
    results, together = {}, threading.Barrier(2)

    def run(k):
        results[k] = session.run({"x": x})["y"]
        together.wait(timeout=30)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for y in results.values():
        np.testing.assert_allclose(y, reference(model, {"x": x}), rtol=1e-6, atol=1e-6)
    assert strategies == [trt.ExecutionContextAllocationStrategy.USER_MANAGED] * 2


def test_a_float64_input_is_cast_for_tensorrt_and_probed_as_float64(trt, tmp_path):
    """Issue 34 item 7: CodeFormer's fidelity weight is float64; TensorRT takes no DOUBLE input."""
    from facefusion_batch.runtime.torch_backend import probe_feeds

    model = weighted_net(tmp_path / "w.onnx")
    backend = make_backend(trt, tmp_path, max_batch=4)
    path, key, inputs, outputs = backend.engine_for(model, "weighted", "fp32")
    assert [p.max for p in key.profiles] == [(4, 3, 8, 8), (1,)]  # the weight's static [1] stays
    feeds = probe_feeds(inputs)
    assert feeds["w"].dtype == np.float64 and feeds["x"].dtype == np.float32
    session = TensorRTSession(backend, path, label="weighted", inputs=inputs, outputs=outputs)
    assert session.max_batch == 4
    assert engine_deviation(session, model) < 1e-6


def test_an_fp16_engine_that_came_out_fp32_is_refused(trt, tmp_path, monkeypatch):
    """Issue 34 item 9: with no FP16 builder flag (11.x) an fp32 file gives an fp32 engine; say so."""
    model = conv_net(tmp_path / "m.onnx")
    monkeypatch.setattr(
        tensorrt_backend, "fp16_onnx", lambda src, sha, work_dir: src
    )  # converter did nothing
    backend = make_backend(trt, tmp_path, precision="fp16")
    with pytest.raises(PrecisionMismatchError, match="mostly FP32"):
        backend.engine_for(model, "m", "fp16")
    assert not list((tmp_path / "engines").glob("*.engine"))  # nothing stored under fp16


def test_an_int8_file_that_is_mostly_fp32_is_refused(trt, tmp_path):
    model = conv_net(tmp_path / "m.onnx", layers=4)
    backend = make_backend(trt, tmp_path, precision="int8")
    with pytest.raises(
        PrecisionMismatchError, match=r"mostly FP32 \(fp16 0%, int8 12%, fp32 88% of 8 layers\)"
    ):
        backend.engine_for(model, "m", "int8", partly_quantized(tmp_path / "q.onnx"))


def test_auto_falls_back_to_fp32_when_fp16_did_not_hold(trt, tmp_path, monkeypatch):
    model = conv_net(tmp_path / "m.onnx")
    monkeypatch.setattr(tensorrt_backend, "fp16_onnx", lambda src, sha, work_dir: src)
    session = make_backend(trt, tmp_path, precision="auto").load(model, label="m")
    assert session.precision == "fp32"


def test_force_removes_the_engines_it_replaces(trt, tmp_path):
    """Issue 34 item 2: `engines build --force` removed nothing and crashed (`onnx` shadowed)."""
    from facefusion_batch.tools.engines import _remove_matching

    model = conv_net(tmp_path / "m.onnx")
    backend = make_backend(trt, tmp_path)
    path = backend.engine_for(model, "m", "fp32")[0]
    _remove_matching(backend, model, "m", "fp32", None)
    assert not path.exists() and not list(path.parent.glob("*.engine.json"))


def test_a_model_with_a_record_is_not_hashed_again_at_each_load(trt, tmp_path, monkeypatch):
    """The engine key takes the sha256 the store recorded while the file is unchanged (size,
    mtime_ns, inode), as the torch runtime does; a changed file is hashed again."""
    from facefusion_batch import fsutil
    from facefusion_batch.models import records
    from facefusion_batch.tools.engines import _remove_matching

    model = conv_net(tmp_path / "m.onnx")
    recorded = "ab" * 32  # not the file's: only a trusted record can give it
    records.write_json_atomic(records.sidecar_path(model), {"sha256": recorded, **records.stamp_of(model)})
    hashed = []
    real = fsutil.sha256_file
    monkeypatch.setattr(fsutil, "sha256_file", lambda p: hashed.append(p) or real(p))
    backend = make_backend(trt, tmp_path)
    path, key, _, _ = backend.engine_for(model, "m", "fp32")
    assert key.model_sha256 == recorded and backend.engine_for(model, "m", "fp32")[0] == path
    assert hashed == []
    _remove_matching(backend, model, "m", "fp32", None)  # --force finds it by the same key
    assert not path.exists()
    conv_net(model, layers=3)  # rewritten: its record no longer holds
    assert backend.engine_for(model, "m", "fp32")[1].model_sha256 == real(model) and hashed == [model]


def test_an_engine_of_another_tensorrt_is_not_loaded(trt, tmp_path):
    other = trt_standin.make("11.4.0.106" if trt.__version__.startswith("10.") else "10.16.1.11")
    model = conv_net(tmp_path / "m.onnx")
    profiles = input_profiles((TensorInfo("x", ("batch", 3, 8, 8), "tensor(float)"),), 2)
    key = EngineKey("m", "ab" * 32, "fp32", profiles, MachineKey(*GPU, other.__version__))
    engine, _ = build_engine(other, model, key, timing_cache=tmp_path / "t.cache")
    logger = trt.Logger()
    assert trt.Runtime(logger).deserialize_cuda_engine(engine) is None
    assert "not compatible" in logger.messages[-1][1]


# --- the command line ---------------------------------------------------------------------------------


def ffbatch(capsys, *args) -> tuple[int, str, str]:
    from facefusion_batch.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_engines_build_says_what_it_built_and_force_rebuilds(trt, tmp_path, capsys):
    """Issue 34 items 2 and 4: `--force` works; build and list give the layers' precisions."""
    engines = tmp_path / "engines"
    args = ("engines", "build", "face_mesh_468", "--precision", "fp16", "--engines-dir", engines)
    code, out, err = ffbatch(capsys, *args)
    assert code == 0, out + err
    assert "layers: fp16 " in out and "fp32 0%" in out
    (sidecar,) = engines.glob("*.engine.json")
    layers = json.loads(sidecar.read_text())["layers"]
    assert layers["fp16"] > 0 and "fp32" not in layers
    first = sidecar.stat().st_mtime_ns
    code, out, err = ffbatch(capsys, *args, "--force")
    assert code == 0, out + err
    assert sidecar.stat().st_mtime_ns != first  # removed and built again
    code, out, _ = ffbatch(capsys, "engines", "list", "--engines-dir", engines)
    assert code == 0 and "layers: fp16 " in out


def test_engines_build_exits_2_when_fp16_came_out_fp32(trt, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tensorrt_backend, "fp16_onnx", lambda src, sha, work_dir: src)
    engines = tmp_path / "engines"
    base = ("engines", "build", "face_mesh_468", "--engines-dir", engines)
    code, out, err = ffbatch(capsys, *base, "--precision", "fp16")
    assert code == 2 and "mostly FP32" in out + err and "Traceback" not in out + err
    code, out, err = ffbatch(capsys, *base)  # auto: said, and fp32 built instead
    assert code == 0 and "building fp32 instead" in out and "layers: fp16 0%, int8 0%, fp32 100%" in out
