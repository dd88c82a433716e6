"""Five-point face alignment for every face of a batch: the similarity to a model's template
(models/templates.py), and the crops the kernel set warps with it (`align_crops`, border
replicated, as the learned models were trained on).
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.kernels.base import LUMA_BGR, Array, Frames, Kernels
from facefusion_batch.models.facefusion import LearnedModel
from facefusion_batch.models.templates import TEMPLATES, similarity_fit, template_points, template_to_template
from facefusion_batch.runtime.batching import BatchPolicy
from facefusion_batch.runtime.session import Session


def alignment_affines(landmarks5: np.ndarray, template: str, size: int) -> np.ndarray:
    """[F,2,3] affines taking frame pixels to the `size`² crop aligned to `template`.

    Estimated as FaceFusion does (OpenCV's partial-affine RANSAC, threshold 100 px, so all
    five points are inliers, then its Levenberg–Marquardt refinement): the closed-form least
    squares (`similarity_fit`) lands within ~1e-5 of it, which moves a crop pixel by one
    level here and there, and a high-gain model multiplies that. The closed form is the
    fallback for a degenerate face."""
    if len(landmarks5) == 0:
        return np.zeros((0, 2, 3), np.float64)
    dst = template_points(template, size)
    exact = similarity_fit(landmarks5, dst)
    for f, points in enumerate(np.asarray(landmarks5)):
        m = cv2.estimateAffinePartial2D(
            points.astype(np.float32), dst, method=cv2.RANSAC, ransacReprojThreshold=100
        )[0]
        if m is not None:
            exact[f] = m
    return exact


def align_crops(
    k: Kernels,
    frames: Frames,
    frame_index: np.ndarray,
    landmarks5: np.ndarray,
    template: str | None,
    size: int,
) -> tuple[Array, np.ndarray]:
    """Crops of every face aligned to `template` at `size` px (the kernel set's own arrays),
    and the affines [F,2,3] that made them."""
    if template is None:
        raise ValueError("aligned crops need an alignment template (the model's catalogue entry has none)")
    affines = alignment_affines(landmarks5, template, size)
    return k.warp_crops(frames, frame_index, affines, size, "replicate"), affines


def _host_layout(k: Kernels, crops: Array) -> np.ndarray:
    """Aligned crops on the host as float32 [F, S, S, 3] BGR, from either kernel set's layout
    (the host set's [F, S, S, 3], the torch set's [F, 3, S, S])."""
    array = np.asarray(k.to_host(crops), np.float32)
    if array.ndim == 4 and array.shape[1] == 3 and array.shape[-1] != 3:
        array = array.transpose(0, 2, 3, 1)
    return array


def host_crops(k: Kernels, crops: Array) -> np.ndarray:
    """Aligned crops as host images [F, S, S, 3] uint8 BGR, from either kernel set's layout: for
    work done in numpy/OpenCV or a library that takes pictures (dlib, the skin model)."""
    return np.clip(np.rint(_host_layout(k, crops)), 0, 255).astype(np.uint8)


def host_lumas(k: Kernels, crops: Array) -> np.ndarray:
    """Aligned crops' luma (LUMA_BGR) [F, S, S] float32 on the host (0–255), from either kernel
    set's layout: for numpy/OpenCV work that reads lightness alone. A weighted sum, not a matrix
    product: the executor's workers call this at once, and a BLAS call from two threads with its
    own thread pool is what an OpenBLAS hang needs."""
    bgr = _host_layout(k, crops)
    b, g, r = (np.float32(w) for w in LUMA_BGR)
    return b * bgr[..., 0] + g * bgr[..., 1] + r * bgr[..., 2]


def crop_model_input(session: Session, model: LearnedModel, policy: BatchPolicy) -> tuple[str, int | None]:
    """(input name, items per call) of a model that reads aligned face crops: its input is
    "input" where it has one of that name (FaceFusion's exports), else its first."""
    names = [t.name for t in session.inputs]
    return ("input" if "input" in names else names[0]), policy.items_per_call(
        model.size, channels=64, budget_mb=512.0
    )


def transform_points(points: np.ndarray, affines: np.ndarray) -> np.ndarray:
    """Apply [F,2,3] affines to points [F,K,2]."""
    return np.einsum("fij,fkj->fki", affines[:, :, :2], points) + affines[:, None, :, 2]


__all__ = [
    "TEMPLATES",
    "align_crops",
    "host_crops",
    "host_lumas",
    "alignment_affines",
    "similarity_fit",
    "template_points",
    "template_to_template",
    "transform_points",
]


def rotation(angle: int, width: int, height: int) -> tuple[np.ndarray, tuple[int, int]]:
    """face_helper.create_rotation_matrix_and_size: the frame turned by `angle` about its centre on
    a canvas that holds all of it."""
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1)
    turned = np.dot(np.abs(matrix[:, :2]), (width, height))
    matrix[:, -1] += (turned - (width, height)) * 0.5
    return matrix, (int(turned[0]), int(turned[1]))
