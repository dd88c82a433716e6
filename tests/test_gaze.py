"""The target's gaze by construction (swap/classical/gaze.py): inside a painted eye the warp is bent
so the target's iris spot samples the source's, the loop itself unmoved."""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.swap.classical.gaze import GAZE_SHIFT_LIMIT, fan_weight, follow_gaze, shifted_offsets


def ellipse(centre: tuple[float, float], axes: tuple[float, float], n: int = 16) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([centre[0] + axes[0] * np.cos(t), centre[1] + axes[1] * np.sin(t)], axis=1)


def test_the_target_spot_samples_the_source_spot_and_the_loop_stays():
    # a map that samples a texture 100 px to the right of the frame region, one to one
    h, w, origin = 60, 80, (10, 20)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    map_x, map_y = xs + origin[0] + 100, ys + origin[1]
    before_x, before_y = map_x.copy(), map_y.copy()
    target_loop = ellipse((50, 50), (20, 8))  # in frame pixels
    source_loop = target_loop + [100, 0]  # the same eye in the texture
    target_spot, source_spot = np.array([56.0, 51.0]), np.array([145.0, 49.0])
    assert follow_gaze(map_x, map_y, origin, target_loop, target_spot, source_loop, source_spot)
    sx, sy = target_spot - origin
    x, y = int(sx), int(sy)
    assert abs(map_x[y, x] - source_spot[0]) < 1e-3 and abs(map_y[y, x] - source_spot[1]) < 1e-3
    # on and outside the loop the map is as it was; inside it moved by at most the shift
    inside = cv2.fillPoly(np.zeros((h, w), np.uint8), [np.round(target_loop - origin).astype(np.int32)], 1)
    outside = inside == 0
    np.testing.assert_array_equal(map_x[outside], before_x[outside])
    np.testing.assert_array_equal(map_y[outside], before_y[outside])
    moved = np.hypot(map_x - before_x, map_y - before_y)
    shift = np.hypot(*(source_spot - (target_spot + [100, 0])))
    assert moved.max() <= shift + 1e-3 and moved.max() > 0.9 * shift


def test_an_eye_sampled_from_elsewhere_is_left_alone():
    """A turned source's eye painted from its flipped half: the map there does not sample the
    photo's own loop, so nothing is bent; nor where the spot lies outside the target's loop."""
    ys, xs = np.mgrid[0:60, 0:80].astype(np.float32)
    map_x, map_y = xs + 300, ys.copy()  # samples far from the source loop
    loop = ellipse((40, 30), (20, 8))
    assert not follow_gaze(map_x, map_y, (0, 0), loop, np.array([40.0, 30.0]), loop, np.array([42.0, 30.0]))
    assert not follow_gaze(map_x, map_y, (0, 0), loop, np.array([40.0, 50.0]), loop, np.array([42.0, 30.0]))
    np.testing.assert_array_equal(map_x, xs + 300)


def test_the_fan_weight_is_one_at_the_apex_and_zero_on_the_loop():
    loop = ellipse((0, 0), (10, 4))
    apex = np.array([3.0, 1.0])
    got = fan_weight(np.vstack([apex, loop, [[30.0, 0.0]]]), apex, loop)
    assert abs(got[0] - 1) < 1e-9 and np.all(np.abs(got[1:-1]) < 1e-9) and got[-1] == 0


def test_the_shift_is_bounded():
    target, source = np.array([0.0, 0.0]), np.array([0.9, -0.9])
    np.testing.assert_allclose(shifted_offsets(target, source), [GAZE_SHIFT_LIMIT[0], -GAZE_SHIFT_LIMIT[1]])
    np.testing.assert_allclose(shifted_offsets(target, np.array([0.1, 0.02])), [0.1, 0.02])


def test_the_swap_bends_a_painted_eye_only_when_asked(models, t1_image, astronaut_path):
    """Off by default (the same pixels as before); on, only pixels inside painted eyes move."""
    from dataclasses import replace

    from facefusion_batch.config import SwapSettings
    from facefusion_batch.kernels.host import HostKernels
    from facefusion_batch.pipeline.build import build_pipeline

    assert SwapSettings().classical.follow_gaze is False
    outs = []
    for follow in (False, True):
        swap = SwapSettings()
        swap = replace(swap, classical=replace(swap.classical, follow_gaze=follow))
        pipeline = build_pipeline(models, (astronaut_path,), swap, "many")
        pipeline.start_job()
        outs.append(pipeline(HostKernels(), [np.ascontiguousarray(t1_image)], seq=0).frames[0])
    changed = np.abs(outs[0].astype(int) - outs[1].astype(int)).max(axis=-1) > 0
    assert 0 < changed.sum() < 0.002 * changed.size, changed.sum()
