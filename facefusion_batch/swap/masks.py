"""Masks over aligned crops: box, occlusion (XSeg), area (the face mesh) and region (BiSeNet),
combined by minimum.

Conventions follow FaceFusion's defaults so results match its users' expectations:

- box: zero a border (at least half the blur width, or `padding` percent per side:
  top, right, bottom, left), then Gaussian blur with σ = size · 0.125 · blur;
- occlusion and region: the model's mask is resized to the crop, blurred (σ = 5 px),
  and the 0.5–1 band rescaled to 0–1, which pulls the edge inward and softens it;
- area (FaceFusion's upper-face, lower-face, mouth): no model; the convex hull of the chosen
  areas' points together (one hull, as FaceFusion takes it), filled in the crop and softened
  like a model mask. FaceFusion's points are its 68-point landmarks; here they are the
  468-point mesh's points of the same parts: upper face = brows, the face outline between
  the eye line and the nose base, and the nose base; lower face = the outline below the nose
  base and the nose base; mouth = both lip contours.

Model stages run every crop of the batch in one call (chunked to `max_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from facefusion_batch.errors import InputError
from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER
from facefusion_batch.kernels.base import Array, Kernels
from facefusion_batch.kernels.host_ops import box_mask
from facefusion_batch.runtime.batching import HOST, BatchPolicy
from facefusion_batch.runtime.session import Session
from facefusion_batch.swap.regions import FaceRegions

# skin: the classical swap's (swap/classical/skin.py)
MASK_TYPES = ("box", "occlusion", "area", "region", "skin")
MASK_AREAS = ("upper-face", "lower-face", "mouth")  # FaceFusion's --face-mask-areas
NOSE_BASE = np.array([98, 97, 2, 326, 327], np.int64)  # mesh points along the bottom of the nose
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
    areas: tuple[str, ...] = MASK_AREAS  # area mask: which of FaceFusion's areas (all by default)
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


class AreaMasker:
    """Area masks: the mesh's points of the chosen areas (in crop pixels) → one filled convex
    hull per face, softened as the model masks are. Rasterising a hull is no model call."""

    def __init__(self, regions: FaceRegions, areas: tuple[str, ...] = MASK_AREAS) -> None:
        unknown = [a for a in areas if a not in MASK_AREAS]
        if unknown or not areas:
            raise InputError(f"--mask-areas takes {', '.join(MASK_AREAS)} (got {list(areas)})")
        self.areas = tuple(areas)
        self.outline = np.asarray(regions.face_oval, np.int64)
        self.brows = np.asarray(regions.brows, np.int64)
        self.lips = np.unique(np.concatenate([regions.lips_outer, regions.lips_inner])).astype(np.int64)

    def points(self, mesh: np.ndarray) -> list[np.ndarray]:
        """Per face, the points [K,2] whose hull is its mask (`mesh` [F,468,2], crop pixels)."""
        eye_y = (mesh[:, LEFT_EYE_OUTER, 1] + mesh[:, RIGHT_EYE_OUTER, 1]) / 2
        nose_y = mesh[:, NOSE_BASE, 1].mean(axis=1)
        outline_y = mesh[:, self.outline, 1]
        chosen = []
        for f in range(len(mesh)):
            parts = []
            if "upper-face" in self.areas:
                side = (outline_y[f] >= eye_y[f]) & (outline_y[f] <= nose_y[f])
                parts += [self.brows, self.outline[side], NOSE_BASE]
            if "lower-face" in self.areas:
                parts += [self.outline[outline_y[f] >= nose_y[f]], NOSE_BASE]
            if "mouth" in self.areas:
                parts.append(self.lips)
            chosen.append(mesh[f, np.concatenate(parts)])
        return chosen

    def __call__(self, k: Kernels, mesh: np.ndarray, size: int) -> Array:
        masks = np.zeros((len(mesh), size, size), np.float32)
        for mask, points in zip(masks, self.points(mesh), strict=True):
            # FaceFusion's hull: points truncated to whole pixels, filled with 1
            cv2.fillConvexPoly(mask, cv2.convexHull(points.astype(np.int32)), 1.0)
        return k.soften_masks(k.from_host(masks), size)


class CropMasker:
    """Masks in two halves around the swap: box, occlusion and area from the target crops (and
    the face's mesh), the region mask from the swapped crops, combined by minimum."""

    def __init__(
        self,
        settings: MaskSettings,
        occluder: Occluder | None = None,
        parser: RegionParser | None = None,
        area: AreaMasker | None = None,
    ) -> None:
        if "occlusion" in settings.types and occluder is None:
            raise InputError("--mask occlusion needs an occluder model (--occluder-model)")
        if "region" in settings.types and parser is None:
            raise InputError("--mask region needs a face-parser model (--parser-model)")
        if "area" in settings.types and area is None:
            raise InputError("--mask area needs the face mesh's regions (an AreaMasker)")
        self.settings = settings
        self.occluder = occluder
        self.parser = parser
        self.area = area

    @property
    def needs_mesh(self) -> bool:
        return "area" in self.settings.types

    def before(
        self, k: Kernels, crops: Array, count: int, size: int, mesh: np.ndarray | None = None
    ) -> list[Array]:
        """`mesh`: the faces' mesh points [F,468,2] in crop pixels (for the area mask)."""
        masks = []
        if "box" in self.settings.types:
            masks.append(k.constant_masks(box_mask(size, self.settings.blur, self.settings.padding), count))
        if "occlusion" in self.settings.types and self.occluder is not None:
            masks.append(self.occluder(k, crops, count, size))
        if "area" in self.settings.types and self.area is not None:
            if mesh is None:
                raise ValueError("the area mask needs the faces' mesh (run FaceMesh first)")
            masks.append(self.area(k, mesh, size))
        return masks or [k.constant_masks(np.ones((size, size), np.float32), count)]

    def after(self, k: Kernels, swapped: Array, masks: list[Array], count: int, size: int) -> Array:
        if "region" in self.settings.types and self.parser is not None:
            masks = masks + [self.parser(k, swapped, count, size)]
        return k.min_masks(masks)
