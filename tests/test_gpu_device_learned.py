"""The learned path with frames resident on the device, against the host path, on the CPU.

Stand-in models (tests/standins.py: FaceFusion's input and output signatures, random weights)
run through the cuda backend's torch interpreter on device="cpu", and through onnxruntime for
the host path.

Tolerances: crops within 1 level (OpenCV's warp quantises coordinates to 1/32 pixel, grid_sample
does not); pasted frames within 2 levels; whole swapped frames mean <= 0.1 levels and 99.9th
percentile <= 3 (measured 0.02 and 1, max 4: the models' float sums run in another order, and a
1-level crop difference moves a random-weight model's output by a few levels).
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import standins

torch = pytest.importorskip("torch")

from facefusion_batch.config import SwapSettings  # noqa: E402
from facefusion_batch.faces.align import align_faces, alignment_affines, template_points  # noqa: E402
from facefusion_batch.faces.identity import to_model_input  # noqa: E402
from facefusion_batch.models.facefusion import MODELS  # noqa: E402
from facefusion_batch.pipeline.build import Models, build_pipeline  # noqa: E402
from facefusion_batch.runtime import device_learned as L  # noqa: E402
from facefusion_batch.runtime.device_pipeline import DeviceLearnedPipeline  # noqa: E402
from facefusion_batch.runtime.torch_backend import TorchBackend  # noqa: E402
from facefusion_batch.swap.learned import LearnedSettings, join_tiles, split_tiles  # noqa: E402
from facefusion_batch.swap.masks import MaskSettings  # noqa: E402
from facefusion_batch.swap.paste import paste_back  # noqa: E402
from facefusion_batch.video.planes import PlaneLayout, blank_picture  # noqa: E402


def nchw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).float()


def test_alignment_crops_match_the_host(t1_image, t1_faces):
    frames = torch.from_numpy(np.stack([t1_image, t1_image[:, ::-1]]).copy())
    index = np.array([0, 0, 1])
    landmarks = t1_faces.landmarks5[[0, 1, 2]].copy()
    landmarks[2, :, 0] = t1_image.shape[1] - 1 - landmarks[2, :, 0]  # the same face, mirrored
    host, host_affines = align_faces(
        [t1_image, np.ascontiguousarray(t1_image[:, ::-1])], index, landmarks, "arcface_128", 128
    )
    crops, affines = L.align(frames, index, landmarks, "arcface_128", 128)
    np.testing.assert_allclose(affines, host_affines)
    assert np.abs(crops.numpy().transpose(0, 2, 3, 1) - host).max() <= 1


def test_crop_edges_replicate_like_the_host():
    """A face at the frame's corner: the crop's outside is the edge pixel, not black."""
    frame = np.full((120, 160, 3), 200, np.uint8)
    landmarks = template_points("arcface_128", 128)[None] * 0.5 - 20.0
    host, _ = align_faces([frame], np.zeros(1, int), landmarks, "arcface_128", 128)
    crops, _ = L.align(torch.from_numpy(frame[None].copy()), np.zeros(1, int), landmarks, "arcface_128", 128)
    assert host.min() == 200 and crops.min() == 200


def test_model_input_output_and_tiles_match_the_host():
    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (2, 256, 256, 3)).astype(np.uint8)
    model = MODELS["inswapper_128"]
    np.testing.assert_allclose(
        L.model_input(nchw(crops), model).numpy(), to_model_input(crops, model), atol=1e-6
    )
    tiles = L.split_tiles(nchw(crops), 2)
    np.testing.assert_array_equal(tiles.numpy(), nchw(split_tiles(crops, 2)).numpy())
    np.testing.assert_array_equal(
        L.join_tiles(tiles, 2).numpy(), nchw(join_tiles(split_tiles(crops, 2), 2)).numpy()
    )
    from facefusion_batch.swap.learned import from_model_output

    out = rng.normal(0, 0.6, (2, 3, 64, 64)).astype(np.float32)
    for name in ("inswapper_128", "gfpgan_1.4"):
        got = L.model_output(torch.from_numpy(out), MODELS[name]).numpy().transpose(0, 2, 3, 1)
        np.testing.assert_allclose(got, from_model_output(out, MODELS[name]), atol=1e-4)


def test_paste_matches_the_host_with_overlapping_faces_and_a_face_past_the_edge():
    rng = np.random.default_rng(1)
    frame = cv2.GaussianBlur(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8), (0, 0), 3)
    points = template_points("arcface_128", 128)[None]
    # two overlapping faces in frame 0 (painted in that order), one half outside frame 1
    landmarks = np.concatenate(
        [points * 0.9 + [100, 60], points * 0.9 + [150, 80], points * 1.2 + [330, -40]]
    )
    index = np.array([0, 0, 1])
    affines = alignment_affines(landmarks, "arcface_128", 128)
    crops = rng.uniform(0, 255, (3, 128, 128, 3)).astype(np.float32)
    alpha = np.clip(rng.uniform(-0.5, 1.5, (3, 128, 128)), 0, 1).astype(np.float32)
    alpha = cv2.GaussianBlur(alpha.transpose(1, 2, 0), (0, 0), 4).transpose(2, 0, 1).copy()
    want = paste_back([frame, frame], index, crops, alpha, affines)
    frames = torch.from_numpy(np.stack([frame, frame]))
    rects = L.paste_crops(frames, index, nchw(crops), torch.from_numpy(alpha), affines)
    assert sorted(r[0] for r in rects) == [0, 0, 1]  # the overlapping face in a second wave
    for got, ref in zip(frames.numpy(), want, strict=True):
        d = np.abs(got.astype(int) - ref.astype(int))
        assert d.max() <= 2 and (d > 1).mean() < 1e-3


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory):
    return standins.write_standins(tmp_path_factory.mktemp("standins"))


@pytest.fixture
def private_home(tmp_path_factory, monkeypatch, models):
    from facefusion_batch import paths

    home = standins.copy_store(paths.ffbatch_home(), tmp_path_factory.mktemp("home"))
    monkeypatch.setenv("FFBATCH_HOME", str(home))
    return home


def pipelines(models, standin_dir, source, swap, faces="many", device: str | None = "cpu"):
    """The host pipeline (onnxruntime) and its device twin (torch on `device`; None: the GPU) for
    `swap` (SwapSettings, or LearnedSettings for a learned swap)."""
    if isinstance(swap, LearnedSettings):
        swap = SwapSettings(swapper="learned", learned=swap)
    host = build_pipeline(
        Models(backend=models.backend, detector=models.detector, paths={}, models_dir=standin_dir),
        (source,),
        swap,
        faces,
    )
    backend = TorchBackend(device=device)
    detector = type(models.detector)(
        backend.load(models.paths["yunet_2023mar_batch"], label="yunet_2023mar_batch"),
        models.detector.settings,
    )
    twin = build_pipeline(
        Models(backend=backend, detector=detector, paths={}, models_dir=standin_dir), (source,), swap, faces
    )
    return host, twin


@pytest.mark.parametrize(
    "learned",
    [
        LearnedSettings(swapper_model="inswapper_128", enhancer_model="gfpgan_1.4"),
        LearnedSettings(
            swapper_model="inswapper_128", pixel_boost=256, masks=MaskSettings(types=("box", "occlusion"))
        ),
    ],
    ids=["enhancer", "boost+occlusion"],
)
def test_device_learned_pipeline_matches_the_host(
    models, standin_dir, private_home, astronaut_path, t1_image, learned
):
    host, device = pipelines(models, standin_dir, astronaut_path, learned)
    assert isinstance(device, DeviceLearnedPipeline) and device.accepts_planes
    a, b = host([t1_image]), device([t1_image])
    assert (a.faces_found, a.faces_swapped) == (b.faces_found, b.faces_swapped) and b.faces_swapped >= 5
    d = np.abs(a.frames[0].astype(int) - b.frames[0].astype(int))
    assert d.mean() <= 0.1 and np.percentile(d, 99.9) <= 3, (d.mean(), np.percentile(d, 99.9))
    assert np.abs(b.frames[0].astype(int) - t1_image.astype(int)).mean() > 2  # faces really changed


def test_device_learned_pipeline_on_planes(models, standin_dir, private_home, astronaut_path, t1_image):
    import av

    _, device = pipelines(models, standin_dir, astronaut_path, LearnedSettings(swapper_model="inswapper_128"))
    image = np.ascontiguousarray(t1_image[:884])
    h, w = image.shape[:2]
    planes = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p").to_ndarray()
    blank = blank_picture("yuv420p", h, w)
    got = device([planes, blank], planes=PlaneLayout(h, w, "bt601"))
    assert got.faces_swapped >= 5 and got.frames[0].shape == planes.shape
    np.testing.assert_array_equal(got.frames[1], blank)
    assert np.abs(got.frames[0][:h].astype(int) - planes[:h].astype(int)).mean() > 1


def test_reference_selection_keeps_bgr_frames(models, standin_dir, private_home, astronaut_path):
    from facefusion_batch.config import ReferenceSettings

    swap = SwapSettings(
        swapper="learned",
        learned=LearnedSettings(swapper_model="inswapper_128"),
        reference=ReferenceSettings(image=astronaut_path),
    )
    _, device = pipelines(models, standin_dir, astronaut_path, swap, faces="reference")
    assert isinstance(device, DeviceLearnedPipeline) and not device.accepts_planes


def test_classical_swap_with_an_enhancer_stays_on_the_device(
    models, standin_dir, private_home, astronaut_path, t1_image
):
    from facefusion_batch.runtime.device_pipeline import DeviceFaceSwapPipeline

    swap = SwapSettings(swapper="classical", learned=LearnedSettings(enhancer_model="gfpgan_1.4"))
    host, device = pipelines(models, standin_dir, astronaut_path, swap)
    assert (
        isinstance(device, DeviceFaceSwapPipeline) and device.enhancer is not None and device.accepts_planes
    )
    a, b = host([t1_image]), device([t1_image])
    assert a.faces_swapped == b.faces_swapped >= 5
    d = np.abs(a.frames[0].astype(int) - b.frames[0].astype(int))
    assert d.mean() <= 0.3 and np.percentile(d, 99.9) <= 8, (d.mean(), np.percentile(d, 99.9))
