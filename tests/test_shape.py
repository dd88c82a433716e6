"""Shape transfer (swap/classical/shape.py): the target mesh takes the source's brows, nose and eye
spacing, mouth width and lip thickness at the target's pose, and keeps its own outline, mouth
opening and eyelid opening."""

from __future__ import annotations

import numpy as np

from facefusion_batch.swap.classical.shape import mouth_weight, shaped_meshes, similarity_3d


def rotation(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def test_the_similarity_fit_recovers_a_known_pose():
    rng = np.random.default_rng(0)
    src = rng.normal(0, 50, (30, 3))
    dst = 1.7 * src @ rotation(0.4).T + [10, -5, 3]
    scale, rot, shift = similarity_3d(src, dst)
    np.testing.assert_allclose(scale * src @ rot.T + shift, dst, atol=1e-6)


def test_a_source_of_the_same_shape_leaves_the_target_as_it_is_and_strength_zero_too(t1_faces, models):
    target = t1_faces.mesh[:2]
    posed = np.stack([0.6 * m @ rotation(0.3).T + [40, 20, 0] for m in target.astype(np.float64)])
    same = shaped_meshes(target, posed.astype(np.float32), models.regions)
    np.testing.assert_allclose(same, target, atol=0.05)
    np.testing.assert_array_equal(
        shaped_meshes(target, posed.astype(np.float32), models.regions, 0.0), target
    )


def test_wider_set_source_eyes_move_the_targets_eyes_apart_but_not_its_outline_or_lips(t1_faces, models):
    regions = models.regions
    target = t1_faces.mesh[:1]
    source = target.copy()
    for loop, side in ((regions.left_eye, 1), (regions.right_eye, -1)):
        span = np.linalg.norm(target[0, 263, :2] - target[0, 33, :2])
        direction = (target[0, 263, :2] - target[0, 33, :2]) / span
        source[0, loop, :2] += side * 0.06 * span * direction  # eyes 12% of the span further apart
    out = shaped_meshes(target, source, regions)[0]
    left, right = out[regions.left_eye, :2].mean(0), out[regions.right_eye, :2].mean(0)
    t_left, t_right = target[0, regions.left_eye, :2].mean(0), target[0, regions.right_eye, :2].mean(0)
    assert np.linalg.norm(left - right) > np.linalg.norm(t_left - t_right) + 3.0
    # the eyelid opening (its shape around the centre) is the target's
    lid = out[regions.left_eye, :2] - left
    np.testing.assert_allclose(np.ptp(lid[:, 1]), np.ptp(target[0, regions.left_eye, 1]), rtol=0.1)
    for fixed in (regions.face_oval, regions.lips_outer, regions.lips_inner):  # no mouth change
        np.testing.assert_allclose(out[fixed, :2], target[0, fixed, :2], atol=0.5)


def test_a_source_mouth_brings_its_width_and_lip_thickness_but_the_target_keeps_its_opening(t1_faces, models):
    regions = models.regions
    outer, inner = regions.lips_outer, regions.lips_inner
    target = t1_faces.mesh[:1]
    source = target.copy()
    centre = target[0, inner, :2].mean(0)
    source[0, np.concatenate([outer, inner]), 0] = centre[0] + 1.1 * (
        target[0, np.concatenate([outer, inner]), 0] - centre[0]
    )  # a mouth 10% wider
    top, bottom = outer[12:19], outer[1:10]  # the upper lip's outer arc, the lower's
    source[0, top, 1] -= 2.0  # fuller lips: the outer contour further from the opening
    source[0, bottom, 1] += 2.0
    out = shaped_meshes(target, source, regions, mouth=np.ones(1))[0]

    def width(mesh, loop):
        return np.ptp(mesh[loop, 0])

    assert width(out, inner) > 1.05 * width(target[0], inner)
    # the opening (each inner point's height) stays the target's: teeth stay under its lips
    np.testing.assert_allclose(out[inner, 1], target[0, inner, 1], atol=0.6)
    thickness = np.abs(out[outer, 1] - out[inner, 1])
    t_thickness = np.abs(target[0, outer, 1] - target[0, inner, 1])
    assert (thickness[1:10] - t_thickness[1:10]).mean() > 1.2
    assert (thickness[12:19] - t_thickness[12:19]).mean() > 1.2
    np.testing.assert_allclose(out[regions.face_oval, :2], target[0, regions.face_oval, :2], atol=0.5)


def test_a_turned_source_photo_keeps_its_mouth_shape_to_itself(t1_faces, models):
    regions = models.regions
    np.testing.assert_allclose(mouth_weight(np.array([0.0, -0.1, 0.225, -0.3, 0.45])), [1, 1, 0.5, 0, 0])
    target = t1_faces.mesh[:1]
    source = target.copy()
    lips = np.concatenate([regions.lips_outer, regions.lips_inner])
    source[0, lips, 0] *= 1.1
    out = shaped_meshes(target, source, regions, mouth=np.array([0.0]))[0]
    np.testing.assert_allclose(out[lips, :2], target[0, lips, :2], atol=0.6)
