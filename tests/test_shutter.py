"""The camera's shutter (`--shutter`, ClassicalSettings.shutter): a moving face's swap is smeared
along its track's motion as far as the shutter was open, as the plate's own motion blur.

The plate is the quality set's motion-blur condition (scripts/quality_set.py): the astronaut's
face moving along a line as fast as a 180° shutter says for the blur drawn along it."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hostk import HOST, analyse, classical_option

from facefusion_batch.config import SwapSettings
from facefusion_batch.kernels.base import streak_kernel
from facefusion_batch.pipeline.build import build_pipeline
from facefusion_batch.swap.classical.settings import ClassicalSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from quality_harm import blur_mismatch  # noqa: E402
from quality_set import PLATE_SHUTTER, Condition, face_offset, render_clip  # noqa: E402


def test_the_streak_kernel_is_a_line_of_the_smears_length_and_direction():
    for streak in [(10.0, 0.0), (0.0, -7.0), (6.0, 8.0)]:
        kernel = streak_kernel(streak).astype(np.float64)
        assert kernel.sum() == pytest.approx(1.0, abs=1e-6)
        ys, xs = np.indices(kernel.shape) - kernel.shape[0] // 2
        mean = np.array([(xs * kernel).sum(), (ys * kernel).sum()])
        assert np.allclose(mean, 0.0, atol=1e-6)  # centred: the face is smeared, not moved
        spread = np.array([[(xs * xs * kernel).sum(), (xs * ys * kernel).sum()],
                           [(xs * ys * kernel).sum(), (ys * ys * kernel).sum()]])  # fmt: skip
        values, vectors = np.linalg.eigh(spread)
        length = float(np.hypot(*streak))
        direction = np.asarray(streak) / length
        assert abs(float(vectors[:, 1] @ direction)) > 0.99  # along the smear
        assert values[1] == pytest.approx(length**2 / 12, rel=0.15)  # a box of that length
        assert values[0] < 0.2  # and thin across it


@pytest.fixture(scope="module")
def plate(models, astronaut_image):
    """Three frames of the astronaut moving 28 px a frame along 60°, smeared 14 px along it."""
    table = models.detector(HOST, HOST.upload([astronaut_image]))
    row = int(np.argmax(table.areas()))
    cond = Condition(kind="blur", face_px=200.0, blur=14.0, blur_angle=60.0)
    clip = render_clip(astronaut_image, table.box[row], table.landmarks5[row], cond, 3)
    step = face_offset(cond, 1, 3) - face_offset(cond, 0, 3)
    assert np.hypot(*step) == pytest.approx(cond.blur / PLATE_SHUTTER)
    return clip


def rendered(models, source: Path, clip: list[np.ndarray], **fields) -> list[np.ndarray]:
    settings = SwapSettings(classical=replace(ClassicalSettings(), **fields))
    pipeline = build_pipeline(models, (source,), settings, "many")
    pipeline.start_job()
    return pipeline(HOST, [np.ascontiguousarray(f) for f in clip], seq=0).frames


def test_a_moving_face_is_smeared_as_far_as_the_shutter_was_open(models, plate, t1_path):
    """Without the shutter the swapped face stays crisp along the motion (half again the plate's
    gradient energy there: 1.51–1.54 measured); at the plate's 180° it comes to the plate's
    (1.03–1.19: the track's smoothed motion lags on its second frame). A track's first frame has
    no motion yet and is painted the same either way."""
    crisp = rendered(models, t1_path, plate)
    smeared = rendered(models, t1_path, plate, shutter=180.0)
    table = analyse(models, plate)
    assert np.array_equal(crisp[0], smeared[0])
    for f in (1, 2):
        row = int(np.flatnonzero(table.frame_index == f)[0])
        before = blur_mismatch(plate[f], crisp[f], table.mesh[row], models.regions)
        after = blur_mismatch(plate[f], smeared[f], table.mesh[row], models.regions)
        assert before > 1.4, before
        assert 0.8 < after < 1.25, after


def test_the_shutter_option_reaches_the_settings(tmp_path):
    """`--shutter DEGREES` on render sets the smear (0, none, by default)."""
    assert classical_option(tmp_path).shutter == 0.0
    assert classical_option(tmp_path, shutter=172.8).shutter == 172.8
