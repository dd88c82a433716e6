"""A few frames spread over a video, found by seeking (no full decode): what a preview shows."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from facefusion_batch.errors import InputError
from facefusion_batch.video.probe import VideoInfo, open_input
from facefusion_batch.video.reader import rotate_upright


def sample_frames(info: VideoInfo, count: int) -> list[tuple[float, np.ndarray]]:
    """`count` frames spread evenly over the video, found by seeking (no full decode)."""
    duration = info.duration_s or 0.0
    picked: list[tuple[float, np.ndarray]] = []
    with open_input(info) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        tb = stream.time_base or Fraction(1, 1000)
        for i in range(count):
            target = duration * (i + 0.5) / count
            container.seek(int(target / tb), stream=stream, backward=True, any_frame=False)
            chosen = None
            for frame in container.decode(stream):
                chosen = frame
                if frame.pts is None or float(frame.pts * tb) >= target - 1e-6:
                    break
            if chosen is not None:
                seconds = float(chosen.pts * tb) if chosen.pts is not None else target
                image = rotate_upright(chosen.to_ndarray(format="bgr24"), info.rotation)
                picked.append((seconds, np.ascontiguousarray(image)))
    if not picked:
        raise InputError(f"input {info.path}: no frame could be decoded for the preview")
    return picked
