"""`ffbatch preview`: a before/after contact sheet of a few sampled frames, a look before a long
render, through exactly the pipeline a render with the same options loads."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np

from facefusion_batch.config import RenderSettings, check_writes, files_read
from facefusion_batch.errors import InputError
from facefusion_batch.fsutil import claim_output
from facefusion_batch.pipeline.run import Renderer, input_view, pixel_format_of, run_frames
from facefusion_batch.timing import StageTimer
from facefusion_batch.video.decode.probe import VideoInfo, probe
from facefusion_batch.video.decode.reader import Frame, FrameReader
from facefusion_batch.video.decode.segments import FrameIndex, frame_index
from facefusion_batch.video.pictures.native import NativePicture
from facefusion_batch.video.pictures.stills import write_image_atomically

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


def face_crops(before: np.ndarray, after: np.ndarray, rects: list[tuple[int, int, int, int]], width: int):
    """[h, width, 3] or None: each of `rects` (x, y, w, h: the painted faces) before | after at
    1:1, side by side and wrapped to `width`; a pair wider than that is scaled down to fit."""
    tiles = []
    for x, y, w, h in rects:
        gap = np.full((h, 2, 3), 255, np.uint8)
        pair = np.hstack([before[y : y + h, x : x + w], gap, after[y : y + h, x : x + w]])
        if pair.shape[1] > width:
            size = (width, max(1, round(pair.shape[0] * width / pair.shape[1])))
            pair = cv2.resize(pair, size, interpolation=cv2.INTER_AREA)
        tiles.append(pair)
    if not tiles:
        return None
    lines: list[list[np.ndarray]] = []
    line: list[np.ndarray] = []
    used = 0
    for tile in tiles:
        if line and used + 4 + tile.shape[1] > width:
            lines.append(line)
            line, used = [], 0
        line.append(tile)
        used += tile.shape[1] + (4 if used else 0)
    lines.append(line)
    out = []
    for line in lines:
        height = max(t.shape[0] for t in line)
        row = np.full((height, width, 3), 255, np.uint8)
        at = 0
        for tile in line:
            row[: tile.shape[0], at : at + tile.shape[1]] = tile
            at += tile.shape[1] + 4
        out += [row, np.full((4, width, 3), 255, np.uint8)]
    return np.vstack(out[:-1])


def contact_sheet(
    rows: list[tuple[str, np.ndarray, np.ndarray]], crops: list[list[tuple[int, int, int, int]]] | None = None
) -> np.ndarray:
    """Rows of (label, before, after), each side scaled to SHEET_COLUMN_WIDTH; with `crops` (per
    row, the painted faces' rectangles), each row's faces at 1:1 under it (`face_crops`)."""
    out = []
    for i, (label, before, after) in enumerate(rows):
        h, w = before.shape[:2]
        size = (SHEET_COLUMN_WIDTH, max(1, round(h * SHEET_COLUMN_WIDTH / w)))
        pair = [
            cv2.resize(before, size, interpolation=cv2.INTER_AREA),
            cv2.resize(after, size, interpolation=cv2.INTER_AREA),
        ]
        for image, tag in zip(pair, (f"before  {label}", f"after  {label}"), strict=True):
            draw_label(image, tag)
        out.append(np.hstack([pair[0], np.full((size[1], 4, 3), 255, np.uint8), pair[1]]))
        width = out[-1].shape[1]
        out.append(np.full((4, width, 3), 255, np.uint8))
        closer = None if crops is None else face_crops(before, after, crops[i], width)
        if closer is not None:
            out += [closer, np.full((4, width, 3), 255, np.uint8)]
    return np.vstack(out[:-1])


def preview_command(settings: RenderSettings, frames: int, output: Path, crops: bool = False) -> None:
    """Sample `frames` frames of the input, swap them in one batch, write the sheet to `output`;
    `crops`: every swapped face at 1:1 too, under its row."""
    check_writes([("preview -o", Path(output))], files_read(settings))
    if not cv2.haveImageWriter(str(output)):
        raise InputError(f"preview -o {output}: the contact sheet is an image; name it .png or .jpg")
    if Path(output).exists() and not settings.overwrite:
        raise InputError(f"preview -o {output} already exists; pass --overwrite to replace it")
    with claim_output(Path(output), "preview"):
        _preview(settings, frames, Path(output), crops)


def sampled_indices(count: int, frames: int) -> list[int]:
    """`frames` frame numbers spread evenly over [0, count), each the middle of its share."""
    return sorted({min(count - 1, int(count * (i + 0.5) / frames)) for i in range(frames)})


def _preview(settings: RenderSettings, frames: int, output: Path, crops: bool = False) -> None:
    info = probe(settings.input)
    # the models and sources exactly as a render loads them (one worker: all cores per model)
    renderer = Renderer.load(settings)
    index = frame_index(settings.input, info.video_stream_index)
    wanted = sampled_indices(index.count, frames)
    rows, painted = render_frames(renderer, settings, info, index, wanted)
    if not rows:
        raise InputError(f"input {info.path}: no frame could be decoded for the preview")
    sheet_rows = [(f"t={seconds:.2f}s", before, after) for seconds, before, after, _ in rows]
    write_image_atomically(output, contact_sheet(sheet_rows, [r[3] for r in rows] if crops else None))
    log.info("%d frames sampled, %d faces swapped", len(rows), painted)


Row = tuple[float, np.ndarray, np.ndarray, list[tuple[int, int, int, int]]]


def render_frames(
    renderer: Renderer, settings: RenderSettings, info: VideoInfo, index: FrameIndex, wanted: list[int]
) -> tuple[list[Row], int]:
    """([(seconds, before, after, painted rectangles)] of frames `wanted`, faces swapped): each
    frame rendered as a render renders it, in a run of the render's frame loop that starts
    `tracking.memory` frames early (the warm-up a farm segment gets), so the face tracks have the
    history they have in a whole render; runs whose warm-ups overlap are read as one."""
    memory = settings.tracking.memory
    runs: list[list[int]] = []
    for n in wanted:
        start = max(0, n - memory)
        if runs and start <= runs[-1][1]:
            runs[-1][1] = n + 1
        else:
            runs.append([start, n + 1])
    # a render's native pictures or BGR
    layout = renderer.frame_layout(info, bgr_view=True, settings=settings)
    keep = set(wanted)
    rows: dict[int, tuple[float, np.ndarray, np.ndarray]] = {}
    rects: dict[int, list[tuple[int, int, int, int]]] = {}
    report = renderer.new_report(settings)

    def sink(frame: Frame, image: np.ndarray | NativePicture) -> None:
        after = image.to_av().to_ndarray(format="bgr24") if isinstance(image, NativePicture) else image
        rows[frame.index] = (frame_seconds(frame), frame.image.copy(), np.ascontiguousarray(after))

    for start, end in runs:
        reader = FrameReader(
            settings.input,
            info=info,
            frames=(start, end),
            index=index,
            pixel_format=pixel_format_of(layout),
            hwaccel=settings.device.hwaccel,
            view=input_view(settings, info),
        )
        try:
            frames = (replace(f, warmup=f.index not in keep) for f in reader)
            run_frames(
                renderer, frames, sink, settings, report, StageTimer(), layout=layout,
                on_painted=lambda frame, painted: rects.__setitem__(frame.index, painted),
            )  # fmt: skip
        finally:
            reader.close()
    return [(*rows[n], rects.get(n, [])) for n in wanted if n in rows], report.faces_swapped


def frame_seconds(frame: Frame) -> float:
    return float(frame.pts * frame.time_base) if frame.pts is not None else 0.0
