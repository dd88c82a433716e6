"""Frames as yuv420p planes from decoder to encoder (what the GPU backends use), on the CPU.

The torch kernel set runs with device="cpu"; a render goes through the whole path with the cuda
backend's session class standing in on the CPU.

Tolerances: BGR → yuv420p agrees with FFmpeg's swscale (the CPU writer's conversion) within 1 level
on every sample; a planar render and a BGR render of the same frames agree within the decoder's
chroma upsampling differences (mean <= 0.5 levels, 99th percentile <= 6); pixels outside the painted
faces leave bit for bit.
"""

from __future__ import annotations

from dataclasses import replace

import av
import numpy as np
import pytest
from media import decode_all, make_clip

torch = pytest.importorskip("torch")

from facefusion_batch.config import RenderSettings, SwapSettings  # noqa: E402
from facefusion_batch.farm.jobs import render  # noqa: E402
from facefusion_batch.kernels import torch_ops as D  # noqa: E402
from facefusion_batch.kernels.host import HostKernels  # noqa: E402
from facefusion_batch.kernels.torch_kernels import TorchKernels  # noqa: E402
from facefusion_batch.models.assets import asset_path  # noqa: E402
from facefusion_batch.pipeline import build as build_module  # noqa: E402
from facefusion_batch.pipeline.build import build_pipeline  # noqa: E402
from facefusion_batch.pipeline.run import Renderer  # noqa: E402
from facefusion_batch.runtime.batching import BatchPolicy  # noqa: E402
from facefusion_batch.runtime.device import DeviceSettings  # noqa: E402
from facefusion_batch.runtime.torch_backend import TorchBackend  # noqa: E402
from facefusion_batch.swap.classical.settings import ClassicalSettings  # noqa: E402
from facefusion_batch.video.decode.probe import probe  # noqa: E402
from facefusion_batch.video.decode.reader import FrameReader  # noqa: E402
from facefusion_batch.video.encode.encoder_policy import EncoderSettings  # noqa: E402
from facefusion_batch.video.encode.writer import VideoWriter  # noqa: E402
from facefusion_batch.video.pictures.planes import (  # noqa: E402
    PlaneLayout,
    blank_picture,
    plane_layout_for,
)


def packed(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    h, w = y.shape
    return np.concatenate([y, np.concatenate([u.reshape(-1), v.reshape(-1)]).reshape(h // 2, w)])


@pytest.mark.parametrize(("colorspace", "matrix"), [(5, "bt601"), (1, "bt709"), (9, "bt2020")])
def test_bgr_to_yuv420p_matches_swscale(t1_small, colorspace, matrix):
    image = np.ascontiguousarray(t1_small[:442])  # even sides
    ref = av.VideoFrame.from_ndarray(image, format="bgr24")
    ref = ref.reformat(format="yuv420p", dst_colorspace=colorspace, dst_color_range=1).to_ndarray()
    y, u, v = D.bgr_to_yuv420p(torch.from_numpy(image[None].copy()), matrix=matrix)
    mine = packed(y[0].numpy(), u[0].numpy(), v[0].numpy())
    assert mine.shape == ref.shape
    assert np.abs(mine.astype(int) - ref.astype(int)).max() <= 1


def test_plane_layout_only_where_exact(face_clip):
    info = probe(face_clip)
    layout, why = plane_layout_for(info, "yuv420p")
    assert layout == PlaneLayout(info.height, info.width, "bt601") and why == ""
    from dataclasses import replace

    for change, words in [
        ({"pix_fmt": "yuv420p10le"}, "yuv420p10le"),
        ({"rotation": 90}, "rotated"),
        ({"width": 641}, "odd"),
        ({"color_range": 2}, "full range"),
        ({"color_space": 7}, "colour matrix"),
    ]:
        layout, why = plane_layout_for(replace(info, **change), "yuv420p")
        assert layout is None and words in why
    assert plane_layout_for(info, "yuv444p")[0] is None


def test_planes_round_trip_through_reader_and_lossless_writer(tmp_path):
    clip = make_clip(tmp_path / "in.mp4", frames=12, size=(96, 64), audio=None)
    info = probe(clip)
    with FrameReader(clip, pixel_format="yuv420p") as reader:
        frames = list(reader)
    assert [f.image.shape for f in frames] == [(96, 96)] * 12
    with av.open(str(clip)) as container:
        decoded = [f.to_ndarray() for f in container.decode(video=0)]
    for frame, plane in zip(frames, decoded, strict=True):
        np.testing.assert_array_equal(frame.image, plane)
    out = tmp_path / "out.mkv"
    with VideoWriter(out, info, EncoderSettings(crf=0, preset="ultrafast"), pixel_format="yuv420p") as writer:
        for frame in frames:
            writer.write(frame.image, frame.pts, frame.time_base)
    with av.open(str(out)) as container:
        again = [(f.time, f.to_ndarray()) for f in container.decode(video=0)]
    assert [round(t, 3) for t, _ in again] == [round(float(f.pts * f.time_base), 3) for f in frames]
    for frame, (_, plane) in zip(frames, again, strict=True):
        np.testing.assert_array_equal(frame.image, plane)  # x264 at crf 0 is lossless


def test_planar_writer_refuses_bgr_frames_and_odd_sizes(tmp_path, face_clip):
    from dataclasses import replace

    from facefusion_batch.errors import FfbatchError

    info = probe(face_clip)
    with VideoWriter(tmp_path / "o.mp4", info, EncoderSettings(), pixel_format="yuv420p") as writer:
        with pytest.raises(FfbatchError, match="expects"):
            writer.write(np.zeros((info.height, info.width, 3), np.uint8), 0, info.time_base)
        writer.write(blank_picture("yuv420p", info.height, info.width), 0, info.time_base)
    with pytest.raises(ValueError, match="even"):
        VideoWriter(tmp_path / "p.mp4", replace(info, width=641), EncoderSettings(), pixel_format="yuv420p")
    black = blank_picture("yuv420p", 4, 4)
    assert black[:4].tolist() == [[16] * 4] * 4 and set(black[4:].reshape(-1)) == {128}


@pytest.fixture(scope="module")
def cpu_torch_models(models):
    """The default models on the cuda backend's session class, run on the CPU."""
    from facefusion_batch.pipeline.build import Models

    backend = TorchBackend(device="cpu")
    detector = type(models.detector)(
        backend.load(models.paths["yunet_2023mar_batch"], label="yunet_2023mar_batch"),
        models.detector.settings,
    )
    return Models(backend=backend, detector=detector, paths=dict(models.paths))


@pytest.mark.slow
def test_torch_kernels_on_planes_match_bgr_and_pass_the_rest_through(
    cpu_torch_models, t1_image, astronaut_path
):
    image = np.ascontiguousarray(t1_image[:884])  # even sides
    h, w = image.shape[:2]
    planes = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p").to_ndarray()
    blank = blank_picture("yuv420p", h, w)
    swap = SwapSettings(swapper="classical", classical=ClassicalSettings())
    pipeline = build_pipeline(cpu_torch_models, (astronaut_path,), swap, "many")
    k = TorchKernels("cpu")
    assert k.accepts_planes and not HostKernels().accepts_planes
    layout = PlaneLayout(h, w, "bt601")
    got = pipeline(k, [planes, blank], planes=layout)
    assert got.faces_swapped >= 5 and got.frames_with_faces == 1
    assert got.frames[0].shape == planes.shape and got.frames[0].dtype == np.uint8
    np.testing.assert_array_equal(got.frames[1], blank)  # no face: every byte as decoded
    # the same picture through the BGR path, converted the way the CPU writer would
    bgr = av.VideoFrame.from_ndarray(planes, format="yuv420p").to_ndarray(format="bgr24")
    want = pipeline(k, [bgr]).frames[0]
    mine = av.VideoFrame.from_ndarray(got.frames[0], format="yuv420p").to_ndarray(format="bgr24")
    d = np.abs(mine.astype(int) - want.astype(int))
    assert d.mean() <= 0.5 and np.percentile(d, 99) <= 6
    # the swap really happened in the planes: the luma changed only around the faces
    changed = np.abs(got.frames[0][:h].astype(int) - planes[:h].astype(int)) > 2
    assert changed.mean() > 0.002
    rows, cols = np.nonzero(changed)
    assert rows.min() > 0 or cols.min() > 0


def test_the_host_kernel_set_refuses_planes():
    with pytest.raises(ValueError, match="BGR"):
        HostKernels().upload([blank_picture("yuv420p", 64, 64)], planes=PlaneLayout(64, 64, "bt601"))


def test_device_batches_take_the_asked_size_of_1080p_frames():
    gpu = BatchPolicy(frames=16, on_gpu=True)
    assert gpu.frames_for((1620, 1920)) == 16  # 1080p planes
    assert gpu.frames_for((3240, 3840)) == 4  # 4K planes
    assert BatchPolicy(frames=16).batch_pixels() == 8 * 1920 * 1080


def test_render_on_a_device_backend_keeps_frames_as_planes(tmp_path, monkeypatch, t1_small, cpu_torch_models):
    """The whole render path with the cuda backend's classes on the CPU: same frames and
    timestamps out, the report says the frames stayed planes, audio copied."""
    monkeypatch.setattr(build_module, "select_backend", lambda *a, **k: TorchBackend(device="cpu"))
    clip = make_clip(tmp_path / "in.mp4", frames=4, size=(640, 360), image=t1_small)
    out = tmp_path / "out.mp4"
    from facefusion_batch.models.assets import asset_path

    settings = RenderSettings(
        input=clip, output=out, sources=(asset_path("astronaut.png"),), device=DeviceSettings(backend="cuda")
    )
    renderer = Renderer.load(settings)
    assert renderer.accepts_planes
    report = render(settings, renderer=renderer)
    assert report.frames_as == "yuv420p (bt601)" and report.faces_swapped > 0
    before, _ = decode_all(clip)
    after, _ = decode_all(out)
    assert [p for p, _ in after] == [p for p, _ in before]
    assert report.audio == "copied"


ASTRONAUT = asset_path("astronaut.png")


@pytest.mark.slow
def test_device_backend_keeps_a_ten_bit_input_at_ten_bits(tmp_path, monkeypatch, t1_small, cpu_torch_models):
    """A 10-bit 4:2:2 input on the device kernel set: BGR to the device, the native pictures on
    the host (video/pictures/native.py): the same pixel format out, untouched outside the faces."""
    monkeypatch.setattr(build_module, "select_backend", lambda *a, **k: TorchBackend(device="cpu"))
    clip = make_clip(tmp_path / "in.mp4", frames=6, size=(640, 360), image=t1_small)
    deep = tmp_path / "in.mkv"
    with av.open(str(clip)) as src, av.open(str(deep), "w") as dst:
        stream = dst.add_stream("ffv1", rate=25)
        stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv422p10le"
        for i, frame in enumerate(src.decode(video=0)):
            frame = frame.reformat(format="yuv422p10le")
            frame.pts = i
            dst.mux(stream.encode(frame))
        dst.mux(stream.encode(None))
    out = tmp_path / "out.mkv"
    settings = RenderSettings(
        input=deep,
        output=out,
        sources=(ASTRONAUT,),
        device=DeviceSettings(backend="cuda"),
        encoder=EncoderSettings(codec="ffv1"),
    )
    renderer = Renderer.load(settings)
    report = render(settings, renderer=renderer)
    assert report.frames_as.startswith("native yuv422p10le") and report.faces_swapped > 0
    with av.open(str(deep)) as a, av.open(str(out)) as b:
        pairs = list(zip(a.decode(video=0), b.decode(video=0), strict=True))
    same = 0
    for before, after in pairs:
        assert after.format.name == "yuv422p10le"
        luma_in = np.frombuffer(before.planes[0], "<u2").reshape(360, -1)[:, :640]
        luma_out = np.frombuffer(after.planes[0], "<u2").reshape(360, -1)[:, :640]
        same += int((luma_in == luma_out).sum())
    assert 0.8 * 6 * 640 * 360 < same < 6 * 640 * 360


def test_device_backend_writes_the_matte_and_the_face_layer(
    tmp_path, monkeypatch, t1_small, cpu_torch_models
):
    """--matte-output and --face-only-output on the device kernel set: its frames cross as BGR
    (the layers are made from the BGR view), its matte is the host set's within the two sets'
    paint tolerance, zero exactly where the output is the input, and the layer over the input
    gives the output back."""
    clip = make_clip(
        tmp_path / "in.mkv",
        frames=4,
        size=(320, 180),
        image=t1_small,
        audio=None,
        codec="ffv1",
        pix_fmt="bgr0",
    )
    settings = RenderSettings(
        input=clip,
        output=tmp_path / "cpu.mkv",
        sources=(ASTRONAUT,),
        encoder=EncoderSettings(codec="ffv1", pix_fmt="bgr0"),
        matte_output=tmp_path / "cpu.%04d.png",
        quiet=True,
    )
    render(settings)  # the host kernel set: the reference matte
    monkeypatch.setattr(build_module, "select_backend", lambda *a, **k: TorchBackend(device="cpu"))
    device = replace(
        settings,
        output=tmp_path / "out.mkv",
        device=DeviceSettings(backend="cuda"),
        matte_output=tmp_path / "matte.mkv",
        face_only_output=tmp_path / "face.%04d.png",
    )
    renderer = Renderer.load(device)
    assert renderer.accepts_planes
    report = render(device, renderer=renderer)
    assert not report.frames_as.startswith("yuv420p") and report.faces_swapped >= 4
    plate, out = decode_rgb(clip), decode_rgb(device.output)
    mattes = [f[..., 0] for f in decode_rgb(device.matte_output)]
    reference = [decode_rgb(tmp_path / f"cpu.{n}.png")[0][..., 0] for n in range(1001, 1005)]
    faces = [decode_rgb(tmp_path / f"face.{n}.png", "rgba")[0] for n in range(1001, 1005)]
    assert len(mattes) == len(faces) == len(out) == 4
    painted = 0
    for before, after, matte, ref, face in zip(plate, out, mattes, reference, faces, strict=True):
        changed = (after != before).any(axis=-1)
        assert not (changed & (matte == 0)).any()
        painted += int(changed.sum())
        d = np.abs(matte.astype(int) - ref.astype(int))
        # the two sets' meshes differ slightly: the alpha's sharp edges (held eyes) move a little
        assert d.mean() < 0.5 and (d > 8).mean() < 0.01, (d.mean(), (d > 8).mean())
        assert np.array_equal(face[..., 3], matte)
        inside = matte > 0
        a = matte[..., None] / 255.0
        back = a * face[..., :3] + (1 - a) * before
        # the default multiband blend: a few pixels of the layer clip (video/compositing/compositing.py)
        assert (np.abs(back - after)[inside] > 1).sum() <= 0.02 * inside.sum()
    assert painted > 4000


def decode_rgb(path, fmt: str = "rgb24") -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format=fmt) for f in container.decode(video=0)]
