"""Paste crops back into their frames: inverse warp inside the crop's footprint, then alpha blend.

Only the bounding rectangle of the crop's four warped corners is touched, so a
face costs its own area, not the frame's. The caller's frames are not modified
(copy on first write).
"""

from __future__ import annotations

import cv2
import numpy as np


def footprint(
    affine: np.ndarray, size: int, frame_shape: tuple[int, ...]
) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1) of the crop's corners mapped into the frame, clipped; None if outside."""
    a = np.vstack([affine, [0.0, 0.0, 1.0]])
    inverse = np.linalg.inv(a)[:2]
    corners = np.array([[0, 0, 1], [size, 0, 1], [0, size, 1], [size, size, 1]], np.float64)
    xy = corners @ inverse.T
    height, width = frame_shape[:2]
    x0 = max(int(np.floor(xy[:, 0].min())) - 1, 0)
    y0 = max(int(np.floor(xy[:, 1].min())) - 1, 0)
    x1 = min(int(np.ceil(xy[:, 0].max())) + 2, width)
    y1 = min(int(np.ceil(xy[:, 1].max())) + 2, height)
    if x1 <= x0 or y1 <= y0:
        return None
    return x0, y0, x1, y1


def paste_back(
    frames: list[np.ndarray],
    frame_index: np.ndarray,
    crops: np.ndarray,
    masks: np.ndarray,
    affines: np.ndarray,
) -> list[np.ndarray]:
    """Blend each crop [F,S,S,3] (0–255) into its frame through mask [F,S,S] (0–1).

    `affines` map frame pixels to crop pixels (the alignment); faces of one frame
    are pasted in order.
    """
    out = list(frames)
    written: set[int] = set()
    size = crops.shape[1]
    for f in range(len(frame_index)):
        fi = int(frame_index[f])
        rect = footprint(affines[f], size, out[fi].shape)
        if rect is None:
            continue
        if fi not in written:
            out[fi] = out[fi].copy()
            written.add(fi)
        x0, y0, x1, y1 = rect
        # the alignment, shifted so that the rectangle's corner is the origin
        m = affines[f].copy()
        m[:, 2] += m[:, :2] @ np.array([x0, y0], np.float64)
        dsize = (x1 - x0, y1 - y0)
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        face = cv2.warpAffine(
            np.ascontiguousarray(crops[f], np.float32), m, dsize, flags=flags, borderMode=cv2.BORDER_REPLICATE
        )
        alpha = cv2.warpAffine(
            np.ascontiguousarray(masks[f], np.float32), m, dsize, flags=flags, borderMode=cv2.BORDER_CONSTANT
        )
        alpha = np.clip(alpha, 0.0, 1.0)[..., None]
        region = out[fi][y0:y1, x0:x1].astype(np.float32)
        out[fi][y0:y1, x0:x1] = np.clip(region + alpha * (face - region) + 0.5, 0, 255).astype(np.uint8)
    return out
