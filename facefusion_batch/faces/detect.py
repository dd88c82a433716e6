"""YuNet face detection over a whole batch of frames in one model call.

YuNet's Reshape nodes hard-code batch 1 and fold the batch into the anchor
axis: fed [N,3,S,S] it returns [1, N*A, C] in batch-major order, so we reshape
to [N, A, C] instead of rewriting the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from facefusion_batch.faces.facefusion_detectors import FaceFusionDetector, FaceFusionDetectorSettings
from facefusion_batch.faces.facefusion_landmarks import FaceFusionLandmarkerSettings
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.runtime.session import Session

STRIDES = (8, 16, 32)


@dataclass(frozen=True)
class DetectorSettings:
    input_size: int = 640
    score_threshold: float = 0.6
    nms_iou: float = 0.3
    max_faces_per_frame: int = 64
    # FaceFusion's --face-detector-model and its options (faces/facefusion_detectors.py); None: YuNet
    facefusion: FaceFusionDetectorSettings | None = None
    # FaceFusion's landmarker, run with a FaceFusion detector when its files are here
    facefusion_landmarker: FaceFusionLandmarkerSettings = FaceFusionLandmarkerSettings()


def decode(outputs: dict[str, np.ndarray], batch: int, height: int, width: int) -> tuple[np.ndarray, ...]:
    """Anchor outputs → per-image scores [N,A], boxes [N,A,4] (x1y1x2y2), landmarks [N,A,5,2]."""
    scores, boxes, landmarks = [], [], []
    for stride in STRIDES:
        rows, cols = height // stride, width // stride
        anchors = rows * cols
        cls = outputs[f"cls_{stride}"].reshape(batch, anchors)
        obj = outputs[f"obj_{stride}"].reshape(batch, anchors)
        bbox = outputs[f"bbox_{stride}"].reshape(batch, anchors, 4)
        kps = outputs[f"kps_{stride}"].reshape(batch, anchors, 5, 2)
        r, c = np.divmod(np.arange(anchors), cols)
        grid = np.stack([c, r], axis=-1).astype(np.float32)  # [A,2] as (x, y)
        scores.append(np.sqrt(np.clip(cls, 0, 1) * np.clip(obj, 0, 1)))
        centre = (grid + bbox[..., :2]) * stride
        wh = np.exp(bbox[..., 2:4]) * stride
        boxes.append(np.concatenate([centre - wh / 2, centre + wh / 2], axis=-1))
        landmarks.append((kps + grid[None, :, None, :]) * stride)
    return (
        np.concatenate(scores, axis=1),
        np.concatenate(boxes, axis=1),
        np.concatenate(landmarks, axis=1),
    )


def non_maximum_suppression(
    scores: np.ndarray, boxes: np.ndarray, landmarks: np.ndarray, settings: DetectorSettings
) -> FaceTable:
    """Per image: candidates above the threshold, NMS, best first → one table for the batch."""
    frame_index, keep_rows = [], []
    for i in range(len(scores)):
        candidates = np.flatnonzero(scores[i] >= settings.score_threshold)
        if candidates.size == 0:
            continue
        xywh = boxes[i, candidates].copy()
        xywh[:, 2:] -= xywh[:, :2]
        survivors = cv2.dnn.NMSBoxes(
            xywh.tolist(), scores[i, candidates].tolist(), settings.score_threshold, settings.nms_iou
        )
        kept = np.asarray(survivors, dtype=np.int64).reshape(-1)[: settings.max_faces_per_frame]
        chosen = candidates[kept]
        chosen = chosen[np.argsort(-scores[i, chosen], kind="stable")]
        frame_index.append(np.full(chosen.shape, i, np.int32))
        keep_rows.append(chosen)
    if not keep_rows:
        return FaceTable.empty()
    fi = np.concatenate(frame_index)
    rows = np.concatenate(keep_rows)
    return FaceTable(
        frame_index=fi,
        box=boxes[fi, rows].astype(np.float32),
        landmarks5=landmarks[fi, rows].astype(np.float32),
        score=scores[fi, rows].astype(np.float32),
    )


class YuNetDetector:
    """A stage: a batch of frames → FaceTable of every face above threshold.

    The letterboxed batch runs in one model call; the anchor outputs come back to the host
    (a few hundred KB a frame) and are decoded and suppressed there."""

    name = "detect"

    def __init__(self, session: Session, settings: DetectorSettings = DetectorSettings()) -> None:
        self.session = session
        self.settings = settings
        self.input_name = session.inputs[0].name

    def __call__(self, k: Kernels, frames: Frames) -> FaceTable:
        if not frames.count:
            return FaceTable.empty()
        batch, scales = k.letterbox(frames, self.settings.input_size)
        height, width = int(batch.shape[2]), int(batch.shape[3])
        outputs = k.to_host(k.run(self.session, {self.input_name: batch}, None))
        scores, boxes, landmarks = decode(outputs, frames.count, height, width)
        boxes = boxes / scales[:, None, None]
        landmarks = landmarks / scales[:, None, None, None]
        return non_maximum_suppression(scores, boxes, landmarks, self.settings)


Detector = YuNetDetector | FaceFusionDetector  # the detect stage: ffbatch's YuNet or FaceFusion's
