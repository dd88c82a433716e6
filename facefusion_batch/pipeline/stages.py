"""The face pipeline: a detector, then stages, over one kernel set.

classical: detect → select → mesh → track → classical swap → [enhance]
learned:   detect → select → track → [recognise] → learned swap (align, swap, mask, paste) → [enhance]

Every stage is written once against the `Kernels` protocol and maps the batch's face
table to a new one, painting into the frames where it swaps; this class only uploads the
frames, runs the stages in order, times them and downloads the result. It knows nothing
about threads, queues or files. Each executor worker passes its own kernel set.

The track stage is ordered: batches reach it in batch order (`InOrder`), whichever worker
runs them, so faces link across batches; every other stage runs batches in parallel, but for
a light ordered step inside the classical swap (its colour statistics along the tracks), whose
turn the pipeline gives back (`release`) however the batch ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from facefusion_batch.faces.detect import Detector
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.faces.track import FaceTracker, InOrder, TrackStage, thumbnails
from facefusion_batch.kernels.base import Frames, Kernels, Rect
from facefusion_batch.timing import StageTimer


class Stage(Protocol):
    """A plain stage: maps a batch's face table to a new one, painting into the frames where it
    swaps; batches may reach it in any order, on any worker."""

    name: str

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable: ...


@runtime_checkable
class OrderedStage(Stage, Protocol):
    """A stage with a light ordered step of its own (batches take their turn in job order)."""

    def reset(self) -> None:
        """A new job: its history starts empty."""
        ...

    def abort(self) -> None:
        """The job failed: let go of batches waiting for their turn."""
        ...

    def release(self, seq: int | None) -> None:
        """Batch `seq` is done with the stage, or never reached it: the next may take its turn."""
        ...


@runtime_checkable
class SelfTimedStage(Stage, Protocol):
    """A stage that times its own parts (align, swap, mask, paste) on the job's timer."""

    timer: StageTimer


@runtime_checkable
class DroppingStage(Protocol):
    """A stage (or the track step) that names, for the report, the faces it drops."""

    drop_reason: str


@dataclass
class BatchResult:
    frames: list[Any]  # BGR arrays or yuv420p planes; with native frames, each frame's own picture
    faces_found: int
    faces_swapped: int
    frames_with_faces: int
    found_per_frame: np.ndarray | None = None  # [B] faces detected in each frame
    swapped_per_frame: np.ndarray | None = None  # [B] faces swapped in each frame
    # reason -> [B] faces of each frame a stage dropped for that reason (stage.drop_reason)
    dropped_per_frame: dict[str, np.ndarray] = field(default_factory=dict)
    # decision -> [B] faces of each frame the swap painted so (Frames.decisions, swap/classical/fit.py)
    decisions_per_frame: dict[str, np.ndarray] = field(default_factory=dict)
    painted: list[Rect] = field(default_factory=list)  # (frame, x, y, w, h): what may have changed
    mattes: dict[int, np.ndarray] | None = None  # matte=True: {frame: the paste alpha, 0–1}
    # --matte-output / --face-only-output: {frame: its matte and layer as their writers take them}
    compositing: dict[int, tuple[Any, ...]] | None = None


def drop_reason(stage: Stage) -> str:
    """The report's name for faces `stage` drops: its own `drop_reason`, else its name."""
    own = stage.drop_reason if isinstance(stage, DroppingStage) else None
    return own or f"dropped_by_{stage.name}"


class FacePipeline:
    """detector → stages, timed by name. `swapper` names the swap stage (the report says which)."""

    def __init__(
        self,
        detector: Detector,
        stages: Sequence[Stage],
        timer: StageTimer | None = None,
        *,
        swapper: str = "classical",
    ) -> None:
        self.detector = detector
        self.stages = list(stages)
        self.swapper = swapper
        self.timer = timer or StageTimer()
        self.order = InOrder()

    def start_job(self) -> None:
        """A new job: tracks start empty and batch numbers from 0."""
        self.order.reset()
        for stage in self.stages:
            if isinstance(stage, TrackStage):
                stage.tracker.reset()
            elif isinstance(stage, OrderedStage):
                stage.reset()

    def abort(self) -> None:
        """The job failed: release workers waiting for their turn at the ordered steps."""
        self.order.abort()
        for stage in self.stages:
            if isinstance(stage, OrderedStage) and not isinstance(stage, TrackStage):
                stage.abort()

    def tracking(self) -> dict[str, int]:
        """What the tracker did in this job (for the report): tracks and swap toggles, and how
        many of those came where the face crossed the frame's edge (entering or leaving)."""
        stage = self.stage("track")
        if stage is None:
            return {}
        t = stage.tracker
        return {"tracks": t.next_id, "toggles": t.toggles, "toggles_at_edge": t.edge_toggles}

    @property
    def timer(self) -> StageTimer:
        return self._timer

    @timer.setter
    def timer(self, timer: StageTimer) -> None:
        """The job's timer, for the pipeline and the stages that time their own parts."""
        self._timer = timer
        for stage in self.stages:
            if isinstance(stage, SelfTimedStage):
                stage.timer = timer

    def _track(
        self, stage: TrackStage, k: Kernels, frames: Frames, table: FaceTable, seq: int | None
    ) -> FaceTable:
        with self._timer.stage("track"):
            thumbs = thumbnails(k, frames)
            if seq is None:
                return FaceTracker(stage.tracker.settings).step(table, frames.count, thumbs, frames.shapes)
            self.order.wait(seq)
            try:
                return stage.tracker.step(table, frames.count, thumbs, frames.shapes)
            finally:
                self.order.done(seq)

    def _run(self, stage: Stage, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if isinstance(stage, SelfTimedStage):
            return stage(k, frames, table)
        with self._timer.stage(stage.name):
            return stage(k, frames, table)

    def stage(self, name: str) -> Any:
        """The stage called `name` (None if the pipeline has none)."""
        return next((s for s in self.stages if s.name == name), None)

    def _detect(self, k: Kernels, frames: Frames) -> tuple[FaceTable, np.ndarray]:
        with self._timer.stage(self.detector.name):
            table = self.detector(k, frames)
        return table, table.counts_per_frame(frames.count)

    def __call__(
        self,
        k: Kernels,
        images: list[np.ndarray],
        planes: Any = None,
        seq: int | None = None,
        matte: bool = False,
    ) -> BatchResult:
        """Swap a batch of BGR frames, or of packed yuv420p frames of layout `planes` (returned in
        the same form; only where `k.accepts_planes`). `seq`: the batch's number in its job, for
        the ordered track stage (None: a batch on its own, tracked from scratch). `matte`: keep
        the paste alpha of every painted frame (`BatchResult.mattes`, host arrays from either
        kernel set)."""
        if not images:
            return BatchResult(frames=[], faces_found=0, faces_swapped=0, frames_with_faces=0)
        passed = seq is None
        try:
            with k.scope():
                with self._timer.stage("upload"):
                    frames = k.upload(images, planes)
                frames.seq = seq
                if matte:
                    frames.mattes = {}
                table, found_per_frame = self._detect(k, frames)
                found = int(found_per_frame.sum())
                dropped: dict[str, np.ndarray] = {}
                for stage in self.stages:
                    before = table.counts_per_frame(len(images))
                    if isinstance(stage, TrackStage):
                        table = self._track(stage, k, frames, table, seq)
                        passed = True
                    elif len(table):
                        table = self._run(stage, k, frames, table)
                    lost = before - table.counts_per_frame(len(images))
                    if lost.any():
                        reason = drop_reason(stage)
                        dropped[reason] = dropped.get(reason, 0) + lost
                with self._timer.stage("download"):
                    out = k.download(frames)
                painted = list(frames.painted)
        finally:
            if not passed and seq is not None:  # failed before its turn: the next must not wait for it
                self.order.done(seq)
            for stage in self.stages:  # ordered steps inside stages: passed, skipped or failed
                if isinstance(stage, OrderedStage):
                    stage.release(seq)
        swapped = table.counts_per_frame(len(images))
        return BatchResult(
            frames=out,
            faces_found=found,
            faces_swapped=len(table),
            frames_with_faces=int(np.count_nonzero(swapped)),
            found_per_frame=found_per_frame,
            swapped_per_frame=swapped,
            dropped_per_frame=dropped,
            decisions_per_frame=dict(frames.decisions),
            painted=painted,
            mattes=frames.mattes,
        )
