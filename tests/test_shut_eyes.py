"""A source photo's eyes drawn shut (swap/shut_eyes.py): only the eyes change, they read as shut
by the measure that reads t1.jpg's shut eyes, and a photo whose eyes are shut keeps its own."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.swap.lids import LID_OPEN, LID_SHUT, lid_skin_shares
from facefusion_batch.swap.shut_eyes import shut_eye_layer

HOST = HostKernels()


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
