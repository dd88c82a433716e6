"""Shape transfer: the target mesh moved toward the source's inner-face geometry, at the
target's pose and with the target's expression.

The source's 468 3D points are fitted to the target's by a rigid similarity (rotation, scale,
translation; Umeyama's least squares) on points that move little with expression (eye
corners, nose bridge, forehead, cheekbones). Then, inside the face:

- brows and nose take the fitted source's positions (brow line, nose length and width);
- each eye keeps the target's lids (its opening: blinks and winks stay the target's) but takes
  the fitted source eye's centre and width (eye spacing and size);
- the outline (face oval) stays the target's: no second jaw or cheek edge;
- the mouth (`mouth`, ClassicalSettings.mouth_shape, on; a frontal source's only) keeps the
  target's opening (the inner lip line: speech, a smile's teeth) but takes the fitted source's
  mouth width along the target's mouth line and its lip thickness (each outer lip point at the
  source's offset from its inner partner); without it the lips stay the target's;
- every other point moves by its neighbours' displacement, fading to zero toward the outline
  and the held lips.

Pure numpy over the table's faces; the classical swap paints through the shaped mesh.
"""

from __future__ import annotations

import numpy as np

from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER
from facefusion_batch.swap.regions import FaceRegions

# points that move little with expression: eye corners, nose bridge, forehead, cheekbones
STABLE = np.array([33, 133, 263, 362, 6, 168, 197, 195, 9, 151, 10, 8, 234, 454, 93, 323, 127, 356])
NOSE = np.array(
    [1, 2, 4, 5, 6, 19, 45, 48, 64, 94, 97, 98, 102, 115, 129, 168, 195, 197, 209, 218, 219, 220]
    + [237, 238, 239, 240, 241, 242, 275, 278, 294, 326, 327, 331, 344, 358, 429, 438, 439, 440, 457]
    + [458, 459, 460, 461, 462]
)
FADE = 0.3  # eye spans from the anchors (outline, held lips) over which the displacement fades in
# how far the mouth's width may follow the source's (a wider source mouth would otherwise cover
# the target's teeth's corners with lip, a much narrower one show the target's lip corners)
MOUTH_WIDTH_RANGE = (0.85, 1.2)
MOUTH_YAW = (0.15, 0.3)  # |source yaw| up to which the mouth shape goes fully, from which not at all


def mouth_delta(tgt: np.ndarray, fitted: np.ndarray, outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """[len(outer)+len(inner), 2] displacements of the lip points (outer, then inner): the
    target's inner lip line stretched along its mouth line to the source's mouth width, and
    each outer lip point at its source offset from its inner partner (the loops run in step)."""
    corners = inner[[0, len(inner) // 2]]
    axis = tgt[corners[1], :2] - tgt[corners[0], :2]
    width = np.linalg.norm(axis) + 1e-6
    axis = axis / width
    measured = np.linalg.norm(fitted[corners[1], :2] - fitted[corners[0], :2]) / width
    ratio = float(np.clip(measured, *MOUTH_WIDTH_RANGE))
    centre = tgt[inner, :2].mean(axis=0)
    along = (tgt[inner, :2] - centre) @ axis
    new_inner = tgt[inner, :2] + ((ratio - 1.0) * along)[:, None] * axis
    new_outer = new_inner + (fitted[outer, :2] - fitted[inner, :2])
    return np.concatenate([new_outer - tgt[outer, :2], new_inner - tgt[inner, :2]])


def similarity_3d(src: np.ndarray, dst: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(scale, rotation [3,3], translation [3]) with dst ≈ scale · src @ R.T + t (least squares)."""
    mu_s, mu_d = src.mean(axis=0), dst.mean(axis=0)
    xs, xd = src - mu_s, dst - mu_d
    u, sv, vt = np.linalg.svd(xd.T @ xs / len(src))
    d = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:  # a rotation, never a reflection
        d[2, 2] = -1
    rotation = u @ d @ vt
    scale = float(np.trace(np.diag(sv) @ d) / max((xs**2).sum() / len(src), 1e-12))
    return scale, rotation, mu_d - scale * rotation @ mu_s


def mouth_weight(source_yaw: np.ndarray) -> np.ndarray:
    """How much of the source's mouth shape to take, from its photo's head turn (eye_frame's
    yaw proxy): all of it from a frontal photo, none from a three-quarter or profile one,
    whose far half of the mouth the mesh can only guess (measured: a profile source's mouth
    cost identity, scripts/bench_quality.py)."""
    t = np.clip(
        (MOUTH_YAW[1] - np.abs(np.asarray(source_yaw, np.float64))) / (MOUTH_YAW[1] - MOUTH_YAW[0]), 0, 1
    )
    return t * t * (3 - 2 * t)


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[len(a), len(b)] squared distances between 2-D points, x² + y² in that order (the same
    bits as summing the squared differences over the last axis, without the reduction)."""
    dx = a[:, None, 0] - b[None, :, 0]
    dy = a[:, None, 1] - b[None, :, 1]
    return dx * dx + dy * dy


def displacement(tgt: np.ndarray, fitted: np.ndarray, regions: FaceRegions, with_mouth: bool) -> np.ndarray:
    """[468, 2] how far each target point moves toward the fitted source (see the module's
    docstring); `with_mouth`: the lips take the source's shape, else they stay put and, like
    the outline, anchor the fade."""
    lips = np.concatenate([regions.lips_outer, regions.lips_inner])
    anchors = (
        np.asarray(regions.face_oval) if with_mouth else np.unique(np.concatenate([regions.face_oval, lips]))
    )
    brows = np.asarray(regions.brows)
    delta = np.zeros((len(tgt), 2))
    moved = np.zeros(len(tgt), bool)
    if with_mouth:
        delta[lips] = mouth_delta(tgt, fitted, regions.lips_outer, regions.lips_inner)
        moved[lips] = True
    delta[brows] = fitted[brows, :2] - tgt[brows, :2]
    delta[NOSE] = fitted[NOSE, :2] - tgt[NOSE, :2]
    moved[brows] = moved[NOSE] = True
    for loop in (np.asarray(regions.left_eye), np.asarray(regions.right_eye)):
        t_centre, f_centre = tgt[loop, :2].mean(axis=0), fitted[loop, :2].mean(axis=0)
        ratio = np.ptp(fitted[loop, 0]) / (np.ptp(tgt[loop, 0]) + 1e-6)
        delta[loop] = f_centre + (tgt[loop, :2] - t_centre) * ratio - tgt[loop, :2]
        moved[loop] = True
    moved[anchors] = False
    span = np.linalg.norm(tgt[RIGHT_EYE_OUTER, :2] - tgt[LEFT_EYE_OUTER, :2]) + 1e-6
    # the rest of the face follows its moved neighbours (Gaussian weights of 0.25 eye spans)
    w = np.exp(-_squared_distances(tgt[:, :2], tgt[moved, :2]) / (2 * (0.25 * span) ** 2))
    spread = (w @ delta[moved]) / np.maximum(w.sum(axis=1, keepdims=True), 1e-9)
    delta = np.where(moved[:, None], delta, spread * np.clip(w.sum(axis=1, keepdims=True), 0, 1))
    # fading to nothing at the anchors
    to_anchor = np.sqrt(_squared_distances(tgt[:, :2], tgt[anchors, :2]).min(axis=1))
    fade = np.clip(to_anchor / (FADE * span), 0.0, 1.0)
    return (fade * fade * (3 - 2 * fade))[:, None] * delta


def shaped_meshes(
    target: np.ndarray,
    source: np.ndarray,
    regions: FaceRegions,
    strength: float | np.ndarray = 1.0,
    mouth: np.ndarray | None = None,
) -> np.ndarray:
    """[F,468,3] target meshes moved toward each face's source mesh ([F,468,3], any frame of
    reference: it is fitted first); `strength` (one, or [F] one a face) 0 gives the target, 1
    the full transfer; `mouth` [F] (default: none): how much of the mouth's width and lip shape
    goes with it."""
    out = target.astype(np.float64).copy()
    amounts = np.broadcast_to(np.asarray(strength, np.float64), (len(target),))
    if not len(target) or amounts.max() <= 0:
        return out.astype(np.float32)
    paired_lips = len(regions.lips_outer) == len(regions.lips_inner)
    for f in range(len(target)):
        if amounts[f] <= 0:
            continue
        tgt = target[f].astype(np.float64)
        scale, rotation, shift = similarity_3d(source[f][STABLE].astype(np.float64), tgt[STABLE])
        fitted = scale * source[f].astype(np.float64) @ rotation.T + shift
        weight = 0.0 if mouth is None or not paired_lips else float(mouth[f])
        delta: np.ndarray | float = 0.0
        if weight < 1:  # the lips held where the target has them (anchors of the fade)
            delta = (1 - weight) * displacement(tgt, fitted, regions, with_mouth=False)
        if weight > 0:  # the lips moved to the source's width and thickness
            delta = delta + weight * displacement(tgt, fitted, regions, with_mouth=True)
        out[f, :, :2] = tgt[:, :2] + amounts[f] * delta
    return out.astype(np.float32)
