"""Painting faces into frames on the host, one region at a time (the torch set's twin:
kernels/torch_paint.py, every face of a batch at once).

A region is the part of a frame a face's warp map covers: the source texture is sampled through
the map, its layers made (formulas.face_layers), matched to the target's sharpness, colour and
grain (kernels/host_ops.py) and blended in.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.kernels import formulas
from facefusion_batch.kernels.base import SHADE_LIMIT, TINT_LIMIT, streak_kernel
from facefusion_batch.kernels.host_ops import (
    PRIMITIVES,
    blend,
    feather,
    inset_ramp,
    lab_stats,
    match_grain,
    match_sharpness,
    multiband_weights,
    transfer_colour,
)


def paint_region(
    frame: np.ndarray,
    texture: np.ndarray,
    map_x: np.ndarray,
    map_y: np.ndarray,
    x0: int,
    y0: int,
    sigma: float,
    colour: str,
    colour_strength: float,
    blend_mode: str,
    shading_limit: tuple[float, float, float] = (60.0, 30.0, 30.0),
    hold_eyes: tuple[float, float] = (0.0, 0.0),
    sharpness: bool = False,
    visible: np.ndarray | None = None,
    grain: bool = False,
    matte: bool = False,
    edge: int = 1,
    tint_limit: float = TINT_LIMIT,
    colour_fix: np.ndarray | None = None,
    shade_limit: float = SHADE_LIMIT,
    rotation: np.ndarray | None = None,
    strength: float = 1.0,
    streak: tuple[float, float] = (0.0, 0.0),
) -> np.ndarray | None:
    """Sample the source texture ([h,w,5]: BGR, alpha, skin, or [h,w,7] with the eye masks)
    through the map and blend it into frame[y0:, x0:], in place; the weight falls to 0 over
    `edge` px toward the edge of what the map covers (`inset_ramp`). `matte`: return the blend's
    weight of the face over the region ([h, w], 0–1; for multiband the widest of its levels',
    `multiband_weights`). `rotation` ([3, 3], with a texture carrying normals in channels 7–9):
    `local` colour relights the face first (formulas.relight). `strength` (0–1): how much of the
    finished swap goes over the target (FaceRegion.strength). `streak` (x, y px): the shutter's
    smear, a line blur of the face first (FaceRegion.streak; (0, 0): none)."""
    rh, rw = map_x.shape
    covered = ~np.isnan(map_x)
    map_x[~covered] = -1e4
    map_y[~covered] = -1e4
    warped = cv2.remap(texture, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    target = frame[y0 : y0 + rh, x0 : x0 + rw].astype(np.float32)
    face, alpha, skin, tinted = formulas.face_layers(
        PRIMITIVES,
        warped,
        target,
        covered,
        inset_ramp(covered, edge),
        hold_eyes if warped.shape[2] >= 7 and max(hold_eyes) > 0 else None,
        visible,
    )
    if streak != (0.0, 0.0):  # the plate's motion blur, before its sharpness is matched
        face = cv2.filter2D(face, -1, streak_kernel(streak), borderType=cv2.BORDER_REFLECT_101)
    have = goal = None
    if sharpness:
        face, have, goal = match_sharpness(face, target, skin)
    if colour == "local" and rotation is not None and warped.shape[2] >= 10:  # the target's light first
        face = formulas.relight(PRIMITIVES, face, target, skin, warped[..., 7:10], rotation, sigma)
    if colour != "none":
        face = transfer_colour(
            face,
            target,
            skin,
            colour_strength,
            colour,
            sigma,
            shading_limit,
            tint_limit,
            colour_fix,
            shade_limit,
            tinted,
        )
        face = np.where(covered[..., None], face, target)
    if grain:
        face = match_grain(face, target, skin, have, goal)
    result = blend(blend_mode, target, face.astype(np.float32), alpha)
    if visible is not None:  # an occluder stays in front exactly: no pyramid level bleeds into it
        result = feather(target, result, visible)
    if strength < 1:
        result = target + np.float32(strength) * (result - target)
    frame[y0 : y0 + rh, x0 : x0 + rw] = np.clip(result + 0.5, 0, 255).astype(np.uint8)
    if not matte:
        return None
    used = multiband_weights(alpha) if blend_mode == "multiband" else alpha
    used = used if visible is None else used * visible
    return used if strength >= 1 else used * np.float32(strength)


def region_colour_stats(
    frame: np.ndarray,
    texture: np.ndarray,
    map_x: np.ndarray,
    map_y: np.ndarray,
    x0: int,
    y0: int,
    visible: np.ndarray | None = None,
    step: int = 2,
) -> np.ndarray:
    """[4, 3] LAB mean and spread of the warped source and of the target (frame[y0:, x0:]) on the
    skin `paint_region` matches (before its sharpness blur), on every `step`-th pixel: what a
    track's colour statistics are made of (swap/classical/colour_track.py); NaN with too little skin."""
    mx, my = map_x[::step, ::step], map_y[::step, ::step]
    covered = ~np.isnan(mx)
    mx, my = np.where(covered, mx, -1e4), np.where(covered, my, -1e4)
    warped = cv2.remap(texture, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    rh, rw = map_x.shape
    target = frame[y0 : y0 + rh : step, x0 : x0 + rw : step]
    skin = covered & (warped[..., 4] > 0.5)
    if visible is not None:
        skin = skin & (visible[::step, ::step] > 0.5)
    if skin.sum() < 16:
        return np.full((4, 3), np.nan, np.float32)
    src = cv2.cvtColor(np.clip(warped[..., :3] + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB)
    dst = cv2.cvtColor(np.ascontiguousarray(target), cv2.COLOR_BGR2LAB)
    mu_s, sd_s = lab_stats(src.astype(np.float32), skin)
    mu_t, sd_t = lab_stats(dst.astype(np.float32), skin)
    return np.stack([mu_s, sd_s, mu_t, sd_t]).astype(np.float32)
