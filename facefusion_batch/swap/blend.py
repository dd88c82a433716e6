"""Blending a warped face into the frame: feathered alpha, multi-band, or Poisson.

Feathering keeps much of the target's look; Poisson (seamlessClone) carries more
of the source but washes out; a Laplacian-pyramid (multi-band) blend inside a
tight mask is the middle way and the default.
"""

from __future__ import annotations

import cv2
import numpy as np

BLEND_MODES = ("multiband", "feather", "poisson")


def feather(target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha[..., None]
    return target * (1.0 - a) + face * a


def pyramid_levels(h: int, w: int, limit: int = 5) -> int:
    """Levels of the multi-band blend for an h x w region: halve while the smaller side stays >= 8."""
    levels = 0
    while levels < limit and min(h, w) >> (levels + 1) >= 8:
        levels += 1
    return levels


def multiband(target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Laplacian-pyramid blend: low frequencies mix over wide seams, fine detail over narrow ones."""
    h, w = alpha.shape
    levels = pyramid_levels(h, w)
    if levels == 0:
        return feather(target, face, alpha)
    gauss_a = [alpha]
    lap_t, lap_f = [], []
    cur_t, cur_f = target, face
    for _ in range(levels):
        down_t, down_f = cv2.pyrDown(cur_t), cv2.pyrDown(cur_f)
        size = (cur_t.shape[1], cur_t.shape[0])
        lap_t.append(cur_t - cv2.pyrUp(down_t, dstsize=size))
        lap_f.append(cur_f - cv2.pyrUp(down_f, dstsize=size))
        gauss_a.append(cv2.pyrDown(gauss_a[-1]))
        cur_t, cur_f = down_t, down_f
    out = feather(cur_t, cur_f, gauss_a[levels])
    for level in range(levels - 1, -1, -1):
        size = (lap_t[level].shape[1], lap_t[level].shape[0])
        out = cv2.pyrUp(out, dstsize=size) + feather(lap_t[level], lap_f[level], gauss_a[level])
    return out


def poisson(target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    mask = (alpha > 0.5).astype(np.uint8) * 255
    if mask.sum() == 0:
        return target
    ys, xs = np.nonzero(mask)
    centre = (int((xs.min() + xs.max() + 1) // 2), int((ys.min() + ys.max() + 1) // 2))
    t8 = np.clip(target, 0, 255).astype(np.uint8)
    f8 = np.clip(face, 0, 255).astype(np.uint8)
    try:
        cloned = cv2.seamlessClone(f8, t8, mask, centre, cv2.NORMAL_CLONE).astype(np.float32)
    except cv2.error:
        return feather(target, face, alpha)
    # keep the soft edge of the mask outside the cloned core
    return feather(target, cloned, np.clip(alpha * 1.5, 0, 1))


def blend(mode: str, target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """All arrays float32; target/face HxWx3 0–255, alpha HxW 0–1."""
    if mode == "feather":
        return feather(target, face, alpha)
    if mode == "multiband":
        return multiband(target, face, alpha)
    if mode == "poisson":
        return poisson(target, face, alpha)
    raise ValueError(f"unknown blend mode {mode!r}")
