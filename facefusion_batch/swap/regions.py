"""Named regions of the 468-point mesh (eyes, lips, brows, face oval) as index loops."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from facefusion_batch.models.topology import Topology


@dataclass(frozen=True)
class FaceRegions:
    face_oval: np.ndarray
    left_eye: np.ndarray
    right_eye: np.ndarray
    lips_outer: np.ndarray
    lips_inner: np.ndarray
    brows: np.ndarray  # every brow point of both brows

    @staticmethod
    def from_topology(topology: Topology) -> FaceRegions:
        brows = np.unique(np.concatenate([topology.loop("left_eyebrow"), topology.loop("right_eyebrow")]))
        return FaceRegions(
            face_oval=topology.loop("face_oval"),
            left_eye=topology.loop("left_eye"),
            right_eye=topology.loop("right_eye"),
            lips_outer=topology.loop("lips_outer"),
            lips_inner=topology.loop("lips_inner"),
            brows=brows.astype(np.int32),
        )
