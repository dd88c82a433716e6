"""Masks over aligned crops: box, occlusion (XSeg) and region (BiSeNet), combined by minimum.

Conventions follow FaceFusion's defaults so results match its users' expectations:

- box: zero a border (at least half the blur width, or `padding` percent per side:
  top, right, bottom, left), then Gaussian blur with σ = size · 0.125 · blur;
- occlusion and region: the model's mask is resized to the crop, blurred (σ = 5 px),
  and the 0.5–1 band rescaled to 0–1, which pulls the edge inward and softens it.

Model stages run every crop of the batch in one call (chunked to `max_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from facefusion_batch.runtime.session import Session
from facefusion_batch.swap.infer import batch_limit, run_chunked

MASK_TYPES = ("box", "occlusion", "region")
# BiSeNet face-parsing classes (CelebAMask-HQ order)
REGION_CLASSES: dict[str, int] = {
    "skin": 1,
    "left-eyebrow": 2,
    "right-eyebrow": 3,
    "left-eye": 4,
    "right-eye": 5,
    "glasses": 6,
    "nose": 10,
    "mouth": 11,
    "upper-lip": 12,
    "lower-lip": 13,
}
MODEL_MASK_BLUR = 5.0  # px, for occlusion and region masks


@dataclass(frozen=True)
class MaskSettings:
    types: tuple[str, ...] = ("box",)
    blur: float = 0.3  # box mask: 0–1
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # box mask: percent, top right bottom left
    regions: tuple[str, ...] = tuple(REGION_CLASSES)
    occluder_model: str = "xseg_1"
    parser_model: str = "bisenet_resnet_34"


@lru_cache(maxsize=32)
def _box_mask(size: int, blur: float, padding: tuple[int, int, int, int]) -> np.ndarray:
    blur_px = int(size * 0.5 * blur)
    border = max(blur_px // 2, 1)
    top, right, bottom, left = (max(border, int(size * p / 100)) for p in padding)
    mask = np.zeros((size, size), np.float32)
    mask[top : size - bottom, left : size - right] = 1.0
    if blur_px > 0:
        mask = cv2.GaussianBlur(mask, (0, 0), blur_px * 0.25)
    mask.setflags(write=False)
    return mask


def box_mask(size: int, blur: float = 0.3, padding: tuple[int, int, int, int] = (0, 0, 0, 0)) -> np.ndarray:
    """[size,size] float32 in 0–1: one at the centre, ramping to zero at the borders (read-only)."""
    return _box_mask(int(size), float(blur), tuple(int(p) for p in padding))


def soften(masks: np.ndarray, size: int) -> np.ndarray:
    """Resize model masks [F,h,w] to `size`², blur, and rescale the 0.5–1 band to 0–1."""
    out = np.empty((len(masks), size, size), np.float32)
    for i, m in enumerate(masks):
        m = cv2.resize(np.clip(m, 0, 1).astype(np.float32), (size, size), interpolation=cv2.INTER_LINEAR)
        m = cv2.GaussianBlur(m, (0, 0), MODEL_MASK_BLUR)
        out[i] = (np.clip(m, 0.5, 1.0) - 0.5) * 2.0
    return out


def combine(masks: list[np.ndarray]) -> np.ndarray:
    """Element-wise minimum of several [F,S,S] (or broadcastable [S,S]) masks, in 0–1."""
    out = masks[0]
    for m in masks[1:]:
        out = np.minimum(out, m)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def resize_batch(crops: np.ndarray, size: int) -> np.ndarray:
    if crops.shape[1] == size:
        return crops
    interp = cv2.INTER_AREA if crops.shape[1] > size else cv2.INTER_LINEAR
    return np.stack([cv2.resize(c, (size, size), interpolation=interp) for c in crops])


class Occluder:
    """A stage: crops [F,S,S,3] BGR uint8 → occlusion masks [F,S,S] (1 = face visible)."""

    def __init__(self, session: Session, size: int = 256) -> None:
        self.session = session
        self.size = size
        self.input_name = session.inputs[0].name
        self.max_batch = batch_limit(size, channels=64)

    def __call__(self, crops: np.ndarray) -> np.ndarray:
        if len(crops) == 0:
            return np.zeros((0,) + crops.shape[1:3], np.float32)
        x = resize_batch(crops, self.size).astype(np.float32) / 255.0  # NHWC, BGR as trained
        masks = run_chunked(self.session, {self.input_name: x}, self.max_batch)[0]
        masks = masks.reshape(len(crops), self.size, self.size)
        return soften(masks, crops.shape[1])


class RegionParser:
    """A stage: crops [F,S,S,3] BGR uint8 → masks [F,S,S] of the chosen face-parsing regions."""

    def __init__(
        self,
        session: Session,
        regions: tuple[str, ...],
        size: int = 512,
        mean: tuple[float, ...] = (0.485, 0.456, 0.406),
        std: tuple[float, ...] = (0.229, 0.224, 0.225),
    ) -> None:
        unknown = [r for r in regions if r not in REGION_CLASSES]
        if unknown:
            raise ValueError(f"unknown face regions {unknown} (known: {', '.join(REGION_CLASSES)})")
        self.session = session
        self.size = size
        self.classes = np.array(sorted({REGION_CLASSES[r] for r in regions}), np.int64)
        self.mean = np.asarray(mean, np.float32)
        self.std = np.asarray(std, np.float32)
        self.input_name = session.inputs[0].name
        self.max_batch = batch_limit(size, channels=64)

    def __call__(self, crops: np.ndarray) -> np.ndarray:
        if len(crops) == 0:
            return np.zeros((0,) + crops.shape[1:3], np.float32)
        x = resize_batch(crops, self.size)[..., ::-1].astype(np.float32) / 255.0
        x = ((x - self.mean) / self.std).transpose(0, 3, 1, 2)
        logits = run_chunked(self.session, {self.input_name: x}, self.max_batch)[0]
        labels = logits.argmax(axis=1)
        return soften(np.isin(labels, self.classes).astype(np.float32), crops.shape[1])


class CropMasker:
    """A stage in two halves around the swap: box and occlusion masks from the target crops,
    the region mask from the swapped crops, combined by minimum."""

    def __init__(
        self, settings: MaskSettings, occluder: Occluder | None = None, parser: RegionParser | None = None
    ) -> None:
        if "occlusion" in settings.types and occluder is None:
            raise ValueError("the occlusion mask needs an occluder model")
        if "region" in settings.types and parser is None:
            raise ValueError("the region mask needs a face-parser model")
        self.settings = settings
        self.occluder = occluder
        self.parser = parser

    def before(self, crops: np.ndarray) -> list[np.ndarray]:
        masks = []
        if "box" in self.settings.types:
            box = box_mask(crops.shape[1], self.settings.blur, self.settings.padding)
            masks.append(np.broadcast_to(box, crops.shape[:3]))
        if "occlusion" in self.settings.types and self.occluder is not None:
            masks.append(self.occluder(crops))
        return masks or [np.ones(crops.shape[:3], np.float32)]

    def after(self, swapped: np.ndarray, masks: list[np.ndarray]) -> np.ndarray:
        if "region" in self.settings.types and self.parser is not None:
            masks = masks + [self.parser(np.clip(swapped + 0.5, 0, 255).astype(np.uint8))]
        return combine(masks)
