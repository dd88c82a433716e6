"""Per-person sources (`--map ref.jpg=src.jpg`): which mapped person each face is.

`PersonMatcher` runs the recogniser once over every face of the batch and adds the
`person_distance` column [F,P]: each face's distance to each reference person. The tracker
(when tracks are on) replaces it by the mean over the face's track window, so the choice is
one per track and does not flip on a blurred or turned frame. `AssignPersons` then turns the
distances into the `person` column and drops the faces nobody is mapped to:

- a face goes to the nearest reference within `--reference-distance`;
- a face near no reference: `skip` leaves it alone (the default), `nearest` gives it the
  nearest reference anyway, `source` swaps it with the plain `--source` photos (person P).
"""

from __future__ import annotations

from typing import Literal, Protocol, get_args

import numpy as np

from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels

Unmatched = Literal["skip", "nearest", "source"]
UNMATCHED: tuple[Unmatched, ...] = get_args(Unmatched)


class SelectionRecogniser(Protocol):
    """What choosing faces needs of a recogniser (ArcFace's or dlib's)."""

    kind: str
    feeds_swap: bool  # its vectors are the swapper's identity space (ArcFace): kept as `embedding`

    def embed(self, k: Kernels, frames: Frames, table: FaceTable) -> np.ndarray: ...

    def distance(self, vectors: np.ndarray, reference: np.ndarray) -> np.ndarray: ...


def recognise(
    recogniser: SelectionRecogniser, k: Kernels, frames: Frames, table: FaceTable
) -> tuple[FaceTable, np.ndarray]:
    """Every face's vector, one recogniser call for the batch; an ArcFace embedding already in
    the table is reused, and a new one kept there for the swap's weight."""
    if recogniser.feeds_swap:
        if table.embedding is None:
            table = table.with_columns(embedding=recogniser.embed(k, frames, table))
            assert table.embedding is not None  # just set
        return table, table.embedding
    return table, recogniser.embed(k, frames, table)


def distances_to(recogniser: SelectionRecogniser, vectors: np.ndarray, references: np.ndarray) -> np.ndarray:
    """[F,P]: each face's distance to each reference vector (`references` [P,D])."""
    if len(vectors) == 0:
        return np.zeros((0, len(references)), np.float32)
    return np.stack([recogniser.distance(vectors, r) for r in references], axis=1).astype(np.float32)


def assign_persons(distances: np.ndarray, max_distance: float, unmatched: str = "skip") -> np.ndarray:
    """[F] int64: the mapped person of each face (its nearest reference within
    `max_distance`), -1 for a face to leave alone, P (the reference count) for `source`."""
    if distances.shape[0] == 0:
        return np.zeros((0,), np.int64)
    nearest = np.argmin(distances, axis=1).astype(np.int64)
    near = distances[np.arange(len(nearest)), nearest] < max_distance
    if unmatched == "nearest":
        return nearest
    other = distances.shape[1] if unmatched == "source" else -1
    return np.where(near, nearest, other)


class PersonMatcher:
    """A stage: every face with its distance to each mapped person (`person_distance`)."""

    name = "match"

    def __init__(self, recogniser: SelectionRecogniser, references: np.ndarray) -> None:
        self.recogniser = recogniser
        self.references = np.asarray(references, np.float32)

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        table, vectors = recognise(self.recogniser, k, frames, table)
        return table.with_columns(person_distance=distances_to(self.recogniser, vectors, self.references))


class AssignPersons:
    """A stage: the `person` column from the (track-averaged) distances; faces left alone dropped."""

    name = "assign"

    def __init__(self, max_distance: float, unmatched: str = "skip") -> None:
        self.max_distance = max_distance
        self.unmatched = unmatched

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if table.person_distance is None:
            raise ValueError("assigning persons needs the table's person_distance column (--map)")
        person = assign_persons(table.person_distance, self.max_distance, self.unmatched)
        return table.with_columns(person=person).select(person >= 0)
