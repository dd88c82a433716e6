"""The shadow under a source's lower lip, lifted toward its chin's skin (swap/classical/lip_shadow.py): a
shadow painted there is lifted by the share asked for, nothing outside the band under the lip
moves, the lips keep their pixels (to a level), a photo without such a shadow barely changes, and
`--lip-shadow` sets the share."""

from __future__ import annotations

import cv2
import hostk
import numpy as np
import pytest

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.swap.classical.lip_shadow import GREY, SHADOW_DEPTH, SHADOW_TOLERANCE, lift_lip_shadow
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.source import prepare_source


@pytest.fixture(scope="module")
def astronaut(astronaut_image, astronaut_mesh):
    return astronaut_image.astype(np.float32), astronaut_mesh


def geometry(mesh: np.ndarray, regions, shape: tuple[int, int]):
    """(skin mask: the oval less the lips, lips mask, IOD, the point 0.2 IOD under the lower lip)."""
    oval = np.zeros(shape, np.uint8)
    cv2.fillPoly(oval, [np.round(mesh[regions.face_oval, :2]).astype(np.int32)], 1)
    lips = np.zeros(shape, np.uint8)
    cv2.fillPoly(lips, [np.round(mesh[regions.lips_outer, :2]).astype(np.int32)], 1)
    iod = 0.7 * eye_frame(mesh)[1]
    eyes = mesh[np.concatenate([regions.left_eye, regions.right_eye]), :2].mean(axis=0)
    mouth = mesh[regions.lips_outer, :2]
    down = (mouth.mean(axis=0) - eyes) / np.linalg.norm(mouth.mean(axis=0) - eyes)
    bottom = mouth.mean(axis=0) + down * ((mouth - mouth.mean(axis=0)) @ down).max()
    return (oval > 0) & (lips == 0), lips > 0, iod, bottom + 0.2 * iod * down


def with_shadow(image: np.ndarray, centre: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """`image` darkened to 55 % (a cast shadow, same hue) in a soft disc; and the disc's core."""
    disc = np.zeros(image.shape[:2], np.float32)
    cv2.circle(disc, tuple(np.round(centre).astype(int)), int(radius), 1.0, -1)
    soft = cv2.GaussianBlur(disc, (0, 0), radius / 4)
    core = cv2.erode(disc, np.ones((3, 3), np.uint8)) > 0
    return image * (1 - 0.45 * soft[..., None]), core


def test_a_shadow_under_the_lip_is_lifted_by_the_share_asked_and_nothing_else_moves(models, astronaut):
    image, mesh = astronaut
    skin, lips, iod, under = geometry(mesh, models.regions, image.shape[:2])
    shadowed, core = with_shadow(image, under, 0.15 * iod)
    grey = lambda im: im @ GREY  # noqa: E731
    before = float(grey(shadowed)[core].mean())
    half = lift_lip_shadow(shadowed, mesh, models.regions, skin, iod, 0.5)
    full = lift_lip_shadow(shadowed, mesh, models.regions, skin, iod, 1.0)
    unshadowed = float(grey(image)[core].mean())  # what the shadow darkened
    # lifted, and by about the share asked. The goal is the median of the chin's skin round the
    # band, its shaded sides too (on the astronaut about 80 % of the lit skin under her lip),
    # less the tolerance: the full lift closes a good part of the gap, the half lift about half
    lifted_full = float(grey(full)[core].mean())
    lifted_half = float(grey(half)[core].mean())
    assert lifted_full > before + 0.3 * ((1 - SHADOW_TOLERANCE) * unshadowed - before)
    assert lifted_full < unshadowed  # never past the chin's own light
    assert before + 0.3 * (lifted_full - before) < lifted_half < before + 0.7 * (lifted_full - before)
    # the shadow's hue stays skin: the lift moves toward the chin's colour, not to a grey
    lab = cv2.cvtColor(np.clip(full + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB).astype(float)
    own = cv2.cvtColor(np.clip(image + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB).astype(float)
    assert np.abs(lab[core][:, 1:].mean(axis=0) - own[core][:, 1:].mean(axis=0)).max() < 4
    # only the band under the lip moves: not the lips, not the cheeks, eyes or forehead
    change = np.abs(full - shadowed).max(axis=2)
    assert change[lips].max() < 1.0  # the band's soft edge reaches the lip's rim by under a level
    moved = change > 0.5
    eyes = mesh[np.concatenate([models.regions.left_eye, models.regions.right_eye]), :2].mean(axis=0)
    ys, xs = np.nonzero(moved)
    reach = np.hypot(xs - under[0], ys - under[1]).max()
    assert reach < (SHADOW_DEPTH + 0.6) * iod
    assert np.hypot(xs - eyes[0], ys - eyes[1]).min() > 0.8 * iod


def test_a_photo_without_such_a_shadow_barely_changes_and_strength_zero_is_the_photo(models, astronaut):
    image, mesh = astronaut
    skin, _, iod, under = geometry(mesh, models.regions, image.shape[:2])
    assert lift_lip_shadow(image, mesh, models.regions, skin, iod, 0.0) is image
    shadowed, core = with_shadow(image, under, 0.15 * iod)
    own = np.abs(lift_lip_shadow(image, mesh, models.regions, skin, iod, 1.0) - image)[core].mean()
    painted = np.abs(lift_lip_shadow(shadowed, mesh, models.regions, skin, iod, 1.0) - shadowed)[core].mean()
    # the astronaut's own chin is evenly lit: what the lift changes there is a small part of
    # what it changes on the same chin with a shadow painted on
    assert own < 0.25 * painted


def test_the_lift_is_the_render_option_and_reaches_the_source_texture(models, astronaut, tmp_path):
    """--lip-shadow sets how far the prepared source's lip shadow is lifted: 0 leaves the photo's
    pixels, 1 lifts the painted shadow, and only under the lip."""
    image, mesh = astronaut
    _, lips, iod, under = geometry(mesh, models.regions, image.shape[:2])
    shadowed, core = with_shadow(image, under, 0.15 * iod)
    photo = np.clip(shadowed + 0.5, 0, 255).astype(np.uint8)
    kept, lifted = (
        prepare_source(photo, mesh, models.regions, ClassicalSettings(lip_shadow=v)) for v in (0.0, 1.0)
    )
    # the texture is the photo's crop: the shadow's core sits at the same offset in both
    assert kept.texture.shape == lifted.texture.shape
    change = np.abs(lifted.texture[..., :3] - kept.texture[..., :3]).max(axis=2)
    x0 = int(np.round(mesh[:, 0].min() - kept.shape_mesh[:, 0].min()))
    y0 = int(np.round(mesh[:, 1].min() - kept.shape_mesh[:, 1].min()))
    ys, xs = np.nonzero(core)
    inside = change[ys - y0, xs - x0]
    assert inside.mean() > 5  # levels: the shadow was lifted
    eyes = kept.shape_mesh[np.concatenate([models.regions.left_eye, models.regions.right_eye]), :2].mean(0)
    yy, xx = np.nonzero(change > 0.5)
    assert np.hypot(xx - eyes[0], yy - eyes[1]).min() > 0.8 * iod  # nothing near the eyes moved
    assert hostk.classical_option(tmp_path, lip_shadow=0.8).lip_shadow == 0.8
