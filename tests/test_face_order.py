"""--face-order (FaceFusion's eight orders) and --face-index, per frame, in the selection stage."""

from __future__ import annotations

import numpy as np
import pytest

from facefusion_batch.config import SwapSettings, validate_swap
from facefusion_batch.errors import InputError
from facefusion_batch.faces.select import FACE_ORDERS, FaceSelector, select_faces
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.host import HostKernels


def table() -> FaceTable:
    """Two frames: five faces in frame 0 (shuffled rows), three in frame 1, one tie in area."""
    rng = np.random.default_rng(4)
    rows = []
    for frame, count in ((0, 5), (1, 3)):
        for _ in range(count):
            x, y = rng.uniform(0, 600, 2)
            w = rng.uniform(20, 120)
            rows.append((frame, x, y, w, rng.uniform(0.5, 1.0)))
    rows[1] = (0, rows[1][1], rows[1][2], rows[0][3], rows[1][4])  # same size as row 0: stable ties
    rows = [rows[i] for i in (3, 0, 4, 1, 2, 6, 5, 7)]
    frame = np.array([r[0] for r in rows], np.int32)
    box = np.array([[x, y, x + w, y + w * 1.2] for _, x, y, w, _ in rows], np.float32)
    return FaceTable(
        frame_index=frame,
        box=box,
        landmarks5=np.zeros((len(rows), 5, 2), np.float32),
        score=np.array([r[4] for r in rows], np.float32),
    )


def facefusion_sorted(faces: list[dict], order: str) -> list[dict]:
    """FaceFusion's sort_faces_by_order, re-derived: Python's stable sorted() on one key."""
    key = {
        "left": lambda f: f["box"][0],
        "top": lambda f: f["box"][1],
        "area": lambda f: (f["box"][2] - f["box"][0]) * (f["box"][3] - f["box"][1]),
        "score": lambda f: f["score"],
    }
    name, reverse = {
        "left-right": ("left", False),
        "right-left": ("left", True),
        "top-bottom": ("top", False),
        "bottom-top": ("top", True),
        "small-large": ("area", False),
        "large-small": ("area", True),
        "best-worst": ("score", True),
        "worst-best": ("score", False),
    }[order]
    return sorted(faces, key=key[name], reverse=reverse)


def expected_rows(t: FaceTable, order: str, indices=None) -> list[int]:
    out = []
    for frame in (0, 1):
        faces = [
            {"row": r, "box": t.box[r].astype(np.float64), "score": float(t.score[r])}
            for r in np.flatnonzero(t.frame_index == frame)
        ]
        ranked = facefusion_sorted(faces, order)
        out += [f["row"] for i, f in enumerate(ranked) if indices is None or i in indices]
    return out


def rows_of(selected: FaceTable, t: FaceTable) -> list[int]:
    return [int(np.flatnonzero((t.box == b).all(axis=1))[0]) for b in selected.box]


def test_there_are_facefusions_eight_orders():
    assert set(FACE_ORDERS) == {
        "left-right", "right-left", "top-bottom", "bottom-top",
        "small-large", "large-small", "best-worst", "worst-best",
    }  # fmt: skip


@pytest.mark.parametrize("order", list(FACE_ORDERS))
def test_each_order_matches_facefusions_sort_per_frame(order):
    t = table()
    assert rows_of(select_faces(t, "many", 2, order), t) == expected_rows(t, order)
    # --faces one takes the first of each frame in the order, as FaceFusion's get_one_face does
    assert rows_of(select_faces(t, "one", 2, order), t) == expected_rows(t, order, [0])


@pytest.mark.parametrize(
    "order,indices", [("left-right", (1,)), ("large-small", (0, 2)), ("best-worst", (4,))]
)
def test_face_index_keeps_those_positions_of_each_frame(order, indices):
    t = table()
    got = rows_of(select_faces(t, "many", 2, order, indices), t)
    assert got == expected_rows(t, order, indices)
    if 4 in indices:  # frame 1 has three faces: position 4 only exists in frame 0
        assert len(got) == 1


def test_default_selection_is_unchanged_and_the_index_defaults_to_large_small():
    t = table()
    assert select_faces(t, "many", 2) is t
    largest = rows_of(select_faces(t, "one", 2), t)
    assert sorted(largest) == sorted(expected_rows(t, "large-small", [0]))
    assert rows_of(select_faces(t, "many", 2, None, (0,)), t) == expected_rows(t, "large-small", [0])


def test_the_stage_keeps_its_signature():
    t = table()
    k = HostKernels()
    frames = k.upload([np.zeros((700, 800, 3), np.uint8)] * 2)
    out = FaceSelector("many", order="right-left", indices=(0,))(k, frames, t)
    assert rows_of(out, t) == expected_rows(t, "right-left", [0])


@pytest.mark.parametrize(
    "settings,faces,match",
    [
        (SwapSettings(face_order="front-back"), "many", "--face-order"),
        (SwapSettings(face_indices=(-1,)), "many", "--face-index"),
        (SwapSettings(face_indices=(1,)), "one", "--face-index"),
    ],
)
def test_bad_selection_options_are_usage_errors(settings, faces, match):
    with pytest.raises(InputError, match=match):
        validate_swap(settings, faces)
