"""Faces as tracks, not detections: link faces across frames, smooth their landmarks, and decide
swap or no swap per track with hysteresis, so nothing toggles from frame to frame.

This is the light ordered step between the batched model calls: detection and the mesh run on
whole batches (in parallel workers), then each batch's faces pass through the tracker in frame
order (`InOrder`), then the swap paints them. No model runs here.

- Linking: a face joins the track whose last box overlaps it most (IoU ≥ `link_iou`, or its
  centre within `link_distance` eye spans of the track's); faces and tracks are matched greedily,
  best pair first. A scene cut (the frame's thumbnail changes by more than `cut_threshold`)
  ends every track.
- Decision: from the track's mesh presence logits (the detector score where there is no
  mesh): a window average above `on` swaps it, below `off` stops it; between the two the track
  keeps the last of those decisions (hysteresis), and without one yet, whether its average is
  above `start`. A weak face that hovers around a threshold keeps one state instead of flickering.
- Persons (`--map`): a face's distances to the mapped people become their mean over the
  track's last 2 · `window` faces, so a track keeps one person instead of flipping on a frame.
- Lids (the classical swap's `lids` column, swap/classical/lids.py): their mean over the track's last
  `window` faces, so an eye read shut on one frame and open on the next does not flicker; but
  a clear step (a blink: `LID_RUN` frames read clearly shut after frames read open, or back)
  starts the mean afresh, so a blink is drawn shut, not half shut and late (`lid_average`).
- Smoothing: the track's landmarks (mesh points and the five points) go through a One Euro
  filter (low lag on motion, strong smoothing when still); `smoothing` 0 turns it off.

Every decision and every smoothed point depends on the last `memory` frames only (the filter
runs over a window of recent observations, the decision over a window of presences). So a
segment that starts `memory` frames early (warm-up frames, analysed but not written) renders
exactly what a whole render gives for those frames: farm chunks and resumes stay bit-identical.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels

THUMB = (16, 9)  # width, height of the thumbnails scene cuts are measured on
# One Euro beta at smoothing 1: how fast the filter opens up on motion; lower lags a panning
# camera, and a still face keeps its smoothing either way (docs/default-swap.md)
SMOOTHING_BETA = 8.0
# A blink in the lids: LID_RUN holds in a row, all clear (within LID_CLEAR of 0 or of 1), and
# all more than LID_JUMP from every hold since the previous such step: a short blink is drawn
# fully shut on time, while most of a squint's flips stay filtered (docs/default-swap.md)
LID_RUN, LID_JUMP, LID_CLEAR = 3, 0.5, 0.05


@dataclass(frozen=True)
class TrackSettings:
    # mesh presence logits: the faces of t1.jpg score 16-44 at 24-118 px wide. Cut by the
    # frame's top edge, most still score 6-27 with their eyes in the frame and 7-16 with them
    # above it (the mesh follows them: it agrees with the detector on the eyes within 0.2 eye
    # spans), but a turned face cut at its brows or eyes scores 1-2, and `make demo`'s face at
    # the top edge 0.2-6.4 (its eyes above the frame): its mesh put them on the nose, and the
    # source's eyes were painted there, white, for 74 frames. A strongly blurred face scores 2-21
    start: float = 5.0  # without a decision yet, a track is swapped when its average is above this
    on: float = 7.0  # window-average presence above which a track is swapped
    off: float = 3.0  # below which it is not
    window: int = 8  # frames in each presence average and in the smoothing window
    link_iou: float = 0.2
    link_distance: float = 1.0  # eye spans between centres that still link a face to a track
    max_gap: int = 5  # frames a track survives without a face
    smoothing: float = 1.0  # One Euro strength: 0 off, 1 default, larger smooths more
    cut_threshold: float = 40.0  # mean absolute thumbnail change (0–255) that starts a new scene
    fps: float = 25.0  # frame rate the filter's time constants assume

    @property
    def memory(self) -> int:
        """Frames of history any output depends on (the warm-up a segment needs)."""
        return 2 * self.window + self.max_gap + 1


class PresenceThresholds(TypedDict):
    start: float
    on: float
    off: float


def presence_thresholds(on: float) -> PresenceThresholds:
    """TrackSettings' start and off for a given `on` (`--face-presence`), as the defaults set
    them: a new track starts 2 below it, a swapped one stops 4 below it."""
    return {"start": on - 2.0, "on": on, "off": on - 4.0}


def one_euro(values: list[np.ndarray], dt: float, scale: float, min_cutoff: float, beta: float) -> np.ndarray:
    """The One Euro filter (Casiez et al.) run over `values` (oldest first) from scratch: the
    last filtered value. Speeds are in eye spans (`scale`) per second, so small and large faces
    behave alike."""

    def alpha(cutoff):
        tau = 1.0 / (2 * math.pi * cutoff)
        return 1.0 / (1.0 + tau / dt)

    x = values[0].astype(np.float64)
    dx = np.zeros_like(x)
    a_d = alpha(1.0)
    for value in values[1:]:
        dx = a_d * (value - x) / dt + (1 - a_d) * dx
        a = alpha(min_cutoff + beta * np.abs(dx) / max(scale, 1e-6))
        x = a * value + (1 - a) * x
    return x.astype(values[-1].dtype)


def lid_average(values: list[np.ndarray]) -> np.ndarray:
    """[2] the lids to draw from a track's last holds (oldest first, each [2]): per eye, their
    mean since the last clear step (see LID_RUN), or over all of them where there is none."""
    holds = np.asarray(values, np.float64)
    out = np.empty(holds.shape[1], np.float64)
    for e in range(holds.shape[1]):
        x, start = holds[:, e], 0
        for lo in range(1, len(x) - LID_RUN + 1):
            run, before = x[lo : lo + LID_RUN], x[start:lo]
            if not ((run >= 1 - LID_CLEAR).all() or (run <= LID_CLEAR).all()):
                continue
            if run.min() - before.max() > LID_JUMP or before.min() - run.max() > LID_JUMP:
                start = lo
        out[e] = x[start:].mean()
    return out.astype(np.asarray(values[-1]).dtype)


@dataclass
class Track:
    id: int
    box: np.ndarray
    span: float
    last_frame: int
    presences: list[float] = field(default_factory=list)  # the last 2 · window, oldest first
    meshes: list[np.ndarray] = field(default_factory=list)  # the last `window` observations
    points: list[np.ndarray] = field(default_factory=list)
    distances: list[np.ndarray] = field(default_factory=list)  # to each --map person, last 2 · window
    lids: list[np.ndarray] = field(default_factory=list)  # how shut its eyes are, last `window`
    swapping: bool | None = None
    centre: np.ndarray | None = None  # its smoothed five points' mean on its last frame (`motion`)

    def decide(self, s: TrackSettings) -> bool:
        """Swap or not, from the presences alone (so a warm-up reproduces it exactly)."""
        p = np.asarray(self.presences)
        for j in range(len(p) - 1, -1, -1):  # the latest decisive window average
            mean = p[max(0, j - s.window + 1) : j + 1].mean()
            if mean > s.on:
                return True
            if mean < s.off:
                return False
        return bool(p.mean() > s.start)


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [N,4] against every box of `b` [M,4] → [N, M]."""
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-6)


def crosses_edge(box: np.ndarray, size: tuple[int, int]) -> bool:
    """Whether a face box [4] reaches the edge of a frame of `size` (height, width): past it, or
    up to it (the detector clamps some boxes to the frame: a face entering at the right edge
    had x1 = 1280 exactly)."""
    height, width = size
    return bool(box[0] < 1 or box[1] < 1 or box[2] > width - 1 or box[3] > height - 1)


def eye_span(landmarks5: np.ndarray) -> np.ndarray:
    return np.linalg.norm(landmarks5[:, 1] - landmarks5[:, 0], axis=-1)


class FaceTracker:
    """The ordered state across batches of one job. `step` takes one batch's faces (all of them,
    with their presence) and returns the rows to swap, smoothed, with a `track` column."""

    def __init__(self, settings: TrackSettings = TrackSettings()) -> None:
        self.settings = settings
        self.reset()

    def reset(self) -> None:
        self.tracks: list[Track] = []
        self.frame = 0  # frames seen so far in this job
        self.next_id = 0
        self.thumb: np.ndarray | None = None
        self.toggles = 0
        # of those, where the face crossed the frame's edge: a face entering or leaving, whose
        # mesh cannot follow it while most of it is outside (not a flicker)
        self.edge_toggles = 0
        self.ended: list[Track] = []

    def _smooth(self, values: list[np.ndarray], dt: float, scale: float) -> np.ndarray:
        """The newest of `values`, smoothed; min_cutoff in Hz (lower: smoother when still), beta
        per eye span a second (higher: less lag on motion; SMOOTHING_BETA)."""
        s = self.settings.smoothing
        if s <= 0 or len(values) == 1:
            return values[-1]
        return one_euro(values, dt, scale, min_cutoff=1.5 / s, beta=SMOOTHING_BETA / s)

    def _cut(self, thumb: np.ndarray | None) -> bool:
        if thumb is None:
            return False
        cut = (
            self.thumb is not None and float(np.abs(thumb - self.thumb).mean()) > self.settings.cut_threshold
        )
        self.thumb = thumb
        return cut

    def step(
        self,
        table: FaceTable,
        frame_count: int,
        thumbs: np.ndarray | None = None,
        sizes: np.ndarray | None = None,
    ) -> FaceTable:
        """`sizes` [frame_count, 2]: each frame's (height, width), which tells the toggles at the
        frame's edge."""
        s = self.settings
        dt = 1.0 / s.fps
        keep: list[int] = []
        track_of = np.full(len(table), -1, np.int64)
        mesh = None if table.mesh is None else table.mesh.copy()
        points = table.landmarks5.copy()
        person_distance = None if table.person_distance is None else table.person_distance.copy()
        lids = None if table.lids is None else table.lids.copy()
        presence = table.presence if table.presence is not None else (table.score - 0.5) * 20
        spans = eye_span(table.landmarks5) if len(table) else np.zeros(0)
        motion = np.zeros((len(table), 2), np.float32)
        for f in range(frame_count):
            frame_no = self.frame + f
            if self._cut(None if thumbs is None else thumbs[f]):
                self.ended += self.tracks
                self.tracks = []
            alive = [t for t in self.tracks if frame_no - t.last_frame <= s.max_gap]
            self.ended += [t for t in self.tracks if frame_no - t.last_frame > s.max_gap]
            self.tracks = alive
            rows = np.flatnonzero(table.frame_index == f)
            pairs = self._match(table.box[rows], spans[rows], alive)
            matched = {}
            for r, t in pairs:
                matched[r] = alive[t]
            for i, row in enumerate(rows):
                track = matched.get(i)
                if track is None:
                    track = Track(self.next_id, table.box[row].copy(), float(spans[row]), frame_no)
                    self.next_id += 1
                    self.tracks.append(track)
                gap = frame_no - track.last_frame
                track.box, track.span, track.last_frame = table.box[row].copy(), float(spans[row]), frame_no
                track.presences = (track.presences + [float(presence[row])])[-2 * s.window :]
                if mesh is not None and table.mesh is not None:
                    track.meshes = (track.meshes + [table.mesh[row]])[-s.window :]
                    mesh[row] = self._smooth(track.meshes, dt, track.span)
                track.points = (track.points + [table.landmarks5[row]])[-s.window :]
                points[row] = self._smooth(track.points, dt, track.span)
                centre = points[row].mean(axis=0).astype(np.float64)
                if track.centre is not None and gap > 0:  # px a frame since the track's frame before
                    motion[row] = (centre - track.centre) / gap
                track.centre = centre
                if (
                    person_distance is not None and table.person_distance is not None
                ):  # one person per track: the window's mean distances
                    track.distances = (track.distances + [table.person_distance[row]])[-2 * s.window :]
                    person_distance[row] = np.mean(track.distances, axis=0)
                if (
                    lids is not None and table.lids is not None
                ):  # a lid read shut on one frame and open on the next: between
                    track.lids = (track.lids + [table.lids[row]])[-s.window :]
                    lids[row] = lid_average(track.lids)
                swapping = track.decide(s)
                if track.swapping is not None and swapping != track.swapping:
                    self.toggles += 1
                    self.edge_toggles += int(sizes is not None and crosses_edge(table.box[row], sizes[f]))
                track.swapping = swapping
                track_of[row] = track.id
                if swapping:
                    keep.append(int(row))
        smoothed = table.with_columns(
            landmarks5=points,
            mesh=mesh,
            track=track_of,
            person_distance=person_distance,
            lids=lids,
            frame_no=self.frame + table.frame_index.astype(np.int64),
            motion=motion,
        )
        self.frame += frame_count
        return smoothed.select(np.array(sorted(keep), np.int64))

    def _match(self, boxes: np.ndarray, spans: np.ndarray, tracks: list[Track]) -> list[tuple[int, int]]:
        """Greedy one-to-one matching of this frame's faces to live tracks, best pair first."""
        if not len(boxes) or not tracks:
            return []
        s = self.settings
        track_boxes = np.stack([t.box for t in tracks])
        overlap = iou(boxes, track_boxes)
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2
        track_centres = (track_boxes[:, :2] + track_boxes[:, 2:]) / 2
        distance = np.linalg.norm(centres[:, None] - track_centres[None], axis=-1)
        near = distance / np.maximum(spans[:, None], 1e-6)
        score = np.where((overlap >= s.link_iou) | (near <= s.link_distance), overlap - 0.01 * near, -np.inf)
        pairs = []
        while np.isfinite(score).any():
            r, t = np.unravel_index(int(np.argmax(score)), score.shape)
            pairs.append((int(r), int(t)))
            score[r, :] = -np.inf
            score[:, t] = -np.inf
        return pairs


def thumbnails(k: Kernels, frames: Frames) -> np.ndarray:
    """[B, h, w] grey thumbnails of the batch's frames (for scene cuts), made by the kernel set."""
    return k.thumbnails(frames, THUMB)


class InOrder:
    """Runs one step per batch in batch order, whichever worker reaches it first: batch n waits
    until batches 0..n-1 have passed (or failed). `abort()` releases every waiting worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next = 0
        self._done: set[int] = set()
        self._aborted = False

    def reset(self) -> None:
        with self._cond:
            self._next, self._done, self._aborted = 0, set(), False
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def wait(self, seq: int) -> None:
        with self._cond:
            while self._next < seq and not self._aborted:
                self._cond.wait(timeout=0.5)
            if self._aborted:
                raise RuntimeError("the job stopped while this batch waited for its turn")

    def done(self, seq: int) -> None:
        """Batch `seq` has passed (or failed): the next in line may go. Saying it twice is harmless."""
        with self._cond:
            if seq < self._next:
                return
            self._done.add(seq)
            while self._next in self._done:
                self._done.discard(self._next)
                self._next += 1
            self._cond.notify_all()


@dataclass
class TrackStage:
    """The pipeline stage: the tracker's ordered step for one batch (see FacePipeline)."""

    tracker: FaceTracker = field(default_factory=FaceTracker)
    name: str = "track"
    ordered: bool = True
    # faces of a track the tracker does not swap (not yet confirmed, its presence fell, a cut)
    drop_reason: str = "track_not_swapping"
