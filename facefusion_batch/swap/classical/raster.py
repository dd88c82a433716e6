"""A batched triangle rasteriser in numpy: all triangles of all faces in one pass.

Drawing 852 triangles per face one by one in Python is the slow part of a
piecewise-affine warp. Here every triangle's bounding box is expanded into
candidate pixels at once, tested with barycentric coordinates, and overlaps
(fold-overs on a turned head) are resolved by depth: the nearest triangle wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Coverage:
    """Pixels covered by the mesh of each face, with the source point each maps to."""

    face: np.ndarray  # [P] int64: which face (row of the input arrays)
    x: np.ndarray  # [P] int32 pixel column in the destination image
    y: np.ndarray  # [P] int32 pixel row
    src_x: np.ndarray  # [P] float32 source-image x for that pixel (piecewise affine)
    src_y: np.ndarray  # [P] float32


def rasterize(
    dst: np.ndarray,
    src: np.ndarray,
    depth: np.ndarray,
    triangles: np.ndarray,
    shape: tuple[int, int] | np.ndarray,
) -> Coverage:
    """Rasterise the mesh of F faces.

    dst: [F,N,2] destination vertices (pixels); src: [F,N,2] matching source vertices, or
    [F,T,3,2] per triangle corner (a triangle may take its texture from elsewhere);
    depth: [F,N] (smaller is nearer); triangles: [T,3] vertex indices; shape: (H, W) of
    the destination, or [F,2] of them, one per face (faces may lie on frames of different
    sizes or scales). Pixel centres sit on integer coordinates (OpenCV's convention).
    """
    faces = dst.shape[0]
    bounds = np.broadcast_to(np.asarray(shape, np.int64).reshape(-1, 2), (faces, 2))
    height = np.repeat(bounds[:, 0], len(triangles))
    width = np.repeat(bounds[:, 1], len(triangles))
    key_height, key_width = int(bounds[:, 0].max(initial=1)), int(bounds[:, 1].max(initial=1))
    tri_dst = dst[:, triangles].reshape(-1, 3, 2).astype(np.float64)  # [F*T,3,2]
    tri_src = (src if src.ndim == 4 else src[:, triangles]).reshape(-1, 3, 2).astype(np.float64)
    tri_depth = depth[:, triangles].mean(axis=2).reshape(-1)
    tri_face = np.repeat(np.arange(faces), len(triangles))

    e1 = tri_dst[:, 1] - tri_dst[:, 0]
    e2 = tri_dst[:, 2] - tri_dst[:, 0]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    x0 = np.clip(np.ceil(tri_dst[..., 0].min(1)), 0, width).astype(np.int64)
    x1 = np.minimum(np.floor(tri_dst[..., 0].max(1)), width - 1).astype(np.int64)
    y0 = np.clip(np.ceil(tri_dst[..., 1].min(1)), 0, height).astype(np.int64)
    y1 = np.minimum(np.floor(tri_dst[..., 1].max(1)), height - 1).astype(np.int64)
    w = np.maximum(x1 - x0 + 1, 0)
    h = np.maximum(y1 - y0 + 1, 0)
    counts = np.where(np.abs(det) > 1e-9, w * h, 0)
    total = int(counts.sum())
    if total == 0:
        empty_i = np.zeros((0,), np.int32)
        empty_f = np.zeros((0,), np.float32)
        return Coverage(np.zeros((0,), np.int64), empty_i, empty_i, empty_f, empty_f)

    tri = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    offset = np.arange(total) - starts[tri]
    px = x0[tri] + offset % w[tri]
    py = y0[tri] + offset // w[tri]

    # barycentric coordinates of each candidate pixel in its triangle
    dx = px - tri_dst[tri, 0, 0]
    dy = py - tri_dst[tri, 0, 1]
    inv = 1.0 / det[tri]
    l1 = (dx * e2[tri, 1] - dy * e2[tri, 0]) * inv
    l2 = (dy * e1[tri, 0] - dx * e1[tri, 1]) * inv
    l0 = 1.0 - l1 - l2
    eps = -1e-7
    inside = (l0 >= eps) & (l1 >= eps) & (l2 >= eps)
    tri, px, py, l0, l1, l2 = tri[inside], px[inside], py[inside], l0[inside], l1[inside], l2[inside]

    # nearest triangle per (face, pixel)
    key = tri_face[tri] * (key_height * key_width) + py * key_width + px
    order = np.lexsort((tri_depth[tri], key))
    key_sorted = key[order]
    first = np.ones(len(order), bool)
    first[1:] = key_sorted[1:] != key_sorted[:-1]
    pick = order[first]

    tri, l0, l1, l2 = tri[pick], l0[pick], l1[pick], l2[pick]
    s = tri_src[tri]
    src_x = l0 * s[:, 0, 0] + l1 * s[:, 1, 0] + l2 * s[:, 2, 0]
    src_y = l0 * s[:, 0, 1] + l1 * s[:, 1, 1] + l2 * s[:, 2, 1]
    return Coverage(
        face=tri_face[tri],
        x=px[pick].astype(np.int32),
        y=py[pick].astype(np.int32),
        src_x=src_x.astype(np.float32),
        src_y=src_y.astype(np.float32),
    )
