"""The face pipelines as composed stages.

classical: detect → select → mesh → swap → [enhance]
learned:   detect → select → align → swap → mask + paste → [enhance]

Each stage maps a whole batch to a batch; these classes only compose and time
them. They know nothing about threads, queues or files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from facefusion_batch.faces.detect import YuNetDetector
from facefusion_batch.faces.identity import IdentityEncoder, Recogniser, match_reference
from facefusion_batch.faces.mesh import FaceMesh
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.pipeline.report import StageTimer
from facefusion_batch.swap.classical import ClassicalSwapper
from facefusion_batch.swap.enhance import FaceEnhancer
from facefusion_batch.swap.learned import LearnedSwapper
from facefusion_batch.swap.masks import CropMasker
from facefusion_batch.swap.paste import paste_back


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
    within `distance` of the reference face's. Returns the kept rows and, when it ran the
    recogniser, their raw embeddings (so later stages need not run it again)."""

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

    def __call__(self, images: list[np.ndarray], table: FaceTable) -> tuple[FaceTable, np.ndarray | None]:
        if self.mode != "reference":
            return select_faces(table, self.mode, len(images)), None
        embeddings = self.recogniser(images, table)
        keep = match_reference(embeddings, self.reference, self.distance)
        return table.select(keep), embeddings[keep]


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
        *,
        selector: FaceSelector | None = None,
        enhancer: FaceEnhancer | None = None,
    ) -> None:
        self.detector = detector
        self.mesh = mesh
        self.swapper = swapper
        self.faces_mode = faces_mode
        self.timer = timer or StageTimer()
        self.selector = selector or FaceSelector(faces_mode)
        self.enhancer = enhancer

    def analyse(self, images: list[np.ndarray]) -> tuple[FaceTable, int]:
        """Faces to swap (with mesh) and how many the detector found."""
        with self.timer.stage("detect"):
            table = self.detector(images)
        found = len(table)
        table, _ = self.selector(images, table)
        with self.timer.stage("mesh"):
            table = self.mesh(images, table)
        return table, found

    def __call__(self, images: list[np.ndarray]) -> BatchResult:
        table, found = self.analyse(images)
        with self.timer.stage("swap"):
            out = self.swapper(images, table)
        if self.enhancer is not None:
            with self.timer.stage("enhance"):
                out = self.enhancer(out, table)
        return BatchResult(
            frames=out,
            faces_found=found,
            faces_swapped=len(table),
            frames_with_faces=int(np.count_nonzero(table.counts_per_frame(len(images)))),
        )


class LearnedFacePipeline:
    """detect → select → align → swap (all faces, one model call) → mask + paste → [enhance].

    The face mesh is not used: alignment needs only YuNet's five landmarks.
    """

    def __init__(
        self,
        detector: YuNetDetector,
        selector: FaceSelector,
        swapper: LearnedSwapper,
        identity: IdentityEncoder,
        masker: CropMasker,
        *,
        recogniser: Recogniser | None = None,
        enhancer: FaceEnhancer | None = None,
        timer: StageTimer | None = None,
    ) -> None:
        if identity.needs_target_embeddings and recogniser is None:
            raise ValueError("a swapper weight other than 0.5 needs the target faces' embeddings")
        self.detector = detector
        self.selector = selector
        self.swapper = swapper
        self.identity = identity
        self.masker = masker
        self.recogniser = recogniser
        self.enhancer = enhancer
        self.timer = timer or StageTimer()

    def __call__(self, images: list[np.ndarray]) -> BatchResult:
        with self.timer.stage("detect"):
            table = self.detector(images)
        found = len(table)
        with self.timer.stage("select"):
            table, embeddings = self.selector(images, table)
        out = images
        if len(table):
            if self.identity.needs_target_embeddings and embeddings is None:
                with self.timer.stage("recognise"):
                    embeddings = self.recogniser(images, table)
            with self.timer.stage("align"):
                crops, affines = self.swapper.crop(images, table)
                masks = self.masker.before(crops)
            with self.timer.stage("swap"):
                swapped = self.swapper.swap_crops(crops, self.identity(len(table), embeddings))
            with self.timer.stage("mask"):
                alpha = self.masker.after(swapped, masks)
            with self.timer.stage("paste"):
                out = paste_back(images, table.frame_index, swapped, alpha, affines)
            if self.enhancer is not None:
                with self.timer.stage("enhance"):
                    out = self.enhancer(out, table)
        return BatchResult(
            frames=out,
            faces_found=found,
            faces_swapped=len(table),
            frames_with_faces=int(np.count_nonzero(table.counts_per_frame(len(images)))),
        )
