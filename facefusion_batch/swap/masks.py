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

import numpy as np

from facefusion_batch.errors import InputError
from facefusion_batch.kernels.base import Array, Kernels
from facefusion_batch.kernels.host_ops import box_mask
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.session import Session

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


@dataclass(frozen=True)
class MaskSettings:
    types: tuple[str, ...] = ("box",)
    blur: float = 0.3  # box mask: 0–1
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # box mask: percent, top right bottom left
    regions: tuple[str, ...] = tuple(REGION_CLASSES)
    occluder_model: str = "xseg_1"
    parser_model: str = "bisenet_resnet_34"


class Occluder:
    """A model stage: crops (uint8-valued BGR) → occlusion masks [F,S,S] (1 = face visible)."""

    def __init__(self, session: Session, size: int = 256, policy: BatchPolicy = HOST) -> None:
        self.session = session
        self.size = size
        self.input_name = session.inputs[0].name
        self.max_batch = policy.items_per_call(size, channels=64)

    def __call__(self, k: Kernels, crops: Array, count: int, crop_size: int) -> Array:
        x = k.model_input(k.resize_crops(crops, self.size), rgb=False, nhwc=True)  # BGR /255, as trained
        masks = k.run(self.session, {self.input_name: x}, self.max_batch)[self.session.outputs[0].name]
        return k.soften_masks(masks.reshape(count, self.size, self.size), crop_size)


class RegionParser:
    """A model stage: crops (uint8-valued BGR) → masks [F,S,S] of the chosen face-parsing regions."""

    def __init__(
        self,
        session: Session,
        regions: tuple[str, ...],
        size: int = 512,
        mean: tuple[float, ...] = (0.485, 0.456, 0.406),
        std: tuple[float, ...] = (0.229, 0.224, 0.225),
        policy: BatchPolicy = HOST,
    ) -> None:
        unknown = [r for r in regions if r not in REGION_CLASSES]
        if unknown:
            raise InputError(
                f"--mask-regions: unknown face regions {unknown} (known: {', '.join(REGION_CLASSES)})"
            )
        self.session = session
        self.size = size
        self.classes = np.array(sorted({REGION_CLASSES[r] for r in regions}), np.int64)
        self.mean = tuple(mean)
        self.std = tuple(std)
        self.input_name = session.inputs[0].name
        self.max_batch = policy.items_per_call(size, channels=64)

    def __call__(self, k: Kernels, crops: Array, count: int, crop_size: int) -> Array:
        # the swapped crop as it is (float), as FaceFusion parses it, not rounded to levels first
        x = k.model_input(k.resize_crops(crops, self.size, levels=False), self.mean, self.std)
        logits = k.run(self.session, {self.input_name: x}, self.max_batch)[self.session.outputs[0].name]
        return k.soften_masks(k.class_masks(logits, self.classes), crop_size)


class CropMasker:
    """Masks in two halves around the swap: box and occlusion from the target crops, the region
    mask from the swapped crops, combined by minimum."""

    def __init__(
        self, settings: MaskSettings, occluder: Occluder | None = None, parser: RegionParser | None = None
    ) -> None:
        if "occlusion" in settings.types and occluder is None:
            raise InputError("--mask occlusion needs an occluder model (--occluder-model)")
        if "region" in settings.types and parser is None:
            raise InputError("--mask region needs a face-parser model (--parser-model)")
        self.settings = settings
        self.occluder = occluder
        self.parser = parser

    def before(self, k: Kernels, crops: Array, count: int, size: int) -> list[Array]:
        masks = []
        if "box" in self.settings.types:
            masks.append(k.constant_masks(box_mask(size, self.settings.blur, self.settings.padding), count))
        if "occlusion" in self.settings.types and self.occluder is not None:
            masks.append(self.occluder(k, crops, count, size))
        return masks or [k.constant_masks(np.ones((size, size), np.float32), count)]

    def after(self, k: Kernels, swapped: Array, masks: list[Array], count: int, size: int) -> Array:
        if "region" in self.settings.types and self.parser is not None:
            masks = masks + [self.parser(k, swapped, count, size)]
        return k.min_masks(masks)
