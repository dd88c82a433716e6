"""A source's smile lines, lifted toward the cheek round them (swap/classical/smile_lines.py): a
dark fold painted along the mesh's line from the nose's wing to the mouth's corner is lifted and
keeps the skin's hue, a light one is left, nothing away from the folds moves, strength 0 is the
photo, and `--smile-lines` reaches the prepared source's texture."""

from __future__ import annotations

import cv2
import hostk
import numpy as np
import pytest

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.swap.classical.lip_shadow import GREY
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.smile_lines import (
    LINE_RAMP,
    LINE_TOLERANCE,
    LINE_WIDTH,
    SMILE_LINES,
    lift_smile_lines,
)
from facefusion_batch.swap.classical.source import prepare_source


@pytest.fixture(scope="module")
def astronaut(astronaut_image, astronaut_mesh):
    return astronaut_image.astype(np.float32), astronaut_mesh


def face_without_features(mesh: np.ndarray, regions, shape: tuple[int, int]) -> np.ndarray:
    """[h,w] bool: the face oval less the eyes, lips and brows (as prepare_source passes it)."""
    face = np.zeros(shape, np.uint8)
    cv2.fillPoly(face, [np.round(mesh[regions.face_oval, :2]).astype(np.int32)], 1)
    for loop in (regions.left_eye, regions.right_eye, regions.lips_outer):
        cv2.fillPoly(face, [np.round(mesh[loop, :2]).astype(np.int32)], 0)
    cv2.fillConvexPoly(face, cv2.convexHull(np.round(mesh[regions.brows, :2]).astype(np.int32)), 0)
    return face > 0


def with_folds(image: np.ndarray, mesh: np.ndarray, iod: float, gain: float) -> tuple[np.ndarray, np.ndarray]:
    """`image` with both folds' lines drawn `gain` times as light (same hue) over 0.04 IOD either
    side, softly; and the folds' cores (where the drawing is full)."""
    lines = np.zeros(image.shape[:2], np.uint8)
    for line in SMILE_LINES:
        cv2.polylines(lines, [np.round(mesh[line, :2]).astype(np.int32)], False, 1, 1)
    near = cv2.distanceTransform((lines == 0).astype(np.uint8), cv2.DIST_L2, 5) < 0.04 * iod
    soft = cv2.GaussianBlur(near.astype(np.float32), (0, 0), 0.015 * iod)
    core = cv2.erode(near.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    return np.clip(image * (1 + (gain - 1) * soft[..., None]), 0, 255).astype(np.float32), core


def test_a_dark_fold_is_lifted_toward_the_cheek_and_nothing_away_from_the_folds_moves(models, astronaut):
    image, mesh = astronaut
    iod = 0.7 * eye_frame(mesh)[1]
    face = face_without_features(mesh, models.regions, image.shape[:2])
    folded, core = with_folds(image, mesh, iod, 0.6)
    core &= face
    grey = lambda im: im @ GREY  # noqa: E731
    before, unfolded = float(grey(folded)[core].mean()), float(grey(image)[core].mean())
    half = lift_smile_lines(folded, mesh, face, iod, 0.5)
    full = lift_smile_lines(folded, mesh, face, iod, 1.0)
    lifted_full, lifted_half = float(grey(full)[core].mean()), float(grey(half)[core].mean())
    # the full lift closes most of what the drawn fold darkened, never past the cheek's own light
    # by more than its shading round the fold; the half lift about half of that
    assert lifted_full > before + 0.6 * ((1 - LINE_TOLERANCE) * unfolded - before)
    assert lifted_full < unfolded * 1.1
    assert before + 0.3 * (lifted_full - before) < lifted_half < before + 0.7 * (lifted_full - before)
    # toward the skin's colour, not a grey: what the fold took from its a*b* comes back with its light
    def ab(im: np.ndarray) -> np.ndarray:
        lab = cv2.cvtColor(np.clip(im + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB)
        return lab[core][:, 1:].mean(axis=0)

    def chroma(im: np.ndarray) -> float:
        return float(np.abs(ab(im) - ab(image)).max())

    assert chroma(full) < 0.7 * chroma(folded)
    # nothing outside the bands moves: not the features, the eyes, the forehead or the background
    change = np.abs(full - folded).max(axis=2)
    lines = np.zeros(image.shape[:2], np.uint8)
    for line in SMILE_LINES:
        cv2.polylines(lines, [np.round(mesh[line, :2]).astype(np.int32)], False, 1, 1)
    reach = cv2.distanceTransform((lines == 0).astype(np.uint8), cv2.DIST_L2, 5)
    assert change[reach > (LINE_WIDTH + LINE_RAMP) * iod + 1.5].max() == 0
    assert change[~face].max() == 0


def test_a_light_fold_is_left_and_strength_zero_is_the_photo(models, astronaut):
    image, mesh = astronaut
    iod = 0.7 * eye_frame(mesh)[1]
    face = face_without_features(mesh, models.regions, image.shape[:2])
    assert lift_smile_lines(image, mesh, face, iod, 0.0) is image
    lit, core = with_folds(image, mesh, iod, 1.25)  # a highlight along the folds
    lifted = lift_smile_lines(lit, mesh, face, iod, 1.0)
    # the highlight itself is not pulled down; what moves in its core is the photo's own folds'
    # dark edges, lifted
    assert (lifted @ GREY)[core & face].mean() >= (lit @ GREY)[core & face].mean()
    assert ((lifted - lit) @ GREY).min() > -1e-3  # nothing anywhere darkened


def test_the_lift_is_the_render_option_and_reaches_the_source_texture(models, astronaut, tmp_path):
    """--smile-lines sets how far the prepared source's folds are lifted: 0 leaves the photo's
    pixels; 1 lifts a fold drawn on it, and nothing near the eyes moves."""
    image, mesh = astronaut
    iod = 0.7 * eye_frame(mesh)[1]
    folded, core = with_folds(image, mesh, iod, 0.6)
    photo = np.clip(folded + 0.5, 0, 255).astype(np.uint8)
    kept, lifted = (
        prepare_source(photo, mesh, models.regions, ClassicalSettings(smile_lines=v)) for v in (0.0, 1.0)
    )
    assert kept.texture.shape == lifted.texture.shape
    change = (lifted.texture[..., :3] - kept.texture[..., :3]) @ GREY
    x0 = int(np.round(mesh[:, 0].min() - kept.shape_mesh[:, 0].min()))
    y0 = int(np.round(mesh[:, 1].min() - kept.shape_mesh[:, 1].min()))
    ys, xs = np.nonzero(core)
    assert change[ys - y0, xs - x0].mean() > 8  # levels: the folds were lifted
    eyes = kept.shape_mesh[np.concatenate([models.regions.left_eye, models.regions.right_eye]), :2].mean(0)
    yy, xx = np.nonzero(np.abs(change) > 0.5)
    assert np.hypot(xx - eyes[0], yy - eyes[1]).min() > 0.5 * iod
    assert hostk.classical_option(tmp_path, smile_lines=0.4).smile_lines == 0.4
