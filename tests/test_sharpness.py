"""Sharpness matching: the classical swap blurs the source texture to the target face's own
sharpness (a defocused face stays defocused), on both kernel sets; it never sharpens."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from hostk import classical_swap

from facefusion_batch.kernels.base import sharpness_weights
from facefusion_batch.kernels.host import HostKernels

try:
    from facefusion_batch.kernels.torch_kernels import TorchKernels
except ImportError:  # torch is a test extra
    TorchKernels = None

HOST = HostKernels()


def test_weights_mix_the_two_blurs_around_the_goal():
    detail = np.array([[10.0, 8.0, 6.0, 4.0], [3.0, 2.0, 1.0, 0.5], [10.0, 9.0, 8.0, 7.0]])
    w = sharpness_weights(detail, np.array([6.0 / 1.15, 5.0, 1.0]))
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    np.testing.assert_allclose(w[0], [0, 0, 1, 0], atol=1e-9)  # exactly the second blur
    assert w[1, 0] == 1.0  # already softer than its target: left as it is
    assert w[2, -1] == 1.0  # sharper than every blur can help: the widest
    mid = sharpness_weights(detail[:1], np.array([7.0 / 1.15]))[0]
    np.testing.assert_allclose(mid, [0, 0.5, 0.5, 0], atol=1e-9)


def detail(image: np.ndarray, mask: np.ndarray) -> float:
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
    return float(np.abs(grey - cv2.GaussianBlur(grey, (0, 0), 1.0))[mask].mean())


def face_mask(table, regions, shape) -> np.ndarray:
    mask = np.zeros(shape[:2], np.uint8)
    for mesh in table.mesh:
        cv2.fillPoly(mask, [np.round(mesh[regions.face_oval, :2]).astype(np.int32)], 1)
    return cv2.erode(mask, np.ones((9, 9), np.uint8)) > 0


@pytest.fixture(scope="module")
def soft_target(models, astronaut_image):
    """The astronaut photo defocused (sigma 3 px) and its faces."""
    image = cv2.GaussianBlur(np.ascontiguousarray(astronaut_image), (0, 0), 3.0)
    frames = HOST.upload([image])
    return image, models.mesh(HOST, frames, models.detector(HOST, frames))


def render(k, models, source_path, image, table, match: bool) -> np.ndarray:
    return classical_swap(k, models, source_path, image, table, match_sharpness=match)


def test_a_defocused_face_gets_a_defocused_swap(models, t1_path, soft_target):
    image, table = soft_target
    mask = face_mask(table, models.regions, image.shape)
    goal = detail(image, mask)
    crisp = detail(render(HOST, models, t1_path, image, table, False), mask)
    matched = detail(render(HOST, models, t1_path, image, table, True), mask)
    assert crisp > 2.0 * goal, (crisp, goal)  # the sharp source shows without matching
    assert matched < 1.4 * goal, (matched, goal)


def test_a_sharp_face_is_never_sharpened_or_blurred_away(models, astronaut_path, t1_image, t1_faces):
    image = np.ascontiguousarray(t1_image)
    plain = render(HOST, models, astronaut_path, image, t1_faces, False)
    matched = render(HOST, models, astronaut_path, image, t1_faces, True)
    mask = face_mask(t1_faces, models.regions, image.shape)
    assert detail(matched, mask) <= detail(plain, mask) + 1e-6
    assert detail(matched, mask) > 0.5 * detail(image, mask)


def test_sharpness_matching_alike_on_both_kernel_sets(models, t1_path, soft_target):
    if TorchKernels is None:
        pytest.skip("torch is not installed")
    image, table = soft_target
    host = render(HOST, models, t1_path, image, table, True)
    device = render(TorchKernels("cpu"), models, t1_path, image, table, True)
    d = np.abs(host.astype(np.int16) - device.astype(np.int16))
    assert d.mean() <= 0.1 and np.percentile(d, 99.9) <= 6, (d.mean(), np.percentile(d, 99.9))
