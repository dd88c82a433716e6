"""Which detected faces are swapped: every face, the largest per frame, or a reference person;
optionally ordered per frame as FaceFusion orders them (`--face-order`) and cut to chosen
positions in that order (`--face-index`), so "the second face from the left" is one option."""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from facefusion_batch.faces.persons import SelectionRecogniser, recognise
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels

# FaceFusion's --face-selector-order: (sort key over the table, descending)
FaceOrder = Literal[
    "left-right",
    "right-left",
    "top-bottom",
    "bottom-top",
    "small-large",
    "large-small",
    "best-worst",
    "worst-best",
]
FACE_ORDERS: dict[str, tuple[str, bool]] = {  # each FaceOrder's
    "left-right": ("left", False),
    "right-left": ("left", True),
    "top-bottom": ("top", False),
    "bottom-top": ("top", True),
    "small-large": ("area", False),
    "large-small": ("area", True),
    "best-worst": ("score", True),
    "worst-best": ("score", False),
}
FACE_ORDER_NAMES: tuple[FaceOrder, ...] = get_args(FaceOrder)


def order_faces(table: FaceTable, order: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows in frame order, then `order` within each frame; each row's position in its frame)."""
    key, descending = FACE_ORDERS[order]
    values = {
        "left": table.box[:, 0],
        "top": table.box[:, 1],
        "area": table.areas(),
        "score": table.score,
    }[key].astype(np.float64)
    rows = np.lexsort((-values if descending else values, table.frame_index))  # stable, as sorted()
    frame_of = table.frame_index[rows]
    starts = np.r_[0, np.flatnonzero(frame_of[1:] != frame_of[:-1]) + 1]
    position = np.arange(len(rows)) - np.repeat(starts, np.diff(np.r_[starts, len(rows)]))
    return rows, position


def pick_positions(table: FaceTable, order: str, indices: tuple[int, ...]) -> FaceTable:
    """The faces at `indices` (0-based) of each frame's `order`, painted in that order."""
    if len(table) == 0:
        return table
    rows, position = order_faces(table, order)
    return table.select(rows[np.isin(position, np.asarray(indices, np.int64))])


def select_faces(
    table: FaceTable, mode: str, frames: int, order: str | None = None, indices: tuple[int, ...] = ()
) -> FaceTable:
    """`many`: every face; `one`: the largest face of each frame (with `order`: the first in it).
    `indices` keeps those positions of each frame in `order` (default large-small)."""
    if len(table) == 0:
        return table
    if order is not None or indices:
        if mode == "one":
            indices = (0,)
        if not indices:
            return table.select(order_faces(table, order or "large-small")[0])
        return pick_positions(table, order or "large-small", indices)
    if mode == "many":
        return table
    area = table.areas()
    rows = np.lexsort((-area, table.frame_index))  # by frame, largest first
    first = np.ones(len(rows), np.bool_)
    first[1:] = table.frame_index[rows][1:] != table.frame_index[rows][:-1]
    return table.select(np.sort(rows[first]))


class FaceSelector:
    """A stage: `many` / `one` as `select_faces`, or `reference`: the faces whose recogniser
    vector (ArcFace's or dlib's) lies within `distance` of the reference face's (with ArcFace the
    kept rows carry their embeddings, so a later stage need not run the recogniser again)."""

    name = "select"

    def __init__(
        self,
        mode: str,
        recogniser: SelectionRecogniser | None = None,
        reference: np.ndarray | None = None,
        distance: float = 0.3,
        order: str | None = None,
        indices: tuple[int, ...] = (),
    ) -> None:
        if mode == "reference" and (recogniser is None or reference is None):
            raise ValueError("reference selection needs a recogniser and a reference embedding")
        self.mode = mode
        self.recogniser = recogniser
        self.reference = reference
        self.distance = distance
        self.order = order
        self.indices = tuple(indices)

    @property
    def drop_reason(self) -> str:
        """Why the faces this stage drops are not swapped (the report counts them by it)."""
        if self.mode == "reference":
            return "not_the_reference_person"
        if self.indices:
            return "not_at_face_index"
        return "not_the_first_face" if self.order else "not_the_largest_face"

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if self.mode != "reference":
            return select_faces(table, self.mode, frames.count, self.order, self.indices)
        recogniser, reference = self.recogniser, self.reference
        if recogniser is None or reference is None:
            raise ValueError("--faces reference needs a face recogniser and the reference face")
        table, vectors = recognise(recogniser, k, frames, table)
        if len(table) == 0:
            return table
        table = table.select(recogniser.distance(vectors, reference) < self.distance)
        return select_faces(table, "many", frames.count, self.order, self.indices)
