"""Relighting (kernels/formulas.py relight, swap/classical/relight.py): the source's albedo lit by
the target's shading, order-2 spherical harmonics fitted through the mesh's normals. Checked on a
rendered sphere whose light is known, on both kernel sets (the torch set on the CPU), and on the
mesh's own normals."""

from __future__ import annotations

import numpy as np
import pytest

from facefusion_batch.kernels import formulas
from facefusion_batch.kernels.host_ops import PRIMITIVES
from facefusion_batch.swap.classical.relight import normal_texture, rotations, vertex_normals


def sphere(size: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """Unit normals of a sphere filling a size² image ([h, w, 3], depth toward the camera
    negative, as the mesh's) and where it lies."""
    yy, xx = (np.mgrid[0:size, 0:size] + 0.5) / size * 2 - 1
    inside = xx**2 + yy**2 < 0.95
    zz = -np.sqrt(np.clip(1 - xx**2 - yy**2, 0, None))
    return np.dstack([xx, yy, zz]).astype(np.float32) * inside[..., None], inside


def lit(normals: np.ndarray, light: np.ndarray, albedo: np.ndarray) -> np.ndarray:
    """A Lambertian picture (BGR 0–255, gamma 2.2) of `albedo` ([h, w, 3], 0–1 linear) under a
    directional `light` plus an ambient term."""
    shade = 0.4 + 0.6 * np.clip(-(normals @ light), 0, None)  # light from where it points
    return (255 * np.clip(albedo * shade[..., None], 0, 1) ** (1 / 2.2)).astype(np.float32)


def pattern(shape: tuple[int, int]) -> np.ndarray:
    """An albedo with texture (the source's identity) round a skin tone."""
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    spots = 0.85 + 0.15 * np.sin(xx / 3.0) * np.cos(yy / 4.0)
    return np.dstack([0.45 * spots, 0.55 * spots, 0.75 * spots]).astype(np.float32)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_a_source_lit_from_the_right_takes_a_targets_light_from_the_left():
    normals, inside = sphere()
    albedo = pattern(inside.shape)
    left, right = unit(np.array([0.8, 0.0, 0.6])), unit(np.array([-0.8, 0.0, 0.6]))  # from the viewer's side
    target = lit(normals, left, np.full_like(albedo, 0.6))
    source = lit(normals, right, albedo)
    out = formulas.relight(PRIMITIVES, source, target, inside, normals, np.eye(3), 2.0)
    # the shading is the target's: the side the source had dark is light, and the other way round
    half = inside.shape[1] // 2

    def side(img: np.ndarray, cols: slice) -> float:
        return float(img[:, cols][inside[:, cols]].mean())

    assert side(source, slice(None, half)) < side(source, slice(half, None)) - 30
    assert side(out, slice(None, half)) > side(out, slice(half, None)) + 30
    # it is the source's own picture lit that way: its albedo and colour, at the target's
    # brightness (a luminance fit holds the mean albedo too; the colour is transfer_colour's),
    # within a few levels where the light falls
    brightness = 0.6 / float((albedo[inside] @ np.array([0.114, 0.587, 0.299])).mean())
    want = lit(normals, left, albedo * brightness)
    core = inside & (np.hypot(*(np.mgrid[0:96, 0:96] - 47.5)) < 36)
    assert np.median(np.abs(out - want)[core]) < 6
    assert np.median(np.abs(source - want)[core]) > 20  # what it was before


def test_without_skin_the_face_stays_as_it_is():
    normals, inside = sphere(32)
    face = lit(normals, np.array([0.0, 0.0, -1.0]), pattern(inside.shape))
    none = np.zeros_like(inside)
    out = formulas.relight(PRIMITIVES, face, face * 0.5, none, normals, np.eye(3), 2.0)
    assert np.array_equal(out, face)


def test_the_torch_set_relights_as_the_host_does():
    torch = pytest.importorskip("torch")
    from facefusion_batch.kernels import torch_ops as D

    normals, inside = sphere(64)
    albedo = pattern(inside.shape)
    target = lit(normals, unit(np.array([0.6, -0.3, 0.74])), np.full_like(albedo, 0.55))
    source = lit(normals, unit(np.array([-0.6, 0.2, 0.77])), albedo)
    a = np.radians(10)  # the target's pose turned a little from the source's
    turn = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]], np.float32)
    ref = formulas.relight(PRIMITIVES, source, target, inside, normals, turn, 3.0)

    def chw(x):
        return torch.from_numpy(np.ascontiguousarray(x)).permute(2, 0, 1)[None]

    got = (
        formulas.relight(
            D.PRIMITIVES,
            chw(source),
            chw(target),
            torch.from_numpy(inside)[None],
            chw(normals),
            torch.from_numpy(turn)[None],
            [3.0],
        )[0]
        .permute(1, 2, 0)
        .numpy()
    )
    assert np.abs(ref - source)[inside].mean() > 5  # it did relight
    assert np.abs(got - ref)[inside].max() < 0.5


def test_mesh_normals_face_the_camera_and_turn_with_the_head(models, t1_faces):
    mesh = t1_faces.mesh[0]
    normals = vertex_normals(mesh, models.triangles)
    assert np.allclose(np.linalg.norm(normals, axis=1), 1, atol=1e-4)
    assert normals[:, 2].mean() < -0.5  # toward the camera (smaller depth is nearer)
    # the same face turned 30 degrees about the vertical: the fit finds the turn
    a = np.radians(30)
    turn = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    centred = mesh - mesh.mean(axis=0)
    found = rotations(centred[None], (centred @ turn.T)[None])[0]
    np.testing.assert_allclose(found, turn, atol=1e-4)
    # over a texture: every covered pixel has a unit normal
    shape = (int(mesh[:, 1].max()) + 4, int(mesh[:, 0].max()) + 4)
    texture = normal_texture(shape, mesh, mesh, models.triangles)
    covered = np.linalg.norm(texture, axis=2) > 0
    assert covered.sum() > 1000
    # interpolated between vertices, a little shorter than unit (the paint makes them unit again)
    lengths = np.linalg.norm(texture[covered], axis=1)
    assert lengths.min() > 0.3 and lengths.max() < 1.0001 and np.percentile(lengths, 5) > 0.95
