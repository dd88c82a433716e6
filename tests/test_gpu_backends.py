"""Backend choice, doctor, the GPU options and engine commands on a machine without a GPU,
the TensorRT session against a fake engine (real device pointers, on the CPU), NVML sampling,
and the per-GPU process fan-out (run with the CPU backend)."""

from __future__ import annotations

import ctypes
import json
import threading
import types
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
from media import decode_all, frame_number, make_clip
from test_compositing_outputs import decoded, sequence

from facefusion_batch.config import RenderSettings, resolve_device
from facefusion_batch.errors import EXIT_USAGE, BackendUnavailableError, InputError
from facefusion_batch.farm.manifest import work_dir_for
from facefusion_batch.farm.multi_gpu import split_ranges
from facefusion_batch.runtime.backends import (
    Availability,
    choose_auto,
    choose_backend,
    nvidia_gpu_count,
    select_backend,
)
from facefusion_batch.runtime.batching import GPU_BATCH
from facefusion_batch.runtime.device import DeviceSettings, default_streams, parse_gpu_list
from facefusion_batch.runtime.nvml import NvmlSampler, nvml_gpus
from facefusion_batch.runtime.session import TensorInfo
from facefusion_batch.video.encode.encoder_policy import EncoderSettings

HAS_GPU = nvidia_gpu_count() > 0
no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the behaviour without an NVIDIA GPU")


def ffbatch(capsys, *args) -> tuple[int, str, str]:
    """Run the command line in this process (no interpreter start-up per call): (code, out, err)."""
    from facefusion_batch.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


# --- choosing a backend ------------------------------------------------------------------------------


def avail(**kw):
    base = dict(torch="2.13.0", torch_cuda="12.8", gpus=1, tensorrt=None, tensorrt_problem="")
    return Availability(**{**base, "engines_ready": False, **kw})


def test_auto_prefers_tensorrt_only_with_built_engines():
    assert choose_auto(avail(tensorrt="10.16.1.11", engines_ready=True))[0] == "tensorrt"
    name, why = choose_auto(avail(tensorrt="10.16.1.11", engines_ready=False))
    assert name == "cuda" and "engines build" in why
    assert choose_auto(avail())[0] == "cuda"
    assert choose_auto(avail(gpus=0)) == ("cpu", "no NVIDIA GPU visible to torch")
    name, why = choose_auto(avail(torch=None, gpus=0))
    assert name == "cpu" and "[cuda]" in why


@no_gpu
@pytest.mark.parametrize("name", ["cuda", "tensorrt"])
def test_gpu_backends_without_a_gpu_are_usage_errors(name):
    with pytest.raises(BackendUnavailableError) as err:
        select_backend(DeviceSettings(backend=name, precision="auto"))
    assert err.value.exit_code == EXIT_USAGE
    assert "no NVIDIA GPU" in str(err.value) and "--backend cpu" in str(err.value)


@no_gpu
def test_auto_without_a_gpu_is_the_cpu():
    assert choose_backend()[0] == "cpu"
    plan = resolve_device(backend="auto", precision="auto")
    assert plan.device == DeviceSettings(backend="cpu", precision="fp32", auto=True)
    assert select_backend(plan.device, threads=1).name == "cpu"


@no_gpu
def test_doctor_without_a_gpu():
    from facefusion_batch.tools.doctor import report_lines

    text = "\n".join(report_lines())
    for words in ("torch", "tensorrt", "ort providers", "no NVIDIA GPU", "nvenc", "nvdec", "engines"):
        assert words in text
    assert "auto backend  cpu:" in text
    assert "unusable here (no NVIDIA GPU)" in text


@no_gpu
def test_cli_gpu_commands_without_a_gpu_exit_2(tmp_path, capsys):
    clip = make_clip(tmp_path / "in.mp4", size=(64, 48), frames=2)
    source = tmp_path / "face.png"
    source.write_bytes(b"not read before the backend check")
    for extra, words in (
        (("--backend", "tensorrt"), "--backend tensorrt: no NVIDIA GPU"),
        (("--backend", "cuda", "--streams", "2"), "--backend cuda: no NVIDIA GPU"),
        (("--gpus", "0,1"), "--gpus: no NVIDIA GPU"),
        (("--backend", "cpu", "--gpus", "0"), "--gpus needs --backend cuda"),
        (("--precision", "fp8"), "--precision must be one of"),
        (("--hwaccel", "cuda"), "--hwaccel cuda: the GPU video decoder cannot be used here"),
        (("--hwaccel", "vaapi"), "--hwaccel must be one of none, cuda"),
    ):
        code, out, err = ffbatch(
            capsys, "render", clip, "-s", source, "-o", tmp_path / "out.mp4", "-q", *extra
        )
        assert code == 2, (extra, err)
        assert words in err and "Traceback" not in err and out == ""
        assert not (tmp_path / "out.mp4").exists()
    code, _, err = ffbatch(capsys, "engines", "build")
    assert code == 2 and "ffbatch engines build: no NVIDIA GPU" in err


# --- GPU options --------------------------------------------------------------------------------------


def test_device_plan_maps_streams_to_workers():
    p = resolve_device(backend="cpu", streams=3, max_batch=8, precision="fp16")
    assert p.workers == 3 and p.device.precision == "fp32"  # --streams on the CPU: as --workers
    p = resolve_device(backend="cuda", streams=3, max_batch=8, precision="fp16")
    assert p.workers == 3 and p.device.max_batch == 8 and p.device.precision == "fp16"
    with pytest.raises(InputError, match="--streams"):
        resolve_device(backend="cuda", streams=99)
    with pytest.raises(InputError, match="--max-batch"):
        resolve_device(backend="cuda", max_batch=0)
    with pytest.raises(InputError, match="--precision"):
        resolve_device(backend="cpu", precision="fp8")


def test_workers_given_on_a_gpu_are_its_streams(monkeypatch):
    from facefusion_batch.config import render_settings

    params = dict(
        inputs=[Path("in.mp4")],
        source=[Path(__file__)],
        output=Path("out.mp4"),
        faces="many",
        blend="multiband",
        eyes_mouth="target",
        colour="local",
        score_threshold=0.6,
        backend="cuda",
        workers=5,
    )
    settings, gpus = render_settings(params, given={"workers", "backend"})
    assert gpus is None and settings.workers == 5 and settings.device.streams == 5
    assert settings.batch_size == GPU_BATCH  # not given: the GPU's default


def test_gpu_list_and_default_streams():
    assert parse_gpu_list("0, 1,3") == (0, 1, 3)
    for bad in ("", "a", "0,0", "-1"):
        with pytest.raises(InputError):
            parse_gpu_list(bad)
    assert default_streams(8 * 2**30) == 2 and default_streams(24 * 2**30) == 3
    assert default_streams(141 * 2**30) == 4


def test_device_settings_validation():
    DeviceSettings(backend="tensorrt", precision="int8", max_batch=64, streams=4).validated()
    with pytest.raises(InputError):
        DeviceSettings(engine_policy="maybe").validated()
    with pytest.raises(InputError, match="--backend"):
        DeviceSettings(backend="auto").validated()  # resolved at the edge, never stored as auto


# --- NVML ---------------------------------------------------------------------------------------------


def test_nvml_sampler_summary_with_a_fake_reader():
    values = iter([(10.0, 1 << 30, 8 << 30, 5.0, 0.0), (90.0, 3 << 30, 8 << 30, 15.0, 0.0)] * 10)
    sampler = NvmlSampler([0], read=lambda d: next(values), names={0: "Fake GPU"})
    sampler.sample_once()
    sampler.sample_once()
    s = sampler.summary()["devices"]["0"]
    assert s["samples"] == 2 and s["utilisation_mean_pct"] == 50.0 and s["utilisation_max_pct"] == 90.0
    assert s["memory_used_max_mib"] == 3072.0 and s["memory_total_mib"] == 8192.0 and s["name"] == "Fake GPU"
    assert s["encoder_mean_pct"] == 10.0
    with NvmlSampler([0], read=lambda d: (50.0, 1, 2, 0.0, 0.0), interval_s=0.01) as live:
        threading.Event().wait(0.05)
    assert live.summary()["devices"]["0"]["samples"] >= 2


def test_nvml_sampler_without_nvml_reports_unavailable():
    sampler = NvmlSampler([0], read=None)
    sampler._read = None
    assert sampler.start().summary()["available"] is False
    sampler.stop()


def test_nvml_inventory_from_a_fake_module():
    mem = types.SimpleNamespace(total=80 << 30, free=70 << 30, used=10 << 30)
    fake = types.SimpleNamespace(
        nvmlSystemGetDriverVersion=lambda: b"580.65",
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
    )
    gpus = nvml_gpus(fake)
    assert [g.sm_tag for g in gpus] == ["sm_90", "sm_90"] and gpus[1].uuid == "GPU-1"
    assert gpus[0].driver == "580.65" and "80.0 GiB" in gpus[0].describe()


# --- the TensorRT session against a fake engine -------------------------------------------------------


class _FakeTrt:
    float32, float16, int32, int8, bool = "f32", "f16", "i32", "i8", "b"
    TensorIOMode = types.SimpleNamespace(INPUT="in", OUTPUT="out")
    ExecutionContextAllocationStrategy = types.SimpleNamespace(USER_MANAGED="user")


class _FakeContext:
    """Computes y = 2·x + 1 through the raw addresses the session hands it, like TensorRT."""

    def __init__(self, log):
        self.shapes, self.addresses, self.log = {}, {}, log

    def set_input_shape(self, name, shape):
        self.shapes[name] = tuple(shape)
        return True

    def set_tensor_address(self, name, address):
        self.addresses[name] = address

    def get_tensor_shape(self, name):
        return (self.shapes["x"][0], 3)

    def update_device_memory_size_for_shapes(self):
        return 0

    def set_device_memory(self, memory, size):
        pass

    def execute_async_v3(self, stream_handle):
        n = self.shapes["x"][0] * 3
        x = np.ctypeslib.as_array((ctypes.c_float * n).from_address(self.addresses["x"]))
        y = np.ctypeslib.as_array((ctypes.c_float * n).from_address(self.addresses["y"]))
        y[:] = 2 * x + 1
        self.log.append((threading.get_ident(), self.shapes["x"][0]))
        return True


class _FakeEngine:
    num_io_tensors = 2

    def __init__(self, log, contexts):
        self.log, self.contexts = log, contexts

    def get_tensor_name(self, i):
        return ["x", "y"][i]

    def get_tensor_mode(self, name):
        return "in" if name == "x" else "out"

    def get_tensor_dtype(self, name):
        return "f32"

    def get_tensor_profile_shape(self, name, profile):
        return (1, 3), (4, 3), (4, 3)

    def get_tensor_shape(self, name):
        return (-1, 3)

    def create_execution_context(self, strategy):
        self.contexts.append(1)
        return _FakeContext(self.log)


def test_tensorrt_session_binds_addresses_chunks_by_profile_and_keeps_a_context_per_thread(tmp_path):
    pytest.importorskip("torch")
    from facefusion_batch.runtime.streams import DeviceTimer
    from facefusion_batch.runtime.tensorrt_backend import TensorRTSession

    log, contexts = [], []
    engine_file = tmp_path / "fake.engine"
    engine_file.write_bytes(b"fake")
    backend = types.SimpleNamespace(
        trt=_FakeTrt,
        runtime=types.SimpleNamespace(deserialize_cuda_engine=lambda data: _FakeEngine(log, contexts)),
        device="cpu",
        timer=DeviceTimer(),
        release_cached=lambda: None,
    )
    session = TensorRTSession(
        backend,
        engine_file,
        label="fake",
        inputs=(TensorInfo("x", ("batch", 3), "tensor(float)"),),
        outputs=(TensorInfo("y", ("batch", 3), "tensor(float)"),),
    )
    assert session.max_batch == 4
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    results = {}
    together = threading.Barrier(2)  # both threads alive at once: their idents cannot be reused

    def run(key):
        results[key] = session.run({"x": x})["y"]
        together.wait(timeout=120)  # a hang guard

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for y in results.values():
        np.testing.assert_array_equal(y, 2 * x + 1)  # every row, in order
    assert sorted(n for _, n in log) == [2, 2, 4, 4, 4, 4]  # chunks within the profile's max
    assert len(contexts) == 2 and len({t for t, _ in log}) == 2  # one context per thread


# --- engines list / verify on a directory of engines --------------------------------------------------------


@no_gpu
def test_engines_list_and_verify_without_a_gpu(tmp_path, capsys):
    from facefusion_batch.runtime.engine_cache import EngineCache, EngineKey, MachineKey, input_profiles

    cache = EngineCache(tmp_path)
    k = EngineKey(
        "face_mesh_468",
        "ab" * 32,
        "fp16",
        input_profiles((TensorInfo("input_1", ("batch", 3, 192, 192), ""),), 16),
        MachineKey("NVIDIA L4", "sm_89", "10.16.1.11"),
    )
    path = cache.write(k, b"ENGINE", {})
    code, out, _ = ffbatch(capsys, "engines", "list", "--engines-dir", tmp_path)
    assert code == 0 and path.name in out
    assert "cannot check fit here" in out and "fp16, batch 1–16" in out
    code, out, _ = ffbatch(capsys, "engines", "verify", "--engines-dir", tmp_path)
    assert code == 2 and "cannot run here" in out
    path.write_bytes(b"DAMAGED")
    code, out, _ = ffbatch(capsys, "engines", "verify", "--engines-dir", tmp_path)
    assert code == 2 and "does not match the recorded" in out


# --- several GPUs: one process per GPU, segments joined ---------------------------------------------------


def test_split_ranges_cover_every_frame_once():
    assert split_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_ranges(2, 4) == [(0, 1), (1, 2)]
    for count in (1, 7, 100):
        for parts in (1, 2, 3, 8):
            ranges = split_ranges(count, parts)
            assert ranges[0][0] == 0 and ranges[-1][1] == count
            assert all(a < b for a, b in ranges)
            assert all(r1[1] == r2[0] for r1, r2 in zip(ranges, ranges[1:], strict=False))


def test_fan_out_over_processes_joins_losslessly(tmp_path, astronaut_path):
    """The per-GPU fan-out, run with the CPU backend: two processes, frames 0..N-1 in order, audio kept."""
    from facefusion_batch.farm.multi_gpu import render_on_gpus

    clip = make_clip(tmp_path / "in.mp4", size=(160, 96), frames=11, audio="aac")
    out = tmp_path / "out.mp4"
    report = tmp_path / "report.json"
    settings = RenderSettings(
        input=clip, output=out, sources=(astronaut_path,), workers=1, threads=1, report=report
    )
    merged = render_on_gpus(settings, (0, 1))
    assert merged["frames_out"] == 11 and merged["audio"] == "copied"
    assert set(merged["per_gpu"]) == {"0", "1"}
    assert json.loads(report.read_text())["frames_out"] == 11
    frames, _ = decode_all(out)
    assert [frame_number(image) for _, image in frames] == list(range(11))
    assert not Path(tmp_path / ".out.mp4.ffbatch").exists()  # the segments' work dir is gone


@pytest.fixture(scope="module")
def composited(tmp_path_factory, t1_image, astronaut_path) -> tuple[RenderSettings, RenderSettings]:
    """A lossless 8-frame clip of faces, and its single-process render with an FFV1 matte video
    and a PNG face-layer sequence: (the settings without outputs, the reference's settings)."""
    from facefusion_batch.farm.jobs import render

    work = tmp_path_factory.mktemp("gpus compositing")
    photo = cv2.resize(t1_image, (400, 277), interpolation=cv2.INTER_AREA)
    clip = make_clip(
        work / "in.mkv", image=photo, size=(256, 144), frames=8, audio=None, codec="ffv1", pix_fmt="bgr0"
    )
    base = RenderSettings(
        input=clip,
        output=work / "unused.mkv",
        sources=(astronaut_path,),
        encoder=EncoderSettings(codec="ffv1", pix_fmt="bgr0"),
        workers=1,
        threads=1,
        quiet=True,
    )
    whole = with_compositing(base, work / "whole")
    assert render(whole).faces_swapped >= 8
    return base, whole


def with_compositing(base: RenderSettings, folder: Path) -> RenderSettings:
    folder.mkdir()
    matte, face = folder / "matte.mkv", folder / "face.%04d.png"
    return replace(base, output=folder / "out.mkv", matte_output=matte, face_only_output=face)


def assert_same_compositing(got: RenderSettings, want: RenderSettings) -> None:
    """The output, the matte video and the layer sequence of `got` are `want`'s, frame for frame
    (decoded pixels, pts), and nothing else is in their folder."""
    numbers = range(1001, 1009)
    faces = [f"face.{n}.png" for n in numbers]
    assert sorted(p.name for p in got.output.parent.iterdir()) == sorted(["out.mkv", "matte.mkv", *faces])
    for option, fmt in (("output", "bgr24"), ("matte_output", "gray")):
        frames, pts = decoded(getattr(got, option), fmt)
        expected, expected_pts = decoded(getattr(want, option), fmt)
        assert pts == expected_pts and len(frames) == 8
        assert all(np.array_equal(a, b) for a, b in zip(frames, expected, strict=True))
    layers = [sequence(run.output.parent, "face", numbers, "rgba") for run in (got, want)]
    assert all(np.array_equal(a, b) for a, b in zip(*layers, strict=True))
    painted = [int(face[..., 3].any()) for face in layers[0]]
    assert painted[:4].count(1) >= 3 and painted[4:].count(1) >= 3  # faces in both processes' ranges


def test_fan_out_over_processes_writes_the_whole_renders_compositing_outputs(tmp_path, composited):
    """`--gpus 0,1` (CPU backend) with an FFV1 matte video and a PNG face-layer sequence: each
    process stages its range in the work directory; after the join they are the single-process
    render's, frame for frame, and nothing else is left beside them."""
    from facefusion_batch.farm.multi_gpu import render_on_gpus

    base, whole = composited
    job = with_compositing(base, tmp_path / "gpus")
    merged = render_on_gpus(job, (0, 1))
    assert merged["frames_out"] == 8 and set(merged["per_gpu"]) == {"0", "1"}
    assert merged["segments_reused"] == 0
    assert_same_compositing(job, whole)


@pytest.mark.slow
def test_a_failed_fan_out_leaves_no_compositing_output_and_a_rerun_reuses_the_finished_range(
    tmp_path, composited
):
    """GPU 1's matte piece cannot be written (a directory is in its place): the run fails with
    nothing but the work directory beside the output, GPU 0's range kept there. Run again, GPU 0's
    segment is reused and the outputs are the single-process render's."""
    from facefusion_batch.farm.chunk_compositing import chunk_segment
    from facefusion_batch.farm.multi_gpu import render_on_gpus

    base, whole = composited
    job = with_compositing(base, tmp_path / "gpus")
    work = work_dir_for(job.output)
    blocker = chunk_segment(work, "--matte-output", job.matte_output, 4, 8)
    blocker.mkdir(parents=True)
    with pytest.raises(InputError, match=r"GPU 1: --matte-output .* is a directory"):
        render_on_gpus(job, (0, 1))
    assert sorted(p.name for p in job.output.parent.iterdir()) == [work.name]
    assert chunk_segment(work, "--matte-output", job.matte_output, 0, 4).is_file()
    blocker.rmdir()
    merged = render_on_gpus(job, (0, 1))
    assert merged["frames_out"] == 8 and merged["segments_reused"] == 1
    assert merged["per_gpu"]["1"]["frames_out"] == 4
    assert_same_compositing(job, whole)


def test_gpu_batch_size_follows_max_batch_unless_given(monkeypatch):
    monkeypatch.setattr("facefusion_batch.config.list_gpus", lambda: [])
    assert resolve_device(backend="cuda").batch_size == GPU_BATCH
    assert resolve_device(backend="cuda", max_batch=32).batch_size == 32
    assert resolve_device(backend="cuda", max_batch=32, batch_size=4).batch_size == 4  # --batch-size wins
    assert resolve_device(backend="cpu", max_batch=32).batch_size == 8  # the CPU keeps its default
