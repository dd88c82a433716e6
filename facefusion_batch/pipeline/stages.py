"""The face pipeline: a detector, then stages, over one kernel set.

classical: detect → select → mesh → classical swap → [enhance]
learned:   detect → select → [recognise] → learned swap (align, swap, mask, paste) → [enhance]

Every stage is written once against the `Kernels` protocol and maps the batch's face
table to a new one, painting into the frames where it swaps; this class only uploads the
frames, runs the stages in order, times them and downloads the result. It knows nothing
about threads, queues or files. Each executor worker passes its own kernel set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from facefusion_batch.faces.detect import YuNetDetector
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.timing import StageTimer


class Stage(Protocol):
    name: str

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable: ...


@dataclass
class BatchResult:
    frames: list[np.ndarray]
    faces_found: int
    faces_swapped: int
    frames_with_faces: int


class FacePipeline:
    """detector → stages, timed by name. `swapper` names the swap stage (the report says which)."""

    def __init__(
        self,
        detector: YuNetDetector,
        stages: Sequence[Stage],
        timer: StageTimer | None = None,
        *,
        swapper: str = "classical",
    ) -> None:
        self.detector = detector
        self.stages = list(stages)
        self.swapper = swapper
        self.timer = timer or StageTimer()

    @property
    def timer(self) -> StageTimer:
        return self._timer

    @timer.setter
    def timer(self, timer: StageTimer) -> None:
        """The job's timer, for the pipeline and the stages that time their own parts."""
        self._timer = timer
        for stage in self.stages:
            if hasattr(stage, "timer"):
                stage.timer = timer

    def _run(self, stage: Stage, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if hasattr(stage, "timer"):  # it times its own parts (align, swap, mask, paste)
            return stage(k, frames, table)
        with self._timer.stage(stage.name):
            return stage(k, frames, table)

    def stage(self, name: str) -> Any:
        """The stage called `name` (None if the pipeline has none)."""
        return next((s for s in self.stages if s.name == name), None)

    def _detect(self, k: Kernels, frames: Frames) -> tuple[FaceTable, int]:
        with self._timer.stage(self.detector.name):
            table = self.detector(k, frames)
        return table, len(table)

    def __call__(self, k: Kernels, images: list[np.ndarray], planes: Any = None) -> BatchResult:
        """Swap a batch of BGR frames, or of packed yuv420p frames of layout `planes` (returned in
        the same form; only where `k.accepts_planes`)."""
        if not images:
            return BatchResult(frames=[], faces_found=0, faces_swapped=0, frames_with_faces=0)
        with k.scope():
            with self._timer.stage("upload"):
                frames = k.upload(images, planes)
            table, found = self._detect(k, frames)
            for stage in self.stages:
                if not len(table):
                    break
                table = self._run(stage, k, frames, table)
            with self._timer.stage("download"):
                out = k.download(frames)
        return BatchResult(
            frames=out,
            faces_found=found,
            faces_swapped=len(table),
            frames_with_faces=int(np.count_nonzero(table.counts_per_frame(len(images)))),
        )
