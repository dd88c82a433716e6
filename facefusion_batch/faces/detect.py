"""YuNet face detection over a whole batch of frames in one model call.

YuNet's Reshape nodes hard-code batch 1 and fold the batch into the anchor
axis: fed [N,3,S,S] it returns [1, N*A, C] in batch-major order, so we reshape
to [N, A, C] instead of rewriting the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from facefusion_batch.faces.table import FaceTable
from facefusion_batch.runtime.session import Session

STRIDES = (8, 16, 32)


@dataclass(frozen=True)
class DetectorSettings:
    input_size: int = 640
    score_threshold: float = 0.6
    nms_iou: float = 0.3
    max_faces_per_frame: int = 64


def canvas_size(shapes: list[tuple[int, ...]], size: int) -> tuple[int, int]:
    """Smallest (height, width), multiples of 32, that hold every image fitted into size×size.

    YuNet is fully convolutional: a 16:9 batch runs at 640×384 instead of 640×640.
    """
    height = width = 32
    for shape in shapes:
        h, w = shape[:2]
        scale = min(size / w, size / h)
        height = max(height, -(-max(1, round(h * scale)) // 32) * 32)
        width = max(width, -(-max(1, round(w * scale)) // 32) * 32)
    return height, width


def letterbox(images: list[np.ndarray], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Resize each image to fit `size`×`size` keeping aspect, pad bottom/right with zeros.

    Returns the batch as [N,3,H,W] float32 BGR 0–255 (H, W from `canvas_size`)
    and the scale per image.
    """
    height, width = canvas_size([im.shape for im in images], size)
    batch = np.zeros((len(images), height, width, 3), np.uint8)
    scales = np.zeros((len(images),), np.float32)
    for i, image in enumerate(images):
        h, w = image.shape[:2]
        scale = min(size / w, size / h)
        nw, nh = min(width, max(1, round(w * scale))), min(height, max(1, round(h * scale)))
        interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
        batch[i, :nh, :nw] = cv2.resize(image, (nw, nh), interpolation=interp)
        scales[i] = scale
    return batch.transpose(0, 3, 1, 2).astype(np.float32), scales


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


class YuNetDetector:
    """A stage: list of BGR frames → FaceTable of every face above threshold."""

    def __init__(self, session: Session, settings: DetectorSettings = DetectorSettings()) -> None:
        self.session = session
        self.settings = settings
        self.input_name = session.inputs[0].name

    def __call__(self, images: list[np.ndarray]) -> FaceTable:
        if not images:
            return FaceTable.empty()
        size = self.settings.input_size
        batch, scales = letterbox(images, size)
        outputs = self.session.run({self.input_name: batch})
        scores, boxes, landmarks = decode(outputs, len(images), batch.shape[2], batch.shape[3])
        boxes = boxes / scales[:, None, None]
        landmarks = landmarks / scales[:, None, None, None]

        frame_index, keep_rows = [], []
        for i in range(len(images)):
            candidates = np.flatnonzero(scores[i] >= self.settings.score_threshold)
            if candidates.size == 0:
                continue
            xywh = boxes[i, candidates].copy()
            xywh[:, 2:] -= xywh[:, :2]
            kept = cv2.dnn.NMSBoxes(
                xywh.tolist(),
                scores[i, candidates].tolist(),
                self.settings.score_threshold,
                self.settings.nms_iou,
            )
            kept = np.asarray(kept, dtype=np.int64).reshape(-1)[: self.settings.max_faces_per_frame]
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
