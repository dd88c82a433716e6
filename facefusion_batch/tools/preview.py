"""`ffbatch preview`: a before/after contact sheet of a few sampled frames, a look before a long
render, through exactly the pipeline a render with the same options loads."""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np

from facefusion_batch.config import RenderSettings, check_writes, files_read
from facefusion_batch.fsutil import claim_output
from facefusion_batch.pipeline.run import Renderer
from facefusion_batch.video.probe import probe
from facefusion_batch.video.sampling import sample_frames
from facefusion_batch.video.stills import write_image_atomically

log = logging.getLogger("ffbatch")

SHEET_COLUMN_WIDTH = 640


def draw_label(image: np.ndarray, text: str, origin: tuple[int, int] = (10, 24)) -> None:
    """White text with a black outline, readable on any picture. The outline is the same thin
    text drawn at the eight neighbouring offsets: OpenCV 5 lays thick text out wider than thin
    (a thick black copy under the white one ran a character ahead of it by the label's end)."""
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, 0.6
    x, y = origin
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            if dx or dy:
                cv2.putText(image, text, (x + dx, y + dy), font, scale, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(image, text, (x, y), font, scale, (255, 255, 255), 1, cv2.LINE_AA)


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
            draw_label(image, tag)
        out.append(np.hstack([pair[0], np.full((size[1], 4, 3), 255, np.uint8), pair[1]]))
        out.append(np.full((4, out[-1].shape[1], 3), 255, np.uint8))
    return np.vstack(out[:-1])


def preview_command(settings: RenderSettings, frames: int, output: Path) -> None:
    """Sample `frames` frames of the input, swap them in one batch, write the sheet to `output`."""
    check_writes([("preview -o", Path(output))], files_read(settings))
    with claim_output(Path(output), "preview"):
        _preview(settings, frames, Path(output))


def _preview(settings: RenderSettings, frames: int, output: Path) -> None:
    info = probe(settings.input)
    # the models and sources exactly as a render loads them (one worker: all cores per model)
    renderer = Renderer.load(settings)
    sampled = sample_frames(info, frames)
    result = renderer.swap([image for _, image in sampled])
    rows = [(f"t={t:.2f}s", before, after) for (t, before), after in zip(sampled, result.frames, strict=True)]
    write_image_atomically(output, contact_sheet(rows))
    log.info("%d frames sampled, %d faces swapped", len(sampled), result.faces_swapped)
