"""The cuda backend's onnxruntime runtime (`--gpu-runtime onnxruntime`), run here through the same
code with onnxruntime's CPU provider and I/O binding (device "cpu"): inputs bound by the torch
tensors' data_ptr, outputs preallocated as torch tensors and bound by theirs.

Reference: a plain onnxruntime CPU session (`session.run` with numpy), which I/O binding must
reproduce exactly (same provider, same kernels); the torch runtime's tolerance is not needed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from standins import inswapper  # noqa: E402
from test_cli import ffbatch_here  # noqa: E402

from facefusion_batch.config import resolve_device  # noqa: E402
from facefusion_batch.errors import BackendUnavailableError, InputError  # noqa: E402
from facefusion_batch.models.store import model_path  # noqa: E402
from facefusion_batch.runtime import onnxruntime_backend as ortb  # noqa: E402
from facefusion_batch.runtime.backends import select_backend  # noqa: E402
from facefusion_batch.runtime.device import DeviceSettings  # noqa: E402
from facefusion_batch.runtime.memory import DeviceOutOfMemory  # noqa: E402
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCudaBackend, OrtSession  # noqa: E402


@pytest.fixture(scope="module")
def real_models():
    return {name: model_path(name) for name in ("yunet_2023mar_batch", "face_mesh_468")}


def _feeds(name: str, n: int = 3) -> dict[str, np.ndarray]:
    r = np.random.default_rng(1)
    if name.startswith("yunet"):
        return {"input": r.uniform(0, 255, (n, 3, 96, 160)).astype(np.float32)}
    return {"input_1": r.uniform(0, 1, (n, 3, 192, 192)).astype(np.float32)}


def _reference(path, feeds):
    return OrtSession(path, label="ref", threads=1, providers=["CPUExecutionProvider"]).run(feeds)


def _same(got: dict, ref: dict) -> None:
    assert got.keys() == ref.keys()
    for k in ref:
        assert got[k].shape == ref[k].shape, k
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("name", ["yunet_2023mar_batch", "face_mesh_468"])
def test_iobinding_session_matches_onnxruntime_run(real_models, name):
    backend = OnnxRuntimeCudaBackend(device="cpu", threads=1)
    session = backend.load(real_models[name], label=name)
    assert session.providers == ("CPUExecutionProvider",)
    feeds = _feeds(name)
    ref = _reference(real_models[name], feeds)
    _same(session.run(feeds), ref)  # the first call learns the output shapes
    _same(session.run(feeds), ref)  # later calls bind preallocated outputs
    other = _feeds(name, n=2)  # another input shape: learnt again, not reused
    _same(session.run(other), _reference(real_models[name], other))


def test_run_device_binds_the_tensors_memory_and_returns_tensors(real_models, monkeypatch):
    name = "face_mesh_468"
    backend = OnnxRuntimeCudaBackend(device="cpu", threads=1)
    session = backend.load(real_models[name], label=name)
    feeds = _feeds(name)
    tensor = torch.from_numpy(feeds["input_1"])
    session.run_device({"input_1": tensor})  # output shapes learnt
    bound: dict[str, int] = {}
    real_io_binding = session._session.io_binding

    def spying_io_binding():
        binding = real_io_binding()
        real_input, real_output = binding.bind_input, binding.bind_output

        def bind_input(name, device_type, device_id, element_type, shape, ptr):
            bound[name] = ptr
            assert device_type == "cpu" and element_type == np.float32
            return real_input(name, device_type, device_id, element_type, shape, ptr)

        def bind_output(name, device_type="cpu", device_id=0, element_type=None, shape=None, ptr=None):
            bound[name] = ptr
            return real_output(name, device_type, device_id, element_type, shape, ptr)

        binding.bind_input, binding.bind_output = bind_input, bind_output
        return binding

    monkeypatch.setattr(session._session, "io_binding", spying_io_binding, raising=False)
    out = session.run_device({"input_1": tensor})
    assert bound["input_1"] == tensor.data_ptr()  # no copy of the input
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in out.values())
    assert bound["conv2d_20"] == out["conv2d_20"].data_ptr()  # onnxruntime wrote into our tensor
    _same({k: v.numpy() for k, v in out.items()}, _reference(real_models[name], feeds))


def test_a_non_contiguous_or_double_input_is_made_what_the_graph_declares(real_models):
    name = "face_mesh_468"
    session = OnnxRuntimeCudaBackend(device="cpu", threads=1).load(real_models[name], label=name)
    feeds = _feeds(name)
    channels_last = np.ascontiguousarray(feeds["input_1"].transpose(0, 2, 3, 1))
    view = torch.from_numpy(channels_last).double().permute(0, 3, 1, 2)  # NCHW values, NHWC memory
    assert not view.is_contiguous()
    out = session.run_device({"input_1": view})
    _same({k: v.numpy() for k, v in out.items()}, _reference(real_models[name], feeds))


@pytest.mark.parametrize("name", ["yunet_2023mar_batch", "face_mesh_468"])
def test_padded_and_chunked_batches_give_the_same_outputs(real_models, name):
    backend = OnnxRuntimeCudaBackend(device="cpu", threads=1)
    backend.pad_batches = True  # as on a GPU: 3 items run as 4 and are trimmed back
    session = backend.load(real_models[name], label=name)
    feeds = _feeds(name)
    ref = _reference(real_models[name], feeds)
    _same(session.run(feeds), ref)
    session.guard.set_limit(2)  # 3 items as 2 + 1
    _same(session.run(feeds), ref)
    report = backend.report()
    assert report["runtime"] == "onnxruntime"
    assert report["providers"][name] == ["CPUExecutionProvider"]
    assert report["memory_guard"][name]["batch_sizes"] == {"2": 1, "1": 1, "3": 1}


def test_an_out_of_memory_is_halved_without_losing_items(real_models):
    name = "face_mesh_468"
    session = OnnxRuntimeCudaBackend(device="cpu", threads=1).load(real_models[name], label=name)
    feeds = _feeds(name, n=5)
    ref = _reference(real_models[name], feeds)
    real = session._bound_run

    def bound_run(part):
        if next(iter(part.values())).shape[0] > 2:
            # the text onnxruntime's CUDA provider raises
            raise RuntimeError("CUDA failure 2: out of memory ; GPU=0 ; hostname=x ; expr=cudaMalloc")
        return real(part)

    session._bound_run = bound_run
    _same(session.run(feeds), ref)
    assert session.guard.oom_events >= 1 and session.guard.limit <= 2
    session._bound_run = lambda part: (_ for _ in ()).throw(DeviceOutOfMemory("out of memory"))
    with pytest.raises(DeviceOutOfMemory, match="even for a batch of 1"):
        session.run({"input_1": feeds["input_1"][:1]})


def test_onnxruntime_arena_exhaustion_halves_the_batch(real_models, monkeypatch):
    """onnxruntime's BFC arena says "Failed to allocate memory for requested buffer of size N"
    (no "out of memory" in it): the session turns it into DeviceOutOfMemory for the guard."""
    name = "face_mesh_468"
    session = OnnxRuntimeCudaBackend(device="cpu", threads=1).load(real_models[name], label=name)
    feeds = _feeds(name, n=4)
    ref = _reference(real_models[name], feeds)
    real_run = session._session.run_with_iobinding
    sizes = []

    def run_with_iobinding(binding, run_options=None):
        if sizes[-1] > 1:  # the arena holds one item's activations, not two
            raise RuntimeError(
                "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running "
                "Conv node. onnxruntime::BFCArena::AllocateRawInternal Failed to allocate memory for "
                "requested buffer of size 1073741824"
            )
        return real_run(binding, run_options)

    real_bound = session._bound_run

    def bound_run(part):
        sizes.append(next(iter(part.values())).shape[0])
        return real_bound(part)

    monkeypatch.setattr(session._session, "run_with_iobinding", run_with_iobinding, raising=False)
    session._bound_run = bound_run
    _same(session.run(feeds), ref)
    assert session.guard.oom_events >= 2 and session.guard.limit == 1 and sizes[:2] == [4, 2]
    monkeypatch.setattr(
        session._session,
        "run_with_iobinding",
        lambda b, o=None: (_ for _ in ()).throw(RuntimeError("bad graph")),
    )
    with pytest.raises(RuntimeError, match="bad graph"):  # anything else is not a memory problem
        session.run({"input_1": feeds["input_1"][:1]})


def test_inswapper_standin_with_two_inputs(tmp_path):
    """The inswapper stand-in (a fixed batch of 1, target and source inputs)."""
    path = tmp_path / "inswapper_128.onnx"
    onnx.save(inswapper(), path)
    r = np.random.default_rng(3)
    feeds = {
        "target": r.uniform(0, 1, (1, 3, 128, 128)).astype(np.float32),
        "source": r.normal(size=(1, 512)).astype(np.float32),
    }
    session = OnnxRuntimeCudaBackend(device="cpu", threads=1).load(path, label="inswapper_128")
    _same(session.run(feeds), _reference(path, feeds))


def test_fp16_model_file_takes_and_returns_float32_tensors(tmp_path):
    """A file that declares float16 I/O: float32 tensors are cast on the way in, float32 out."""
    w = np.random.default_rng(4).normal(size=(4, 3, 3, 3)).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "half",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 4, 8, 8])],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "half.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    x = np.random.default_rng(5).uniform(0, 1, (2, 3, 8, 8)).astype(np.float32)
    session = OnnxRuntimeCudaBackend(device="cpu", threads=1).load(path, label="half")
    out = session.run_device({"x": torch.from_numpy(x)})
    assert out["y"].dtype == torch.float32
    ref = _reference(path, {"x": x.astype(np.float16)})
    np.testing.assert_allclose(out["y"].numpy(), ref["y"].astype(np.float32), rtol=0, atol=0)


def test_a_silent_fallback_to_the_cpu_is_refused(real_models, monkeypatch):
    """onnxruntime-gpu whose CUDA libraries do not load runs on the CPU provider without an
    error; the session's providers say so, and the backend refuses (exit 2), naming them."""
    backend = OnnxRuntimeCudaBackend(device="cpu", threads=1)
    backend.device = "cuda:0"  # asked for CUDA; the session below gets only the CPU provider
    with pytest.raises(BackendUnavailableError, match="fell back to CPUExecutionProvider") as err:
        backend.load(real_models["face_mesh_468"], label="face_mesh_468")
    assert err.value.exit_code == 2


def test_without_onnxruntime_gpu_the_runtime_is_refused_naming_the_package(monkeypatch):
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(BackendUnavailableError, match="install onnxruntime-gpu"):
        OnnxRuntimeCudaBackend(DeviceSettings(backend="cuda", gpu_runtime="onnxruntime"))
    assert ortb.cuda_provider_problem().startswith(f"onnxruntime {onnxruntime.__version__} has no CUDA")


def test_fp16_and_int8_are_refused_on_the_onnxruntime_runtime():
    for precision in ("fp16", "int8"):
        settings = DeviceSettings(backend="cuda", precision=precision, gpu_runtime="onnxruntime")
        with pytest.raises(BackendUnavailableError, match="runs each model file as it is"):
            OnnxRuntimeCudaBackend(settings, device="cpu")


def test_the_option_is_validated_and_chooses_the_runtime(monkeypatch):
    with pytest.raises(InputError, match="--gpu-runtime must be one of torch, onnxruntime"):
        DeviceSettings(backend="cuda", gpu_runtime="tensorflow").validated()
    from facefusion_batch.runtime import backends

    monkeypatch.setattr(backends, "nvidia_gpu_count", lambda: 1)
    made = []
    monkeypatch.setattr(backends, "OnnxRuntimeCudaBackend", lambda d, threads=None: made.append(d) or "ort")
    monkeypatch.setattr(backends, "TorchBackend", lambda d: "torch")
    assert select_backend(DeviceSettings(backend="cuda", gpu_runtime="onnxruntime")) == "ort"
    assert select_backend(DeviceSettings(backend="cuda")) == "torch"  # the default
    assert made[0].gpu_runtime == "onnxruntime"


def test_the_device_plan_carries_the_gpu_runtime():
    plan = resolve_device(backend="cuda", gpu_runtime="onnxruntime", resolve=False)
    assert plan.device.gpu_runtime == "onnxruntime"
    assert resolve_device(backend="cuda", resolve=False).device.gpu_runtime == "torch"
    with pytest.raises(InputError, match="--gpu-runtime"):
        resolve_device(backend="cuda", gpu_runtime="tvm", resolve=False)


def test_render_refuses_an_unknown_gpu_runtime_with_exit_2(tmp_path):
    out = ffbatch_here(
        "render", tmp_path / "in.mp4", "-s", tmp_path / "a.png", "-o", tmp_path / "o.mp4",
        "--backend", "cpu", "--gpu-runtime", "tvm",
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "--gpu-runtime must be one of torch, onnxruntime (got 'tvm')" in out.stderr


@pytest.mark.skipif(
    not torch.cuda.is_available() or bool(ortb.cuda_provider_problem()),
    reason="needs an NVIDIA GPU, torch with CUDA and onnxruntime-gpu",
)
@pytest.mark.parametrize("name", ["yunet_2023mar_batch", "face_mesh_468"])
def test_on_cuda_the_tensors_stay_on_the_device_and_agree_with_the_cpu(real_models, name):
    backend = OnnxRuntimeCudaBackend(DeviceSettings(backend="cuda", gpu_runtime="onnxruntime"))
    session = backend.load(real_models[name], label=name)
    assert session.providers[0] == "CUDAExecutionProvider"
    feeds = _feeds(name)
    ref = _reference(real_models[name], feeds)
    dev = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
    for _ in range(2):  # learnt output shapes, then preallocated outputs
        out = session.run_device(dev)
        assert all(v.is_cuda for v in out.values())
        got = {k: v.cpu().numpy() for k, v in out.items()}
        for k in ref:  # cuDNN's kernels differ from the CPU's: a relative bound, TF32 off
            scale = max(1.0, float(np.abs(ref[k]).max()))
            assert float(np.abs(got[k] - ref[k]).max()) / scale <= 1e-4, k


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory):
    import standins

    return standins.write_standins(
        tmp_path_factory.mktemp("standins"), ["inswapper_128", "arcface_w600k_r50"]
    )


def test_the_device_pipeline_runs_on_the_onnxruntime_runtime(
    models, standin_dir, private_home, astronaut_path, t1_image
):
    """t1.jpg's six faces through the whole pipeline on the torch kernel set with every model on
    the onnxruntime runtime (CPU provider here), against the host pipeline: the same faces, the
    same frame within the kernel sets' own tolerance (tests/test_kernels_pipeline.py)."""
    from facefusion_batch.config import SwapSettings
    from facefusion_batch.kernels.factory import make_kernels
    from facefusion_batch.kernels.host import HostKernels
    from facefusion_batch.pipeline.build import Models, build_pipeline
    from facefusion_batch.swap.learned import LearnedSettings

    swap = SwapSettings(swapper="learned", learned=LearnedSettings(swapper_model="inswapper_128"))
    host = build_pipeline(
        Models(backend=models.backend, detector=models.detector, paths={}, models_dir=standin_dir),
        (astronaut_path,),
        swap,
        "many",
    )
    backend = OnnxRuntimeCudaBackend(device="cpu", threads=2)
    detector = type(models.detector)(
        backend.load(models.paths["yunet_2023mar_batch"], label="yunet_2023mar_batch"),
        models.detector.settings,
    )
    device_models = Models(
        backend=backend,
        detector=detector,
        triangles=models.triangles,
        regions=models.regions,
        paths={},
        models_dir=standin_dir,
    )
    device = build_pipeline(device_models, (astronaut_path,), swap, "many")
    kernels = make_kernels(backend)
    assert type(kernels).__name__ == "TorchKernels"  # a backend with a device: frames as tensors
    a, b = host(HostKernels(), [t1_image]), device(kernels, [t1_image])
    assert (a.faces_found, a.faces_swapped) == (b.faces_found, b.faces_swapped) and b.faces_swapped >= 5
    d = np.abs(a.frames[0].astype(np.int16) - b.frames[0].astype(np.int16))
    assert d.mean() <= 0.1 and np.percentile(d, 99.9) <= 3
    assert np.abs(b.frames[0].astype(int) - t1_image.astype(int)).mean() > 0.1  # faces really changed
    assert {"yunet_2023mar_batch", "inswapper_128@batch"} <= {s.label for s in backend.sessions}
    assert all(s.providers == ("CPUExecutionProvider",) for s in backend.sessions)


def test_doctor_says_whether_the_onnxruntime_runtime_can_run(monkeypatch):
    import onnxruntime

    from facefusion_batch.tools.doctor import report_lines

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    line = next(x for x in report_lines() if x.startswith("gpu runtimes"))
    assert "torch (the default" in line and "install onnxruntime-gpu in place of onnxruntime" in line
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: providers)
    line = next(x for x in report_lines() if x.startswith("gpu runtimes"))
    assert line.endswith("--gpu-runtime onnxruntime: available (onnxruntime's CUDA provider)")
