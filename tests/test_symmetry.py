"""Mirror fill (swap/classical/symmetry.py): a turned source photo's squeezed side is painted from its
visible side, flipped; a frontal photo is left as it is."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest

from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, NOSE_TIP, RIGHT_EYE_OUTER, eye_frame
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.pipeline.build import build_pipeline, prepare_sources
from facefusion_batch.settings.types import SwapSettings
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.symmetry import (
    MIDLINE_INSET,
    NASION,
    far_half,
    inset_midline,
    mirror_weights,
    symmetric_pair,
    triangle_areas,
)

HOST = HostKernels()


@pytest.fixture(scope="module")
def turned_photo(t1_image, t1_faces, tmp_path_factory):
    """The most turned face of t1.jpg (a near profile), cut out with a margin, as a photo."""
    yaws = np.array([eye_frame(m)[2] for m in t1_faces.mesh])
    x0, y0, x1, y1 = t1_faces.box[int(np.argmax(np.abs(yaws)))]
    pad = 0.7 * max(x1 - x0, y1 - y0)
    crop = t1_image[int(max(0, y0 - pad)) : int(y1 + pad), int(max(0, x0 - pad)) : int(x1 + pad)]
    path = tmp_path_factory.mktemp("turned") / "turned.png"
    cv2.imwrite(str(path), crop)
    return path


def grid_mesh(squeeze: float, n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """An n x n vertex grid (x, y, 0), 10 px apart, its right half's x squeezed by `squeeze`,
    and its triangles, all facing the same way."""
    ys, xs = np.mgrid[0:n, 0:n].astype(np.float64)
    half = (n - 1) // 2
    xs = np.where(xs > half, half + (xs - half) * squeeze, xs)
    mesh = np.stack([xs.ravel() * 10, ys.ravel() * 10, np.zeros(n * n)], axis=1)
    tris = []
    for r in range(n - 1):
        for c in range(n - 1):
            a = r * n + c
            tris += [(a, a + 1, a + n), (a + 1, a + n + 1, a + n)]
    return mesh, np.array(tris)


def test_back_facing_triangles_have_no_area():
    mesh, tris = grid_mesh(1.0)
    areas = triangle_areas(mesh, tris)
    assert np.allclose(areas, 50.0)
    flipped = tris.copy()
    flipped[0] = flipped[0][::-1]  # one triangle folded over: seen from behind
    assert triangle_areas(mesh, flipped)[0] == 0.0
    assert np.allclose(triangle_areas(mesh, flipped)[1:], 50.0)


def test_weights_are_zero_on_a_symmetric_face_and_high_where_squeezed():
    mesh, tris = grid_mesh(1.0, 11)
    assert np.all(mirror_weights(mesh, mesh, tris) == 0.0)
    squeezed, _ = grid_mesh(0.2, 11)  # the photo: its right half squeezed
    weights = mirror_weights(squeezed, mesh, tris)  # the flipped photo sees that half whole
    assert weights[mesh[:, 0] >= 70].min() > 0.5  # painted from the flipped photo
    assert weights[mesh[:, 0] <= 20].max() == 0.0  # the visible side stays the photo's own


def test_both_halves_hold_the_same_blend_where_the_paint_switches():
    mesh, tris = grid_mesh(0.35)
    full, _ = grid_mesh(1.0)
    rng = np.random.default_rng(0)
    own = np.zeros((50, 50, 5), np.float32)
    own[..., :3] = 80.0
    other = np.zeros((50, 50, 5), np.float32)
    other[..., :3] = 160.0 + rng.normal(0, 1, (50, 50, 3))
    own_out, other_out, use = symmetric_pair(own, mesh, other, full, tris)
    assert use.any() and not use.all()
    # at a vertex shared by a triangle painted from each, both textures hold about the same colour
    shared = np.intersect1d(tris[use].ravel(), tris[~use].ravel())
    for v in shared:
        a = own_out[int(round(mesh[v, 1])), min(int(round(mesh[v, 0])), 49), 0]
        b = other_out[int(round(full[v, 1])), min(int(round(full[v, 0])), 49), 0]
        assert abs(a - b) < 25, (v, a, b)
    assert np.all(own_out[..., 3:] == own[..., 3:])  # alpha and skin untouched


def test_a_strongly_turned_face_gives_its_far_half_from_the_midline(t1_faces, models):
    """far_half: nothing for t1's frontal and three-quarter faces; for its near profile the
    far eye's corner all, the near one's nothing, the midline half; and mirror_weights take it."""
    yaws = np.array([eye_frame(m)[2] for m in t1_faces.mesh])
    for mesh in t1_faces.mesh[np.abs(yaws) < 0.3]:
        assert not far_half(mesh).any()
    mesh = t1_faces.mesh[int(np.argmax(np.abs(yaws)))]
    assert abs(yaws).max() > 0.4
    half = far_half(mesh)
    # the nose tip is displaced toward the far side: that eye's corner is the far one
    far, near = (
        (LEFT_EYE_OUTER, RIGHT_EYE_OUTER)
        if yaws[np.argmax(np.abs(yaws))] < 0
        else (RIGHT_EYE_OUTER, LEFT_EYE_OUTER)
    )
    assert half[far] == pytest.approx(1.0) and half[near] == 0.0 and half[NASION] == pytest.approx(0.5)
    weights = mirror_weights(mesh, mesh, models.triangles)  # no squeeze against itself: far_half alone
    assert weights[far] > 0.9 and weights[near] < 0.1


def test_a_turned_faces_upper_midline_is_sampled_inward(t1_faces, t1_image):
    """inset_midline: t1's frontal and three-quarter faces as they are; on its near profile the
    skin between the brows moves MIDLINE_INSET of the eye span toward the near side, the eye
    corners, the nose tip and the chin stay where they are; mirrored, the same move mirrored."""
    yaws = np.array([eye_frame(m)[2] for m in t1_faces.mesh])
    for mesh in t1_faces.mesh[np.abs(yaws) < 0.3]:
        np.testing.assert_array_equal(inset_midline(mesh), mesh)
    f = int(np.argmax(np.abs(yaws)))
    mesh = t1_faces.mesh[f]
    span = eye_frame(mesh)[1]
    moved = inset_midline(mesh)
    near = RIGHT_EYE_OUTER if yaws[f] < 0 else LEFT_EYE_OUTER
    shift = np.linalg.norm(moved[NASION, :2] - mesh[NASION, :2])
    assert shift == pytest.approx(MIDLINE_INSET * span, rel=0.05)
    gap = np.linalg.norm(mesh[NASION, :2] - mesh[near, :2])
    assert np.linalg.norm(moved[NASION, :2] - moved[near, :2]) < gap - 0.8 * shift  # toward the near eye
    for point in (LEFT_EYE_OUTER, RIGHT_EYE_OUTER, NOSE_TIP, 152):  # 152: the chin
        np.testing.assert_array_equal(moved[point], mesh[point])
    flipped = mesh.copy()
    flipped[:, 0] = t1_image.shape[1] - 1 - flipped[:, 0]
    back = inset_midline(flipped)
    back[:, 0] = t1_image.shape[1] - 1 - back[:, 0]
    np.testing.assert_allclose(back, moved, atol=1e-6)


def test_a_turned_photo_takes_one_side_from_the_flipped_photo(models, turned_photo):
    source = prepare_sources(models, (turned_photo,), ClassicalSettings())[0]
    assert source.use_mirror is not None
    share = float(source.use_mirror.mean())
    assert 0.1 < share < 0.6, share
    # one side of the face (the one turned away): one eye's corners, never both
    mirrored = np.unique(models.triangles[source.use_mirror[: len(models.triangles)]].ravel())
    eyes = [
        np.isin(models.regions.left_eye, mirrored).mean(),
        np.isin(models.regions.right_eye, mirrored).mean(),
    ]
    assert max(eyes) > 0.8 and min(eyes) < 0.2, eyes


def test_a_frontal_photo_is_left_as_it_is(models, astronaut_path):
    source = prepare_sources(models, (astronaut_path,), ClassicalSettings())[0]
    assert source.use_mirror is None or source.use_mirror.mean() < 0.05
    np.testing.assert_array_equal(source.mesh, source.geometry)  # sampled where it was measured


def test_a_turned_photo_is_sampled_inward_but_keeps_its_measured_shape(models, turned_photo):
    source = prepare_sources(models, (turned_photo,), ClassicalSettings())[0]
    moved = np.linalg.norm(source.mesh[:, :2] - source.geometry[:, :2], axis=1)
    assert moved[NASION] > 1.0 and moved[NOSE_TIP] == 0.0


def test_the_squeezed_side_is_painted_from_the_source(models, turned_photo, astronaut_image):
    """On a frontal target, the side of the face a turned photo hardly shows is painted from
    its visible side, where before the target's own eye and a smear showed through."""
    target = np.ascontiguousarray(astronaut_image)
    renders = {}
    for fill in (False, True):
        settings = replace(ClassicalSettings(), mirror_fill=fill)
        swap = SwapSettings(swapper="classical", classical=settings)
        pipeline = build_pipeline(models, (turned_photo,), swap, "many", tracking=None)
        renders[fill] = pipeline(HOST, [target.copy()], seq=0).frames[0]
    source = prepare_sources(models, (turned_photo,), ClassicalSettings())[0]
    faces = models.mesh(HOST, HOST.upload([target]), models.detector(HOST, HOST.upload([target])))
    mesh = faces.mesh[int(np.argmax(faces.areas()))]
    mirrored = np.unique(models.triangles[source.use_mirror[: len(models.triangles)]].ravel())
    area = np.zeros(target.shape[:2], np.uint8)
    cv2.fillConvexPoly(area, cv2.convexHull(np.round(mesh[mirrored, :2]).astype(np.int32)), 1)
    area = cv2.erode(area, np.ones((5, 5), np.uint8)).astype(bool)

    def change(image: np.ndarray) -> float:
        return float(np.abs(image.astype(np.float32) - target)[area].mean())

    # measured: 1.53x (the local colour's tint limit brings both renders' colour nearer the
    # target's, so what is left is mostly the painted detail)
    assert change(renders[True]) > 1.4 * change(renders[False]), (
        change(renders[True]),
        change(renders[False]),
    )
