"""468-point face mesh for every face of a batch: one model call per pass.

The crop (ROI) is a square around the face, rotated so the eyes are level.
Pass 1 takes it from the YuNet box and eyes; pass 2 recomputes it from the
first mesh, which fixes YuNet's under-read of strong head tilt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.kernels.geometry import invert_affines
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.session import Session

MESH_SIZE = 192
LEFT_EYE_OUTER = 33  # image-left outer eye corner
RIGHT_EYE_OUTER = 263  # image-right outer eye corner
NOSE_TIP = 4


def eye_frame(mesh: np.ndarray) -> tuple[float, float, float]:
    """Angle of the eye line, interocular distance (outer corners) and a yaw proxy."""
    left, right, nose = mesh[LEFT_EYE_OUTER, :2], mesh[RIGHT_EYE_OUTER, :2], mesh[NOSE_TIP, :2]
    d = right - left
    span = float(np.hypot(*d))
    angle = float(np.arctan2(d[1], d[0]))
    along = float(np.dot(nose - (left + right) / 2, d / max(span, 1e-6)))
    return angle, span, along / max(span, 1e-6)


@dataclass(frozen=True)
class MeshSettings:
    passes: int = 2
    presence_threshold: float = 0.0  # logit; real faces score 18–66
    box_scale: float = 1.35  # pass 1: ROI side / longer side of the detector box
    mesh_scale: float = 1.5  # pass 2: ROI side / mesh extent in the eye-aligned frame


def roi_affines(centre: np.ndarray, side: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """[F,2,3] affines mapping frame pixels into the rotated MESH_SIZE² crop.

    `angle` is the eye line's angle in the frame (radians); the crop undoes it.
    """
    scale = MESH_SIZE / np.maximum(side, 1e-3)
    cos, sin = np.cos(angle) * scale, np.sin(angle) * scale
    m = np.zeros((len(side), 2, 3), np.float64)
    m[:, 0, 0], m[:, 0, 1] = cos, sin
    m[:, 1, 0], m[:, 1, 1] = -sin, cos
    m[:, :, 2] = MESH_SIZE / 2 - np.einsum("fij,fj->fi", m[:, :, :2], centre)
    return m


def roi_from_detection(table: FaceTable, box_scale: float) -> tuple[np.ndarray, ...]:
    box = table.box.astype(np.float64)
    centre = (box[:, :2] + box[:, 2:]) / 2
    side = np.max(box[:, 2:] - box[:, :2], axis=1) * box_scale
    eyes = table.landmarks5[:, 1].astype(np.float64) - table.landmarks5[:, 0]
    angle = np.arctan2(eyes[:, 1], eyes[:, 0])
    return centre, side, angle


def roi_from_mesh(mesh: np.ndarray, mesh_scale: float) -> tuple[np.ndarray, ...]:
    pts = mesh[:, :, :2].astype(np.float64)
    eyes = pts[:, RIGHT_EYE_OUTER] - pts[:, LEFT_EYE_OUTER]
    angle = np.arctan2(eyes[:, 1], eyes[:, 0])
    cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]
    # rotate into the eye-aligned frame, take the bounding box there, rotate its centre back
    u = pts[..., 0] * cos + pts[..., 1] * sin
    v = -pts[..., 0] * sin + pts[..., 1] * cos
    cu = (u.min(1) + u.max(1)) / 2
    cv = (v.min(1) + v.max(1)) / 2
    side = np.maximum(u.max(1) - u.min(1), v.max(1) - v.min(1)) * mesh_scale
    centre = np.stack([cu * cos[:, 0] - cv * sin[:, 0], cu * sin[:, 0] + cv * cos[:, 0]], axis=1)
    return centre, side, angle


class FaceMesh:
    """A stage: frames + face table → the same table with `mesh` and `presence`, absent faces dropped.

    Each pass warps every face's crop out of the frames (zero padding outside the frame) and
    runs them through the model, all in one call on a GPU, a few a call on the CPU
    (BatchPolicy.cache_items); only the 468 points per face come back to the host."""

    name = "mesh"
    drop_reason = "mesh_presence_low"  # the mesh sees no face there: too small, turned away, not a face

    def __init__(
        self,
        session: Session,
        settings: MeshSettings = MeshSettings(),
        *,
        points: str = "conv2d_20",
        presence: str = "conv2d_30",
        policy: BatchPolicy = HOST,
    ) -> None:
        self.session = session
        self.policy = policy
        # crops a call: the CPU runs a few at a time (cache-sized), a GPU all of them at once
        self.max_batch = policy.cache_items(3 * MESH_SIZE * MESH_SIZE * 4)
        self.settings = settings
        self.input_name = session.inputs[0].name
        self.points_name = points
        self.presence_name = presence

    def run_pass(
        self, k: Kernels, frames: Frames, frame_index: np.ndarray, roi: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        affines = roi_affines(*roi)
        crops = k.warp_crops(frames, frame_index, affines, MESH_SIZE, "zeros")
        out = k.run(self.session, {self.input_name: k.model_input(crops)}, self.max_batch)  # RGB, 0–1
        out = k.to_host({name: out[name] for name in (self.points_name, self.presence_name)})
        points = out[self.points_name].reshape(len(frame_index), 468, 3).astype(np.float64)
        presence = out[self.presence_name].reshape(len(frame_index)).astype(np.float32)
        inverse = invert_affines(affines)
        xy = np.einsum("fij,fnj->fni", inverse[:, :, :2], points[:, :, :2]) + inverse[:, None, :, 2]
        z = points[:, :, 2] * (roi[1][:, None] / MESH_SIZE)
        mesh = np.concatenate([xy, z[..., None]], axis=-1).astype(np.float32)
        return mesh, presence

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if len(table) == 0:
            return table.with_columns(
                mesh=np.zeros((0, 468, 3), np.float32), presence=np.zeros((0,), np.float32)
            )
        roi = roi_from_detection(table, self.settings.box_scale)
        mesh, presence = self.run_pass(k, frames, table.frame_index, roi)
        for _ in range(self.settings.passes - 1):
            mesh, presence = self.run_pass(
                k, frames, table.frame_index, roi_from_mesh(mesh, self.settings.mesh_scale)
            )
        table = table.with_columns(mesh=mesh, presence=presence)
        return table.select(presence > self.settings.presence_threshold)
