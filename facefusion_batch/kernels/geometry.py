"""Geometry both kernel sets share (numpy, no pixels): affine inverses, letterbox canvases,
paste footprints, and the canvases the torch set paints many faces on at once."""

from __future__ import annotations

import numpy as np

CANVAS_STEP = 32  # canvases (and YuNet inputs) are multiples of this many pixels


def invert_affines(m: np.ndarray) -> np.ndarray:
    """[F,2,3] → [F,2,3] inverse affines."""
    a = m[:, :, :2]
    inv_a = np.linalg.inv(a)
    out = np.empty_like(m)
    out[:, :, :2] = inv_a
    out[:, :, 2] = -np.einsum("fij,fj->fi", inv_a, m[:, :, 2])
    return out


def letterbox_canvas(shapes: list[tuple[int, ...]], size: int) -> tuple[int, int]:
    """Smallest (height, width), multiples of 32, that hold every image fitted into size×size.

    YuNet is fully convolutional: a 16:9 batch runs at 640×384 instead of 640×640.
    """
    height = width = 32
    for shape in shapes:
        h, w = shape[:2]
        scale = min(size / w, size / h)
        height = max(height, -(-max(1, round(h * scale)) // 32) * 32)
        width = max(width, -(-max(1, round(w * scale)) // 32) * 32)
    return height, width


def footprint(
    affine: np.ndarray, size: int, frame_shape: tuple[int, ...]
) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1) of a size² crop's corners mapped back into the frame, clipped; None if
    outside. `affine` maps frame pixels to crop pixels."""
    a = np.vstack([affine, [0.0, 0.0, 1.0]])
    inverse = np.linalg.inv(a)[:2]
    corners = np.array([[0, 0, 1], [size, 0, 1], [0, size, 1], [size, size, 1]], np.float64)
    xy = corners @ inverse.T
    height, width = frame_shape[:2]
    # FaceFusion's paste area (calculate_paste_area): floor / ceil of the corners, no margin; a
    # wider one lets the bilinear edge of the mask paint a pixel or two FaceFusion leaves alone
    x0 = min(max(int(np.floor(xy[:, 0].min())), 0), width)
    y0 = min(max(int(np.floor(xy[:, 1].min())), 0), height)
    x1 = min(max(int(np.ceil(xy[:, 0].max())), 0), width)
    y1 = min(max(int(np.ceil(xy[:, 1].max())), 0), height)
    if x1 <= x0 or y1 <= y0:
        return None
    return x0, y0, x1, y1


def canvas_size(heights, widths, frame_hw: tuple[int, int]) -> tuple[int, int]:
    """One canvas for all faces of a batch: the largest region rounded up to CANVAS_STEP, at most
    the frame."""
    height, width = frame_hw

    def round_up(n) -> int:
        return -(-int(n) // CANVAS_STEP) * CANVAS_STEP

    return min(height, round_up(max(heights))), min(width, round_up(max(widths)))


def canvas_origins(ys, xs, canvas: tuple[int, int], frame_hw: tuple[int, int]) -> np.ndarray:
    """[F, 2] (y, x) top-left of each canvas: over its region's top-left, inside the frame."""
    ch, cw = canvas
    height, width = frame_hw
    oy = np.minimum(np.asarray(ys, np.int64), height - ch)
    ox = np.minimum(np.asarray(xs, np.int64), width - cw)
    return np.stack([np.maximum(oy, 0), np.maximum(ox, 0)], axis=1)


def plan_waves(frame_of, origins: np.ndarray, canvas: tuple[int, int]) -> list[list[int]]:
    """Faces in waves: within a wave no two canvases of one frame overlap; a face goes into the
    wave after the last earlier face it overlaps, so the painting order of overlapping faces
    stays the table's (as a face-by-face loop paints them)."""
    ch, cw = canvas
    frame_of = [int(f) for f in frame_of]
    wave_of: list[int] = []
    for i in range(len(frame_of)):
        wave = 0
        for j in range(i):
            if frame_of[j] != frame_of[i]:
                continue
            (ya, xa), (yb, xb) = origins[i], origins[j]
            if ya < yb + ch and yb < ya + ch and xa < xb + cw and xb < xa + cw:
                wave = max(wave, wave_of[j] + 1)
        wave_of.append(wave)
    waves: list[list[int]] = [[] for _ in range(max(wave_of, default=-1) + 1)]
    for i, w in enumerate(wave_of):
        waves[w].append(i)
    return waves


def split_tiles_nchw(x, k: int):
    """Pixel-boost tiles of NCHW `x` (numpy or torch): [F, C, kS, kS] → [F·k², C, S, S], tile (a, b)
    holding pixels (a + k·i, b + k·j). Only reshapes and a permutation: the same for both sets."""
    if k == 1:
        return x
    f, c, side, _ = x.shape
    s = side // k
    x = x.reshape(f, c, s, k, s, k)
    x = x.permute(0, 3, 5, 1, 2, 4) if hasattr(x, "permute") else x.transpose(0, 3, 5, 1, 2, 4)
    return x.reshape(f * k * k, c, s, s)


def join_tiles_nchw(x, k: int):
    """The inverse of `split_tiles_nchw`."""
    if k == 1:
        return x
    n, c, s, _ = x.shape
    f = n // (k * k)
    x = x.reshape(f, k, k, c, s, s)
    x = x.permute(0, 3, 4, 1, 5, 2) if hasattr(x, "permute") else x.transpose(0, 3, 4, 1, 5, 2)
    return x.reshape(f, c, s * k, s * k)
