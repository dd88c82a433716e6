"""A source photo's eyes drawn shut (swap/shut_eyes.py): only the eyes change, they read as shut
by the measure that reads t1.jpg's shut eyes, and a photo whose eyes are shut keeps its own; a
winking photo gives its open eye to both sides, and a photo with both eyes shut is warned of."""

from __future__ import annotations

import logging
from dataclasses import replace

import cv2
import numpy as np
import pytest

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.swap.classical import ClassicalSettings, swap_triangles
from facefusion_batch.swap.lids import LID_OPEN, LID_SHUT, lid_skin_shares
from facefusion_batch.swap.shut_eyes import SKIN_LIFT, in_tint, lifted, shut_eye_layer
from facefusion_batch.swap.symmetry import wink_shares

HOST = HostKernels()
# t1.jpg's faces by the left edge of their box (px), as tests/test_lids.py finds them
DAVID, MATTHEW, LISA = 462, 750, 1132


@pytest.fixture(scope="module")
def astronaut(models, astronaut_image):
    image = np.ascontiguousarray(astronaut_image)
    frames = HOST.upload([image])
    table = models.mesh(HOST, frames, models.detector(HOST, frames))
    return image, table.mesh[int(np.argmax(table.areas()))]


def skin_of(image: np.ndarray, mesh: np.ndarray, regions) -> np.ndarray:
    face = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(face, [np.round(mesh[regions.face_oval, :2]).astype(np.int32)], 1)
    return face > 0


def near_eyes(mesh: np.ndarray, regions, shape: tuple[int, int], reach: float) -> np.ndarray:
    """The eye loops grown by `reach` IOD."""
    mask = np.zeros(shape, np.uint8)
    for loop in (regions.left_eye, regions.right_eye):
        cv2.fillPoly(mask, [np.round(mesh[loop, :2]).astype(np.int32)], 1)
    grow = int(np.ceil(reach * 0.7 * eye_frame(mesh)[1]))
    return cv2.dilate(mask, np.ones((2 * grow + 1,) * 2, np.uint8)) > 0


def test_the_drawn_lids_change_only_the_eyes_and_read_shut(models, astronaut):
    image, mesh = astronaut
    pixels = image.astype(np.float32)
    drawn, side = shut_eye_layer(pixels, mesh, models.regions, skin_of(image, mesh, models.regions))
    changed = np.abs(drawn - pixels).max(axis=2) > 1.0
    assert changed.sum() > 200  # both eyes, a few hundred pixels each
    assert not (changed & ~near_eyes(mesh, models.regions, image.shape[:2], 0.25)).any()
    # the same measure that tells t1.jpg's shut lids from open eyes: the photo's open eyes read
    # open, the drawn ones shut
    crops = np.stack([image, np.clip(drawn + 0.5, 0, 255).astype(np.uint8)])
    read = lid_skin_shares(crops, np.stack([mesh[:, :2], mesh[:, :2]]), models.regions)
    assert (read[0] < LID_OPEN).all() and (read[1] >= LID_SHUT).all(), read
    # which eye a pixel belongs to: 1 round the left eye, 0 round the right
    for loop, want in ((models.regions.left_eye, 1.0), (models.regions.right_eye, 0.0)):
        x, y = np.round(mesh[loop, :2].mean(axis=0)).astype(int)
        assert side[y, x] == want


def test_an_eye_already_shut_is_not_drawn(models, astronaut):
    image, mesh = astronaut
    pixels = image.astype(np.float32)
    skin = skin_of(image, mesh, models.regions)
    drawn, _ = shut_eye_layer(pixels, mesh, models.regions, skin, open_share=(0.0, 1.0))
    changed = np.abs(drawn - pixels).max(axis=2) > 1.0
    around = near_eyes(mesh, models.regions, image.shape[:2], 0.25)
    left_loop = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(left_loop, [np.round(mesh[models.regions.left_eye, :2]).astype(np.int32)], 1)
    right_loop = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(right_loop, [np.round(mesh[models.regions.right_eye, :2]).astype(np.int32)], 1)
    assert not changed[left_loop > 0].any()  # the left eye is the photo's own
    assert changed[right_loop > 0].mean() > 0.5  # the right one is drawn shut
    assert not (changed & ~around).any()
    none, _ = shut_eye_layer(pixels, mesh, models.regions, skin, open_share=(0.0, 0.0))
    np.testing.assert_array_equal(none, pixels)


def face_photo(tmp_path, image: np.ndarray, table, x: int, name: str):
    """One of t1.jpg's faces cut out with a margin, as a source photo (found by its box's left edge)."""
    row = int(np.argmin(np.abs(table.box[:, 0] - x)))
    x0, y0, x1, y1 = table.box[row]
    pad = 0.7 * max(x1 - x0, y1 - y0)
    crop = image[int(max(0, y0 - pad)) : int(y1 + pad), int(max(0, x0 - pad)) : int(x1 + pad)]
    path = tmp_path / f"{name}.png"
    cv2.imwrite(str(path), crop)
    return path


def test_a_wink_is_told_from_a_shut_pair_and_a_half_read_eye():
    assert wink_shares((1.0, 0.0)) == (1.0, 0.0)
    assert wink_shares((0.0, 1.0)) == (0.0, 1.0)
    assert wink_shares((1.0, 1.0)) == (0.0, 0.0)  # both shut: no open eye to give
    assert wink_shares((0.45, 0.0)) == (0.0, 0.0)  # half read: left as it is


def test_a_winking_photo_gives_its_open_eye_to_both_sides(models, t1_image, t1_faces, tmp_path):
    """t1.jpg's Matthew winks (his left eye shut): as a source, the triangles round that eye are
    painted from the flipped photo (his open right eye), and the source counts as open-eyed."""
    settings = ClassicalSettings()
    path = face_photo(tmp_path, t1_image, t1_faces, MATTHEW, "matthew")
    plain = prepare_sources(models, (path,), replace(settings, mirror_fill=False))[0]
    assert plain.lid_shut[0] >= 0.9 and plain.lid_shut[1] <= 0.1, plain.lid_shut
    source = prepare_sources(models, (path,), settings)[0]
    assert source.lid_shut == pytest.approx((0.0, 0.0), abs=0.1)
    assert source.eye_open[0] == pytest.approx(source.eye_open[1])
    # against the mirror fill without the lids read (his face is a little turned, so some
    # triangles are taken from the flipped photo anyway)
    unread = prepare_sources(models, (path,), replace(settings, lids=False))[0]
    triangles = swap_triangles(models.triangles, models.regions, settings.eyes_mouth)
    eyes = (models.regions.left_eye, models.regions.right_eye)
    shut, opened = (np.isin(triangles, loop).any(axis=1) for loop in eyes)
    assert unread.use_mirror[shut].mean() < 0.7
    assert source.use_mirror[shut].mean() > 0.95  # the shut eye: from the flipped photo
    # the open one as it was
    np.testing.assert_array_equal(source.use_mirror[opened], unread.use_mirror[opened])


def test_a_photo_with_shut_eyes_is_warned_of(models, t1_image, t1_faces, tmp_path, caplog):
    path = face_photo(tmp_path, t1_image, t1_faces, LISA, "lisa")
    with caplog.at_level(logging.WARNING, logger="ffbatch"):
        source = prepare_sources(models, (path,), ClassicalSettings())[0]
    assert min(source.lid_shut) >= 0.9
    assert any("eyes are shut" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ffbatch"):
        david = face_photo(tmp_path, t1_image, t1_faces, DAVID, "david")
        prepare_sources(models, (david,), ClassicalSettings())
    assert not any("eyes are shut" in r.getMessage() for r in caplog.records)


def lab_of(bgr) -> np.ndarray:
    return cv2.cvtColor((np.asarray(bgr, np.float32) / 255)[None, None], cv2.COLOR_BGR2LAB)[0, 0]


def test_a_drawn_lid_keeps_its_sockets_tint_and_its_lash_line_too():
    # the local colour transfer moves the socket's tint to the target's; a lid or lash line in
    # another tint takes that move as well and turns grey or cyan on a pale face
    socket, skin, lashes = np.array([90.0, 120.0, 160.0]), np.array([150.0, 180.0, 225.0]), np.full(3, 40.0)
    lid = lifted(socket, skin)
    np.testing.assert_allclose(lab_of(lid)[1:], lab_of(socket)[1:], atol=0.5)
    lightness = lab_of(socket)[0] + SKIN_LIFT * (lab_of(skin)[0] - lab_of(socket)[0])
    np.testing.assert_allclose(lab_of(lid)[0], lightness, atol=0.5)
    line = in_tint(lashes, lid)
    np.testing.assert_allclose(lab_of(line)[0], lab_of(lashes)[0], atol=0.5)
    np.testing.assert_allclose(lab_of(line)[1:], lab_of(lid)[1:], atol=1.5)
