"""--mask area (FaceFusion's upper-face, lower-face, mouth) from the 468-point mesh, no extra model."""

from __future__ import annotations

import json

import cv2
import hostk
import numpy as np
import onnx
import pytest
import standins
from test_cli import ffbatch_here

from facefusion_batch.config import SwapSettings, validate_swap
from facefusion_batch.errors import InputError
from facefusion_batch.faces.identity import IdentityEncoder, SourceIdentity
from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER
from facefusion_batch.models.facefusion import MODELS
from facefusion_batch.models.prepare import make_dynamic_batch
from facefusion_batch.swap.learned import LearnedSettings, LearnedSwapper
from facefusion_batch.swap.masks import NOSE_BASE, AreaMasker, CropMasker, MaskSettings

K = hostk.HOST
SIZE = 256


def synthetic_mesh(regions) -> np.ndarray:
    """[1,468,2] in a 256-px crop: the outline an ellipse from y 40 to 240, eyes at y 110, brows at
    y 90, the nose base at y 160, the lips an ellipse around (128, 195); the rest at the centre."""
    mesh = np.full((468, 2), 128.0, np.float32)
    t = np.linspace(0, 2 * np.pi, len(regions.face_oval), endpoint=False)
    mesh[regions.face_oval] = np.stack([128 + 80 * np.sin(t), 140 - 100 * np.cos(t)], axis=1)
    mesh[LEFT_EYE_OUTER], mesh[RIGHT_EYE_OUTER] = (80, 110), (176, 110)
    mesh[regions.brows] = np.stack(
        [np.linspace(70, 186, len(regions.brows)), np.full(len(regions.brows), 90)], 1
    )
    mesh[NOSE_BASE] = np.stack([np.linspace(110, 146, 5), np.full(5, 160)], axis=1)
    lips = np.concatenate([regions.lips_outer, regions.lips_inner])
    u = np.linspace(0, 2 * np.pi, len(lips), endpoint=False)
    mesh[lips] = np.stack([128 + 30 * np.cos(u), 195 + 12 * np.sin(u)], axis=1)
    return mesh[None]


def facefusion_area_mask(points: np.ndarray, size: int) -> np.ndarray:
    """FaceFusion's create_area_mask, re-derived: the hull of the points, filled, blurred (σ 5),
    the 0.5–1 band rescaled."""
    mask = np.zeros((size, size), np.float32)
    cv2.fillConvexPoly(mask, cv2.convexHull(points.astype(np.int32)), 1.0)
    return (np.clip(cv2.GaussianBlur(mask, (0, 0), 5), 0.5, 1) - 0.5) * 2


@pytest.mark.parametrize(
    "areas, inside, outside",
    [
        (("mouth",), [(128, 195)], [(128, 150), (128, 100), (60, 130)]),
        (("upper-face",), [(128, 120), (70, 140)], [(128, 200), (128, 60)]),
        (("lower-face",), [(128, 200), (128, 225)], [(128, 120), (128, 90)]),
        (("upper-face", "lower-face", "mouth"), [(128, 120), (128, 200)], [(128, 60), (20, 20)]),
    ],
)
def test_area_geometry_on_a_synthetic_mesh(models, areas, inside, outside):
    masker = AreaMasker(models.regions, areas)
    mesh = synthetic_mesh(models.regions)
    mask = np.asarray(masker(K, mesh, SIZE))[0]
    for x, y in inside:
        assert mask[y, x] > 0.95, (areas, x, y)
    for x, y in outside:
        assert mask[y, x] < 0.01, (areas, x, y)
    np.testing.assert_allclose(mask, facefusion_area_mask(masker.points(mesh)[0], SIZE), atol=1e-6)


def test_the_outline_is_cut_at_the_eye_line_and_the_nose_base(models):
    mesh = synthetic_mesh(models.regions)
    upper = AreaMasker(models.regions, ("upper-face",)).points(mesh)[0]
    lower = AreaMasker(models.regions, ("lower-face",)).points(mesh)[0]
    outline = set(map(tuple, mesh[0, models.regions.face_oval].round(3).tolist()))
    upper_outline = [p for p in map(tuple, upper.round(3).tolist()) if p in outline]
    lower_outline = [p for p in map(tuple, lower.round(3).tolist()) if p in outline]
    assert upper_outline and all(110 <= y <= 160 for _, y in upper_outline)
    assert lower_outline and all(y >= 160 for _, y in lower_outline)


def test_area_masks_are_checked():
    with pytest.raises(InputError, match="--mask-areas must be one of"):
        validate_swap(SwapSettings(learned=LearnedSettings(masks=MaskSettings(areas=("nose",)))), "many")
    with pytest.raises(InputError, match="--mask-areas needs"):
        validate_swap(SwapSettings(learned=LearnedSettings(masks=MaskSettings(areas=()))), "many")


@pytest.fixture(scope="module")
def hyperswap(models, tmp_path_factory):
    path = tmp_path_factory.mktemp("hyperswap") / "hyperswap.onnx"
    onnx.save(make_dynamic_batch(standins.hyperswap())[0], str(path))
    return models.backend.load(path, label="hyperswap stand-in")


def test_a_mouth_mask_swaps_the_mouth_and_nothing_else(models, t1_small, hyperswap):
    model = MODELS["hyperswap_1a_256"]
    v = np.random.default_rng(3).normal(size=512).astype(np.float32)
    v /= np.linalg.norm(v)
    identity = IdentityEncoder(model, SourceIdentity(embedding=v, raw=v, unit_mean=v))
    table = hostk.analyse(models, [t1_small])
    settings = MaskSettings(types=("box", "area"), areas=("mouth",))
    masker = CropMasker(settings, area=AreaMasker(models.regions, settings.areas))
    out, _ = hostk.stage(LearnedSwapper(hyperswap, model, identity, masker), [t1_small], table)
    changed = np.abs(out[0].astype(np.int16) - t1_small).max(axis=2) > 2
    assert changed.any()
    for f in range(len(table)):
        mesh = table.mesh[f, :, :2]
        lips = mesh[np.concatenate([models.regions.lips_outer, models.regions.lips_inner])]
        centre = lips.mean(axis=0).round().astype(int)
        eye = mesh[[LEFT_EYE_OUTER, RIGHT_EYE_OUTER]].mean(axis=0).round().astype(int)
        assert changed[centre[1], centre[0]], f  # inside the lips
        assert not changed[eye[1], eye[0]], f  # between the eyes: the target's own pixels
    # nothing changed outside the faces' lips, grown by the blur
    allowed = np.zeros(changed.shape, np.uint8)
    for f in range(len(table)):
        lips = table.mesh[f, np.concatenate([models.regions.lips_outer, models.regions.lips_inner]), :2]
        cv2.fillConvexPoly(allowed, cv2.convexHull(lips.astype(np.int32)), 1)
    allowed = cv2.dilate(allowed, np.ones((9, 9), np.uint8)).astype(bool)
    assert not (changed & ~allowed).any()


def test_render_with_facefusion_area_mask_names(tmp_path, private_home, t1_small):
    from media import decode_all, make_clip

    store = standins.write_standins(tmp_path / "models", ["hyperswap_1a_256", "arcface_w600k_r50"])
    clip = make_clip(tmp_path / "clip.mp4", frames=3, size=(480, 320), image=t1_small)
    src = tmp_path / "src.png"
    cv2.imwrite(str(src), t1_small)
    out = tmp_path / "o.mp4"
    proc = ffbatch_here(
        "render", "-t", clip, "--source-paths", src, "--models-dir", store,
        "--face-swapper-model", "hyperswap_1a_256", "--face-mask-types", "box", "area",
        "--face-mask-areas", "lower-face", "mouth", "-o", out, "--report", tmp_path / "r.json",
        home=private_home,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    learned = report["settings"]["swap"]["learned"]["masks"]
    assert learned["types"] == ["box", "area"] and learned["areas"] == ["lower-face", "mouth"]
    assert report["faces_swapped"] > 0 and len(decode_all(out)[0]) == 3
    bad = ffbatch_here("render", clip, "-s", src, "--mask", "box,area", "--mask-areas", "nose", "-o", out,
                  "--overwrite", home=private_home)  # fmt: skip
    assert bad.returncode == 2 and "--mask-areas must be one of" in bad.stderr
