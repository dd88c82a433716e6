"""Occlusion without a model (`--mask skin`, the classical swap): what in front of the face is
not skin stays in front.

On each target's aligned crop the face's own skin is measured (median and spread of Y, Cr, Cb
over the face oval, eyes, brows, lips and nostrils left out); a pixel there whose chroma is far
from it, or that is much darker than it, is something in front: a hair strand, a glasses rim,
a microphone, a coloured glove. The eyes and brows are features, never occluders; the lips and
nostrils are features unless an occluder found on the skin continues over them in its own
colour (so does the part of it just past the mesh's outline). A hand is skin and is not found
(the optional xseg model, `--mask occlusion`, finds it). Pure numpy/OpenCV over the batch's
crops: no model call.
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
# An occluder found on the skin continues into the lips and nostrils and a little past the
# outline (`occluder_continued`) where a pixel there is within JOIN_TOLERANCE (Y, Cr, Cb) of its
# median colour, so the source's lips are not painted over a microphone at a mouth's corner
# (tests/test_skin_occlusion.py); a false occluder grows the same way (docs/default-swap.md)
JOIN_TOLERANCE = (24.0, 8.0, 8.0)
BEYOND = 0.03  # of the crop: how far past the mesh's outline an occluder is followed


def _fill(mask: np.ndarray, points: np.ndarray, convex: bool = False) -> None:
    pts = np.round(points).astype(np.int32)
    if convex:
        cv2.fillConvexPoly(mask, cv2.convexHull(pts), 1)
    else:
        cv2.fillPoly(mask, [pts], 1)


def feature_parts(
    mesh: np.ndarray, regions: FaceRegions, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(eyes and brows, lips and nostrils, face): bool [size, size] masks of one face's crop from
    its mesh in crop pixels, the features grown by FEATURE_GROW."""
    face = np.zeros((size, size), np.uint8)
    _fill(face, mesh[regions.face_oval, :2])
    upper = np.zeros((size, size), np.uint8)
    for loop in (regions.left_eye, regions.right_eye):
        _fill(upper, mesh[loop, :2])
    _fill(upper, mesh[regions.brows, :2], convex=True)
    lower = np.zeros((size, size), np.uint8)
    _fill(lower, mesh[regions.lips_outer, :2])
    _fill(lower, mesh[NOSTRILS, :2], convex=True)
    grow = max(1, int(round(FEATURE_GROW * size)))
    disc = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2)
    return cv2.dilate(upper, disc) > 0, cv2.dilate(lower, disc) > 0, face > 0


def feature_and_face_masks(
    mesh: np.ndarray, regions: FaceRegions, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(features, face): bool [size, size] masks of one face's crop from its mesh in crop pixels."""
    upper, lower, face = feature_parts(mesh, regions, size)
    return upper | lower, face


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


def occluder_continued(
    ycc: np.ndarray, labels: np.ndarray, keep: np.ndarray, candidates: np.ndarray
) -> np.ndarray:
    """bool [S, S]: the pixels of `candidates` (not skin, in the lips or nostrils or just past
    the face's outline) that continue an occluder found on the skin (`labels`' parts `keep`):
    connected to it and of its own colour (within JOIN_TOLERANCE of its median Y, Cr, Cb). A
    microphone over a mouth's corner stays in front over the lips too, and past the jaw's line
    where the mesh's outline falls short of the painted edge; the lips themselves, redder than
    it, and a nostril, lighter, do not join it."""
    out = np.zeros(labels.shape, bool)
    if not candidates.any():
        return out
    tolerance = np.asarray(JOIN_TOLERANCE, np.float32)
    for part in keep:
        own = labels == part
        colour = np.median(ycc[own], axis=0)
        alike = candidates & (np.abs(ycc - colour) <= tolerance).all(axis=2)
        if not alike.any():
            continue
        _, grown = cv2.connectedComponents((own | alike).astype(np.uint8), connectivity=8)
        touching = np.unique(grown[own])
        out |= alike & np.isin(grown, touching[touching > 0])
    return out


def skin_visibility(crops: np.ndarray, meshes: np.ndarray, regions: FaceRegions) -> np.ndarray:
    """[F, S, S] float32: 1 where the face shows, 0 where something not skin is in front of it;
    `crops` [F, S, S, 3] uint8 BGR, `meshes` [F, 468, 2+] in crop pixels."""
    count, size = crops.shape[0], crops.shape[1]
    out = np.ones((count, size, size), np.float32)
    min_part = MIN_PART * size * size
    for f in range(count):  # image operations per crop; no model is called
        upper, lower, face = feature_parts(meshes[f], regions, size)
        features = upper | lower
        reference = face & ~features
        measured = skin_statistics(crops[f], reference)
        if measured is None:
            continue
        ycc, centre, spread = measured
        z = (ycc - centre) / spread
        darker = np.maximum(-z[..., 0], 0.0)
        not_skin = darker**2 + z[..., 1] ** 2 + z[..., 2] ** 2 > OCCLUDER_Z**2
        front = (not_skin & reference).astype(np.uint8)
        front = cv2.morphologyEx(front, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
        parts, labels, stats, _ = cv2.connectedComponentsWithStats(front, connectivity=8)
        keep = np.flatnonzero(stats[1:, cv2.CC_STAT_AREA] >= min_part) + 1
        front = np.isin(labels, keep) if parts > 1 else np.zeros_like(front, bool)
        # into the lips and nostrils, not the eyes and brows (as dark as hair and black plastic,
        # they cannot be told apart), and past the outline as far as the painted edge reaches
        band = max(1, int(round(BEYOND * size)))
        rim = cv2.dilate(face.astype(np.uint8), np.ones((2 * band + 1,) * 2, np.uint8)) > 0
        joined = occluder_continued(ycc, labels, keep, not_skin & ((lower & ~upper) | (rim & ~face)))
        front |= joined
        # grown by the blur's reach first, so a thin strand's own pixels stay fully in front
        grown = cv2.dilate(front.astype(np.uint8), np.ones((5, 5), np.uint8))
        visible = cv2.GaussianBlur(1.0 - grown.astype(np.float32), (0, 0), SOFTEN)
        followed = cv2.dilate(joined.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
        visible[(features | ~face) & ~followed] = 1.0
        out[f] = visible
    return out
