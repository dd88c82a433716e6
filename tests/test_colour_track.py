"""Colour statistics along a track (swap/classical/colour_track.py): a dark bar passing in front of a face
for three frames does not pump the rest of the face; the history follows batch order, starts
afresh for a batch on its own, and forgets what lies outside its window."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from hostk import HOST, analyse

from facefusion_batch.faces.track import FaceTracker
from facefusion_batch.pipeline.build import prepare_sources
from facefusion_batch.swap.classical.colour_track import ColourTracks, track_values
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.stage import ClassicalSwapper

try:
    from facefusion_batch.kernels.torch_kernels import TorchKernels
except ImportError:  # torch is a test extra
    TorchKernels = None


def stats_of(spread: float, mean: float) -> np.ndarray:
    """[4, 3] colour statistics whose target spread is `spread` times the source's and whose
    target mean lies `mean` above it."""
    return np.array([[100, 128, 128], [10, 5, 5], [100 + mean, 128, 128], [10 * spread, 5, 5]], np.float64)


def test_a_few_unlike_frames_are_outvoted_by_their_track():
    tracks = ColourTracks(window=16)
    stats = np.stack([stats_of(1.0, 0.0)] * 6 + [stats_of(1.6, -20.0)] * 3 + [stats_of(1.0, 0.0)] * 3)
    fixes = tracks.step(0, np.zeros(12, np.int64), np.arange(12), stats)
    values = track_values(stats)
    fixed = np.stack([values[:, 0] * fixes[:, 0], values[:, 1] + fixes[:, 1]], axis=1)
    # every frame is painted with the track's median: the three dark frames included
    assert np.allclose(fixed[:, 0, 0], 1.0) and np.allclose(fixed[:, 1, 0], 0.0), fixed[:, :, 0]
    # a steady frame is left as it is
    assert np.allclose(fixes[:6, 0], 1.0) and np.allclose(fixes[:6, 1], 0.0)


def test_the_history_follows_batch_order_and_its_window():
    tracks = ColourTracks(window=4)
    first = tracks.step(0, np.zeros(4, np.int64), np.arange(4), np.stack([stats_of(1.0, 0.0)] * 4))
    assert np.allclose(first[:, 1], 0.0)
    # the next batch's first frame is unlike the last four: outvoted, it is moved to them
    nxt = tracks.step(1, np.zeros(1, np.int64), np.array([4]), stats_of(1.0, 9.0)[None])
    assert nxt[0, 1, 0] == pytest.approx(-9.0)
    # 8 frames later the old frames are out of the window: its own statistics again
    later = tracks.step(2, np.zeros(1, np.int64), np.array([12]), stats_of(1.0, 9.0)[None])
    assert later[0, 1, 0] == pytest.approx(0.0)
    # a batch on its own (seq None) starts from nothing and leaves the job's history alone
    alone = tracks.step(None, np.zeros(1, np.int64), np.array([13]), stats_of(1.0, 30.0)[None])
    assert alone[0, 1, 0] == pytest.approx(0.0) and len(tracks.history[0]) == 1
    # untracked faces and faces with too little skin (NaN) get no fix
    other = tracks.step(3, np.array([-1, 5]), np.array([14, 14]), np.full((2, 4, 3), np.nan))
    assert not np.isfinite(other).any()


@pytest.fixture(scope="module")
def barred(models, astronaut_image):
    """12 frames of the astronaut photo with a dark bar over the lower left quarter of its face
    in frames 6-8, their tracked faces, and where the input never changes (41 px off the bar)."""
    still = np.ascontiguousarray(astronaut_image)
    box = analyse(models, [still]).box[0].astype(int)
    bar = np.zeros(still.shape[:2], np.uint8)
    x0, y0, x1, y1 = box
    bar[(y0 + y1) // 2 : y1, x0 : x0 + (x1 - x0) // 4] = 1
    frames = [still.copy() for _ in range(12)]
    for i in (6, 7, 8):
        frames[i][bar > 0] = (30, 30, 40)
    table = FaceTracker().step(analyse(models, frames), len(frames))
    away = np.zeros(bar.shape, bool)
    away[max(0, y0) : y1, max(0, x0) : x1] = True
    away &= ~(cv2.dilate(bar, np.ones((41, 41), np.uint8)) > 0)
    return frames, table, away


def swap_clip(k, models, source, frames, table, window: int) -> list[np.ndarray]:
    settings = ClassicalSettings(colour_window=window)
    swapper = ClassicalSwapper(
        prepare_sources(models, (source,), settings), models.triangles, models.regions, settings
    )
    batch = k.upload(frames)
    swapper(k, batch, table)
    return k.download(batch)


def pumping(out: list[np.ndarray], away: np.ndarray) -> float:
    """The most the swap away from the bar changes while the bar is there (mean levels)."""
    return max(float(np.abs(out[i].astype(int) - out[5].astype(int))[away].mean()) for i in (6, 7, 8))


@pytest.mark.slow
def test_a_bar_in_front_for_three_frames_does_not_pump_the_face(models, t1_path, barred):
    frames, table, away = barred
    own = pumping(swap_clip(HOST, models, t1_path, frames, table, window=0), away)
    tracked = pumping(swap_clip(HOST, models, t1_path, frames, table, window=16), away)
    assert tracked <= 0.6 * own, (tracked, own)


@pytest.mark.slow
def test_track_colours_alike_on_both_kernel_sets(models, t1_path, barred):
    if TorchKernels is None:
        pytest.skip("torch is not installed")
    frames, table, away = barred
    host = swap_clip(HOST, models, t1_path, frames, table, window=16)
    device = swap_clip(TorchKernels("cpu"), models, t1_path, frames, table, window=16)
    for i in (5, 7):
        d = np.abs(host[i].astype(np.int16) - device[i].astype(np.int16))
        assert d.mean() <= 0.1 and np.percentile(d, 99.9) <= 6, (i, d.mean(), np.percentile(d, 99.9))
    assert abs(pumping(host, away) - pumping(device, away)) < 0.3
