"""Closed eyes the mesh keeps open stay closed: t1.jpg's Lisa (eyes shut, smiling) and Jennifer
(lids lowered, looking down) measure as open as David in the mesh; the picture tells them apart
(swap/classical/lids.py), and the classical swap keeps them shut (the target's own eyes), on both kernel
sets."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from facefusion_batch.faces.align import align_crops, host_crops, transform_points
from facefusion_batch.kernels.host import HostKernels
from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.swap.classical.features import eye_openness
from facefusion_batch.swap.classical.lids import (
    LID_CROP,
    LID_OPEN,
    LID_SHUT,
    LID_TEMPLATE,
    lid_holds,
    lid_skin_shares,
)
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.stage import ClassicalSwapper

try:
    from facefusion_batch.kernels.torch_kernels import TorchKernels
except ImportError:  # torch is a test extra
    TorchKernels = None

HOST = HostKernels()
# t1.jpg's faces by the left edge of their box (px): who they are and how their eyes are
JENNIFER, DAVID, COURTENEY, MATTHEW, MATT, LISA = 52, 462, 270, 750, 898, 1132


def by_x(table, x: int) -> int:
    return int(np.argmin(np.abs(table.box[:, 0] - x)))


def shares(k, image: np.ndarray, table, regions) -> np.ndarray:
    frames = k.upload([image])
    crops, affines = align_crops(k, frames, table.frame_index, table.landmarks5, LID_TEMPLATE, LID_CROP)
    meshes = transform_points(table.mesh[:, :, :2].astype(np.float64), affines)
    return lid_skin_shares(host_crops(k, crops), meshes, regions)


def test_the_mesh_alone_cannot_tell_these_lids(models, t1_faces):
    """Why swap/classical/lids.py exists: by mesh opening the shut eyes are as open as David's."""
    opening = eye_openness(t1_faces.mesh, models.regions)
    for who in (JENNIFER, LISA):
        assert opening[by_x(t1_faces, who)].min() >= 0.8 * opening[by_x(t1_faces, DAVID)].min()


def test_shut_and_lowered_lids_are_told_from_open_eyes(models, t1_image, t1_faces, astronaut_image):
    s = shares(HOST, np.ascontiguousarray(t1_image), t1_faces, models.regions)
    for who in (JENNIFER, LISA):
        assert np.all(s[by_x(t1_faces, who)] >= LID_SHUT), (who, s)
    for who in (DAVID, COURTENEY, MATT):  # open (Courteney's looks down, but her iris shows)
        assert np.all(s[by_x(t1_faces, who)] < LID_OPEN), (who, s)
    astronaut = models.mesh(
        HOST, HOST.upload([astronaut_image]), models.detector(HOST, HOST.upload([astronaut_image]))
    )
    assert np.all(shares(HOST, np.ascontiguousarray(astronaut_image), astronaut, models.regions) < LID_OPEN)
    holds = lid_holds(s)
    assert holds[by_x(t1_faces, LISA)].tolist() == [1.0, 1.0]
    assert holds[by_x(t1_faces, DAVID)].tolist() == [0.0, 0.0]


def test_an_eye_too_small_to_tell_is_not_held(models, t1_faces):
    """A crop where the eye loops hold almost no pixels gives NaN, which holds nothing."""
    tiny = np.full((len(t1_faces), 8, 8, 3), 128, np.uint8)
    s = lid_skin_shares(tiny, t1_faces.mesh[:, :, :2] * 0.0 + 4.0, models.regions)
    assert np.isnan(s).all() and lid_holds(s).max() == 0.0


@pytest.fixture(scope="module")
def swappers(models, astronaut_path):
    """The astronaut onto t1.jpg three ways: with the fit off (swap/classical/fit.py) "own" (a shut eye
    stays the target's own) and "open" (no lids read: the astronaut's open eye is painted over
    it); and the default, "fit" (a face with a shut eye keeps both its own)."""
    variants = {
        "own": ClassicalSettings(fit=False),
        "open": ClassicalSettings(lids=False, fit=False),
        "fit": ClassicalSettings(),  # the default: swap/classical/fit.py keeps a face's shut eyes whole
    }
    return {
        name: ClassicalSwapper(
            prepare_sources(models, (astronaut_path,), settings), models.triangles, models.regions, settings
        )
        for name, settings in variants.items()
    }


def eye_change(before: np.ndarray, after: np.ndarray, mesh: np.ndarray, regions) -> float:
    mask = np.zeros(before.shape[:2], np.uint8)
    for loop in (regions.left_eye, regions.right_eye):
        cv2.fillPoly(mask, [np.round(mesh[loop, :2]).astype(np.int32)], 1)
    return float(np.abs(after.astype(np.int16) - before.astype(np.int16))[mask > 0].mean())


def paint(k, swapper, image, table) -> np.ndarray:
    frames = k.upload([image])
    swapper(k, frames, table)
    return k.download(frames)[0]


def test_a_shut_eye_stays_shut_and_an_open_one_takes_the_sources(models, swappers, t1_image, t1_faces):
    image = np.ascontiguousarray(t1_image)
    out = {name: paint(HOST, s, image, t1_faces) for name, s in swappers.items()}
    lisa_row, david_row = by_x(t1_faces, LISA), by_x(t1_faces, DAVID)
    lisa, david = t1_faces.mesh[lisa_row], t1_faces.mesh[david_row]
    change = {name: eye_change(image, o, lisa, models.regions) for name, o in out.items()}
    # without the lids the astronaut's open eyes are painted over Lisa's shut ones; kept as her
    # own they change little
    assert change["open"] > 15 and change["own"] < 0.35 * change["open"], change
    assert change["fit"] < 0.35 * change["open"], change
    # and both of Lisa's eyes still read as shut, by the measure that reads t1.jpg's shut eyes
    read = {name: shares(HOST, o, t1_faces, models.regions)[lisa_row] for name, o in out.items()}
    assert all((read[name] >= LID_SHUT).all() for name in ("own", "fit")), read
    assert (read["open"] < LID_OPEN).all(), read
    # David's open eyes take the source's every way with the fit off
    opened = [eye_change(image, o, david, models.regions) for name, o in out.items() if name != "fit"]
    assert min(opened) > 15 and max(opened) < 1.05 * min(opened), opened


def test_lids_are_told_alike_on_both_kernel_sets(models, t1_image, t1_faces):
    if TorchKernels is None:
        pytest.skip("torch is not installed")
    image = np.ascontiguousarray(t1_image)
    host, device = (
        shares(HOST, image, t1_faces, models.regions),
        shares(TorchKernels("cpu"), image, t1_faces, models.regions),
    )
    np.testing.assert_allclose(lid_holds(host), lid_holds(device), atol=0.05)
