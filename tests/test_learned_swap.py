"""The learned path on stand-ins: alignment, identity, masks, paste-back, selection, end to end."""

from __future__ import annotations

from pathlib import Path

import cv2
import hostk
import numpy as np
import pytest
import standins
from media import decode_all, make_clip
from test_cli import ffbatch, ffbatch_here

from facefusion_batch.faces.align import (
    TEMPLATES,
    alignment_affines,
    similarity_fit,
    template_points,
)
from facefusion_batch.faces.identity import (
    IdentityEncoder,
    Recogniser,
    SourceIdentity,
    face_distance,
    normalise,
    read_emap,
)
from facefusion_batch.faces.select import FaceSelector
from facefusion_batch.kernels.geometry import invert_affines, join_tiles_nchw, split_tiles_nchw
from facefusion_batch.kernels.host_ops import box_mask, combine
from facefusion_batch.models.assets import asset_path
from facefusion_batch.models.facefusion import MODELS
from facefusion_batch.runtime.onnxruntime_backend import OnnxRuntimeCpuBackend
from facefusion_batch.swap.learned import LearnedSwapper
from facefusion_batch.swap.masks import CropMasker, MaskSettings, Occluder, RegionParser

K = hostk.HOST


def warp_crops(images, frame_index, affines, size):
    return K.warp_crops(hostk.frames(images), frame_index, affines, size, "replicate")


def paste_back(images, frame_index, crops, masks, affines):
    frames = hostk.frames(images)
    K.paste(frames, frame_index, crops, masks, affines)
    return K.download(frames)


@pytest.fixture(scope="module")
def standin_dir(tmp_path_factory) -> Path:
    return standins.write_standins(tmp_path_factory.mktemp("standins"))


@pytest.fixture(scope="module")
def backend():
    return OnnxRuntimeCpuBackend(2)


class Counting:
    """A session wrapper that counts model calls and the items in each."""

    def __init__(self, session) -> None:
        self.session = session
        self.inputs, self.outputs = session.inputs, session.outputs
        self.calls: list[int] = []

    def run(self, feeds):
        self.calls.append(len(next(iter(feeds.values()))))
        return self.session.run(feeds)


def load(backend, standin_dir, name, tmp_path):
    """A stand-in with a dynamic batch (prepared the way the pipeline prepares it)."""
    import onnx

    from facefusion_batch.models.prepare import make_dynamic_batch

    model, _ = make_dynamic_batch(onnx.load(str(standin_dir / f"{name}.onnx")))
    path = tmp_path / f"{name}.batch.onnx"
    onnx.save(model, str(path))
    return backend.load(path, label=name)


# --- alignment ---------------------------------------------------------------------------------


def test_arcface_112_v1_is_insightfaces_frontal_template():
    np.testing.assert_allclose(
        TEMPLATES["arcface_112_v1"] * 112,
        [[39.730, 51.138], [72.270, 51.138], [56.0, 68.493], [42.463, 87.010], [69.537, 87.010]],
    )


def test_similarity_fit_is_the_least_squares_similarity():
    rng = np.random.default_rng(0)
    src = rng.uniform(0, 500, (7, 5, 2))
    dst = template_points("arcface_128", 128)
    m = similarity_fit(src, dst)
    for f in range(len(src)):  # reference: least squares over (a, b, tx, ty)
        rows = []
        for (x, y), (u, v) in zip(src[f], dst, strict=True):
            rows += [([x, -y, 1, 0], u), ([y, x, 0, 1], v)]
        a, b, tx, ty = np.linalg.lstsq(
            np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), rcond=None
        )[0]
        np.testing.assert_allclose(m[f], [[a, -b, tx], [b, a, ty]], atol=1e-8)
    # an exact similarity is recovered exactly
    theta, s = 0.3, 2.5
    r = s * np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    moved = dst @ r.T + [40.0, -7.0]
    back = similarity_fit(moved[None], dst)[0]
    np.testing.assert_allclose(back[:, :2] @ r, np.eye(2), atol=1e-9)


@pytest.mark.parametrize(
    "template,size",
    [
        ("arcface_112_v1", 112),
        ("arcface_112_v2", 112),
        ("arcface_128", 128),
        ("ffhq_512", 512),
        ("arcface_128", 256),
    ],
)
def test_aligning_tom_hanks_to_each_template_and_back_recovers_him(template, size):
    face = cv2.imread(str(asset_path("Tom_Hanks_54745.png")))  # aligned to arcface_112_v2 at 112 px
    landmarks = template_points("arcface_112_v2", 112)[None]
    affines = alignment_affines(landmarks, template, size)
    crop = warp_crops([face], np.zeros(1, np.int32), affines, size)
    # the crop's landmarks sit on the template (up to the templates' own difference in shape)
    moved = np.einsum("ij,kj->ki", affines[0, :, :2], landmarks[0]) + affines[0, :, 2]
    np.testing.assert_allclose(moved, template_points(template, size), atol=0.02 * size)
    back = cv2.warpAffine(crop[0], invert_affines(affines)[0], (112, 112), flags=cv2.INTER_LINEAR)
    inner = (slice(30, 100), slice(25, 87))  # eyes to chin, inside every template's crop
    err = np.abs(back[inner].astype(float) - face[inner].astype(float)).mean()
    assert err < (6.0 if size < 112 * 1.5 else 3.0), err


# --- identity ----------------------------------------------------------------------------------


def test_inswapper_latent_matches_a_hand_computed_reference(standin_dir):
    emap = read_emap(standin_dir / "inswapper_128.onnx")
    rng = np.random.default_rng(3)
    e = rng.standard_normal(512).astype(np.float32) * 21.0  # raw ArcFace embeddings are long
    source = SourceIdentity(embedding=e / np.linalg.norm(e), raw=e)
    encoder = IdentityEncoder(MODELS["inswapper_128"], source, emap=emap)
    latent = encoder(3)
    expected = (e / np.linalg.norm(e)) @ emap
    expected = expected / np.linalg.norm(expected)  # InsightFace's convention: normalised again
    assert latent.shape == (3, 512)
    np.testing.assert_allclose(latent, np.tile(expected, (3, 1)), atol=1e-5)
    # FaceFusion's swapper weight: 0.5 is the source alone, 0 moves 35% toward each target
    target = rng.standard_normal((2, 512)).astype(np.float32)
    weighted = IdentityEncoder(MODELS["inswapper_128"], source, emap=emap, weight=0.0)(2, target)
    mix = 0.65 * source.embedding + 0.35 * normalise(target)
    ref = normalise(normalise(mix) @ emap)
    np.testing.assert_allclose(weighted, ref, atol=1e-5)
    hyper = IdentityEncoder(MODELS["hyperswap_1a_256"], source)(1)
    np.testing.assert_allclose(hyper[0], source.embedding, atol=1e-6)


# --- masks and paste ---------------------------------------------------------------------------


def test_box_mask_values():
    m = box_mask(256, 0.3)
    assert m.shape == (256, 256) and m[128, 128] == pytest.approx(1.0, abs=1e-3)
    assert m[0, 0] < 0.05 and m[0, 128] < 0.25 and m[128, 0] < 0.25
    np.testing.assert_allclose(m, m[::-1, ::-1], atol=1e-6)
    assert np.all(np.diff(m[128, :128]) >= -1e-6)  # rises toward the centre
    padded = box_mask(256, 0.0, (10, 0, 0, 0))
    assert padded[:25].max() == 0 and padded[26:-1, 1:-1].min() == 1.0  # 10% of 256 rows (and 1 px) zeroed


def test_occlusion_and_region_masks_and_their_minimum(backend, standin_dir, tmp_path):
    crops = np.full((2, 256, 256, 3), 128, np.uint8)
    occlusion = Occluder(load(backend, standin_dir, "xseg_1", tmp_path), 256)(K, crops, 2, 256)
    y0, y1, x0, x1 = standins.XSEG_HOLE
    assert occlusion.shape == (2, 256, 256)
    assert occlusion[:, y0 + 12 : y1 - 12, x0 + 12 : x1 - 12].max() < 0.01  # occluded
    assert occlusion[:, 20:100, 20:230].min() > 0.99  # visible
    region = RegionParser(load(backend, standin_dir, "bisenet_resnet_34", tmp_path), ("skin",))(
        K, crops, 2, 256
    )
    ry0, ry1, rx0, rx1 = (v * 4 for v in standins.SKIN_BOX)  # 64² map → 256² crop
    assert region[:, ry0 + 16 : ry1 - 16, rx0 + 16 : rx1 - 16].min() > 0.99
    assert region[:, : ry0 - 12].max() < 0.01  # hair is not chosen
    no_skin = RegionParser(load(backend, standin_dir, "bisenet_resnet_34", tmp_path), ("nose",))(
        K, crops, 2, 256
    )
    assert no_skin.max() == 0.0
    both = combine([box_mask(256), occlusion, region])
    np.testing.assert_allclose(both, np.minimum(np.minimum(box_mask(256), occlusion), region))
    assert both.min() >= 0 and both.max() <= 1


def test_paste_back_touches_only_the_crop_footprint_and_inverts_the_warp():
    rng = np.random.default_rng(0)
    frame = cv2.GaussianBlur(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8), (0, 0), 3)
    frame.setflags(write=False)
    landmarks = template_points("arcface_128", 128)[None] * 0.8 + [120.0, 90.0]
    affines = alignment_affines(landmarks, "arcface_128", 128)
    crops = warp_crops([frame], np.zeros(1, np.int32), affines, 128)
    mask = np.ones((1, 128, 128), np.float32)
    same = paste_back([frame], np.zeros(1, np.int32), crops.astype(np.float32), mask, affines)[0]
    assert np.abs(same.astype(int) - frame.astype(int)).mean() < 2.0  # warp there and back
    white = paste_back([frame], np.zeros(1, np.int32), np.full_like(crops, 255, np.float32), mask, affines)[0]
    changed = np.any(white != frame, axis=2)
    ys, xs = np.nonzero(changed)
    corners = np.array([[0, 0, 1], [128, 0, 1], [0, 128, 1], [128, 128, 1]]) @ invert_affines(affines)[0].T
    assert xs.min() >= corners[:, 0].min() - 2 and xs.max() <= corners[:, 0].max() + 2
    assert ys.min() >= corners[:, 1].min() - 2 and ys.max() <= corners[:, 1].max() + 2
    assert frame.flags.writeable is False  # the caller's frame is untouched


def test_pixel_boost_tiles_round_trip_and_share_one_model_call(backend, standin_dir, tmp_path):
    x = np.random.default_rng(0).integers(0, 255, (3, 512, 512, 3)).astype(np.uint8)
    planar = x.transpose(0, 3, 1, 2)
    tiles = split_tiles_nchw(planar, 4)
    assert tiles.shape == (48, 3, 128, 128)
    # tile (0, 1): every 4th pixel from (0, 1)
    np.testing.assert_array_equal(tiles[1], planar[0, :, ::4, 1::4])
    np.testing.assert_array_equal(join_tiles_nchw(tiles, 4), planar)
    session = Counting(load(backend, standin_dir, "inswapper_128", tmp_path))
    model = MODELS["inswapper_128"]
    identity = IdentityEncoder(
        model,
        SourceIdentity(np.ones(512, np.float32) / np.sqrt(512), None),
        emap=np.eye(512, dtype=np.float32),
    )
    swapper = LearnedSwapper(session, model, identity, CropMasker(MaskSettings()), pixel_boost=512)
    out = swapper.swap_crops(K, x, np.ones((3, 512), np.float32) / np.sqrt(512))
    assert out.shape == (3, 512, 512, 3) and out.dtype == np.float32
    assert session.calls == [48]  # every tile of every face in one call


def test_faces_per_call_leave_the_swapped_crops_as_they_are(backend, standin_dir, tmp_path):
    """The CPU layout chooses how many faces share a model call (runtime/batching.py): 7 faces in
    calls of 1, of 3 and of all 7 give the same crops within float rounding."""
    x = np.random.default_rng(1).integers(0, 255, (7, 128, 128, 3)).astype(np.uint8)
    rows = np.random.default_rng(2).standard_normal((7, 512)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    session = Counting(load(backend, standin_dir, "inswapper_128", tmp_path))
    model = MODELS["inswapper_128"]
    identity = IdentityEncoder(model, SourceIdentity(rows[0], None), emap=np.eye(512, dtype=np.float32))
    swapper = LearnedSwapper(session, model, identity, CropMasker(MaskSettings()))
    outs = {}
    for per_call in (1, 3, 7):
        swapper.max_batch = per_call
        session.calls.clear()
        outs[per_call] = swapper.swap_crops(K, x, rows)
        assert session.calls == [per_call] * (7 // per_call) + ([7 % per_call] if 7 % per_call else [])
    assert outs[7].shape == (7, 128, 128, 3) and float(np.ptp(outs[7])) > 10  # a picture, not a constant
    for per_call in (1, 3):
        np.testing.assert_allclose(outs[per_call], outs[7], atol=1e-2, rtol=0)  # levels 0-255


# --- selection ---------------------------------------------------------------------------------


def test_reference_selection_finds_the_right_face_among_six(backend, standin_dir, tmp_path, models, t1_image):
    recogniser = Recogniser(
        load(backend, standin_dir, "arcface_w600k_r50", tmp_path), MODELS["arcface_w600k_r50"]
    )
    table = hostk.detect(models, [t1_image])
    assert len(table) == 6
    for k in range(6):
        x0, y0, x1, y1 = table.box[k]
        pad = 0.6 * (x1 - x0)
        crop = t1_image[int(max(0, y0 - pad)) : int(y1 + pad), int(max(0, x0 - pad)) : int(x1 + pad)]
        ref_table = hostk.detect(models, [np.ascontiguousarray(crop)])
        assert len(ref_table) >= 1
        largest = ref_table.select(np.array([int(np.argmax(ref_table.areas()))]))
        reference = recogniser.embed(K, hostk.frames([np.ascontiguousarray(crop)]), largest)[0]
        # the stand-in recogniser is a random projection: the right face is the nearest by a
        # margin of about 0.02 in (1 - cos) / 2, so the threshold sits between
        embedded = recogniser.embed(K, hostk.frames([t1_image]), table)
        assert int(np.argmin(face_distance(embedded, reference))) == k
        selector = FaceSelector("reference", recogniser, reference, distance=0.125)
        chosen = selector(K, hostk.frames([t1_image]), table)
        assert len(chosen) == 1 and chosen.embedding.shape == (1, 512), k
        np.testing.assert_allclose(chosen.box[0], table.box[k])


# --- end to end --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clip(tmp_path_factory, t1_small) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=6, size=(480, 320), image=t1_small)


@pytest.mark.slow
def test_render_with_standins_end_to_end(tmp_path, standin_dir, private_home, clip, astronaut_path, models):
    out = tmp_path / "out.mp4"
    proc = ffbatch(
        "render",
        clip,
        "--source",
        astronaut_path,
        "--models-dir",
        standin_dir,
        "--swapper-model",
        "inswapper_128",
        "--enhancer-model",
        "gfpgan_1.4",
        "-o",
        out,
        "--report",
        tmp_path / "r.json",
        home=private_home,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    assert "inswapper_128 is present" in proc.stderr
    before, tb = decode_all(clip)
    after, ta = decode_all(out)
    assert [p for p, _ in after] == [p for p, _ in before] and ta == tb
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["frames_out"] == 6 and report["faces_swapped"] >= 6
    assert {"swap", "paste", "enhance"} <= set(report["stage_seconds"]) and "mesh" not in report[
        "stage_seconds"
    ]
    diff = np.mean(
        [np.abs(a.astype(int) - b.astype(int)).mean() for (_, a), (_, b) in zip(after, before, strict=True)]
    )
    assert diff > 3.0, diff  # faces changed
    # away from every face (boxes grown 3x about their centres: the enhancer's ffhq_512 crop is
    # wide) the picture is untouched but for the re-encoding
    table = hostk.detect(models, [before[0][1]])
    far = np.ones(before[0][1].shape[:2], bool)
    for x0, y0, x1, y1 in table.box:
        cx, cy, w, h = (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0
        far[int(max(0, cy - 1.5 * h)) : int(cy + 1.5 * h), int(max(0, cx - 1.5 * w)) : int(cx + 1.5 * w)] = (
            False
        )
    assert far.mean() > 0.03, far.mean()
    changed = np.abs(after[0][1].astype(int) - before[0][1].astype(int)).max(axis=2) > 40
    assert changed[far].mean() < 0.01, changed[far].mean()  # re-encoding moves pixels by a few levels
    assert changed[~far].mean() > 0.05, changed[~far].mean()


@pytest.mark.slow
def test_render_masks_pixel_boost_weight_and_hyperswap(
    tmp_path, standin_dir, private_home, clip, astronaut_path
):
    out = tmp_path / "out.mp4"
    proc = ffbatch(
        "render",
        clip,
        "-s",
        astronaut_path,
        "--models-dir",
        standin_dir,
        "--swapper",
        "learned",
        "--swapper-model",
        "hyperswap_1a_256",
        "--pixel-boost",
        "512",
        "--swapper-weight",
        "0.3",
        "--mask",
        "box,occlusion,region",
        "--mask-regions",
        "skin,nose",
        "-o",
        out,
        home=private_home,
    )
    assert proc.returncode == 0, proc.stderr


def test_auto_without_learned_files_is_the_classical_swap(tmp_path, private_home, clip, astronaut_path):
    proc = ffbatch_here(
        "render",
        clip,
        "-s",
        astronaut_path,
        "-o",
        tmp_path / "o.mp4",
        "--frames",
        "0:2",
        home=private_home,
    )
    assert proc.returncode == 0, proc.stderr
    assert "using the classical swap" in proc.stderr


def test_reference_mode_without_a_recogniser_is_refused(tmp_path, private_home, clip, astronaut_path):
    proc = ffbatch_here(
        "render",
        clip,
        "-s",
        astronaut_path,
        "--faces",
        "reference",
        "--reference-face",
        astronaut_path,
        "--swapper",
        "classical",
        "-o",
        tmp_path / "o.mp4",
        home=private_home,
    )
    assert proc.returncode == 2
    assert "ffbatch: error: --faces reference needs the face recogniser arcface_w600k_r50" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_reference_mode_with_standins(tmp_path, standin_dir, private_home, clip, astronaut_path):
    out = tmp_path / "o.mp4"
    proc = ffbatch_here(
        "render",
        clip,
        "-s",
        astronaut_path,
        "--models-dir",
        standin_dir,
        "--faces",
        "reference",
        "--reference-frame",
        "0",
        "--reference-distance",
        "0.1",
        "--swapper-model",
        "inswapper_128",
        "-o",
        out,
        "--report",
        tmp_path / "r.json",
        home=private_home,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert 1 <= report["faces_swapped"] < report["faces_found"]
