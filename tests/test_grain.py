"""Grain matching: on a noisy shot the classical swap carries the target's own grain onto the
face's skin (no clean, pasted-looking face), adds nothing to a clean one, and does the same on
both kernel sets."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from hostk import classical_swap

from facefusion_batch.kernels.base import GRAIN_SLACK, grain_gain
from facefusion_batch.kernels.host import HostKernels

try:
    from facefusion_batch.kernels.torch_kernels import TorchKernels
except ImportError:  # torch is a test extra
    TorchKernels = None

HOST = HostKernels()


def test_the_gain_adds_in_quadrature_past_the_slack_and_never_below_zero():
    have = np.array([0.0, 3.0, 4.0, 5.0, 7.0]) / GRAIN_SLACK
    gain = grain_gain(have, np.full(5, 5.0))
    np.testing.assert_allclose(gain, [1.0, 0.8, 0.6, 0.0, 0.0])


def fine(image: np.ndarray, mask: np.ndarray) -> float:
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
    return float(np.abs(grey - cv2.GaussianBlur(grey, (0, 0), 1.0))[mask].mean())


def skin_inside(table, regions, shape) -> np.ndarray:
    """The cheeks and forehead of every face: the oval less eyes, brows and lips, eroded."""
    mask = np.zeros(shape[:2], np.uint8)
    for mesh in table.mesh:
        cv2.fillPoly(mask, [np.round(mesh[regions.face_oval, :2]).astype(np.int32)], 1)
        for loop in (regions.left_eye, regions.right_eye, regions.lips_outer):
            cv2.fillPoly(mask, [np.round(mesh[loop, :2]).astype(np.int32)], 0)
        cv2.fillConvexPoly(mask, cv2.convexHull(np.round(mesh[regions.brows, :2]).astype(np.int32)), 0)
    return cv2.erode(mask, np.ones((15, 15), np.uint8)) > 0


@pytest.fixture(scope="module")
def noisy_target(models, astronaut_image):
    """The astronaut photo with sensor noise (sigma 7 levels) and its faces."""
    rng = np.random.default_rng(3)
    image = np.clip(astronaut_image + rng.normal(0, 7, astronaut_image.shape), 0, 255).astype(np.uint8)
    frames = HOST.upload([image])
    return image, models.mesh(HOST, frames, models.detector(HOST, frames))


def render(k, models, source_path, image, table, grain: bool) -> np.ndarray:
    return classical_swap(k, models, source_path, image, table, match_grain=grain)


def test_a_noisy_shot_keeps_its_grain_on_the_swapped_skin(models, t1_path, noisy_target):
    image, table = noisy_target
    skin = skin_inside(table, models.regions, image.shape)
    goal = fine(image, skin)
    clean = fine(render(HOST, models, t1_path, image, table, False), skin)
    grained = fine(render(HOST, models, t1_path, image, table, True), skin)
    assert clean < 0.75 * goal, (clean, goal)  # without it, the face is visibly cleaner
    assert 0.75 * goal < grained < 1.2 * goal, (grained, goal)


@pytest.mark.slow
def test_a_clean_shot_gets_no_grain(models, astronaut_path, t1_image, t1_faces):
    image = np.ascontiguousarray(t1_image)
    plain = render(HOST, models, astronaut_path, image, t1_faces, False)
    grained = render(HOST, models, astronaut_path, image, t1_faces, True)
    skin = skin_inside(t1_faces, models.regions, image.shape)
    # t1 is a clean photo: at most a face or two smoother than its target gets a trace
    assert fine(grained, skin) <= 1.1 * fine(plain, skin)
    assert np.abs(grained.astype(int) - plain.astype(int)).mean() < 0.3


@pytest.mark.slow
def test_grain_matching_alike_on_both_kernel_sets(models, t1_path, noisy_target):
    if TorchKernels is None:
        pytest.skip("torch is not installed")
    image, table = noisy_target
    host = render(HOST, models, t1_path, image, table, True)
    device = render(TorchKernels("cpu"), models, t1_path, image, table, True)
    d = np.abs(host.astype(np.int16) - device.astype(np.int16))
    assert d.mean() <= 0.15 and np.percentile(d, 99.9) <= 6, (d.mean(), np.percentile(d, 99.9))
