"""Colour statistics along a track, so something passing in front of a face does not pump it.

The classical paint matches each face's LAB mean and lightness spread to its target's skin. On
a frame's own statistics, a dark sleeve or microphone over part of a face for three frames
moves the spread and the mean of the whole face with it: the swapped face away from the
occluder brightens and darkens (scripts/bench_quality.py, `occluder_pumping`).

Here each face's statistics (`Kernels.colour_stats`: the warped source's and the target's, on
the skin the paint matches) join its track's, and the paint is corrected by how far this frame
stands from the median of the track's last `window` frames: its target spread over the source's
(a factor) and the difference of their means (a shift). The paint keeps its own per-frame
statistics for the rest (its sharpness-matched source, the local shading), so a steady face is
painted as before; a few frames unlike the rest are outvoted. A real change of light moves the
median within half a window; the local shading follows the target's light on every frame.

It is a light ordered step between the batched stats and paint calls: batches reach it in batch
order (its own `InOrder`), and its history depends on the last `window` frames only (inside the
tracker's warm-up, `TrackSettings.memory`), so segments and chunks render as a whole render.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from facefusion_batch.faces.track import InOrder

# frames of a track whose median the paint follows: an occluder over fewer than half of them
# leaves the median alone (bench_quality's occluder_pumping; docs/default-swap.md)
COLOUR_WINDOW = 16


def track_values(stats: np.ndarray) -> np.ndarray:
    """[R, 2, 3] from colour statistics [R, 4, 3] (source mean, spread; target mean, spread):
    the target's spread over the source's, and the difference of their means."""
    return np.stack([stats[:, 3] / stats[:, 1], stats[:, 2] - stats[:, 0]], axis=1)


def fixes(values: np.ndarray, medians: np.ndarray) -> np.ndarray:
    """[R, 2, 3] `FaceRegion.colour_fix`: the spread factor and mean shift that take a frame's
    `values` to its track's `medians`."""
    return np.stack([medians[:, 0] / values[:, 0], medians[:, 1] - values[:, 1]], axis=1).astype(np.float32)


@dataclass
class ColourTracks:
    """The ordered state of one job: per track, the (frame, values) of its last `window` frames."""

    window: int = COLOUR_WINDOW
    history: dict[int, list[tuple[int, np.ndarray]]] = field(default_factory=dict)
    order: InOrder = field(default_factory=InOrder)  # the one writer of `history` at a time

    def reset(self) -> None:
        self.history = {}
        self.order.reset()

    def _update(self, tracks: np.ndarray, frame_no: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The track medians [R, 2, 3] for rows in frame order, each row's own frame counted."""
        out = np.full_like(values, np.nan)
        for row in np.argsort(frame_no, kind="stable"):
            if tracks[row] < 0 or not np.isfinite(values[row]).all():
                continue
            now = int(frame_no[row])
            kept = [(f, v) for f, v in self.history.get(int(tracks[row]), []) if now - f < self.window]
            kept.append((now, values[row]))
            self.history[int(tracks[row])] = kept
            out[row] = np.median(np.stack([v for _, v in kept]), axis=0)
        # tracks not seen within the window are over (a cut, a face gone)
        latest = int(frame_no.max()) if len(frame_no) else 0
        for t in [t for t, h in self.history.items() if latest - h[-1][0] >= self.window]:
            del self.history[t]
        return out

    def step(
        self, seq: int | None, tracks: np.ndarray, frame_no: np.ndarray, stats: np.ndarray
    ) -> np.ndarray:
        """[R, 2, 3] per region its colour fix (NaN rows: none), given its track, its frame in
        the job and its colour statistics [R, 4, 3]. `seq`: the batch's number (None: a batch on
        its own, from an empty history)."""
        values = track_values(stats.astype(np.float64))
        if seq is None:
            medians = ColourTracks(self.window)._update(tracks, frame_no, values)
        else:
            self.order.wait(seq)
            try:
                medians = self._update(tracks, frame_no, values)
            finally:
                self.order.done(seq)
        return fixes(values, medians)
