"""One pipeline, two kernel sets: the host set (OpenCV/numpy, onnxruntime sessions) against the
torch set (torch's ONNX interpreter and device ops) on the CPU, stage for stage, on t1.jpg.

The kernel operations are checked one by one in test_kernels_torch_ops.py; here the learned
operations (crops, model input and output, tiles, paste) and then whole pipelines.

Tolerances: crops within 1 level (OpenCV's warp quantises coordinates to 1/32 pixel,
grid_sample does not); pasted frames within 2 levels; classical swaps over whole frames mean
<= 0.1 levels, 99.9th percentile <= 6, at most 0.1% of pixels off by more than 8 (edge pixels
of the coverage map); learned stand-ins mean <= 0.1, 99.9th percentile <= 3 (random-weight
models move a 1-level crop difference by a few levels).
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import standins

torch = pytest.importorskip("torch")

from facefusion_batch.config import ReferenceSettings, SwapSettings  # noqa: E402
from facefusion_batch.errors import InputError  # noqa: E402
from facefusion_batch.faces.align import alignment_affines, template_points  # noqa: E402
from facefusion_batch.kernels.host import HostKernels  # noqa: E402
from facefusion_batch.kernels.torch_kernels import TorchKernels  # noqa: E402
from facefusion_batch.models.facefusion import MODELS  # noqa: E402
from facefusion_batch.pipeline.build import Models, build_pipeline  # noqa: E402
from facefusion_batch.runtime.torch_backend import TorchBackend  # noqa: E402
from facefusion_batch.swap.classical.settings import ClassicalSettings  # noqa: E402
from facefusion_batch.swap.classical.stage import OCCLUSION_CROP, OCCLUSION_TEMPLATE  # noqa: E402
from facefusion_batch.swap.learned import LearnedSettings  # noqa: E402
from facefusion_batch.swap.masks import MaskSettings  # noqa: E402
from facefusion_batch.video.pictures.planes import PlaneLayout, blank_picture  # noqa: E402

HOST = HostKernels()
TORCH = TorchKernels("cpu")


def nchw(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).float()


def nhwc(x: torch.Tensor) -> np.ndarray:
    return x.permute(0, 2, 3, 1).numpy()


# --- the learned operations -------------------------------------------------------------------------


def test_alignment_crops_match_the_host(t1_image, t1_faces):
    pictures = [t1_image, np.ascontiguousarray(t1_image[:, ::-1])]
    index = np.array([0, 0, 1])
    landmarks = t1_faces.landmarks5[[0, 1, 2]].copy()
    landmarks[2, :, 0] = t1_image.shape[1] - 1 - landmarks[2, :, 0]  # the same face, mirrored
    affines = alignment_affines(landmarks, "arcface_128", 128)
    host = HOST.warp_crops(HOST.upload(pictures), index, affines, 128, "replicate")
    crops = TORCH.warp_crops(TORCH.upload(pictures), index, affines, 128, "replicate")
    assert np.abs(nhwc(crops) - host).max() <= 1


def test_crop_edges_replicate_like_the_host():
    """A face at the frame's corner: the crop's outside is the edge pixel, not black."""
    frame = np.full((120, 160, 3), 200, np.uint8)
    affines = alignment_affines(template_points("arcface_128", 128)[None] * 0.5 - 20.0, "arcface_128", 128)
    host = HOST.warp_crops(HOST.upload([frame]), np.zeros(1, int), affines, 128, "replicate")
    crops = TORCH.warp_crops(TORCH.upload([frame]), np.zeros(1, int), affines, 128, "replicate")
    assert host.min() == 200 and crops.min() == 200


def test_model_input_output_and_tiles_match_the_host():
    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (2, 256, 256, 3)).astype(np.uint8)
    model = MODELS["inswapper_128"]
    host = HOST.model_input(crops, model.mean, model.std)
    device = TORCH.model_input(nchw(crops), model.mean, model.std)
    np.testing.assert_allclose(device.numpy(), host, atol=1e-6)
    np.testing.assert_array_equal(TORCH.split_tiles(device, 2).numpy(), HOST.split_tiles(host, 2))
    np.testing.assert_array_equal(HOST.join_tiles(HOST.split_tiles(host, 2), 2), host)
    out = rng.normal(0, 0.6, (2, 3, 64, 64)).astype(np.float32)
    for name in ("inswapper_128", "gfpgan_1.4"):
        m = MODELS[name]
        got = TORCH.model_output(torch.from_numpy(out), m.mean, m.std, denormalise=m.output_denormalise)
        want = HOST.model_output(out, m.mean, m.std, denormalise=m.output_denormalise)
        np.testing.assert_allclose(nhwc(got), want, atol=1e-4)


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
    host = HOST.upload([frame, frame])
    host.mattes = {}  # --matte-output: the alpha each paste used, the largest where faces overlap
    HOST.paste(host, index, crops, alpha, affines)
    device = TORCH.upload([frame, frame])
    device.mattes = {}
    TORCH.paste(device, index, nchw(crops), torch.from_numpy(alpha), affines)
    assert sorted(r[0] for r in device.painted) == [0, 0, 1]  # the overlapping face in a second wave
    assert sorted(r[0] for r in host.painted) == [0, 0, 1]
    for got, ref in zip(TORCH.download(device), HOST.download(host), strict=True):
        d = np.abs(got.astype(int) - ref.astype(int))
        assert d.max() <= 2 and (d > 1).mean() < 1e-3
    assert sorted(device.mattes) == sorted(host.mattes) == [0, 1]
    for i in (0, 1):
        got, ref = device.mattes[i], host.mattes[i]
        assert isinstance(got, np.ndarray) and got.shape == ref.shape == frame.shape[:2]
        assert np.abs(got - ref).max() < 0.02 and ref.max() > 0.3
    assert (frame == HOST.download(HOST.upload([frame]))[0]).all()  # the caller's frame is untouched


# --- whole pipelines ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory):
    return standins.write_standins(tmp_path_factory.mktemp("standins"))


@pytest.fixture
def private_home(tmp_path_factory, monkeypatch, models):
    from facefusion_batch import paths

    home = standins.copy_store(paths.ffbatch_home(), tmp_path_factory.mktemp("home"))
    monkeypatch.setenv("FFBATCH_HOME", str(home))
    return home


def pipelines(models, standin_dir, source, swap, faces="many"):
    """The same settings built on onnxruntime sessions (for the host set) and on the cuda
    backend's torch sessions on the CPU (for the torch set)."""
    if isinstance(swap, LearnedSettings):
        swap = SwapSettings(swapper="learned", learned=swap)
    host = build_pipeline(
        Models(backend=models.backend, detector=models.detector, paths={}, models_dir=standin_dir),
        (source,),
        swap,
        faces,
    )
    backend = TorchBackend(device="cpu")
    detector = type(models.detector)(
        backend.load(models.paths["yunet_2023mar_batch"], label="yunet_2023mar_batch"),
        models.detector.settings,
    )
    device = build_pipeline(
        Models(
            backend=backend,
            detector=detector,
            triangles=models.triangles,
            regions=models.regions,
            paths={},
            models_dir=standin_dir,
        ),
        (source,),
        swap,
        faces,
    )
    return host, device


def compare(host, device, frames, *, mean, p999, big=None):
    a, b = host(HOST, frames), device(TORCH, frames)
    assert (a.faces_found, a.faces_swapped, a.frames_with_faces) == (
        b.faces_found,
        b.faces_swapped,
        b.frames_with_faces,
    )
    assert b.faces_swapped >= 5
    for x, y, before in zip(a.frames, b.frames, frames, strict=True):
        assert x.shape == y.shape and y.dtype == np.uint8
        d = np.abs(x.astype(np.int16) - y.astype(np.int16))
        assert d.mean() <= mean and np.percentile(d, 99.9) <= p999, (d.mean(), np.percentile(d, 99.9))
        if big is not None:
            assert (d.max(axis=-1) > 8).mean() <= big
        assert np.abs(y.astype(int) - before.astype(int)).mean() > 0.1  # faces really changed
        assert not np.shares_memory(y, before)  # the input frames are never written to
    return a, b


@pytest.mark.parametrize("blend", ["multiband", pytest.param("poisson", marks=pytest.mark.slow)])
def test_classical_pipeline_on_both_kernel_sets(models, standin_dir, astronaut_path, t1_image, blend):
    swap = SwapSettings(swapper="classical", classical=ClassicalSettings(blend=blend))
    host, device = pipelines(models, standin_dir, astronaut_path, swap)
    compare(host, device, [t1_image], mean=0.1, p999=6, big=1e-3)


@pytest.mark.parametrize(
    "learned",
    [
        LearnedSettings(swapper_model="inswapper_128", enhancer_model="gfpgan_1.4"),
        LearnedSettings(
            swapper_model="inswapper_128", pixel_boost=256, masks=MaskSettings(types=("box", "occlusion"))
        ),
        LearnedSettings(
            swapper_model="hyperswap_1a_256", weight=0.3, masks=MaskSettings(types=("box", "region"))
        ),
    ],
    ids=["enhancer", "boost+occlusion", "weight+region"],
)
def test_learned_pipeline_on_both_kernel_sets(
    models, standin_dir, private_home, astronaut_path, t1_image, learned
):
    host, device = pipelines(models, standin_dir, astronaut_path, learned)
    compare(host, device, [t1_image], mean=0.1, p999=3)


def test_classical_swap_with_an_enhancer_on_both_kernel_sets(
    models, standin_dir, private_home, astronaut_path, t1_image
):
    swap = SwapSettings(swapper="classical", learned=LearnedSettings(enhancer_model="gfpgan_1.4"))
    host, device = pipelines(models, standin_dir, astronaut_path, swap)
    assert [s.name for s in device.stages] == ["select", "mesh", "lids", "track", "swap", "enhance"]
    compare(host, device, [t1_image], mean=0.3, p999=8)


def test_planes_in_planes_out_with_reference_selection(
    models, standin_dir, private_home, astronaut_path, t1_image
):
    """Frames as yuv420p planes through the torch set: faces painted, a blank frame bit for bit;
    reference selection needs no BGR frames on the host any more (the recogniser is a stage)."""
    import av

    swap = SwapSettings(
        swapper="learned",
        learned=LearnedSettings(swapper_model="inswapper_128"),
        reference=ReferenceSettings(image=astronaut_path, distance=1.0),
    )
    _, device = pipelines(models, standin_dir, astronaut_path, swap, faces="reference")
    image = np.ascontiguousarray(t1_image[:884])
    h, w = image.shape[:2]
    planes = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p").to_ndarray()
    blank = blank_picture("yuv420p", h, w)
    got = device(TORCH, [planes, blank], planes=PlaneLayout(h, w, "bt601"))
    assert got.faces_swapped >= 5 and got.frames[0].shape == planes.shape
    np.testing.assert_array_equal(got.frames[1], blank)
    assert np.abs(got.frames[0][:h].astype(int) - planes[:h].astype(int)).mean() > 1


def test_no_faces_leaves_frames_as_they_were(models, standin_dir, astronaut_path):
    host, device = pipelines(models, standin_dir, astronaut_path, SwapSettings(swapper="classical"))
    frames = [np.full((90, 160, 3), 127, np.uint8) for _ in range(3)]
    for pipeline, k in ((host, HOST), (device, TORCH)):
        result = pipeline(k, frames)
        assert result.faces_found == 0 and len(result.frames) == 3
        for f in result.frames:
            np.testing.assert_array_equal(f, frames[0])
    assert {"upload", "detect", "download"} <= set(device.timer.seconds)


# --- the classical swap with an occlusion model --------------------------------------------------


def occluded_pixels(table, shape) -> np.ndarray:
    """Frame pixels whose aligned occlusion crop falls well inside the stand-in's hole."""
    y0, y1, x0, x1 = standins.XSEG_HOLE
    affines = alignment_affines(table.landmarks5, OCCLUSION_TEMPLATE, OCCLUSION_CROP)
    ys, xs = np.mgrid[0 : shape[0], 0 : shape[1]]
    points = np.stack([xs.ravel(), ys.ravel(), np.ones(xs.size)], axis=0).astype(np.float64)
    out = np.zeros(shape[:2], bool)
    for m in affines:
        u, v = m @ points
        inside = (u > x0 + 24) & (u < x1 - 24) & (v > y0 + 24) & (v < y1 - 24)
        out |= inside.reshape(shape[:2])
    return out


@pytest.mark.slow
def test_classical_swap_keeps_what_the_occlusion_model_says_is_in_front(
    models, standin_dir, astronaut_path, t1_image, t1_faces
):
    occlusion = SwapSettings(
        swapper="classical",
        classical=ClassicalSettings(blend="feather"),
        learned=LearnedSettings(masks=MaskSettings(types=("occlusion",))),
    )
    plain = SwapSettings(swapper="classical", classical=ClassicalSettings(blend="feather"))
    host, device = pipelines(models, standin_dir, astronaut_path, occlusion)
    without, _ = pipelines(models, standin_dir, astronaut_path, plain)
    image = np.ascontiguousarray(t1_image)
    hidden = occluded_pixels(t1_faces, image.shape)
    assert hidden.sum() > 500
    bare = without(HOST, [image]).frames[0]
    kept = host(HOST, [image]).frames[0]
    assert np.abs(bare.astype(int) - image.astype(int))[hidden].mean() > 3  # swapped without the mask
    np.testing.assert_array_equal(kept[hidden], image[hidden])  # in front: the target's own pixels
    faces = np.zeros(image.shape[:2], bool)
    for x0, y0, x1, y1 in t1_faces.box.astype(int):
        faces[max(y0, 0) : y1, max(x0, 0) : x1] = True
    rest = faces & ~hidden
    assert np.abs(kept.astype(int) - image.astype(int))[rest].mean() > 3  # the rest is swapped
    compare(host, device, [image], mean=0.1, p999=6, big=1e-3)


def test_classical_swap_refuses_the_region_mask(models, standin_dir, astronaut_path):
    region = SwapSettings(swapper="classical", learned=LearnedSettings(masks=MaskSettings(types=("region",))))
    with pytest.raises(InputError, match="--mask region needs a learned swapper"):
        pipelines(models, standin_dir, astronaut_path, region)
