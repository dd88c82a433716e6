"""Do no harm (swap/classical/fit.py): a face whose eyes the source photo cannot give keeps its own, for
a reason the report names, along its track without switching back and forth."""

from __future__ import annotations

import cv2
import hostk
import numpy as np

from facefusion_batch.swap.classical.fit import (
    EYE_REASONS,
    FIT_WINDOW,
    HELD,
    HIDDEN_FROM,
    HIDDEN_NONE,
    NOT_SWAPPED,
    REASONS,
    WEAKER,
    FitInputs,
    FitTracks,
    gaze_offsets,
    reason_holds,
    reason_of,
    strengths,
)


def inputs(faces: int = 1, **changes) -> FitInputs:
    """`faces` frontal faces with open eyes looking ahead, as their source: nothing to hold."""
    base = {
        "target_open": np.full((faces, 2), 0.3),
        "source_open": np.full((faces, 2), 0.3),
        "lids": np.zeros((faces, 2)),
        "target_gaze": np.zeros((faces, 2, 2)),
        "source_gaze": np.zeros((faces, 2, 2)),
        "target_yaw": np.zeros(faces),
        "source_yaw": np.zeros(faces),
        "source_shut": np.zeros((faces, 2)),
        "far_eye_hidden": np.zeros(faces),
    }
    base.update({k: np.asarray(v, np.float64) for k, v in changes.items()})
    return FitInputs(**base)


def test_each_state_the_source_cannot_give_is_named():
    assert reason_of(reason_holds(inputs())) == ["full"]
    cases = {
        "eyes_closed": {"target_open": [[0.05, 0.3]]},  # a wink: both eyes stay the target's
        "eyes_wider": {"source_open": [[0.08, 0.08]]},  # a squinting source on open eyes
        "lids": {"lids": [[0.0, 1.0]]},
        "gaze": {"target_gaze": [[[0.0, 0.3], [0.0, 0.3]]]},  # looking down
        # turned as far as the photo, the other way: the mirror fill gives the face, not the eyes
        "pose": {"target_yaw": [0.3], "source_yaw": [-0.3]},
        "source_shut": {"source_shut": [[1.0, 1.0]]},
    }
    assert set(cases) == set(EYE_REASONS)
    for reason, change in cases.items():
        holds = reason_holds(inputs(**change))
        assert reason_of(holds) == [f"own_eyes_{reason}"], reason
        assert holds[0, REASONS.index(reason)] == 1.0
        assert strengths(holds)[0] == 1.0, reason  # the whole face is still painted
    # an eye too shut to measure its gaze (NaN) asks nothing for its gaze
    nan = reason_holds(inputs(target_gaze=[[[np.nan, np.nan], [0.0, 0.0]]]))
    assert nan[0, REASONS.index("gaze")] == 0.0


def test_a_face_in_profile_is_painted_less_then_not_at_all():
    """Its far eye hidden behind its own face up to HIDDEN_FROM: full strength; from HIDDEN_NONE:
    none (counted as not swapped); in between, less and less, and named."""
    hidden = np.array([0.0, 0.125, HIDDEN_FROM, 0.33, 0.4, HIDDEN_NONE, 0.6])
    holds = reason_holds(inputs(7, far_eye_hidden=hidden))
    weight = strengths(holds)
    assert weight[0] == weight[1] == weight[2] == 1.0
    assert 1.0 > weight[3] > weight[4] > 0.0
    assert weight[5] == weight[6] == 0.0
    names = reason_of(holds)
    assert names[:3] == ["full"] * 3 and names[4] == WEAKER, names
    assert names[5] == names[6] == NOT_SWAPPED, names
    assert holds[:, : len(EYE_REASONS)].max() == 0.0  # no eye reason asked for any of it


def test_a_hold_lasts_the_window_and_lets_go():
    tracks = FitTracks()
    asked = np.zeros((1, len(REASONS)))
    asked[0, REASONS.index("gaze")] = 1.0
    out = []
    for frame in range(3 * FIT_WINDOW):  # one frame a batch, in order; frame 2 asks to hold
        holds = asked if frame == 2 else np.zeros_like(asked)
        out.append(tracks.step(frame, np.array([0]), np.array([frame]), holds)[0].max())
    held = [frame for frame, h in enumerate(out) if h >= HELD]
    assert held == list(range(2, 2 + FIT_WINDOW))  # one switch on, one off: no toggling
    # another track, and a face with no track, are not held by it
    tracks.reset()
    tracks.step(0, np.array([0]), np.array([0]), asked)
    other = tracks.step(1, np.array([1, -1]), np.array([1, 1]), np.zeros((2, len(REASONS))))
    assert other.max() == 0.0


def test_a_batch_on_its_own_starts_from_nothing():
    tracks = FitTracks()
    asked = np.ones((1, len(REASONS)))
    tracks.step(0, np.array([0]), np.array([0]), asked)
    alone = tracks.step(None, np.array([0]), np.array([1]), np.zeros_like(asked))
    assert alone.max() == 0.0


def test_gaze_follows_the_dark_spot(models, t1_faces):
    """A dark disc (an iris) painted to one side of each eye on a light face moves the gaze."""
    mesh = t1_faces.mesh[0]
    shape = (int(mesh[:, 1].max()) + 20, int(mesh[:, 0].max()) + 20, 3)
    image = np.random.default_rng(0).integers(180, 220, shape).astype(np.uint8)  # no ties

    def with_iris(aside: float) -> np.ndarray:
        out = image.copy()
        for loop in (models.regions.left_eye, models.regions.right_eye):
            pts = mesh[loop, :2]
            centre = pts.mean(axis=0)
            width = np.ptp(pts[:, 0])
            spot = (int(round(centre[0] + aside * width)), int(round(centre[1])))
            cv2.circle(out, spot, max(1, int(0.15 * width)), (20, 20, 20), -1)
        return out

    level = gaze_offsets(with_iris(0.0), mesh, models.regions)
    aside = gaze_offsets(with_iris(0.25), mesh, models.regions)
    assert np.isfinite(level).all() and np.isfinite(aside).all()
    moved = np.linalg.norm(aside - level, axis=1)
    assert np.all(moved > 0.15) and np.all(np.linalg.norm(level, axis=1) < 0.06), (level, aside)


def test_the_report_counts_every_painted_face_by_its_decision(models, t1_small, astronaut_path):
    """The default pipeline on three frames of t1: each swapped face is counted once under its
    decision; Lisa's shut eyes (the mesh keeps them open, the lids read shut) keep her own."""
    result, report = hostk.reported(models, astronaut_path, [t1_small] * 3)
    assert sum(report.swap_decisions.values()) == result.faces_swapped == 18, report.swap_decisions
    assert report.swap_decisions.get("own_eyes_lids", 0) >= 3, report.swap_decisions
    assert set(report.swap_decisions) <= {"full", WEAKER, *(f"own_eyes_{r}" for r in EYE_REASONS)}
    assert report.summary()["swap_decisions"] == report.swap_decisions
