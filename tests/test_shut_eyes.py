"""Source photos with shut eyes: a winking photo gives its open eye to both sides, and a photo with
both eyes shut is warned of (every target keeps its own eyes then)."""

from __future__ import annotations

import logging
from dataclasses import replace

import cv2
import hostk
import numpy as np
import pytest

from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.stage import swap_triangles
from facefusion_batch.swap.classical.symmetry import wink_shares

# t1.jpg's faces by the left edge of their box (px), as tests/test_lids.py finds them
DAVID, MATTHEW, LISA = 462, 750, 1132


@pytest.fixture(scope="module")
def astronaut(astronaut_image, astronaut_mesh):
    return astronaut_image, astronaut_mesh


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


def test_a_winking_photo_gives_its_open_eye_to_both_sides(models, t1_image, t1_faces, tmp_path, caplog):
    """t1.jpg's Matthew winks (his left eye shut; his right a smile's squint): as a source, the
    triangles round that eye are painted from the flipped photo (his right eye). With the fit
    off the source then counts as open-eyed; with it (the default) the photo keeps its reading,
    so targets keep their own eyes instead of his squint painted on both sides as slits."""
    settings = replace(ClassicalSettings(), fit=False)
    path = face_photo(tmp_path, t1_image, t1_faces, MATTHEW, "matthew")
    plain = prepare_sources(models, (path,), replace(settings, mirror_fill=False))[0]
    assert plain.lid_shut[0] >= 0.9 and plain.lid_shut[1] <= 0.1, plain.lid_shut
    source = prepare_sources(models, (path,), settings)[0]
    assert source.lid_shut == pytest.approx((0.0, 0.0), abs=0.1)
    assert source.eye_open[0] == pytest.approx(source.eye_open[1])
    with caplog.at_level(logging.WARNING, logger="ffbatch"):
        fitted = prepare_sources(models, (path,), ClassicalSettings())[0]
    assert fitted.lid_shut == plain.lid_shut and fitted.eye_open == plain.eye_open
    np.testing.assert_array_equal(fitted.use_mirror, source.use_mirror)  # the same texture
    assert any("reads shut (a squint or a wink)" in r.getMessage() for r in caplog.records)
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


def test_a_winking_photo_leaves_every_target_its_own_eyes(models, t1_image, t1_faces, t1_small, tmp_path):
    """Matthew's photo as the source over t1: no face gets his eyes (none decided `full`), most
    for the reason that the photo's own eye is shut."""
    path = face_photo(tmp_path, t1_image, t1_faces, MATTHEW, "matthew")
    result, report = hostk.reported(models, path, [t1_small] * 2)
    assert result.faces_swapped >= 10 and "full" not in report.swap_decisions, report.swap_decisions
    assert report.swap_decisions.get("own_eyes_source_shut", 0) >= result.faces_swapped // 2
