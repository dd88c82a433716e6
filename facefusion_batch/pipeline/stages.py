"""The default face pipeline as composed stages: detect → select → mesh → swap.

Each stage maps a whole batch to a batch; this class only composes them and
times them. It knows nothing about threads, queues or files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from facefusion_batch.faces.detect import YuNetDetector
from facefusion_batch.faces.mesh import FaceMesh
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.pipeline.report import StageTimer
from facefusion_batch.swap.classical import ClassicalSwapper


def select_faces(table: FaceTable, mode: str, frames: int) -> FaceTable:
    """`many`: every face; `one`: the largest face of each frame."""
    if mode == "many" or len(table) == 0:
        return table
    area = table.areas()
    order = np.lexsort((-area, table.frame_index))  # by frame, largest first
    first = np.ones(len(order), bool)
    first[1:] = table.frame_index[order][1:] != table.frame_index[order][:-1]
    return table.select(np.sort(order[first]))


@dataclass
class BatchResult:
    frames: list[np.ndarray]
    faces_found: int
    faces_swapped: int
    frames_with_faces: int


class FaceSwapPipeline:
    def __init__(
        self,
        detector: YuNetDetector,
        mesh: FaceMesh,
        swapper: ClassicalSwapper,
        faces_mode: str,
        timer: StageTimer | None = None,
    ) -> None:
        self.detector = detector
        self.mesh = mesh
        self.swapper = swapper
        self.faces_mode = faces_mode
        self.timer = timer or StageTimer()

    def analyse(self, images: list[np.ndarray]) -> tuple[FaceTable, int]:
        """Faces to swap (with mesh) and how many the detector found."""
        with self.timer.stage("detect"):
            table = self.detector(images)
        found = len(table)
        table = select_faces(table, self.faces_mode, len(images))
        with self.timer.stage("mesh"):
            table = self.mesh(images, table)
        return table, found

    def __call__(self, images: list[np.ndarray]) -> BatchResult:
        table, found = self.analyse(images)
        with self.timer.stage("swap"):
            out = self.swapper(images, table)
        return BatchResult(
            frames=out,
            faces_found=found,
            faces_swapped=len(table),
            frames_with_faces=int(np.count_nonzero(table.counts_per_frame(len(images)))),
        )
