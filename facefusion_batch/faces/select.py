"""Which detected faces are swapped: every face, the largest per frame, or a reference person."""

from __future__ import annotations

import numpy as np

from facefusion_batch.faces.identity import Recogniser, match_reference
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels


def select_faces(table: FaceTable, mode: str, frames: int) -> FaceTable:
    """`many`: every face; `one`: the largest face of each frame."""
    if mode == "many" or len(table) == 0:
        return table
    area = table.areas()
    order = np.lexsort((-area, table.frame_index))  # by frame, largest first
    first = np.ones(len(order), bool)
    first[1:] = table.frame_index[order][1:] != table.frame_index[order][:-1]
    return table.select(np.sort(order[first]))


class FaceSelector:
    """A stage: `many` / `one` as `select_faces`, or `reference`: the faces whose embedding lies
    within `distance` of the reference face's (the kept rows carry their embeddings, so a later
    stage need not run the recogniser again)."""

    name = "select"

    def __init__(
        self,
        mode: str,
        recogniser: Recogniser | None = None,
        reference: np.ndarray | None = None,
        distance: float = 0.3,
    ) -> None:
        if mode == "reference" and (recogniser is None or reference is None):
            raise ValueError("reference selection needs a recogniser and a reference embedding")
        self.mode = mode
        self.recogniser = recogniser
        self.reference = reference
        self.distance = distance

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if self.mode != "reference":
            return select_faces(table, self.mode, frames.count)
        table = self.recogniser(k, frames, table)
        if len(table) == 0:
            return table
        return table.select(match_reference(table.embedding, self.reference, self.distance))
