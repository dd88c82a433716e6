"""The target's gaze by construction (issue 35, "expression belongs to the target"): inside each
painted eye the warp is bent so that the target's iris spot samples the source's iris spot.

`fit.gaze_offsets` measures, for the target (on its aligned crop) and for the source photo,
where the darkest quarter of each eye opening lies from the loop's centre, as a share of the
eye's width. Without this step the source's eye is warped loop to loop, so its iris lands where
the source looked; with it, each eye's map is shifted by a tent over the fan from the target's
spot to its loop (the spot's own barycentric weight: 1 at the spot, 0 on the loop), so the lids
and corners stay where the warp put them and only what lies between them moves."""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.faces.mesh import eye_frame

# how far the source's iris may be moved, in eye widths along and across the eye line: a bound
# for safety, not a tuned value (the fit keeps a target's own eyes from a gaze 0.2-0.3 away)
GAZE_SHIFT_LIMIT = (0.3, 0.15)


def eye_spot(mesh: np.ndarray, loop: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the point `offsets` names, the loop's points) in `mesh`'s pixels: `offsets` along and
    across the eye line as shares of the eye's width from the loop's centre (fit.gaze_offsets)."""
    angle = eye_frame(mesh)[0]
    u = np.array([np.cos(angle), np.sin(angle)])
    v = np.array([-u[1], u[0]])
    pts = mesh[loop, :2].astype(np.float64)
    width = float(np.ptp(pts @ u))
    return pts.mean(axis=0) + width * (offsets[0] * u + offsets[1] * v), pts


def shifted_offsets(target: np.ndarray, source: np.ndarray) -> np.ndarray:
    """The source offsets the target's spot will sample: the source's own, within
    GAZE_SHIFT_LIMIT of the target's."""
    limit = np.array(GAZE_SHIFT_LIMIT)
    return target + np.clip(source - target, -limit, limit)


def fan_weight(points: np.ndarray, apex: np.ndarray, loop: np.ndarray) -> np.ndarray:
    """[N] the apex's barycentric weight of each point over the fan of triangles (apex, loop[i],
    loop[i+1]); 0 outside the fan."""
    out = np.zeros(len(points))
    for i in range(len(loop)):
        b, c = loop[i], loop[(i + 1) % len(loop)]
        m = np.array([[b[0] - apex[0], c[0] - apex[0]], [b[1] - apex[1], c[1] - apex[1]]])
        det = float(np.linalg.det(m))
        if abs(det) < 1e-9:
            continue
        wb, wc = np.linalg.solve(m, (points - apex).T)
        inside = (wb >= 0) & (wc >= 0) & (wb + wc <= 1)
        out[inside] = np.maximum(out[inside], 1 - wb[inside] - wc[inside])
    return out


def follow_gaze(
    map_x: np.ndarray,
    map_y: np.ndarray,
    origin: tuple[int, int],
    target_loop: np.ndarray,
    target_spot: np.ndarray,
    source_loop: np.ndarray,
    source_spot: np.ndarray,
) -> bool:
    """Bend one eye of a face's warp map in place (`origin`: the map's top-left in the frame;
    the loops and spots in frame and texture pixels) so that the target's spot samples the
    source's. False, the map untouched, where the spot is not inside its loop or the map samples
    that eye from elsewhere (a turned source's flipped half)."""
    h, w = map_x.shape
    loop = target_loop - np.asarray(origin, np.float64)
    spot = target_spot - np.asarray(origin, np.float64)
    if not (0 <= spot[0] < w - 1 and 0 <= spot[1] < h - 1):
        return False
    if cv2.pointPolygonTest(loop.astype(np.float32), (float(spot[0]), float(spot[1])), False) <= 0:
        return False
    x, y = int(spot[0]), int(spot[1])
    fx, fy = spot[0] - x, spot[1] - y

    def bilinear(m: np.ndarray) -> float:
        top = m[y, x] * (1 - fx) + m[y, x + 1] * fx
        bottom = m[y + 1, x] * (1 - fx) + m[y + 1, x + 1] * fx
        return float(top * (1 - fy) + bottom * fy)

    now = np.array([bilinear(map_x), bilinear(map_y)])
    if cv2.pointPolygonTest(source_loop.astype(np.float32), (float(now[0]), float(now[1])), False) <= 0:
        return False
    delta = source_spot - now
    x0, y0 = np.maximum(np.floor(loop.min(axis=0)).astype(int), 0)
    x1, y1 = np.minimum(np.ceil(loop.max(axis=0)).astype(int), [w - 1, h - 1])
    if x1 < x0 or y1 < y0:
        return False
    ys, xs = np.mgrid[y0 : y1 + 1, x0 : x1 + 1]
    weight = fan_weight(np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float64), spot, loop)
    weight = weight.reshape(xs.shape)
    map_x[y0 : y1 + 1, x0 : x1 + 1] += (weight * delta[0]).astype(map_x.dtype)
    map_y[y0 : y1 + 1, x0 : x1 + 1] += (weight * delta[1]).astype(map_y.dtype)
    return True
