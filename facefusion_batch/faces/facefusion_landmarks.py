"""FaceFusion 3.x's 68-point landmarkers over a whole batch of faces: `fan_68_5` (68 points
estimated from the five, which give the face's angle), then `2dfan4`, `peppa_wutz` or both
(`many`) on a crop turned upright by that angle; where the landmarker scores above
--face-landmarker-score, the face's five points become the 68's (eye centres, nose tip, mouth
corners), FaceFusion's '5/68', which it swaps and embeds with.

As FaceFusion's face_landmarker and face_creator do, but each model runs once for every face of
the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from facefusion_batch.errors import InputError
from facefusion_batch.faces.align import rotation
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Kernels
from facefusion_batch.runtime.session import Session

LANDMARKERS = ("2dfan4", "peppa_wutz", "many")  # FaceFusion's --face-landmarker-model choices
CROP = 256  # both landmarkers' input
# FaceFusion's ffhq_512 template (face_helper.WARP_TEMPLATE_SET), where fan_68_5 works
FFHQ_512 = np.array(
    [[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
     [0.39308822, 0.72541100], [0.61150205, 0.72490465]]
)  # fmt: skip


@dataclass(frozen=True)
class FaceFusionLandmarkerSettings:
    model: str = "2dfan4"  # FaceFusion's --face-landmarker-model
    score: float = 0.5  # FaceFusion's --face-landmarker-score: 0 runs no landmarker

    def __post_init__(self) -> None:
        if self.model not in LANDMARKERS:
            raise ValueError(f"face landmarker {self.model!r} is not one of {', '.join(LANDMARKERS)}")


def _transform(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    return cv2.transform(points.reshape(1, -1, 2), matrix).reshape(-1, 2)


def face_angles(five68: np.ndarray) -> np.ndarray:
    """face_helper.estimate_face_angle per face: the jaw's ends' direction, to the nearest 90°."""
    d = five68[:, 16] - five68[:, 0]
    theta = np.degrees(np.arctan2(d[:, 1], d[:, 0])) % 360
    angles = np.linspace(0, 360, 5)
    return (angles[np.argmin(np.abs(angles[None] - theta[:, None]), axis=1)] % 360).astype(int)


def to_five(points68: np.ndarray) -> np.ndarray:
    """face_helper.convert_to_face_landmark_5: [F,68,2] → [F,5,2]."""
    return np.stack(
        [
            points68[:, 36:42].mean(1),
            points68[:, 42:48].mean(1),
            points68[:, 30],
            points68[:, 48],
            points68[:, 54],
        ],
        axis=1,
    )


def optimise_contrast(crop: np.ndarray) -> np.ndarray:
    """face_landmarker.conditional_optimize_contrast (its picture is BGR, read as RGB, as there)."""
    lab = cv2.cvtColor(crop, cv2.COLOR_RGB2Lab)
    if np.mean(lab[:, :, 0]) < 30:
        lab[:, :, 0] = cv2.createCLAHE(clipLimit=2).apply(lab[:, :, 0])
    return cv2.cvtColor(lab, cv2.COLOR_Lab2RGB)


class FaceFusionLandmarker:
    """Refines a table's five points as FaceFusion does: fan_68_5 for every face in one call, the
    landmarker(s) for every face in one call each."""

    def __init__(self, sessions: dict[str, Session], settings: FaceFusionLandmarkerSettings) -> None:
        self.settings = settings
        self.models = ["2dfan4", "peppa_wutz"] if settings.model == "many" else [settings.model]
        missing = [m for m in ["fan_68_5", *self.models] if m not in sessions]
        if missing:
            raise ValueError(f"face landmarker {settings.model} needs the sessions of {', '.join(missing)}")
        self.sessions = sessions

    def _run(self, k: Kernels, name: str, batch: np.ndarray) -> list[np.ndarray]:
        session = self.sessions[name]
        out = k.to_host(k.run(session, {session.inputs[0].name: k.from_host(batch)}, None))
        return [np.asarray(out[o.name]) for o in session.outputs]

    def estimate_68(self, k: Kernels, five: np.ndarray) -> np.ndarray:
        """face_landmarker.estimate_face_landmark_68_5 for every face: [F,5,2] → [F,68,2]."""
        matrices = [
            cv2.estimateAffinePartial2D(f, FFHQ_512, method=cv2.RANSAC, ransacReprojThreshold=100)[0]
            for f in five
        ]
        unit = np.stack([_transform(f, m) for f, m in zip(five, matrices, strict=True)]).astype(np.float32)
        estimated = self._run(k, "fan_68_5", unit)[0].reshape(len(five), 68, 2)
        return np.stack(
            [_transform(e, cv2.invertAffineTransform(m)) for e, m in zip(estimated, matrices, strict=True)]
        )

    def landmarks(
        self, k: Kernels, images: list[np.ndarray], table: FaceTable, angles: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """detect_face_landmark for every face: its 68 points [F,68,2] and score [F]."""
        crops, backs = [], []
        for fi, box, angle in zip(table.frame_index, table.box.astype(np.float64), angles, strict=True):
            scale = 195 / np.subtract(box[2:], box[:2]).max().clip(1, None)
            translation = (CROP - np.add(box[2:], box[:2]) * scale) * 0.5
            affine = np.array([[scale, 0, translation[0]], [0, scale, translation[1]]])
            crop = cv2.warpAffine(images[fi], affine, (CROP, CROP))
            turn, size = rotation(int(angle), CROP, CROP)
            crop = optimise_contrast(cv2.warpAffine(crop, turn, size))
            crops.append(crop.transpose(2, 0, 1).astype(np.float32) / 255.0)
            backs.append((cv2.invertAffineTransform(turn), cv2.invertAffineTransform(affine)))
        batch = np.stack(crops)
        found: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if "2dfan4" in self.models:
            points, heatmaps = self._run(k, "2dfan4", batch)[:2]
            raw = points.reshape(len(batch), 68, 3)[:, :, :2] / 64 * 256
            score = np.interp(np.amax(heatmaps, axis=(2, 3)).mean(axis=1), [0, 0.9], [0, 1])
            found["2dfan4"] = (raw, score)
        if "peppa_wutz" in self.models:
            prediction = self._run(k, "peppa_wutz", batch)[0].reshape(len(batch), 68, 3)
            score = np.interp(prediction[:, :, 2].mean(axis=1), [0, 0.95], [0, 1])
            found["peppa_wutz"] = (prediction[:, :, :2] / 64 * CROP, score)
        if len(found) == 2:  # 2dfan4 unless peppa_wutz scores more than 0.2 higher
            (a, sa), (b, sb) = found["2dfan4"], found["peppa_wutz"]
            first = sa > sb - 0.2
            raw, score = np.where(first[:, None, None], a, b), np.where(first, sa, sb)
        else:
            raw, score = next(iter(found.values()))
        points68 = np.stack(
            [_transform(_transform(p, turn), back) for p, (turn, back) in zip(raw, backs, strict=True)]
        )
        return points68, score

    def refine(self, k: Kernels, images: list[np.ndarray], table: FaceTable) -> FaceTable:
        """The table with each face's five points FaceFusion's '5/68'."""
        if not len(table) or self.settings.score <= 0:
            return table
        five = table.landmarks5.astype(np.float64)
        angles = face_angles(self.estimate_68(k, five))
        points68, score = self.landmarks(k, images, table, angles)
        better = score > self.settings.score
        refined = np.where(better[:, None, None], to_five(points68), five).astype(np.float32)
        return table.with_columns(landmarks5=refined)


def facefusion_landmarker_settings(model: str, score: float) -> FaceFusionLandmarkerSettings:
    """--face-landmarker-model / --face-landmarker-score (exit 2 for a value FaceFusion does not take)."""
    if model not in LANDMARKERS:
        raise InputError(f"--face-landmarker-model {model}: not one of {', '.join(LANDMARKERS)}")
    if not 0 <= score <= 1:
        raise InputError(f"--face-landmarker-score must be between 0 and 1 (got {score:g})")
    return FaceFusionLandmarkerSettings(model, score)
