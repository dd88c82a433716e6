"""The GPU path on a real NVIDIA GPU: skipped where torch sees none (CI), run by scripts/gpu_session.sh.

Each test holds the GPU to the CPU on the real models and photos: torch sessions against
onnxruntime, the torch kernel set's ops on cuda against the same ops on the CPU, the one face
pipeline over the torch kernel set on cuda against the host kernel set, several streams at once
against one, a real render through the CLI, and the memory guard with most of the GPU's memory taken.

Tolerances (fp16 where the precision check allows it): model outputs within 2% of each output's
range; uint8 kernel ops within 1 level of the CPU; whole swapped frames as in
test_kernels_pipeline.py, loosened for fp16 (mean <= 0.5 levels, 99.9th percentile <= 12).
"""

from __future__ import annotations

import json
import threading

import av
import hostk
import numpy as np
import pytest
from media import decode_all, make_clip
from test_cli import ffbatch

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no NVIDIA GPU visible to torch", allow_module_level=True)

from facefusion_batch.kernels import torch_ops as D  # noqa: E402
from facefusion_batch.kernels.host import HostKernels  # noqa: E402
from facefusion_batch.kernels.torch_kernels import TorchKernels  # noqa: E402
from facefusion_batch.pipeline.build import Models, build_pipeline  # noqa: E402
from facefusion_batch.runtime.device import DeviceSettings  # noqa: E402
from facefusion_batch.runtime.torch_backend import TorchBackend  # noqa: E402
from facefusion_batch.settings.types import SwapSettings  # noqa: E402
from facefusion_batch.swap.classical.settings import ClassicalSettings  # noqa: E402
from facefusion_batch.video.pictures.planes import PlaneLayout, blank_picture  # noqa: E402

pytestmark = pytest.mark.gpu
HOST = HostKernels()


def on_gpu(backend) -> TorchKernels:
    """A torch kernel set on the backend's GPU (each thread that uses it gets its own stream)."""
    return TorchKernels(backend.device, timer=backend.timer)


@pytest.fixture(scope="module")
def gpu_models(models):
    backend = TorchBackend(DeviceSettings(backend="cuda", precision="auto", streams=3))
    detector = type(models.detector)(
        backend.load(models.paths["yunet_2023mar_batch"], label="yunet_2023mar_batch"),
        models.detector.settings,
    )
    yield Models(backend=backend, detector=detector, paths=dict(models.paths))
    backend.close()


def _close(a: np.ndarray, b: np.ndarray, levels: float = 1.0) -> None:
    assert a.shape == b.shape
    assert np.abs(a.astype(np.float64) - b.astype(np.float64)).max() <= levels


def test_sessions_on_the_gpu_match_onnxruntime(models, gpu_models, t1_image):
    frames = [t1_image, np.ascontiguousarray(t1_image[:, ::-1])]
    host = hostk.detect(models, [np.ascontiguousarray(f) for f in frames])
    k = on_gpu(gpu_models.backend)
    gpu_frames = k.upload([np.ascontiguousarray(f) for f in frames])
    gpu = gpu_models.detector(k, gpu_frames)
    assert len(host) == len(gpu) >= 10
    np.testing.assert_allclose(gpu.box, host.box, atol=3.0)
    meshed_host = hostk.analyse(models, frames, host)
    meshed_gpu = gpu_models.mesh(k, gpu_frames, gpu)
    assert len(meshed_host) == len(meshed_gpu)
    iod = np.linalg.norm(meshed_host.mesh[:, 33, :2] - meshed_host.mesh[:, 263, :2], axis=-1)
    err = np.linalg.norm(meshed_gpu.mesh[:, :, :2] - meshed_host.mesh[:, :, :2], axis=-1).max(axis=1)
    assert (err <= 0.02 * iod).all(), err / iod


def test_device_ops_on_cuda_match_the_cpu(t1_image):
    image = np.ascontiguousarray(t1_image[:884, :1280])
    cpu = torch.from_numpy(image[None].copy())
    gpu = cpu.cuda()
    y, u, v = D.bgr_to_yuv420p(gpu, matrix="bt709")
    yc, uc, vc = D.bgr_to_yuv420p(cpu, matrix="bt709")
    for a, b in ((y, yc), (u, uc), (v, vc)):
        _close(a.cpu().numpy(), b.numpy())
    _close(
        D.yuv420p_to_bgr(y, u, v, matrix="bt709").cpu().numpy(),
        D.yuv420p_to_bgr(yc, uc, vc, matrix="bt709").numpy(),
    )
    batch_gpu, scales_gpu = D.letterbox(gpu, 640)
    batch_cpu, scales_cpu = D.letterbox(cpu, 640)
    np.testing.assert_allclose(scales_gpu, scales_cpu)
    _close(batch_gpu.cpu().numpy(), batch_cpu.numpy(), 0.51)
    m = torch.tensor([[[0.5, 0.1, -40.0], [-0.1, 0.5, 10.0]]], dtype=torch.float64)
    crop_gpu = D.warp_affine(gpu, np.array([0]), m.cuda(), (192, 192))
    crop_cpu = D.warp_affine(cpu, np.array([0]), m, (192, 192))
    _close(crop_gpu.cpu().numpy(), crop_cpu.numpy(), 0.51)
    face = cpu[0, 100:228, 200:328].permute(2, 0, 1).float()
    target = cpu[0, 300:428, 500:628].permute(2, 0, 1).float()
    alpha = torch.zeros(128, 128)
    alpha[32:96, 32:96] = 1.0
    _close(
        D.multiband(target.cuda(), face.cuda(), alpha.cuda()).cpu().numpy(),
        D.multiband(target, face, alpha).numpy(),
        0.51,
    )


@pytest.fixture(scope="module")
def pipelines(models, gpu_models, astronaut_path):
    """The classical pipeline on the host set and, the same stages, on the torch set on the GPU
    (`device(frames, **kw)` runs it on a kernel set of the calling thread)."""
    swap = SwapSettings(swapper="classical", classical=ClassicalSettings())
    host = build_pipeline(models, (astronaut_path,), swap, "many")
    gpu = build_pipeline(gpu_models, (astronaut_path,), swap, "many")
    local = threading.local()

    def device(frames, **kw):
        if not hasattr(local, "k"):
            local.k = on_gpu(gpu_models.backend)
        return gpu(local.k, frames, **kw)

    return (lambda frames: host(HOST, frames)), device


def test_the_pipeline_on_the_torch_kernel_set_on_cuda_matches_the_host(pipelines, t1_image):
    host, device = pipelines
    a, b = host([t1_image]), device([t1_image])
    assert (a.faces_found, a.faces_swapped) == (b.faces_found, b.faces_swapped) and b.faces_swapped >= 5
    d = np.abs(a.frames[0].astype(np.int16) - b.frames[0].astype(np.int16))
    assert d.mean() <= 0.5 and np.percentile(d, 99.9) <= 12


def test_planes_on_cuda_pass_untouched_frames_through(pipelines, t1_image):
    import av

    _, device = pipelines
    image = np.ascontiguousarray(t1_image[:884])
    h, w = image.shape[:2]
    planes = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p").to_ndarray()
    blank = blank_picture("yuv420p", h, w)
    got = device([planes, blank, planes], planes=PlaneLayout(h, w, "bt601"))
    assert got.faces_swapped >= 10 and got.frames_with_faces == 2
    np.testing.assert_array_equal(got.frames[1], blank)
    _close(got.frames[0], got.frames[2])


def test_several_streams_at_once_give_what_one_gives(pipelines, t1_image):
    _, device = pipelines
    frames = [np.ascontiguousarray(np.roll(t1_image, 40 * k, axis=1)) for k in range(6)]
    serial = [device([f]).frames[0] for f in frames]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(3):
                results[k] = device([frames[k]]).frames[0]
        except BaseException as exc:  # re-raised below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(frames))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k, want in enumerate(serial):
        _close(results[k], want, 2)


def test_memory_guard_under_real_memory_pressure(gpu_models, models, t1_image):
    """With all but ~1.5 GiB of the GPU taken, a 256-face mesh batch still comes back whole."""
    frames = [t1_image]
    table = hostk.detect(models, frames)
    rows = np.tile(np.arange(len(table)), 256 // len(table) + 1)[:256]
    big = table.select(rows)
    want = hostk.analyse(models, frames, big)
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(max(0, free - int(1.5 * 2**30)), dtype=torch.uint8, device="cuda")
    try:
        k = on_gpu(gpu_models.backend)
        got = gpu_models.mesh(k, k.upload(frames), big)
    finally:
        del hog
        torch.cuda.empty_cache()
    assert len(got) == len(want) == 256
    guard = {s.label: s.guard.summary() for s in gpu_models.backend.sessions}
    assert guard, guard


def test_render_on_the_gpu_through_the_cli(tmp_path, t1_small):
    clip = make_clip(tmp_path / "in.mp4", frames=48, size=(640, 360), image=t1_small)
    out, report = tmp_path / "out.mp4", tmp_path / "r.json"
    from facefusion_batch.models.assets import asset_path

    proc = ffbatch(
        "render",
        clip,
        "-s",
        asset_path("astronaut.png"),
        "-o",
        out,
        "--backend",
        "cuda",
        "--report",
        report,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["backend"].startswith("cuda") and data["frames_as"].startswith("yuv420p")
    assert data["faces_swapped"] > 0 and data["device"]["device_seconds"]
    before, _ = decode_all(clip)
    after, _ = decode_all(out)
    assert [p for p, _ in after] == [p for p, _ in before]


def test_compositing_outputs_on_the_gpu_match_the_cpus(tmp_path, t1_small):
    """--matte-output and --face-only-output on --backend cuda: the torch kernel set's mattes on
    the GPU against the host set's (the CPU test's tolerance, loosened for fp16 models)."""
    from facefusion_batch.models.assets import asset_path

    clip = make_clip(
        tmp_path / "in.mkv", frames=12, size=(640, 360), image=t1_small, audio=None, codec="ffv1",
        pix_fmt="bgr0",
    )  # fmt: skip
    mattes = {}
    for backend in ("cpu", "cuda"):
        matte = tmp_path / f"{backend}.matte.mkv"
        proc = ffbatch(
            "render", clip, "-s", asset_path("astronaut.png"), "-o", tmp_path / f"{backend}.mkv",
            "--encoder", "ffv1", "--backend", backend, "--matte-output", matte,
            "--face-only-output", tmp_path / f"{backend}.face.%04d.png", timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        mattes[backend] = [frame.to_ndarray(format="gray") for frame in av_frames(matte)]
        assert len(list(tmp_path.glob(f"{backend}.face.*.png"))) == 12
    assert len(mattes["cuda"]) == len(mattes["cpu"]) == 12
    d = np.abs(np.stack(mattes["cuda"]).astype(int) - np.stack(mattes["cpu"]).astype(int))
    assert d.mean() < 1.0 and (d > 8).mean() < 0.02, (d.mean(), (d > 8).mean())
    assert np.stack(mattes["cuda"]).max() == 255


def av_frames(path):
    with av.open(str(path)) as container:
        return list(container.decode(video=0))


def test_doctor_on_the_gpu_picks_a_gpu_backend():
    proc = ffbatch("doctor")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert torch.cuda.get_device_name(0) in text
    assert "auto" in text and ("cuda" in text or "tensorrt" in text)


def test_learned_standins_on_cuda_match_the_host(
    models, astronaut_path, t1_image, tmp_path_factory, monkeypatch
):
    """The learned path (stand-in inswapper + gfpgan, random weights) resident on the GPU."""
    import standins

    from facefusion_batch import paths
    from facefusion_batch.swap.learned import LearnedSettings

    home = standins.copy_store(paths.ffbatch_home(), tmp_path_factory.mktemp("home"))
    monkeypatch.setenv("FFBATCH_HOME", str(home))
    standin_dir = standins.write_standins(tmp_path_factory.mktemp("standins"))
    learned = LearnedSettings(swapper_model="inswapper_128", enhancer_model="gfpgan_1.4", pixel_boost=256)
    swap = SwapSettings(swapper="learned", learned=learned)
    backend = TorchBackend(DeviceSettings(backend="cuda", precision="auto"))
    detector = type(models.detector)(
        backend.load(models.paths["yunet_2023mar_batch"], label="yunet_2023mar_batch"),
        models.detector.settings,
    )
    host = build_pipeline(
        Models(backend=models.backend, detector=models.detector, paths={}, models_dir=standin_dir),
        (astronaut_path,),
        swap,
        "many",
    )
    device = build_pipeline(
        Models(backend=backend, detector=detector, paths={}, models_dir=standin_dir),
        (astronaut_path,),
        swap,
        "many",
    )
    a, b = host(HOST, [t1_image]), device(on_gpu(backend), [t1_image])
    assert a.faces_swapped == b.faces_swapped >= 5
    d = np.abs(a.frames[0].astype(int) - b.frames[0].astype(int))
    assert d.mean() <= 1.0 and np.percentile(d, 99.9) <= 16, (d.mean(), np.percentile(d, 99.9))


def test_nvdec_decodes_the_same_pictures_and_a_render_uses_it(tmp_path, t1_small):
    from facefusion_batch.video.decode.hwaccel import hwaccel_problem
    from facefusion_batch.video.decode.reader import FrameReader

    if hwaccel_problem("cuda"):
        pytest.skip(f"no NVDEC here: {hwaccel_problem('cuda')}")
    clip = make_clip(tmp_path / "in.mp4", frames=24, size=(640, 360), image=t1_small)
    for pixels in ("bgr24", "yuv420p"):
        with (
            FrameReader(clip, pixel_format=pixels) as soft,
            FrameReader(clip, pixel_format=pixels, hwaccel="cuda") as hard,
        ):
            a, b = list(soft), list(hard)
        assert [f.pts for f in a] == [f.pts for f in b]
        for x, y in zip(a, b, strict=True):
            if pixels == "yuv420p":  # H.264 decoding is bit-exact; nv12 → yuv420p only moves bytes
                np.testing.assert_array_equal(x.image, y.image)
            else:  # swscale may take another path from nv12 than from yuv420p to BGR
                assert np.abs(x.image.astype(int) - y.image.astype(int)).max() <= 2
    out = tmp_path / "out.mp4"
    from facefusion_batch.models.assets import asset_path

    proc = ffbatch(
        "render", clip, "-s", asset_path("astronaut.png"), "-o", out, "--backend", "cuda", "--hwaccel", "cuda"
    )
    assert proc.returncode == 0, proc.stderr
    assert len(decode_all(out)[0]) == 24


def test_a_batch_waits_for_the_gpu_a_fixed_few_times(pipelines, t1_image):
    """Every synchronising call torch makes (blocking copies, .item(), nonzero) is counted: a batch
    may wait for its candidates (detection), the mesh points (two passes) and its frames, not once
    per face or per constant."""
    import warnings

    _, device = pipelines
    device([t1_image])  # constants uploaded, shapes tuned
    counts = []
    for n in (1, 8):
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                device([t1_image] * n)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        counts.append(len([w for w in caught if "synchroniz" in str(w.message)]))
    assert counts[0] == counts[1] <= 12, counts
