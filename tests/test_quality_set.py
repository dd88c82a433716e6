"""The quality benchmark's wider set (scripts/quality_set.py, scripts/quality_harm.py): the
hold-out split and the condition generator are deterministic, both halves hold clips, and each
condition is really applied, measured on the rendered frames (the mesh's roll, the detector's
box, light, noise, blur, H.264, occluders)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import hostk
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from quality_harm import SHARPER_FLAG, SOFTER_FLAG, blur_mismatch, loop_opening, openings  # noqa: E402
from quality_set import (  # noqa: E402
    ASTRONAUT_SHA256,
    CAMERAMAN_SHA256,
    FRAME,
    KINDS,
    TOM_HANKS_SHA256,
    clip_plan,
    condition,
    photo_half,
    render_clip,
    t1_face_sha256,
)

from facefusion_batch.faces.mesh import eye_frame  # noqa: E402

HALVES = {
    "astronaut": photo_half(ASTRONAUT_SHA256),
    "tom_hanks": photo_half(TOM_HANKS_SHA256),
    "cameraman": photo_half(CAMERAMAN_SHA256),
    **{f"t1-face{r}": photo_half(t1_face_sha256(r)) for r in range(6)},
}


def test_split_is_fixed_and_both_halves_hold_clips():
    assert HALVES == {
        "astronaut": "judging",
        "tom_hanks": "tuning",
        "cameraman": "judging",
        "t1-face0": "judging",
        "t1-face1": "judging",
        "t1-face2": "tuning",
        "t1-face3": "tuning",
        "t1-face4": "judging",
        "t1-face5": "tuning",
    }
    plan = clip_plan(HALVES, seed=0)
    assert plan == clip_plan(HALVES, seed=0)
    for half in ("tuning", "judging"):
        clips = [p for p in plan if p[0] == half]
        assert clips
        # a clip never mixes halves and never swaps a face onto itself
        assert all(HALVES[s] == half and HALVES[t] == half and s != t for _, s, t, _ in clips)
    assert {c.kind for h, _, _, c in plan if h == "judging"} == set(KINDS)
    assert clip_plan(HALVES, seed=1) != plan  # the seed draws other strengths


def test_conditions_are_seeded_and_in_range():
    for kind in KINDS:
        assert condition(kind, "a>b", 3) == condition(kind, "a>b", 3)
    rolls = [condition("roll", f"k{i}").roll for i in range(20)]
    assert all(15 <= abs(r) <= 30 for r in rolls) and min(rolls) < 0 < max(rolls)
    assert all(50 <= condition("small", f"k{i}").face_px <= 80 for i in range(10))
    assert all(380 <= condition("large", f"k{i}").face_px <= 500 for i in range(10))


def face_of(astronaut_image, models):
    table = models.detector(hostk.HOST, hostk.HOST.upload([astronaut_image]))
    row = int(np.argmax(table.areas()))
    return table.box[row], table.landmarks5[row]


def analyse(models, frames):
    table = models.mesh(
        hostk.HOST, hostk.HOST.upload(frames), models.detector(hostk.HOST, hostk.HOST.upload(frames))
    )
    assert len(table) == len(frames)  # the rendered face is found, once per frame
    return table


def test_render_is_deterministic(astronaut_image, models):
    box, marks = face_of(astronaut_image, models)
    cond = condition("noise", "a>b")
    a = render_clip(astronaut_image, box, marks, cond, 2, seed=5)
    b = render_clip(astronaut_image, box, marks, cond, 2, seed=5)
    assert a[0].shape == (FRAME[1], FRAME[0], 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_roll_size_and_nod_change_the_mesh(astronaut_image, models):
    box, marks = face_of(astronaut_image, models)
    plain = condition("roll", "a>b")
    level = analyse(models, render_clip(astronaut_image, box, marks, replace(plain, roll=0.0), 1))
    rolled = analyse(models, render_clip(astronaut_image, box, marks, plain, 1))
    turned = np.degrees(eye_frame(rolled.mesh[0])[0] - eye_frame(level.mesh[0])[0])
    assert turned == pytest.approx(plain.roll, abs=3.0)
    for kind in ("small", "large"):
        cond = condition(kind, "a>b")
        found = analyse(models, render_clip(astronaut_image, box, marks, cond, 1))
        width = float(found.box[0, 2] - found.box[0, 0])
        assert width == pytest.approx(cond.face_px, rel=0.15)
    nod = condition("nod", "a>b")
    swept = analyse(models, render_clip(astronaut_image, box, marks, nod, 3))
    # the face's height against its width: the chin-down end of the sweep is foreshortened (a
    # flat photo tilted: the mesh reads the chin-up end as near upright), and the sweep moves
    heights = [np.ptp(m[:, 1]) / np.ptp(m[:, 0]) for m in swept.mesh[:, :, :2]]
    assert heights[0] < heights[1] - 0.03 and heights[2] > heights[0] + 0.03


def face_region(frame: np.ndarray, face_px: float) -> np.ndarray:
    h, w = frame.shape[:2]
    r = int(face_px / 2)
    return frame[h // 2 - r : h // 2 + r, w // 2 - r : w // 2 + r].astype(float)


@pytest.mark.parametrize(
    "kind", ["dim", "colour", "side", "noise", "blur", "h264", "hand", "hair", "glasses"]
)
def test_each_condition_is_applied(astronaut_image, models, kind):
    box, marks = face_of(astronaut_image, models)
    cond = condition(kind, "a>b")
    clean = replace(
        cond, gain=1.0, tint=(1.0, 1.0, 1.0), side=0.0, noise=0.0, blur=0.0, kbps=0, occluder="", kind="plain"
    )
    got = face_region(render_clip(astronaut_image, box, marks, cond, 1)[0], cond.face_px)
    ref = face_region(render_clip(astronaut_image, box, marks, clean, 1)[0], cond.face_px)
    if kind == "dim":
        assert got.mean() / ref.mean() == pytest.approx(cond.gain, rel=0.05)
    elif kind == "colour":
        ratios = got.reshape(-1, 3).mean(0) / ref.reshape(-1, 3).mean(0)
        assert ratios == pytest.approx(np.array(cond.tint) * cond.gain, rel=0.1)
    elif kind == "side":
        half = got.shape[1] // 2
        left = got[:, :half].mean() / ref[:, :half].mean()
        right = got[:, half:].mean() / ref[:, half:].mean()
        assert (right > left) == (cond.side > 0) and max(left, right) / min(left, right) > 1.3
    elif kind == "noise":
        assert np.std(got - ref) == pytest.approx(cond.noise, rel=0.15)
    elif kind == "blur":
        sharp = lambda x: np.abs(np.diff(x, axis=0)).mean() + np.abs(np.diff(x, axis=1)).mean()  # noqa: E731
        assert sharp(got) < 0.7 * sharp(ref)
    elif kind == "h264":
        mse = np.mean((got - ref) ** 2)
        assert 0.5 < mse < 300  # really coded, and still the picture
    else:
        changed = (np.abs(got - ref).max(axis=2) > 30).mean()
        assert 0.01 < changed < 0.5


def test_openings_of_an_ellipse():
    t = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    eye = np.stack([20 * np.cos(t), 5 * np.sin(t)], axis=1)
    assert loop_opening(eye, 0.0) == pytest.approx(0.25, abs=0.02)
    assert loop_opening(eye @ np.array([[0, 1], [-1, 0]]), np.pi / 2) == pytest.approx(0.25, abs=0.02)


def test_openings_on_a_real_face(t1_faces, models):
    values = openings(t1_faces.mesh[0], models.regions)
    assert values.shape == (3,) and np.all(values >= 0) and np.all(values < 1)


def test_blur_mismatch_tells_a_crisp_face_in_a_motion_blur_and_an_erased_rim(astronaut_image, models):
    """A face blurred along one direction against its sharp self reads as sharper than its frame;
    the same face with glasses rims drawn against it without reads as detail lost."""
    import cv2
    from quality_set import draw_occluder

    image = np.ascontiguousarray(astronaut_image)
    table = hostk.analyse(models, [image])
    row = int(np.argmax(table.areas()))
    mesh = table.mesh[row]
    kernel = np.zeros((15, 15), np.float32)
    kernel[7, :] = 1 / 15  # 15 px along the rows
    blurred = cv2.filter2D(image, -1, kernel)
    assert blur_mismatch(blurred, blurred, mesh, models.regions) == pytest.approx(1.0)
    assert blur_mismatch(blurred, image, mesh, models.regions) > SHARPER_FLAG
    rims = image.copy()
    draw_occluder(rims, "glasses", table.landmarks5[row][:2].astype(np.float64), 0.0, 0.0)
    assert blur_mismatch(rims, image, mesh, models.regions) < SOFTER_FLAG


def test_fold_deepening_tells_a_deeper_smile_line_and_a_lifted_one(astronaut_image, astronaut_mesh, models):
    """The astronaut's broad smile reads as folds on her own picture; the same face with both
    folds painted darker reads as deeper by more than the flag, with them lifted as shallower,
    and against itself as unchanged."""
    import cv2
    from quality_harm import FOLD_FLAG, fold_deepening, fold_depths

    from facefusion_batch.swap.classical.smile_lines import SMILE_LINES, lift_smile_lines

    image, mesh = np.ascontiguousarray(astronaut_image), astronaut_mesh
    own = fold_depths(image, mesh, models.regions)
    assert np.all(own > 0.03)  # her smile's folds are darker than the cheek round them
    assert fold_deepening(image, image, mesh, models.regions) == 0.0
    iod = 0.7 * eye_frame(mesh)[1]
    lines = np.zeros(image.shape[:2], np.uint8)
    for line in SMILE_LINES:
        cv2.polylines(lines, [np.round(mesh[line, :2]).astype(np.int32)], False, 1, 1)
    near = cv2.distanceTransform((lines == 0).astype(np.uint8), cv2.DIST_L2, 5) < 0.03 * iod
    deeper = np.clip(image * np.where(near, 0.7, 1.0)[..., None], 0, 255).astype(np.uint8)
    assert fold_deepening(image, deeper, mesh, models.regions) > FOLD_FLAG
    face = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(face, [np.round(mesh[models.regions.face_oval, :2]).astype(np.int32)], 1)
    cv2.fillPoly(face, [np.round(mesh[models.regions.lips_outer, :2]).astype(np.int32)], 0)
    lifted = lift_smile_lines(image.astype(np.float32), mesh, face > 0, iod, 1.0)
    assert fold_deepening(image, np.clip(lifted + 0.5, 0, 255).astype(np.uint8), mesh, models.regions) < -0.01
