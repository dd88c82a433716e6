"""Closed eyes the mesh does not see: a lowered lid told from the picture.

The 468-point mesh keeps its eye loops open over a shut or downcast eye (t1.jpg: Lisa's
closed eyes and Jennifer's lowered lids measure 0.25–0.33 height over width, as open as David's
0.30), so `eye_openness` alone paints an open source eye over them. The picture tells them
apart: over a closed eye the upper half of the loop is the lid, the face's own skin, and the
lash line is the darkest thing, along the bottom; over an open eye the upper half is the iris
and the upper lashes, darker than the rest and not skin.

Per eye of each target's aligned crop: the share of the loop's upper half whose colour is
the face's skin (YCrCb within a few robust spreads of the face's own skin, as swap/classical/skin.py
measures it), and whether that half is the lighter one. Pure numpy/OpenCV over the batch's
crops: no model call.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.faces.align import align_crops, host_crops, transform_points
from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.swap.classical.skin import feature_and_face_masks, skin_statistics
from facefusion_batch.swap.regions import FaceRegions

# the aligned crop a lid is told from (the occlusion model's template): the eye spans ~20 px
LID_TEMPLATE, LID_CROP = "arcface_128", 128
LID_Z = 2.5  # robust spreads of the skin's Cr/Cb (and, darker only, Y) within which a pixel is skin
# share of the loop's upper half that is skin at which an eye starts to count as shut / fully
# does (t1.jpg and its pan clip, 128 px crops: open eyes 0.00, Matthew's squinting eye 0.00–0.30;
# his wink 0.35–0.68, Lisa's shut eyes 0.38–0.80, Jennifer's lowered lids 0.81–1.0)
LID_OPEN, LID_SHUT = 0.12, 0.22
MIN_PIXELS = 12  # fewer pixels in a half: the eye is too small or too turned to tell


def lid_skin_shares(crops: np.ndarray, meshes: np.ndarray, regions: FaceRegions) -> np.ndarray:
    """[F, 2] per face's left and right eye loop: the share of its upper half that is skin where
    that half is lighter than the lower one, else 0; NaN where the eye cannot be told (too few
    pixels, too little skin to measure). `crops` [F, S, S, 3] uint8 BGR, `meshes` [F, 468, 2+]
    in crop pixels."""
    count, size = crops.shape[0], crops.shape[1]
    out = np.full((count, 2), np.nan)
    for f in range(count):  # image operations per crop; no model is called
        features, face = feature_and_face_masks(meshes[f], regions, size)
        measured = skin_statistics(crops[f], face & ~features)
        if measured is None:
            continue
        ycc, centre, spread = measured
        d = meshes[f, RIGHT_EYE_OUTER, :2] - meshes[f, LEFT_EYE_OUTER, :2]
        across = np.array([-d[1], d[0]]) / max(float(np.hypot(*d)), 1e-6)  # points down the face
        for e, loop in enumerate((regions.left_eye, regions.right_eye)):
            pts = meshes[f, loop, :2]
            inside = np.zeros((size, size), np.uint8)
            cv2.fillPoly(inside, [np.round(pts).astype(np.int32)], 1)
            ys, xs = np.nonzero(inside)  # only the loop's pixels are measured
            centre_pt = pts.mean(axis=0)
            upper = (xs - centre_pt[0]) * across[0] + (ys - centre_pt[1]) * across[1] < 0
            if upper.sum() < MIN_PIXELS or (~upper).sum() < MIN_PIXELS:
                continue
            z = (ycc[ys, xs] - centre) / spread
            skin_like = (np.abs(z[:, 1]) < LID_Z) & (np.abs(z[:, 2]) < LID_Z) & (z[:, 0] > -LID_Z)
            lighter_above = z[upper, 0].mean() > z[~upper, 0].mean()
            out[f, e] = float(skin_like[upper].mean()) if lighter_above else 0.0
    return out


def lid_holds(shares: np.ndarray) -> np.ndarray:
    """[F, 2] how much of each eye stays the target's because its lid is down: none below
    LID_OPEN, all of it from LID_SHUT, smoothly between; 0 where the eye could not be told."""
    t = np.clip((np.nan_to_num(shares, nan=0.0) - LID_OPEN) / (LID_SHUT - LID_OPEN), 0.0, 1.0)
    return t * t * (3 - 2 * t)


def shut_lids(k: Kernels, frames: Frames, table: FaceTable, regions: FaceRegions) -> np.ndarray:
    """[F, 2] how shut each face's left and right eye are by their lids (`lid_holds`), from small
    aligned crops of every face of the batch: one crop call on the kernel set, then numpy."""
    if len(table) == 0:
        return np.zeros((0, 2), np.float32)
    crops, affines = align_crops(k, frames, table.frame_index, table.landmarks5, LID_TEMPLATE, LID_CROP)
    meshes = transform_points(table.required("mesh")[:, :, :2].astype(np.float64), affines)
    return lid_holds(lid_skin_shares(host_crops(k, crops), meshes, regions)).astype(np.float32)


class LidReader:
    """A stage before the tracker: every face's `lids` column, so the tracker can average it
    along the track (a lid read as half shut on one frame and open on the next does not make
    the eye flicker between the source's and the target's)."""

    name = "lids"

    def __init__(self, regions: FaceRegions) -> None:
        self.regions = regions

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if table.mesh is None:
            raise ValueError("reading lids needs the face mesh (run FaceMesh first)")
        return table.with_columns(lids=shut_lids(k, frames, table, self.regions))
