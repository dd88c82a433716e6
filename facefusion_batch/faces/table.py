"""The face table: every face of a batch as a struct of arrays.

Stages add columns (mesh, presence) or filter rows; nobody loops over faces to
call a model. Row order is by frame, then by detection score.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FaceTable:
    frame_index: np.ndarray  # [F] int32: index of the frame inside the batch
    box: np.ndarray  # [F,4] float32: x1, y1, x2, y2 in frame pixels
    landmarks5: np.ndarray  # [F,5,2] float32: image-left eye, image-right eye, nose, mouth l, mouth r
    score: np.ndarray  # [F] float32: detector confidence
    mesh: np.ndarray | None = None  # [F,468,3] float32: dense landmarks, x/y in pixels, z same scale
    presence: np.ndarray | None = None  # [F] float32: face-mesh presence logit
    embedding: np.ndarray | None = None  # [F,512] float32: raw recogniser embedding (when one ran)
    track: np.ndarray | None = None  # [F] int64: the face's track across frames (faces/track.py)
    person_distance: np.ndarray | None = None  # [F,P] float32: distance to each --map reference
    person: np.ndarray | None = None  # [F] int64: the --map person whose source it gets
    lids: np.ndarray | None = None  # [F,2] float32: how shut each eye is by its lid (swap/classical/lids.py)
    frame_no: np.ndarray | None = None  # [F] int64: the face's frame in the job (faces/track.py)
    # [F,2] float32: how far the face moved since its track's frame before, px a frame (x, y; 0
    # on a track's first frame): its smoothed five points' mean (faces/track.py)
    motion: np.ndarray | None = None

    @staticmethod
    def empty() -> FaceTable:
        return FaceTable(
            frame_index=np.zeros((0,), np.int32),
            box=np.zeros((0, 4), np.float32),
            landmarks5=np.zeros((0, 5, 2), np.float32),
            score=np.zeros((0,), np.float32),
        )

    def __len__(self) -> int:
        return int(self.frame_index.shape[0])

    def select(self, keep: np.ndarray) -> FaceTable:
        """Rows where `keep` (bool mask or index array) holds."""
        values: dict[str, Any] = {}  # column name -> its array (None: not set)
        for f in fields(self):
            column = getattr(self, f.name)
            values[f.name] = None if column is None else column[keep]
        return FaceTable(**values)

    def with_columns(self, **columns: np.ndarray | None) -> FaceTable:
        """The table with `columns` set (None: a column unset)."""
        changes: dict[str, Any] = columns
        return replace(self, **changes)

    def required(self, column: str) -> np.ndarray:
        """The optional column `column`, which the caller needs: ValueError if no stage set it."""
        value = getattr(self, column)
        if value is None:
            raise ValueError(f"the face table has no {column} column (the stage that sets it did not run)")
        return np.asarray(value)

    def areas(self) -> np.ndarray:
        areas: np.ndarray = (self.box[:, 2] - self.box[:, 0]) * (self.box[:, 3] - self.box[:, 1])
        return areas

    def counts_per_frame(self, frames: int) -> np.ndarray:
        return np.bincount(self.frame_index, minlength=frames)

    @staticmethod
    def concat(tables: list[FaceTable], frame_offsets: list[int]) -> FaceTable:
        """Join tables of consecutive sub-batches, shifting their frame indices."""
        if not tables:
            return FaceTable.empty()
        values: dict[str, Any] = {}  # column name -> its array (None: not set)
        for f in fields(FaceTable):
            cols = [getattr(t, f.name) for t in tables]
            if any(c is None for c in cols):
                values[f.name] = None
                continue
            if f.name == "frame_index":
                cols = [c + off for c, off in zip(cols, frame_offsets, strict=True)]
            values[f.name] = np.concatenate(cols, axis=0)
        return FaceTable(**values)
