"""Glasses in front of the eyes: a dark rim round each eye, found on the picture and kept in front
of the swap.

The classical swap paints the source's face over the target's, and a pair of glasses on the
target went with it: its rims half erased, grey rings with the source's eyes through them
(issue 35). The mesh does not see glasses and `--mask skin` cannot keep them (round the eyes and
brows every pixel is a feature, never an occluder), so here, per eye of each face's aligned
crop: along rays from the eye's centre, beyond its loop, the darkest thin ridge of the luma (a
line darker than both its sides by a share of them, and much darker than the face's skin). A
rim is a closed loop: it is found when the ridge is there on most rays at a radius that varies
smoothly from ray to ray. Where a ray finds none (a brow or the bridge over it) the ring goes on
at its neighbours' radius, over the pixels as dark as the rim. Between two rims, a ridge along
the line that joins them is the bridge. What is found keeps the frame's own pixels (a
visibility of 0), the rest of the face is swapped as before. Shadows, brows and lashes are not
found: a shadow is broad, a brow covers a part of the circle, lashes lie on the loop.

Pure numpy/OpenCV over the batch's crops, with the scales of the occlusion crop's template
(arcface_128 at 256 px: the eyes' centres 82 px apart); no model call.
"""

from __future__ import annotations

import warnings

import cv2
import numpy as np

from facefusion_batch.swap.classical.skin import feature_and_face_masks
from facefusion_batch.swap.regions import FaceRegions

RAYS = 48  # rays round each eye
SAMPLES = 64  # luma samples along each ray
# the rays' span, in halves of the eye loop's width from its centre; a rim is searched from
# START_GAP px past the loop (the lashes lie on it)
RAY_FROM, RAY_TO = 0.5, 2.6
START_GAP = 2.5
SIDES = (3.0, 5.0, 7.0)  # px either side of a ridge where its sides are read (rims 2-12 px wide)
# a ridge: darker than the darker of its sides by this share of it, and darker than this share
# of the face's skin luma (relative, so a grey photo's wide spread or dim light does not matter)
RIDGE_SHARE, DARK_SHARE = 0.35, 0.6
RING_SHARE = 0.6  # of the rays that must find the ridge at a radius near their neighbours'
RING_JUMP = 0.2  # of the half width: how far a ray's radius may lie from its neighbours' median
BRIDGE_STEPS = 12  # profiles across the line between two rims
BRIDGE_REACH = 0.5  # of the half width: how far either side of that line a bridge is looked for
SKIN_STEP, MIN_SKIN = 2, 16  # the skin's luma is read on every 2nd pixel each way, from 16 of them
BROW_SHARE = 0.5  # over a brow, a source photo's rim is what is darker than this share of the brow
PHOTO_GROW = 2  # px: a source photo's rims grown over their anti-aliased edge before inpainting
INPAINT_REACH = 0.05  # of the eye distance: how far round a source photo's rims the inpainting reads
SOFTEN = 1.0  # px: the kept rim's edge, grown by as much first so the rim's own pixels stay


def ray_samples(
    luma: np.ndarray, centre: np.ndarray, half: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the rays' directions [A, 2], their radii [S] in px, the luma along them [A, S])."""
    angles = np.linspace(0.0, 2 * np.pi, RAYS, endpoint=False)
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    radii = np.linspace(RAY_FROM, RAY_TO, SAMPLES) * half
    points = centre[None, None] + radii[None, :, None] * directions[:, None]
    return directions, radii, sampled(luma, points)


def sampled(luma: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The luma at `points` [..., 2] (x, y; bilinear, the crop's edge repeated), float64."""
    return cv2.remap(
        luma,
        points[..., 0].astype(np.float32),
        points[..., 1].astype(np.float32),
        cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_REPLICATE,
    ).astype(np.float64)


def ridges(values: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """(how much darker each sample is than the darker of its sides, as a share of them; the
    sides' luma), both [..., S]; the sides are read SIDES px either way (the widest that is a
    ridge counts)."""
    n = values.shape[-1]
    index = np.arange(n)
    sides = np.full(values.shape, -np.inf)
    for px in SIDES:
        w = max(1, int(round(px / step)))
        before = values[..., np.clip(index - w, 0, n - 1)]
        after = values[..., np.clip(index + w, 0, n - 1)]
        sides = np.maximum(sides, np.minimum(before, after))
    return (sides - values) / np.maximum(sides, 1.0), sides


def loop_radius(loop: np.ndarray, centre: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """[A] the eye loop's radius along each ray (its nearest point by angle)."""
    rel = loop - centre
    loop_angles = np.arctan2(rel[:, 1], rel[:, 0])
    ray_angles = np.arctan2(directions[:, 1], directions[:, 0])
    gap = np.abs(np.angle(np.exp(1j * (loop_angles[None] - ray_angles[:, None]))))
    return np.hypot(rel[:, 0], rel[:, 1])[np.argmin(gap, axis=1)]


def eye_rim(luma: np.ndarray, loop: np.ndarray, skin: float) -> tuple[np.ndarray, np.ndarray] | None:
    """One eye's rim as its (inner, outer) polygon [A, 2] each, or None where there is none."""
    centre = loop.mean(axis=0)
    half = 0.5 * float(np.ptp(loop[:, 0]))
    if half < 4:
        return None
    directions, radii, values = ray_samples(luma, centre, half)
    step = float(radii[1] - radii[0])
    share, sides = ridges(values, step)
    beyond = radii[None] >= (loop_radius(loop, centre, directions) + START_GAP)[:, None]
    ok = beyond & (share > RIDGE_SHARE) & (values < DARK_SHARE * skin)
    best = np.argmax(np.where(ok, share, -np.inf), axis=1)
    found = ok[np.arange(RAYS), best]
    if found.mean() < RING_SHARE:
        return None
    # each ray's radius against the median of its four neighbours that found one (none: NaN)
    around = np.stack([np.roll(np.where(found, radii[best], np.nan), s) for s in (-2, -1, 1, 2)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a ray whose neighbours found none
        neighbours = np.nanmedian(around, axis=0)
    steady = found & (np.abs(radii[best] - neighbours) < RING_JUMP * half)
    if steady.mean() < RING_SHARE:
        return None
    inner, outer = np.empty(RAYS), np.empty(RAYS)
    for a in np.flatnonzero(steady):  # the rim's width on this ray: samples darker than halfway
        i = int(best[a])
        dark = values[a] < 0.5 * (values[a, i] + sides[a, i])
        lo, hi = i, i
        while lo > 0 and dark[lo - 1]:
            lo -= 1
        while hi < SAMPLES - 1 and dark[hi + 1]:
            hi += 1
        inner[a], outer[a] = radii[lo], radii[hi]
    rays = np.flatnonzero(steady)
    angles = np.arange(RAYS)
    inner = np.interp(angles, rays, inner[rays], period=RAYS)
    outer = np.interp(angles, rays, outer[rays], period=RAYS)
    return centre + inner[:, None] * directions, centre + outer[:, None] * directions


def bridge(
    luma: np.ndarray, rims: list[tuple[np.ndarray, np.ndarray]], half: float, skin: float
) -> np.ndarray | None:
    """The bridge between two rims as a polyline [N, 2], or None: a dark ridge on most profiles
    across the line between the rims' nearest outer points."""
    (_, outer_a), (_, outer_b) = rims
    gaps = np.linalg.norm(outer_a[:, None] - outer_b[None], axis=2)
    a, b = np.unravel_index(int(np.argmin(gaps)), gaps.shape)
    start, end = outer_a[a], outer_b[b]
    along = end - start
    length = float(np.linalg.norm(along))
    if length < 2:
        return None
    across = np.array([-along[1], along[0]]) / length
    offsets = np.linspace(-BRIDGE_REACH, BRIDGE_REACH, SAMPLES) * half
    t = np.linspace(0.0, 1.0, BRIDGE_STEPS + 2)[1:-1]
    points = start[None, None] + t[:, None, None] * along + offsets[None, :, None] * across
    values = sampled(luma, points)
    share, _ = ridges(values, float(offsets[1] - offsets[0]))
    ok = (share > RIDGE_SHARE) & (values < DARK_SHARE * skin)
    best = np.argmax(np.where(ok, share, -np.inf), axis=1)
    found = ok[np.arange(len(t)), best]
    if found.mean() < RING_SHARE:
        return None
    line = points[np.arange(len(t)), best][found]
    return np.concatenate([start[None], line, end[None]])


def skin_luma(luma: np.ndarray, mesh: np.ndarray, regions: FaceRegions) -> float | None:
    """The median luma of a face's own skin (its oval, the features left out), read on every
    SKIN_STEP-th pixel each way; None where too little skin shows."""
    size = luma.shape[0] // SKIN_STEP
    features, face = feature_and_face_masks(mesh[:, :2] / SKIN_STEP, regions, size)
    reference = face & ~features
    if reference.sum() < MIN_SKIN:
        return None
    return float(np.median(luma[::SKIN_STEP, ::SKIN_STEP][:size, :size][reference]))


def rim_visibility(lumas: np.ndarray, meshes: np.ndarray, regions: FaceRegions) -> np.ndarray:
    """[F, S, S] float32: 0 on the glasses' rims and bridge found in front of each face's eyes,
    1 elsewhere; `lumas` [F, S, S] float32 the aligned crops' luma (faces/align.host_lumas),
    `meshes` [F, 468, 2+] in crop pixels."""
    count, size = lumas.shape[0], lumas.shape[1]
    out = np.ones((count, size, size), np.float32)
    for f in range(count):  # a few hundred samples per eye; no model is called
        luma = lumas[f]
        skin = skin_luma(luma, meshes[f], regions)
        if skin is None:
            continue
        found = [
            eye_rim(luma, meshes[f, loop, :2].astype(np.float64), skin)
            for loop in (regions.left_eye, regions.right_eye)
        ]
        rims = [r for r in found if r is not None]
        if not rims:
            continue
        ring = np.zeros((size, size), np.uint8)
        for inner, outer in rims:
            cv2.fillPoly(ring, [np.round(outer).astype(np.int32)], 1)
            cv2.fillPoly(ring, [np.round(inner).astype(np.int32)], 0)
        if len(rims) == 2:
            half = 0.5 * float(np.ptp(meshes[f, regions.left_eye, 0]))
            line = bridge(luma, rims, half, skin)
            if line is not None:
                cv2.polylines(ring, [np.round(line).astype(np.int32)], False, 1, max(1, int(round(SIDES[1]))))
        kept = (ring > 0) & (luma < DARK_SHARE * skin)
        grown = cv2.dilate(kept.astype(np.uint8), np.ones((3, 3), np.uint8))
        out[f] = np.minimum(out[f], cv2.GaussianBlur(1.0 - grown.astype(np.float32), (0, 0), SOFTEN))
        out[f][kept] = 0.0
    return out


def rims_on_photo(
    visibility: np.ndarray,
    luma: np.ndarray,
    mesh: np.ndarray,
    regions: FaceRegions,
    affine: np.ndarray,
    shape: tuple[int, int],
) -> np.ndarray:
    """bool [H, W]: the rims found on one face's aligned crop (`visibility` [S, S] from
    `rim_visibility`, `luma` the crop's, `mesh` [468, 2+] in crop pixels; `affine` [2, 3] photo
    → crop) in the photo's own pixels, grown by PHOTO_GROW px over their soft edge. Never the
    eyes' openings; over a brow only what is much darker than the brow (a rim, not its hairs)."""
    height, width = shape
    size = visibility.shape[0]
    loops = np.zeros((size, size), np.uint8)
    for loop in (regions.left_eye, regions.right_eye):
        cv2.fillPoly(loops, [np.round(mesh[loop, :2]).astype(np.int32)], 1)
    eyes = cv2.dilate(loops, np.ones((2 * PHOTO_GROW + 1,) * 2, np.uint8))
    brows = np.zeros((size, size), np.uint8)
    cv2.fillConvexPoly(brows, cv2.convexHull(np.round(mesh[regions.brows, :2]).astype(np.int32)), 1)
    found = (visibility < 0.5) & (eyes == 0)
    if found.any() and (brows > 0).any():
        brow = float(np.median(luma[(brows > 0) & ~found]))
        found &= (brows == 0) | (luma < BROW_SHARE * brow)
    back = cv2.warpAffine(
        found.astype(np.uint8),
        affine.astype(np.float64),
        (width, height),
        flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP,
    )
    grow = 2 * PHOTO_GROW + 1
    return cv2.dilate(back, np.ones((grow, grow), np.uint8)) > 0


def without_rims(photo: np.ndarray, rims: np.ndarray, iod: float) -> np.ndarray:
    """A source photo with its glasses' rims (`rims`, bool [H, W]) painted over from the skin round
    them (OpenCV's Telea inpainting over INPAINT_REACH of the eye distance): the classical swap
    warps the photo's pixels, and rims left in them would be drawn bent onto the target's face."""
    reach = max(2.0, INPAINT_REACH * iod)
    return cv2.inpaint(np.ascontiguousarray(photo), rims.astype(np.uint8), reach, cv2.INPAINT_TELEA)
