"""A before/after contact sheet of a few sampled frames: a look before a long render."""

from __future__ import annotations

import os
import tempfile
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from facefusion_batch.errors import InputError, OutputError
from facefusion_batch.fsutil import default_file_mode
from facefusion_batch.video.probe import VideoInfo
from facefusion_batch.video.reader import rotate_upright

SHEET_COLUMN_WIDTH = 640


def sample_frames(info: VideoInfo, count: int) -> list[tuple[float, np.ndarray]]:
    """`count` frames spread evenly over the video, found by seeking (no full decode)."""
    duration = info.duration_s or 0.0
    picked: list[tuple[float, np.ndarray]] = []
    with av.open(str(info.path)) as container:
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


def contact_sheet(rows: list[tuple[str, np.ndarray, np.ndarray]]) -> np.ndarray:
    """Rows of (label, before, after), each side scaled to SHEET_COLUMN_WIDTH."""
    out = []
    for label, before, after in rows:
        h, w = before.shape[:2]
        size = (SHEET_COLUMN_WIDTH, max(1, round(h * SHEET_COLUMN_WIDTH / w)))
        pair = [
            cv2.resize(before, size, interpolation=cv2.INTER_AREA),
            cv2.resize(after, size, interpolation=cv2.INTER_AREA),
        ]
        for image, tag in zip(pair, (f"before  {label}", f"after  {label}"), strict=True):
            cv2.putText(image, tag, (10, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 3, cv2.LINE_AA)
            cv2.putText(image, tag, (10, 24), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1, cv2.LINE_AA)
        out.append(np.hstack([pair[0], np.full((size[1], 4, 3), 255, np.uint8), pair[1]]))
        out.append(np.full((4, out[-1].shape[1], 3), 255, np.uint8))
    return np.vstack(out[:-1])


def write_image_atomically(path: Path, image: np.ndarray) -> None:
    ext = path.suffix.lower() or ".png"
    ok, data = cv2.imencode(ext, image)
    if not ok:
        raise InputError(f"output {path}: cannot write an image with extension {ext!r} (use .png or .jpg)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"output directory {parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=parent)
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.tobytes())
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"output {path}: cannot write ({exc.strerror or exc})") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
