"""Interlaced frames swapped per field: split, swap each field as a picture of its own, weave.

The two fields of an interlaced frame are two moments; a face that moves between them is two
faces a line apart, and a swap of the whole frame mixes them. So each field (every other row)
is stretched to the frame's height (its faces then have their true proportions) and goes
through the face stages as a frame of its own, in the order the fields are shown; what the
swap changed is brought back to field height (each field row gets the mean change of the two
rows it was stretched to) and added to the field's own rows. A row the swap did not touch
keeps its values exactly, so the woven frame differs from the input only inside the painted
rectangles, and the native composition (video/pictures/native.py) carries that into the input's own
pictures. Field order itself goes to the output as the input's (the container's flag).
"""

from __future__ import annotations

import cv2
import numpy as np

Rect = tuple[int, int, int, int, int]  # frame, x, y, width, height

# AVFieldOrder → which field is shown first (0: top, 1: bottom)
FIRST_FIELD = {2: 0, 3: 1, 4: 1, 5: 0}


def field_reason(field_order: int, interlaced: bool, height: int) -> str:
    """'' when frames of this field order can be swapped per field, else why not."""
    if field_order not in FIRST_FIELD:
        return "its field order is not tagged" if interlaced else "it is progressive"
    if height % 2:
        return f"its height {height} is odd"
    return ""


def split_fields(images: list[np.ndarray], first: int) -> list[np.ndarray]:
    """Two pictures per frame, in the order shown: each field stretched to the frame's height."""
    out = []
    for image in images:
        height, width = image.shape[:2]
        for parity in (first, 1 - first):
            out.append(cv2.resize(image[parity::2], (width, height), interpolation=cv2.INTER_LINEAR))
    return out


def _rows(rects: list[Rect], height: int) -> tuple[int, int, int, int] | None:
    """The bounding box (x0, y0, x1, y1) of `rects`, its rows widened to whole row pairs."""
    if not rects:
        return None
    x0 = max(0, min(r[1] for r in rects))
    x1 = max(r[1] + r[3] for r in rects)
    y0 = max(0, min(r[2] for r in rects))
    y1 = min(height, max(r[2] + r[4] for r in rects))
    y0 -= y0 % 2
    y1 += y1 % 2
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def weave_fields(
    images: list[np.ndarray],
    stretched: list[np.ndarray],
    swapped: list[np.ndarray],
    painted: list[Rect],
    first: int,
    mattes: dict[int, np.ndarray] | None = None,
) -> tuple[list[np.ndarray], list[Rect], dict[int, np.ndarray] | None]:
    """The frames with each field's change woven back in; the rectangles (in frame rows) that
    may have changed; with `mattes` (per stretched field), each frame's matte woven likewise."""
    by_field: dict[int, list[Rect]] = {}
    for rect in painted:
        by_field.setdefault(rect[0], []).append(rect)
    frames: list[np.ndarray] = []
    rects: list[Rect] = []
    woven_mattes: dict[int, np.ndarray] | None = {} if mattes is not None else None
    for f, image in enumerate(images):
        height = image.shape[0]
        out = image
        for k, parity in enumerate((first, 1 - first)):
            index = 2 * f + k
            box = _rows(by_field.get(index, []), height)
            if box is None:
                continue
            x0, y0, x1, y1 = box
            change = swapped[index][y0:y1, x0:x1].astype(np.float32) - stretched[index][y0:y1, x0:x1]
            change = cv2.resize(change, (x1 - x0, (y1 - y0) // 2), interpolation=cv2.INTER_AREA)
            if out is image:
                out = image.copy()
            rows = out[y0 + parity : y1 : 2, x0:x1]
            rows[...] = np.clip(np.rint(rows.astype(np.float32) + change), 0, 255).astype(np.uint8)
            rects.append((f, x0, y0, x1 - x0, y1 - y0))
            if woven_mattes is not None and mattes is not None and index in mattes:
                alpha = cv2.resize(mattes[index], (image.shape[1], height // 2), interpolation=cv2.INTER_AREA)
                matte = woven_mattes.setdefault(f, np.zeros(image.shape[:2], np.float32))
                matte[parity::2] = alpha
        frames.append(out)
    return frames, rects, woven_mattes
