"""Closed eyes stay closed: where the target's eye is much more closed than the source's (a
blink, a wink), the classical swap keeps the target's own eye, on both kernel sets."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest

from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER, eye_frame
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.swap.classical.features import eye_openness
from facefusion_batch.swap.classical.fit import held_eyes
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.stage import ClassicalSwapper, far_eye_holds
from facefusion_batch.swap.classical.symmetry import TURNED_FROM, TURNED_FULLY

try:
    from facefusion_batch.kernels.torch_kernels import TorchKernels
except ImportError:  # torch is a test extra
    TorchKernels = None

HOST = HostKernels()


def closed(mesh: np.ndarray, regions, which: tuple[int, ...] = (0, 1), keep: float = 0.1) -> np.ndarray:
    """The faces' meshes with the chosen eyes shut: each eye loop's height squeezed to `keep`
    about its centre line, along the face's eye line."""
    out = mesh.copy()
    for f in range(len(out)):
        d = out[f, RIGHT_EYE_OUTER, :2] - out[f, LEFT_EYE_OUTER, :2]
        along = d / np.linalg.norm(d)
        across = np.array([-along[1], along[0]])
        for e in which:
            loop = (regions.left_eye, regions.right_eye)[e]
            pts = out[f, loop, :2]
            centre = pts.mean(axis=0)
            v = (pts - centre) @ across
            out[f, loop, :2] = pts - np.outer(v * (1 - keep), across)
    return out


def test_held_eyes_follow_the_opening_ratio():
    source = np.array([[0.3, 0.3]])
    ratios = np.array([[1.0, 0.62], [0.5, 0.3], [0.1, 2.0]])
    held = held_eyes(ratios * source, np.repeat(source, 3, axis=0))
    assert np.all(held[0] == 0.0)  # open as the source: the source's eyes
    assert 0.0 < held[1, 0] < 1.0 and held[1, 1] == 1.0  # half shut: a blend; shut: the target's
    assert held[2, 0] == 1.0 and held[2, 1] == 0.0  # a wink keeps one eye


def test_a_shut_eye_is_measured_shut(models, t1_faces):
    open_ = eye_openness(t1_faces.mesh, models.regions)
    shut = eye_openness(closed(t1_faces.mesh, models.regions, (1,)), models.regions)
    np.testing.assert_allclose(shut[:, 0], open_[:, 0], rtol=0.02)  # the eye line tilts a little
    assert np.all(shut[:, 1] < 0.2 * open_[:, 1])


def test_a_turned_targets_far_eye_stays_its_own(models, t1_faces, t1_image):
    """Past TURNED_FROM..TURNED_FULLY the eye the face turns away from (beside the nose, at the silhouette)
    is held; the near eye and every frontal face's eyes are not; a mirrored face holds the same
    eye of its own (the far one again)."""
    yaw = np.array([eye_frame(m)[2] for m in t1_faces.mesh])
    far = far_eye_holds(t1_faces.mesh)
    turned = np.flatnonzero(np.abs(yaw) >= TURNED_FULLY)
    assert len(turned) >= 1 and (np.abs(yaw) < TURNED_FROM).sum() >= 3  # t1.jpg: Matt's profile
    for f in range(len(yaw)):
        if abs(yaw[f]) < TURNED_FROM:
            assert far[f].tolist() == [0.0, 0.0]
    for f in turned:
        assert sorted(far[f].tolist()) == [0.0, 1.0]
        loops = (models.regions.left_eye, models.regions.right_eye)
        nose = t1_faces.mesh[f, 4, 0]
        gaps = [abs(t1_faces.mesh[f, loop, 0].mean() - nose) for loop in loops]
        assert far[f, int(np.argmin(gaps))] == 1.0  # the held eye is the one beside the nose
    mirrored = t1_faces.mesh.copy()
    mirrored[:, :, 0] = t1_image.shape[1] - 1 - mirrored[:, :, 0]
    np.testing.assert_allclose(far_eye_holds(mirrored), far, atol=1e-5)


@pytest.fixture(scope="module")
def swapper(models, astronaut_path):
    """The default, with the fit (swap/classical/fit.py): a face with a closed eye keeps both its own."""
    settings = ClassicalSettings()
    sources = prepare_sources(models, (astronaut_path,), settings)
    assert sources[0].texture.shape[2] == 7
    return ClassicalSwapper(sources, models.triangles, models.regions, settings)


@pytest.fixture(scope="module")
def own_eyes(models, astronaut_path):
    """With the fit off: a closed target eye stays the target's own, the other eye the source's."""
    settings = ClassicalSettings(fit=False)
    sources = prepare_sources(models, (astronaut_path,), settings)
    assert sources[0].texture.shape[2] == 7
    return ClassicalSwapper(sources, models.triangles, models.regions, settings)


def paint(k, swapper, image, table):
    frames = k.upload([image])
    swapper(k, frames, table)
    return k.download(frames)[0]


def eye_change(before: np.ndarray, after: np.ndarray, table, regions) -> float:
    mask = np.zeros(before.shape[:2], np.uint8)
    for mesh in table.mesh:
        for loop in (regions.left_eye, regions.right_eye):
            cv2.fillPoly(mask, [np.round(mesh[loop, :2]).astype(np.int32)], 1)
    return float(np.abs(after.astype(np.int16) - before.astype(np.int16))[mask > 0].mean())


@pytest.mark.slow
def test_shut_target_eyes_stay_the_targets_own(models, own_eyes, swapper, t1_image, t1_faces):
    image = np.ascontiguousarray(t1_image)
    shapes = np.array([image.shape[:2]])
    far = far_eye_holds(t1_faces.mesh)  # a turned face's far eye is held all the same
    assert [r.hold_eyes for r in own_eyes.regions(t1_faces, shapes)] == [tuple(h) for h in far.tolist()]
    shut = replace(t1_faces, mesh=closed(t1_faces.mesh, models.regions))
    assert all(r.hold_eyes == (1.0, 1.0) for r in own_eyes.regions(shut, shapes))
    # with the fit (the default) too, and one shut eye keeps both: no source eye is drawn shut
    fit = swapper.regions(shut, shapes)
    assert all(r.hold_eyes == (1.0, 1.0) for r in fit)
    wink = replace(t1_faces, mesh=closed(t1_faces.mesh, models.regions, (0,)))
    assert all(r.hold_eyes == (1.0, 1.0) for r in swapper.regions(wink, shapes))
    assert any(r.hold_eyes[1] == 0.0 for r in own_eyes.regions(wink, shapes))  # fit off: one eye
    # the painted pixels along the shut eyes' lash lines: the source's while the mesh has the
    # eyes open, the target's once it has them shut (the lid above comes from the source:
    # EYE_MARGIN is a pixel or two, so the source's lid and brow bone carry its identity).
    # Feather blending: multiband carries the lid's low frequencies into a one-pixel slit
    settings = ClassicalSettings(blend="feather", fit=False)
    feather = ClassicalSwapper(own_eyes.sources, models.triangles, models.regions, settings)
    wide = eye_change(image, paint(HOST, feather, image, t1_faces), shut, models.regions)
    held = eye_change(image, paint(HOST, feather, image, shut), shut, models.regions)
    assert wide > 10 and held < 0.3 * wide, (wide, held)


@pytest.mark.slow
def test_held_eyes_paint_alike_on_both_kernel_sets(models, swapper, t1_image, t1_faces):
    if TorchKernels is None:
        pytest.skip("torch is not installed")
    image = np.ascontiguousarray(t1_image)
    table = replace(t1_faces, mesh=closed(t1_faces.mesh, models.regions, (0,)))
    host, device = paint(HOST, swapper, image, table), paint(TorchKernels("cpu"), swapper, image, table)
    d = np.abs(host.astype(np.int16) - device.astype(np.int16))
    assert d.mean() <= 0.1 and np.percentile(d, 99.9) <= 6, (d.mean(), np.percentile(d, 99.9))
