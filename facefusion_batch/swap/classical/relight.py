"""What the relighting (kernels/formulas.py `relight`) needs from the geometry: the source face's
surface normals over its texture, and each target face's turn from the source's pose.

The normals are the face mesh's own (MediaPipe's 468 points carry a depth in the same pixel scale
as x and y): per vertex, the area-weighted mean of its triangles' normals, turned toward the
camera, interpolated over each triangle of the swap where the texture is sampled from (the flipped
photo's half of a mirror-filled atlas takes the same triangles' normals: the swap paints them as
the photo's own). They are stored in the source frame; a target's paint turns them by the rigid
rotation of the source's stable points onto the target's (swap/classical/shape.py's fit), so the target's
shading is fitted through normals at its own pose.
"""

from __future__ import annotations

import numpy as np

from facefusion_batch.swap.classical.raster import rasterize
from facefusion_batch.swap.classical.shape import STABLE, similarity_3d


def vertex_normals(mesh: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """[N, 3] unit normals of a 3D mesh [N, 3] (depth: smaller is nearer), each facing the camera
    (negative depth): the area-weighted sum of its triangles' normals."""
    p = mesh.astype(np.float64)
    a, b, c = p[triangles[:, 0]], p[triangles[:, 1]], p[triangles[:, 2]]
    face = np.cross(b - a, c - a)
    face *= np.where(face[:, 2:3] > 0, -1.0, 1.0)  # toward the camera, whatever the winding
    out = np.zeros_like(p)
    for corner in range(3):
        np.add.at(out, triangles[:, corner], face)
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
    return out.astype(np.float32)


def normal_texture(
    shape: tuple[int, int],
    geometry: np.ndarray,
    mesh: np.ndarray,
    triangles: np.ndarray,
    mirror_mesh: np.ndarray | None = None,
    use_mirror: np.ndarray | None = None,
) -> np.ndarray:
    """[h, w, 3] float32: the source face's unit normals (`geometry`'s, [N, 3]) over its texture
    of `shape`, interpolated over each of `triangles` where it lies in the texture (`mesh`'s
    x, y), and where `use_mirror` says (per triangle) at `mirror_mesh`'s place instead; 0 where
    no triangle lies."""
    normals = vertex_normals(geometry, triangles)
    out = np.zeros((*shape, 3), np.float32)
    parts = [(mesh, np.ones(len(triangles), bool) if use_mirror is None else ~use_mirror.astype(bool))]
    if mirror_mesh is not None and use_mirror is not None:
        parts.append((mirror_mesh, use_mirror.astype(bool)))
    for where, chosen in parts:
        tris = triangles[chosen]
        if not len(tris):
            continue
        dst = np.repeat(where[None, :, :2], 2, axis=0)
        src = np.stack([normals[:, :2], np.stack([normals[:, 2], np.zeros(len(normals))], axis=1)])
        depth = np.repeat(geometry[None, :, 2], 2, axis=0)
        cov = rasterize(dst, src.astype(np.float32), depth, tris, np.array(shape))
        first, second = cov.face == 0, cov.face == 1
        out[cov.y[first], cov.x[first], 0] = cov.src_x[first]
        out[cov.y[first], cov.x[first], 1] = cov.src_y[first]
        out[cov.y[second], cov.x[second], 2] = cov.src_x[second]
    return out


def rotations(sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """[F, 3, 3]: per face, the rotation of its source's stable points ([F, N, 3]) onto its
    target mesh's ([F, N, 3]): how far a normal in the source photo turns to the target's pose."""
    out = np.empty((len(targets), 3, 3), np.float32)
    for f in range(len(targets)):
        _, rotation, _ = similarity_3d(
            sources[f][STABLE].astype(np.float64), targets[f][STABLE].astype(np.float64)
        )
        out[f] = rotation
    return out
