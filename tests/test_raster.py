import cv2
import numpy as np

from facefusion_batch.swap.classical.raster import rasterize


def grid_mesh(n: int, size: float, offset=(0.0, 0.0)):
    xs, ys = np.meshgrid(np.linspace(0, size, n), np.linspace(0, size, n))
    pts = np.stack([xs.ravel() + offset[0], ys.ravel() + offset[1]], axis=1)
    tris = []
    for r in range(n - 1):
        for c in range(n - 1):
            i = r * n + c
            tris += [[i, i + 1, i + n], [i + 1, i + n + 1, i + n]]
    return pts, np.array(tris, np.int32)


def test_coverage_matches_filled_polygon_and_maps_affinely():
    pts, tris = grid_mesh(5, 40.0, offset=(10.3, 12.7))
    # source = destination under a known affine: every covered pixel must map through it exactly
    a = np.array([[0.8, -0.2, 5.0], [0.3, 1.1, -2.0]])
    src = pts @ a[:, :2].T + a[:, 2]
    cov = rasterize(pts[None], src[None], np.zeros((1, len(pts))), tris, (80, 80))
    expected = np.stack([cov.x, cov.y], 1) @ a[:, :2].T + a[:, 2]
    np.testing.assert_allclose(np.stack([cov.src_x, cov.src_y], 1), expected, atol=1e-3)
    # the covered set is the square's interior (pixel centres inside), each pixel once
    assert len(set(zip(cov.x.tolist(), cov.y.tolist(), strict=True))) == len(cov.x)
    xs = np.arange(80)
    inside_x = xs[(xs >= 10.3) & (xs <= 50.3)]
    inside_y = xs[(xs >= 12.7) & (xs <= 52.7)]
    assert len(cov.x) == len(inside_x) * len(inside_y)


def test_fold_over_resolved_by_depth():
    # two overlapping triangles; the nearer (smaller depth) one must win everywhere they overlap
    pts = np.array([[0, 0], [30, 0], [0, 30], [5, 5], [35, 5], [5, 35]], np.float64)
    tris = np.array([[0, 1, 2], [3, 4, 5]], np.int32)
    src_a = np.array([[100, 100]] * 3 + [[200, 200]] * 3, np.float64)  # constant maps tell them apart
    depth = np.array([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
    cov = rasterize(pts[None], src_a[None], depth[None], tris, (40, 40))
    overlap = (cov.x >= 6) & (cov.y >= 6) & (cov.x + cov.y <= 29)
    assert overlap.any()
    assert np.all(cov.src_x[overlap] == 200)


def test_batched_faces_equal_single_faces():
    pts, tris = grid_mesh(4, 20.0)
    meshes = np.stack([pts + [5, 5], pts * 1.3 + [30, 10]])
    srcs = np.stack([pts, pts])
    depth = np.zeros((2, len(pts)))
    both = rasterize(meshes, srcs, depth, tris, (64, 64))
    for f in range(2):
        one = rasterize(meshes[f : f + 1], srcs[f : f + 1], depth[f : f + 1], tris, (64, 64))
        sel = both.face == f
        a = sorted(zip(both.x[sel].tolist(), both.y[sel].tolist(), both.src_x[sel].tolist(), strict=True))
        b = sorted(zip(one.x.tolist(), one.y.tolist(), one.src_x.tolist(), strict=True))
        assert a == b


def test_clipped_at_frame_border():
    pts, tris = grid_mesh(3, 30.0, offset=(-10.0, -10.0))
    cov = rasterize(pts[None], pts[None], np.zeros((1, len(pts))), tris, (15, 12))
    assert cov.x.min() >= 0 and cov.y.min() >= 0 and cov.x.max() < 12 and cov.y.max() < 15
    mask = np.zeros((15, 12), np.uint8)
    cv2.rectangle(mask, (0, 0), (11, 14), 1, -1)
    assert len(cov.x) == mask.sum()


def test_per_triangle_corners_equal_vertices_and_let_a_triangle_map_elsewhere():
    pts, tris = grid_mesh(4, 30.0, offset=(3.0, 4.0))
    src = pts * 0.5 + [100.0, 50.0]
    depth = np.zeros((1, len(pts)))
    by_vertex = rasterize(pts[None], src[None], depth, tris, (40, 40))
    corners = src[tris][None]  # [1,T,3,2]
    by_corner = rasterize(pts[None], corners, depth, tris, (40, 40))
    for field in ("x", "y", "src_x", "src_y"):
        np.testing.assert_array_equal(getattr(by_vertex, field), getattr(by_corner, field))
    moved = corners.copy()
    moved[0, 0] += 1000.0  # the first triangle samples its texture 1000 px away, nothing else does
    elsewhere = rasterize(pts[None], moved, depth, tris, (40, 40))
    far = elsewhere.src_x > 500
    assert far.any() and not far.all()
    np.testing.assert_array_equal(elsewhere.src_x[~far], by_vertex.src_x[~far])
