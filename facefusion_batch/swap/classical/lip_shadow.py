"""The shadow a top-lit source photo has under its lower lip, partly lifted before it is painted.

The lower lip casts a shadow on the chin when the light comes from above (Matt in t1.jpg). At a
skin block's size it is finer than the local colour's shading scale, so it travels with the
source's detail; the lightness stretch to a contrasty target deepens it, and on a pale target it
showed as a grey goatee (ΔL* -37 on Jennifer). Here the band under the lower lip, as wide as the
mouth, is pulled toward the colour of the chin's own skin wherever it is darker than that: the
pixel's detail stays, its local mean moves. A photo without such a shadow barely changes.

Once per source photo (and its flipped twin for the mirror fill), so both kernel sets get it.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.kernels.base import LUMA_BGR
from facefusion_batch.swap.regions import FaceRegions

GREY = np.array(LUMA_BGR, np.float32)
SHADOW_DEPTH = 0.5  # IOD below the lower lip's lowest point that the band reaches
SHADOW_WIDTH = 1.0  # of the mouth's half width, either side of its centre
SHADOW_RAMP = 0.08  # IOD over which the band fades in at each of its edges
SHADOW_SCALE = 0.04  # IOD: the local mean that is compared and moved (finer detail stays)
SHADOW_TOLERANCE = 0.05  # darker than the chin's median skin by less than this share is left


def lift_lip_shadow(
    crop: np.ndarray, mesh: np.ndarray, regions: FaceRegions, skin: np.ndarray, iod: float, strength: float
) -> np.ndarray:
    """`crop` (float32 BGR 0-255) with the band under its lower lip moved `strength` (0-1) of the
    way toward the chin's median skin colour where it is darker than that; `mesh` in crop
    pixels, `skin` the cut-out's skin mask (features left out)."""
    if strength <= 0:
        return crop
    h, w = crop.shape[:2]
    eyes = mesh[np.concatenate([regions.left_eye, regions.right_eye]), :2].mean(axis=0)
    mouth = mesh[regions.lips_outer, :2]
    centre = mouth.mean(axis=0)
    down = centre - eyes
    length = float(np.linalg.norm(down))
    if length < 1e-6:
        return crop
    down = down / length
    across = np.array([down[1], -down[0]])
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    v = (xx - centre[0]) * down[0] + (yy - centre[1]) * down[1]
    u = (xx - centre[0]) * across[0] + (yy - centre[1]) * across[1]
    lip_bottom = float(((mouth - centre) @ down).max())
    half = float(np.abs((mouth - centre) @ across).max())
    ramp = max(SHADOW_RAMP * iod, 1.0)
    band = np.clip((v - (lip_bottom - 0.1 * iod)) / ramp, 0, 1)
    band *= np.clip((lip_bottom + SHADOW_DEPTH * iod - v) / ramp, 0, 1)
    band *= np.clip((SHADOW_WIDTH * half - np.abs(u)) / ramp, 0, 1)
    lips: np.ndarray = np.zeros((h, w), np.uint8)
    cv2.fillPoly(lips, [np.round(mouth).astype(np.int32)], 255)
    grow = max(1, int(round(0.02 * iod)))
    lips = cv2.dilate(lips, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))
    band = cv2.GaussianBlur((band * (lips == 0)).astype(np.float32), (0, 0), max(1.0, 0.02 * iod))
    chin = (skin > 0) & (v > lip_bottom) & (band < 0.05)  # the chin's skin round the band
    if chin.sum() < 16:
        return crop
    level = float(np.median(crop[chin] @ GREY))
    colour = np.median(crop[chin], axis=0)
    return lift_darker(crop, strength * band, colour, level, SHADOW_SCALE * iod, SHADOW_TOLERANCE)


def lift_darker(
    crop: np.ndarray,
    weight: np.ndarray,
    colour: np.ndarray,
    level: float | np.ndarray,
    scale: float,
    tolerance: float,
) -> np.ndarray:
    """`crop` (float32 BGR 0-255) whose local mean at `scale` px (finer detail stays) is moved
    `weight` ([h,w], 0-1) of the way toward `colour` ([3], or [h,w,3] per pixel) wherever that
    mean's grey is darker than `tolerance` less than `level` (its grey: one, or [h,w]), by the
    share of the way that excess is; lighter pixels are left."""
    smooth = cv2.GaussianBlur(crop, (0, 0), max(1.0, scale))
    local = smooth @ GREY  # the blur is linear: the local mean of the grey
    deficit = np.maximum(0.0, (1 - tolerance) * level - local)
    share = np.clip(deficit / np.maximum(level - local, 1.0), 0.0, 1.0)
    moved = crop + (weight * share)[..., None] * (colour - smooth)
    return np.clip(moved, 0, 255).astype(np.float32)
