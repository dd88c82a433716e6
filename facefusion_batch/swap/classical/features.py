"""Masks of a face's features drawn from its mesh on a picture: the eyes, lips and brows and the
ring round them, hair over the brows and at the temples, the hole a held eye shows the target
through; and how open each eye is."""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER
from facefusion_batch.kernels.base import LUMA_BGR
from facefusion_batch.swap.regions import FaceRegions

# IOD around each eye opening that stays the target's with a held eye: a pixel or two, so the
# source's lid and brow bone stay and carry its identity (docs/default-swap.md)
EYE_MARGIN = 0.015
# IOD: with the do-no-harm fit (swap/classical/fit.py) the held eye is the target's whole eye with its lids,
# its edge ramped over HELD_FEATHER so no lid line of either face shows at the seam (tuning half:
# a margin of 0.015 and 0.06 both moved fewer faces to the source; a feather of 0.06 did less harm
# on both halves for a little identity, render revision 5: docs/default-swap.md)
HELD_MARGIN, HELD_FEATHER = 0.03, 0.06
# above the brows, a source pixel darker than this share of the face's median grey is hair (a
# fringe); cutting lighter hair too cost identity (docs/default-swap.md)
HAIR_DARKER = 0.6
# IOD: dark pixels at the temples (beside the eyes and brows) that come within this of the
# cut-out's edge are hair that reaches it (a bob), cut like the fringe (docs/default-swap.md)
TEMPLE_EDGE = 0.05
# IOD round the eyes, brows and lips left out of the skin's colour statistics: nearer the
# features the local colour takes over the source's own shading there, which is identity
FEATURE_GROW = 0.08


def fill_poly(mask: np.ndarray, points: np.ndarray, value: int) -> None:
    cv2.fillPoly(mask, [np.round(points[:, :2]).astype(np.int32)], value, lineType=cv2.LINE_8)


def filled_holes(
    mesh: np.ndarray, loops: list[np.ndarray], grow: float, shape: tuple[int, int]
) -> np.ndarray:
    """[h,w] uint8: the loops filled, grown by `grow` px (at least one)."""
    holes = np.zeros(shape, np.uint8)
    if not loops:
        return holes
    for loop in loops:
        fill_poly(holes, mesh[loop], 255)
    size = 2 * max(1, int(round(grow))) + 1
    return cv2.dilate(holes, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (size, size)))


def hair_grey(crop: np.ndarray, iod: float) -> np.ndarray:
    """The crop's grey, blurred a little (single hairs and pores do not count), that hair is told
    from skin by."""
    return cv2.GaussianBlur(crop @ np.array(LUMA_BGR, np.float32), (0, 0), max(1.0, 0.02 * iod))


def hair_above_brows(
    crop: np.ndarray, mesh: np.ndarray, regions: FaceRegions, above: np.ndarray, iod: float
) -> np.ndarray:
    """[h,w] bool: the pixels of `above` (the band over the brows) darker than HAIR_DARKER of the
    face's median grey below the brows: a fringe, a dark hairline. Fair hair is as light as
    skin and is kept (it cannot be told from it here, and it lifts no orange streak)."""
    grey = hair_grey(crop, iod)
    face = np.zeros(above.shape, np.uint8)
    fill_poly(face, mesh[regions.face_oval], 255)
    below = (face > 0) & ~above
    if not below.any():
        return np.zeros(above.shape, bool)
    return above & (grey < HAIR_DARKER * float(np.median(grey[below])))


def drawn_features(
    mesh: np.ndarray, regions: FaceRegions, loops: tuple[np.ndarray, ...], shape: tuple[int, int]
) -> np.ndarray:
    """[h,w] uint8: `loops` and the brows' hull filled."""
    mask = np.zeros(shape, np.uint8)
    for loop in loops:
        fill_poly(mask, mesh[loop], 255)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.round(mesh[regions.brows, :2]).astype(np.int32)), 255)
    return mask


def grown_features(drawn: np.ndarray, iod: float) -> np.ndarray:
    """`drawn` (drawn_features) grown by FEATURE_GROW IOD."""
    grow = max(1, int(round(FEATURE_GROW * iod)))
    return cv2.dilate(drawn, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))


def feature_mask(
    mesh: np.ndarray, regions: FaceRegions, loops: tuple[np.ndarray, ...], iod: float, shape: tuple[int, int]
) -> np.ndarray:
    """[h,w] uint8: `loops` and the brows' hull filled, grown by FEATURE_GROW IOD."""
    return grown_features(drawn_features(mesh, regions, loops, shape), iod)


def temple_hair(crop: np.ndarray, area: np.ndarray, beside: np.ndarray, iod: float) -> np.ndarray:
    """[h,w] bool: hair that falls over the sides of the face beside the eyes and brows (a bob,
    curls at the temples): the pixels of `beside` darker than HAIR_DARKER of the face's median
    grey that reach the edge of `area` (the cut-out), as hair does; a dark eye corner or socket
    inside the face is left."""
    grey = hair_grey(crop, iod)
    inside = area > 0
    if not (inside & ~beside).any():  # no skin of the face's own to compare with
        return np.zeros(area.shape, bool)
    dark = beside & inside & (grey < HAIR_DARKER * float(np.median(grey[inside & ~beside])))
    count, labels = cv2.connectedComponents(dark.astype(np.uint8), connectivity=8)
    if count <= 1:  # nothing dark there
        return dark
    ring = max(1, int(round(TEMPLE_EDGE * iod)))
    core = cv2.erode(area, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * ring + 1,) * 2))
    edge = inside & (core == 0)
    reaching = np.unique(labels[edge & dark])
    return np.isin(labels, reaching[reaching > 0])


def eye_hole(loop: np.ndarray, iod: float, shape: tuple[int, int], whole: bool) -> np.ndarray:
    """[h,w] float32 0–1: where a held eye shows the target's (texture channel 5 or 6): the
    loop grown by EYE_MARGIN with a soft edge, or with `whole` (the fit) by HELD_MARGIN and
    ramped down over HELD_FEATHER outside it."""
    eye: np.ndarray = np.zeros(shape, np.uint8)
    fill_poly(eye, loop, 255)
    grow = max(1, int(round((HELD_MARGIN if whole else EYE_MARGIN) * iod)))
    eye = cv2.dilate(eye, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))
    if whole:
        dist = cv2.distanceTransform((eye == 0).astype(np.uint8), cv2.DIST_L2, 5)
        ramp = 1 - np.clip(dist / max(HELD_FEATHER * iod, 1.0), 0.0, 1.0)
        return (ramp * ramp * (3 - 2 * ramp)).astype(np.float32)
    soft = cv2.GaussianBlur(eye.astype(np.float32) / 255, (0, 0), max(1.0, 0.5 * EYE_MARGIN * iod))
    return np.maximum(soft, eye / 255.0).astype(np.float32)


def eye_openness(meshes: np.ndarray, regions: FaceRegions) -> np.ndarray:
    """[F,2]: height over width of the left and right eye openings, along each face's eye line."""
    d = meshes[:, RIGHT_EYE_OUTER, :2] - meshes[:, LEFT_EYE_OUTER, :2]
    angle = np.arctan2(d[:, 1], d[:, 0])[:, None]
    out = []
    for loop in (regions.left_eye, regions.right_eye):
        x, y = meshes[:, loop, 0], meshes[:, loop, 1]
        u = x * np.cos(angle) + y * np.sin(angle)
        v = -x * np.sin(angle) + y * np.cos(angle)
        out.append(np.ptp(v, axis=1) / np.maximum(np.ptp(u, axis=1), 1e-6))
    return np.stack(out, axis=1)
