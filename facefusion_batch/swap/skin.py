"""Occlusion without a model (`--mask skin`, the classical swap): what in front of the face is
not skin stays in front.

On each target's aligned crop the face's own skin is measured (median and spread of Y, Cr, Cb
over the face oval, eyes, brows, lips and nostrils left out); a pixel there whose chroma is far
from it, or that is much darker than it, is something in front: a hair strand, a glasses rim,
a microphone, a coloured glove. The eyes, brows, lips and nostrils are features, never
occluders. A hand is skin and is not found (the optional xseg model, `--mask occlusion`, finds
it). Pure numpy/OpenCV over the batch's crops: no model call.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.swap.masks import NOSE_BASE
from facefusion_batch.swap.regions import FaceRegions

NOSTRILS = np.concatenate([NOSE_BASE, [64, 294, 240, 460]])  # the base of the nose and its wings
# how far from the skin a pixel must be to be in front, in robust spreads of the face's own Y,
# Cr and Cb (luma counted only where darker: a highlight is skin; a shadow on skin darkens and
# keeps its tint, hair and rims are dark and grey)
OCCLUDER_Z = 4.0
# the least spread counted (levels): a flat, evenly lit face does not make every pixel an outlier
SPREAD_FLOOR = (8.0, 3.0, 3.0)
FEATURE_GROW = 0.03  # of the crop: how far around eyes, brows, lips and nostrils stays a feature
MIN_PART = 0.0015  # of the crop's area: a smaller speck is noise, not an occluder
SOFTEN = 1.5  # px: the visibility's edge


def _fill(mask: np.ndarray, points: np.ndarray, convex: bool = False) -> None:
    pts = np.round(points).astype(np.int32)
    if convex:
        cv2.fillConvexPoly(mask, cv2.convexHull(pts), 1)
    else:
        cv2.fillPoly(mask, [pts], 1)


def feature_and_face_masks(
    mesh: np.ndarray, regions: FaceRegions, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(features, face): bool [size, size] masks of one face's crop from its mesh in crop pixels."""
    face = np.zeros((size, size), np.uint8)
    _fill(face, mesh[regions.face_oval, :2])
    features = np.zeros((size, size), np.uint8)
    for loop in (regions.left_eye, regions.right_eye, regions.lips_outer):
        _fill(features, mesh[loop, :2])
    _fill(features, mesh[regions.brows, :2], convex=True)
    _fill(features, mesh[NOSTRILS, :2], convex=True)
    grow = max(1, int(round(FEATURE_GROW * size)))
    features = cv2.dilate(features, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))
    return features > 0, face > 0


def skin_statistics(
    crop: np.ndarray, reference: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(the crop in YCrCb float32, the median and the robust spread of its Y, Cr, Cb over
    `reference`, the face's own skin; at least SPREAD_FLOOR), or None where too little skin
    shows (fewer than 64 pixels) to measure it."""
    if reference.sum() < 64:
        return None
    ycc = cv2.cvtColor(np.ascontiguousarray(crop), cv2.COLOR_BGR2YCrCb).astype(np.float32)
    skin = ycc[reference]
    centre = np.median(skin, axis=0)
    spread = 1.4826 * np.median(np.abs(skin - centre), axis=0)
    return ycc, centre, np.maximum(spread, np.asarray(SPREAD_FLOOR, np.float32))


def skin_visibility(crops: np.ndarray, meshes: np.ndarray, regions: FaceRegions) -> np.ndarray:
    """[F, S, S] float32: 1 where the face shows, 0 where something not skin is in front of it;
    `crops` [F, S, S, 3] uint8 BGR, `meshes` [F, 468, 2+] in crop pixels."""
    count, size = crops.shape[0], crops.shape[1]
    out = np.ones((count, size, size), np.float32)
    min_part = MIN_PART * size * size
    for f in range(count):  # image operations per crop; no model is called
        features, face = feature_and_face_masks(meshes[f], regions, size)
        reference = face & ~features
        measured = skin_statistics(crops[f], reference)
        if measured is None:
            continue
        ycc, centre, spread = measured
        z = (ycc - centre) / spread
        darker = np.maximum(-z[..., 0], 0.0)
        front = (darker**2 + z[..., 1] ** 2 + z[..., 2] ** 2 > OCCLUDER_Z**2) & reference
        front = cv2.morphologyEx(front.astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
        parts, labels, stats, _ = cv2.connectedComponentsWithStats(front, connectivity=8)
        keep = np.flatnonzero(stats[1:, cv2.CC_STAT_AREA] >= min_part) + 1
        front = np.isin(labels, keep) if parts > 1 else np.zeros_like(front, bool)
        # grown by the blur's reach first, so a thin strand's own pixels stay fully in front
        grown = cv2.dilate(front.astype(np.uint8), np.ones((5, 5), np.uint8))
        visible = cv2.GaussianBlur(1.0 - grown.astype(np.float32), (0, 0), SOFTEN)
        visible[features | ~face] = 1.0
        out[f] = visible
    return out
