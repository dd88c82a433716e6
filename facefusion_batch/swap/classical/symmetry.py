"""Mirror fill: the squeezed or hidden side of a turned source face taken from its visible side.

A source photo at a three-quarter or profile view shows one cheek, eye and brow squeezed into
a few pixels (or hidden behind the nose). Warped onto a more frontal target, those few pixels
are stretched into a smear: the dark, bruised-looking eye of a turned source. Faces are close
to symmetric, so the squeezed side is taken from the other side. The photo flipped left-right
is a face too, and the mesh model labels it like any face (its point 263 is its own left eye
corner, made of the photo's right eye), so painting a triangle from the flipped photo, point
for point, puts the visible side's pixels, mirrored, where the hidden side is, at the
resolution the visible side was photographed at.

The source texture becomes an atlas, the photo's crop beside the flipped photo's crop; each
triangle of the mesh is sampled from the half where it is clearly larger (better seen). A
frontal photo takes every triangle from itself.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, NOSE_TIP, RIGHT_EYE_OUTER, eye_frame
from facefusion_batch.swap.classical.raster import rasterize

LOW, HIGH = 0.5, 0.78  # share of the two areas over which a triangle turns to the flipped photo
# a source turned this far (the yaw proxy: the nose tip's offset from the eyes' centre along the
# eye line, in eye-corner spans) gives its whole far half, from the midline, to the flipped photo
TURNED_FROM, TURNED_FULLY = 0.3, 0.4
NASION = 168  # the mesh point between the eyes: the midline the far half is measured from
MIDLINE_BAND = 0.06  # eye-corner spans either side of the midline over which it turns
SMOOTHING = 2  # rounds of neighbour averaging: the turn spreads over a band of triangles
# a turned photo's upper midline (the skin between the brows, the top of the nose bridge) is
# sampled this many eye-corner spans inward, toward its near side, fading out over INSET_BAND
# spans either side of the midline and from the nasion to INSET_DOWN of the way to the nose tip
MIDLINE_INSET, INSET_BAND, INSET_DOWN = 0.09, 0.12, 0.5
# eye-corner spans round a photo's shut eye (the other open) painted from the flipped photo,
# which holds the open one there: the eye, its lids and the socket, not the brow
SHUT_EYE_REACH = 0.17


def triangle_areas(mesh: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Projected area of every triangle; back-facing ones (folded behind the nose) count 0."""
    p = mesh[triangles, :2].astype(np.float64)
    e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
    signed = 0.5 * (e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    facing = np.sign(np.median(signed)) or 1.0  # most of a face's triangles face the camera
    return np.maximum(signed * facing, 0.0)


def _per_vertex(values: np.ndarray, triangles: np.ndarray, n: int) -> np.ndarray:
    total, count = np.zeros(n), np.zeros(n)
    np.add.at(total, triangles.reshape(-1), np.repeat(values, 3))
    np.add.at(count, triangles.reshape(-1), 1.0)
    return total / np.maximum(count, 1.0)


def _smoothstep(t: np.ndarray | float) -> np.ndarray:
    t = np.clip(t, 0.0, 1.0)
    return t * t * (3 - 2 * t)


def turned(yaw: np.ndarray | float) -> np.ndarray:
    """How turned a face is, 0 within TURNED_FROM of the yaw proxy (faces/mesh.eye_frame) to 1
    from TURNED_FULLY: past it the far side is hidden behind the nose (the mirror fill's far
    half, the inset midline, a target's held far eye)."""
    return _smoothstep((np.abs(yaw) - TURNED_FROM) / (TURNED_FULLY - TURNED_FROM))


def far_half(mesh: np.ndarray) -> np.ndarray:
    """Per vertex, how far it lies on the far side of a turned face (0 near side, 1 far side,
    0.5 on the midline), times how turned the face is (0 for a face within TURNED_FROM).

    On a strongly turned photo the midline itself (nose bridge, the skin between the brows) is
    seen edge-on: the mesh lays the far brow and the socket's shadow over it while its
    triangles keep about the area the flipped photo gives them, so area alone leaves them to
    the photo and a frontal target gets a grey smear between the brows. In the flipped photo
    that half is the near half's skin, seen from the front (docs/default-swap.md)."""
    if len(mesh) <= max(LEFT_EYE_OUTER, RIGHT_EYE_OUTER, NOSE_TIP, NASION):
        return np.zeros(len(mesh))  # not a face mesh: no eyes to tell its sides by
    angle, span, yaw = eye_frame(mesh)
    axis = np.array([np.cos(angle), np.sin(angle)])
    amount = float(turned(yaw))
    if amount == 0:
        return np.zeros(len(mesh))
    offset = np.sign(yaw) * ((mesh[:, :2] - mesh[NASION, :2]) @ axis) / max(span, 1e-6)
    return amount * _smoothstep((offset + MIDLINE_BAND) / (2 * MIDLINE_BAND))


def inset_midline(mesh: np.ndarray) -> np.ndarray:
    """`mesh` with its upper midline moved toward the near side on a turned photo (as turned
    as `far_half` counts it); a frontal photo's mesh is returned as it is.

    Seen edge-on, the skin between the brows is the face's silhouette, and the mesh lays it a
    pixel or two past it, on the background (a grey door frame behind Matt in t1.jpg). The
    flipped photo's midline is the same edge, so the mirror fill cannot help there: painted on
    a frontal target that was a grey spot between the brows. Sampled a little inward it is the
    brow ridge's skin, at a cost in identity the recogniser measures (docs/default-swap.md)."""
    if len(mesh) <= max(LEFT_EYE_OUTER, RIGHT_EYE_OUTER, NOSE_TIP, NASION):
        return mesh
    angle, span, yaw = eye_frame(mesh)
    amount = float(turned(yaw))
    if amount == 0:
        return mesh
    axis = np.array([np.cos(angle), np.sin(angle)])
    down = np.array([-axis[1], axis[0]])
    rel = mesh[:, :2] - mesh[NASION, :2]
    across = np.sign(yaw) * (rel @ axis) / max(span, 1e-6)
    nose = float((mesh[NOSE_TIP, :2] - mesh[NASION, :2]) @ down)
    below = (rel @ down) / (nose if abs(nose) > 1e-6 else 1e-6)  # 0 at the nasion, 1 at the tip
    weight = np.clip(1 - np.abs(across) / INSET_BAND, 0.0, 1.0) * _smoothstep(1 - below / INSET_DOWN)
    out = mesh.copy()
    out[:, :2] -= (np.sign(yaw) * MIDLINE_INSET * span * amount * weight)[:, None] * axis[None]
    return out


def wink_shares(shut: tuple[float, float]) -> tuple[float, float]:
    """Per eye (left, right), how much of it to paint from the flipped photo because the photo
    has that eye clearly shut (more than half held by its lid, swap/classical/lids.py) and the other open:
    a wink. A pair both shut, or an eye half read, gives none."""
    left, right = (float(v) for v in shut)
    return (
        float(np.clip(2 * left - 1, 0.0, 1.0)) * (1.0 - right),
        float(np.clip(2 * right - 1, 0.0, 1.0)) * (1.0 - left),
    )


def shut_eye_weights(
    mesh: np.ndarray, shut: tuple[float, float], eyes: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """Per vertex, how much the flipped photo should give round an eye the photo has shut while
    the other is open (a wink, `wink_shares`): there the flipped photo holds the open eye, so
    every target gets an open eye to take on both sides. 1 within SHUT_EYE_REACH eye-corner
    spans of the shut eye's centre, fading to 0 over as much again. `eyes`: the left and right
    eye loops' point indices (`shut` is indexed alike)."""
    if len(mesh) <= max(LEFT_EYE_OUTER, RIGHT_EYE_OUTER):
        return np.zeros(len(mesh))
    span = max(eye_frame(mesh)[1], 1e-6)
    out = np.zeros(len(mesh))
    for loop, amount in zip(eyes, wink_shares(shut), strict=True):
        if amount <= 0:
            continue
        distance = np.linalg.norm(mesh[:, :2] - mesh[loop, :2].mean(axis=0), axis=1) / span
        out = np.maximum(out, amount * _smoothstep(2 - distance / SHUT_EYE_REACH))
    return out


def mirror_weights(
    mesh: np.ndarray, mirror_mesh: np.ndarray, triangles: np.ndarray, extra: np.ndarray | None = None
) -> np.ndarray:
    """Per vertex, how much the flipped photo should give there (0: none, 1: all): high where
    the photo's own triangles are squeezed against the flipped photo's, or on the far half of a
    strongly turned face (`far_half`), or where `extra` says so (per vertex: `shut_eye_weights`),
    smooth over the mesh."""
    own, other = triangle_areas(mesh, triangles), triangle_areas(mirror_mesh, triangles)
    t = np.clip((other / np.maximum(own + other, 1e-9) - LOW) / (HIGH - LOW), 0.0, 1.0)
    weights = np.maximum(_per_vertex(_smoothstep(t), triangles, len(mesh)), far_half(mesh))
    if extra is not None:
        weights = np.maximum(weights, extra)
    for _ in range(SMOOTHING):
        weights = _per_vertex(weights[triangles].mean(axis=1), triangles, len(mesh))
    return weights


def _warp(
    image: np.ndarray,
    dst: np.ndarray,
    src: np.ndarray,
    weights: np.ndarray,
    triangles: np.ndarray,
    shape: tuple[int, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """`image` (laid out on mesh `src`) warped onto mesh `dst` over an image of `shape`, and
    the per-vertex `weights` interpolated there (0 where the mesh does not cover)."""
    h, w = shape[:2]
    depth = dst[None, :, 2]
    warp = rasterize(dst[None, :, :2], src[None, :, :2], depth, triangles, (h, w))
    field = rasterize(dst[None, :, :2], np.stack([weights, weights], 1)[None], depth, triangles, (h, w))
    map_x = np.full((h, w), -1e4, np.float32)
    map_y = np.full((h, w), -1e4, np.float32)
    map_x[warp.y, warp.x], map_y[warp.y, warp.x] = warp.src_x, warp.src_y
    amount = np.zeros((h, w), np.float32)
    amount[field.y, field.x] = field.src_x
    warped = cv2.remap(image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return warped, amount


def symmetric_pair(
    texture: np.ndarray,
    mesh: np.ndarray,
    mirror: np.ndarray,
    mirror_mesh: np.ndarray,
    triangles: np.ndarray,
    extra: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The photo's and the flipped photo's textures ([h,w,5], meshes in their pixels) blended
    into each other over the band where the mesh turns from one to the other, and [T] which
    triangles are painted from the flipped one. Each texture keeps its own layout (its own
    resolution), and at the turn both hold the same blend, so no seam shows where it switches."""
    weights = mirror_weights(mesh, mirror_mesh, triangles, extra)
    use = weights[triangles].mean(axis=1) > 0.5
    texture, mirror = texture.copy(), mirror.copy()
    colour = np.r_[0:3]  # the colour layers: B, G, R
    from_mirror, w_own = _warp(mirror[..., colour], mesh, mirror_mesh, weights, triangles, texture.shape)
    from_own, w_mirror = _warp(texture[..., colour], mirror_mesh, mesh, weights, triangles, mirror.shape)
    texture[..., colour] += w_own[..., None] * (from_mirror - texture[..., colour])
    mirror[..., colour] = from_own + w_mirror[..., None] * (mirror[..., colour] - from_own)
    return texture, mirror, use


def atlas(texture: np.ndarray, mirror_texture: np.ndarray) -> tuple[np.ndarray, int]:
    """The two textures side by side (the shorter padded with zeros: transparent); returns
    the atlas and the x offset of the second."""
    height = max(texture.shape[0], mirror_texture.shape[0])
    pad = [((0, height - t.shape[0]), (0, 0), (0, 0)) for t in (texture, mirror_texture)]
    out = np.concatenate([np.pad(texture, pad[0]), np.pad(mirror_texture, pad[1])], axis=1)
    return out, texture.shape[1]


def mirror_corners(
    mirror_mesh: np.ndarray | None, use_mirror: np.ndarray | None, triangles: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """[T,3,2] texture corners of every triangle in the flipped photo, and [T,3,2] labels (1
    on the triangles painted from there, else 0); (None, None) without a mirror to use."""
    if mirror_mesh is None or use_mirror is None or not use_mirror.any():
        return None, None
    labels = np.broadcast_to(use_mirror.astype(np.float32)[:, None, None], (len(triangles), 3, 2))
    return mirror_mesh[triangles, :2], np.ascontiguousarray(labels)
