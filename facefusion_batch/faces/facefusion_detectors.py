"""FaceFusion 3.x's face detectors over a whole batch: `yolo_face`, `retinaface`, `scrfd`, `yunet`
and `many` (retinaface, scrfd and yolo_face together), at FaceFusion's sizes, score scale, angles
and suppression, so a user moving over gets the same faces from the same files.

As FaceFusion's face_detector and face_creator do: each frame is shrunk (never enlarged) to fit
the detector size with cv2's bilinear resize and put at the top left of a zero canvas of that
size; the candidates of every model and angle are kept on FaceFusion's score scale (yunet's is
cls·obj, where ffbatch's own YuNet stage uses √(cls·obj)) and suppressed together with
cv2.dnn.NMSBoxes at FaceFusion's IoU. Unlike FaceFusion, the canvases of the whole batch (every
frame at every angle) go through each model in one call. The five points are the detector's
(FaceFusion's '5'), refined by FaceFusion's landmarker where one is given (facefusion_landmarks.py).
A margin (FaceFusion's --face-detector-margin, percent of each side: 100 is half the frame) pads the
picture with black before it is shrunk, at every angle, as face_detector.detect_faces does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import cv2
import numpy as np

from facefusion_batch.errors import InputError
from facefusion_batch.faces.align import rotation
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.models.facefusion import FACE_DETECTOR_SIZES, FACE_DETECTORS, MODELS
from facefusion_batch.runtime.session import Session

if TYPE_CHECKING:
    from facefusion_batch.faces.facefusion_landmarks import FaceFusionLandmarker

STRIDES = (8, 16, 32)
ANGLES = (0, 90, 180, 270)  # FaceFusion's --face-detector-angles choices


@dataclass(frozen=True)
class FaceFusionDetectorSettings:
    model: str = "yolo_face"  # FaceFusion's --face-detector-model
    size: int = 640  # FaceFusion's --face-detector-size, square
    angles: tuple[int, ...] = (0,)
    score: float = 0.5  # FaceFusion's --face-detector-score, on its own scale
    max_faces_per_frame: int = 64
    margin: tuple[int, int, int, int] = (0, 0, 0, 0)  # --face-detector-margin: top, right, bottom, left %

    def __post_init__(self) -> None:
        if self.model not in FACE_DETECTORS:
            raise ValueError(f"face detector {self.model!r} is not one of {', '.join(FACE_DETECTORS)}")
        if f"{self.size}x{self.size}" not in FACE_DETECTOR_SIZES[self.model]:
            raise ValueError(
                f"face detector size {self.size}x{self.size} is not one of {self.model}'s "
                f"({', '.join(FACE_DETECTOR_SIZES[self.model])})"
            )
        if not self.angles or any(a not in ANGLES for a in self.angles):
            raise ValueError(f"face detector angles {self.angles} are not among {ANGLES}")
        if len(self.margin) != 4 or any(not 0 <= m <= 100 for m in self.margin):
            raise ValueError(f"face detector margin {self.margin}: four percentages from 0 to 100")

    @property
    def nms_iou(self) -> float:
        """face_helper.get_nms_threshold: looser with more angles or models, whose boxes overlap."""
        if self.model == "many":
            return 0.1
        return {2: 0.3, 3: 0.2, 4: 0.1}.get(len(self.angles), 0.4)


def margin_pixels(shape: tuple[int, ...], margin: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """face_detector.prepare_margin: top, right, bottom, left in pixels of a picture of `shape`,
    each percent 0..100 mapped onto 0..half its height (top, bottom) or width (right, left)."""
    height, width = shape[:2]
    sides = (height, width, height, width)
    top, right, bottom, left = (
        int(side * float(np.interp(m, [0, 100], [0, 0.5]))) for side, m in zip(sides, margin, strict=True)
    )
    return top, right, bottom, left


def restrict(image: np.ndarray, size: int) -> tuple[np.ndarray, float, float]:
    """vision.restrict_frame: shrunk to fit size×size (int sizes, bilinear), never enlarged; and
    the (height, width) ratios of the frame to the shrunk picture."""
    height, width = image.shape[:2]
    if height > size or width > size:
        scale = min(size / height, size / width)
        image = cv2.resize(image, (int(width * scale), int(height * scale)))
    return image, height / image.shape[0], width / image.shape[1]


def canvas(image: np.ndarray, size: int, model: str) -> np.ndarray:
    """[3,size,size] float32: the picture at the top left of zeros, normalised as `model` takes it."""
    out = np.zeros((size, size, 3), np.float32)
    out[: image.shape[0], : image.shape[1]] = image
    out = out.transpose(2, 0, 1)
    if model in ("retinaface", "scrfd"):
        return (out - 127.5) / 128.0
    if model == "yolo_face":
        return out / 255.0
    return np.ascontiguousarray(out)  # yunet: 0–255


def anchors(stride: int, per_cell: int, size: int) -> np.ndarray:
    """face_helper.create_static_anchors for a square size: (x, y) of each cell, row-major, each
    repeated `per_cell` times."""
    cells = size // stride
    y, x = np.divmod(np.arange(cells * cells), cells)
    return np.repeat(np.stack([x, y], axis=-1) * stride, per_cell, axis=0)


Candidates = tuple[list[np.ndarray], list[float], list[np.ndarray]]  # boxes, scores, five points


def decode_distances(
    outputs: list[np.ndarray], size: int, score: float, ratio: tuple[float, float]
) -> Candidates:
    """retinaface / scrfd, one picture: scores [A,1], box distances [A,4], point offsets [A,10]
    per stride (two anchors a cell), in FaceFusion's order of arithmetic."""
    ratio_h, ratio_w = ratio
    boxes, scores, points = [], [], []
    for index, stride in enumerate(STRIDES):
        raw_scores = outputs[index].reshape(-1, 1)
        keep = np.where(raw_scores >= score)[0]
        if not np.any(keep):  # as FaceFusion: a stride whose only candidate is anchor 0 gives none
            continue
        centre = anchors(stride, 2, size)
        distance = outputs[index + 3].reshape(-1, 4) * stride
        offset = outputs[index + 6].reshape(-1, 10) * stride
        box = np.column_stack(
            [centre[:, 0] - distance[:, 0], centre[:, 1] - distance[:, 1]]
            + [centre[:, 0] + distance[:, 2], centre[:, 1] + distance[:, 3]]
        )
        five = np.stack([centre[:, :1] + offset[:, 0::2], centre[:, 1:] + offset[:, 1::2]], axis=-1)
        boxes += [b * [ratio_w, ratio_h, ratio_w, ratio_h] for b in box[keep]]
        scores += [float(s) for s in raw_scores[keep, 0]]
        points += [p * [ratio_w, ratio_h] for p in five[keep]]
    return boxes, scores, points


def decode_yolo(output: np.ndarray, score: float, ratio: tuple[float, float]) -> Candidates:
    """yolo_face, one picture: [20, anchors] rows cx, cy, w, h, score, 5 × (x, y, visibility)."""
    ratio_h, ratio_w = ratio
    detection = output.reshape(20, -1).T
    keep = np.where(detection[:, 4] > score)[0]
    if not np.any(keep):
        return [], [], []
    detection = detection[keep]
    cx, cy, w, h = (detection[:, i] for i in range(4))
    box = np.stack(
        [(cx - w / 2) * ratio_w, (cy - h / 2) * ratio_h, (cx + w / 2) * ratio_w, (cy + h / 2) * ratio_h], 1
    )
    five = detection[:, 5:].reshape(-1, 5, 3)[:, :, :2] * np.array([ratio_w, ratio_h], np.float32)
    return list(box), [float(s) for s in detection[:, 4]], list(five)


def decode_yunet(
    outputs: list[np.ndarray], size: int, score: float, ratio: tuple[float, float]
) -> Candidates:
    """yunet as FaceFusion reads it, one picture: cls, obj, bbox, kps per stride; the score is
    cls·obj (OpenCV's and ffbatch's own YuNet stage take its square root)."""
    ratio_h, ratio_w = ratio
    boxes, scores, points = [], [], []
    for index, stride in enumerate(STRIDES):
        raw_scores = (outputs[index].reshape(-1) * outputs[index + 3].reshape(-1)).astype(np.float32)
        keep = np.where(raw_scores >= score)[0]
        if not np.any(keep):
            continue
        centre = anchors(stride, 1, size)
        bbox = outputs[index + 6].reshape(-1, 4)
        mid = bbox[:, :2] * stride + centre
        wh = np.exp(bbox[:, 2:4]) * stride
        box = np.concatenate([mid - wh / 2, mid + wh / 2], axis=1)
        five = outputs[index + 9].reshape(-1, 5, 2) * stride + centre[:, None, :]
        boxes += [b * [ratio_w, ratio_h, ratio_w, ratio_h] for b in box[keep]]
        scores += [float(s) for s in raw_scores[keep]]
        points += [p * [ratio_w, ratio_h] for p in five[keep]]
    return boxes, scores, points


def decode(
    model: str, outputs: list[np.ndarray], size: int, score: float, ratio: tuple[float, float]
) -> Candidates:
    """One picture's candidates from `model`'s outputs (in the session's output order)."""
    if model == "yolo_face":
        return decode_yolo(outputs[0], score, ratio)
    if model == "yunet":
        return decode_yunet(outputs, size, score, ratio)
    return decode_distances(outputs, size, score, ratio)


def _transform(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    return cv2.transform(points.reshape(-1, 1, 2), matrix).reshape(-1, 2)


def suppress(candidates: Candidates, score: float, iou: float) -> np.ndarray:
    """face_helper.apply_nms: the kept candidates, best first."""
    boxes, scores, _ = candidates
    xywh = [(x1, y1, x2 - x1, y2 - y1) for (x1, y1, x2, y2) in boxes]
    kept = cv2.dnn.NMSBoxes(xywh, scores, score_threshold=score, nms_threshold=iou)
    return np.asarray(kept, np.int64).reshape(-1)


class FaceFusionDetector:
    """A stage: a batch of frames → FaceTable of every face FaceFusion's detector keeps.

    `sessions`: the model file's session per FaceFusion model name (`many`: all three). Each
    model runs once per batch over every frame at every angle. `landmarker`: FaceFusion's 68-point
    refinement of the five points (faces/facefusion_landmarks.py), None for the detector's."""

    name = "detect"

    def __init__(
        self,
        sessions: dict[str, Session],
        settings: FaceFusionDetectorSettings,
        landmarker: FaceFusionLandmarker | None = None,
    ) -> None:
        self.settings = settings
        self.landmarker = landmarker
        self.models = [MODELS[f].family for f in FACE_DETECTORS[settings.model]]
        missing = [m for m in self.models if m not in sessions]
        if missing:
            raise ValueError(f"face detector {settings.model} needs the sessions of {', '.join(missing)}")
        self.sessions = sessions

    def __call__(self, k: Kernels, frames: Frames) -> FaceTable:
        if not frames.count:
            return FaceTable.empty()
        # FaceFusion's shrinking and canvases are cv2's, on the host: a device batch comes down
        # as its BGR frames [B,H,W,3] (not `download`, which gives the output's planes)
        pixels = frames.pixels if isinstance(frames.pixels, list) else list(k.to_host(frames.pixels))
        return self.detect(k, pixels)

    def detect(self, k: Kernels, images: list[np.ndarray]) -> FaceTable:
        s = self.settings
        # (picture, matrix back to the frame, the margin's left and top), one per frame and angle
        turned: list[tuple[np.ndarray, np.ndarray | None, tuple[int, int]]] = []
        for image in images:
            for angle in s.angles:
                picture, back = image, None
                if angle:
                    matrix, size = rotation(angle, image.shape[1], image.shape[0])
                    picture, back = cv2.warpAffine(image, matrix, size), cv2.invertAffineTransform(matrix)
                top, right, bottom, left = margin_pixels(picture.shape, s.margin)
                if top or right or bottom or left:
                    picture = np.pad(picture, ((top, bottom), (left, right), (0, 0)))
                turned.append((picture, back, (left, top)))
        restricted = [restrict(picture, s.size) for picture, _, _ in turned]
        candidates: list[Candidates] = [([], [], []) for _ in turned]
        for model in self.models:
            session = self.sessions[model]
            batch = np.stack([canvas(r[0], s.size, model) for r in restricted])
            out = k.to_host(k.run(session, {session.inputs[0].name: k.from_host(batch)}, None))
            arrays = [np.asarray(out[o.name]).reshape(len(turned), -1) for o in session.outputs]
            for j, (_, ratio_h, ratio_w) in enumerate(restricted):
                boxes, scores, points = decode(
                    model, [a[j] for a in arrays], s.size, s.score, (ratio_h, ratio_w)
                )
                candidates[j][0].extend(boxes)
                candidates[j][1].extend(scores)
                candidates[j][2].extend(points)
        rows: list[tuple[int, np.ndarray, np.ndarray, float]] = []
        per_angle = len(s.angles)
        for i in range(len(images)):
            boxes, scores, points = [], [], []
            for j in range(i * per_angle, (i + 1) * per_angle):
                _, back, (left, top) = turned[j]
                for box, score, five in zip(*candidates[j], strict=True):
                    box = np.array([*sorted(box[0::2]), *sorted(box[1::2])])[[0, 2, 1, 3]]
                    if left or top:  # back into the picture the margin padded
                        box = box - np.array([left, top, left, top])
                        five = np.asarray(five, np.float64) - np.array([left, top])
                    if back is not None:  # face_helper.transform_bounding_box / transform_points
                        corners = _transform(box[[0, 1, 2, 1, 2, 3, 0, 3]].reshape(4, 2), back)
                        box = np.concatenate([corners.min(axis=0), corners.max(axis=0)])
                        five = _transform(np.asarray(five, np.float64), back)
                    boxes.append(box)
                    scores.append(score)
                    points.append(np.asarray(five))
            if not boxes or s.score <= 0:
                continue
            for r in suppress((boxes, scores, points), s.score, s.nms_iou)[: s.max_faces_per_frame]:
                rows.append((i, boxes[r], points[r], scores[r]))
        if not rows:
            return FaceTable.empty()
        table = FaceTable(
            frame_index=np.array([r[0] for r in rows], np.int32),
            box=np.array([r[1] for r in rows], np.float32),
            landmarks5=np.array([r[2] for r in rows], np.float32),
            score=np.array([r[3] for r in rows], np.float32),
        )
        return table if self.landmarker is None else self.landmarker.refine(k, images, table)


def facefusion_detector_settings(
    model: str | None,
    size: str | None,
    angles: str | None,
    score_threshold: float | None,
    margin: str | None = None,
) -> FaceFusionDetectorSettings | None:
    """The render's --face-detector-* options (None without --face-detector-model; exit 2 for a
    value FaceFusion does not take). `score_threshold`: --score-threshold when given, on ffbatch's
    √ scale (FaceFusion's --face-detector-score S arrives as √S); else FaceFusion's default 0.5.
    `margin`: --detector-margin (FaceFusion's --face-detector-margin), 1 to 4 percentages."""
    if model is None:
        if size is not None or angles is not None or any(parse_margin(margin)):
            raise InputError(
                "--face-detector-size, --detector-angles and --detector-margin need --face-detector-model"
            )
        return None
    if model not in FACE_DETECTORS:
        raise InputError(f"--face-detector-model {model}: not one of {', '.join(FACE_DETECTORS)}")
    sizes = FACE_DETECTOR_SIZES[model]
    size = (size or sizes[-1]).lower()
    if "x" not in size:
        size = f"{size}x{size}"
    if size not in sizes:
        raise InputError(f"--face-detector-size {size}: {model} takes {', '.join(sizes)}")
    try:
        turns = tuple(int(a) for a in (angles or "0").replace(",", " ").split())
    except ValueError:
        raise InputError(f"--detector-angles {angles}: whole degrees from {ANGLES}") from None
    if not turns or any(a not in ANGLES for a in turns):
        raise InputError(f"--detector-angles {angles}: each one of {', '.join(map(str, ANGLES))}")
    # √S squared: FaceFusion's scores are multiples of 0.05, so 6 decimals undo the √'s rounding
    score = 0.5 if score_threshold is None else round(score_threshold**2, 6)
    return FaceFusionDetectorSettings(
        model, int(size.split("x")[0]), tuple(dict.fromkeys(turns)), score, margin=parse_margin(margin)
    )


def parse_margin(text: str | None) -> tuple[int, int, int, int]:
    """--face-detector-margin as FaceFusion reads it (normalizer.normalize_space): T, T R, T R B or
    T R B L, whole percentages 0..100 (commas or spaces)."""
    if text is None:
        return (0, 0, 0, 0)
    try:
        v = [int(t) for t in str(text).replace(",", " ").split()]
    except ValueError:
        raise InputError(f"--detector-margin {text}: 1 to 4 whole percentages from 0 to 100") from None
    if not 1 <= len(v) <= 4 or any(not 0 <= m <= 100 for m in v):
        raise InputError(f"--detector-margin {text}: 1 to 4 whole percentages from 0 to 100")
    top, right = v[0], v[1 % len(v)]
    bottom = v[2] if len(v) > 2 else top
    left = v[3] if len(v) > 3 else right
    return top, right, bottom, left
