"""A source photo's smile lines, lifted before it is painted: the target's expression is its own.

The folds from the nose's wings to the mouth's corners belong to the photo's expression, not to
its face: a broad smile deepens them, and on a target whose cheek turns away they were squeezed
into a thin dark line down the side of the nose (`make demo`, frame 150: docs/default-swap.md).
Here a band along each fold, drawn from the mesh, is pulled toward the colour of the cheek's own
skin round it wherever it is darker than that (lip_shadow.lift_darker): the pixel's detail stays,
the fold's shadow goes. The target keeps its own folds: the local colour carries its shading.

Once per source photo (and its flipped twin for the mirror fill), so both kernel sets get it.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.swap.classical.lip_shadow import GREY, lift_darker

# mesh points along each fold, from the nose's wing down to beside the mouth's corner (MediaPipe
# 468-point mesh: the image-left fold on a frontal face, then the image-right one)
SMILE_LINES = (np.array([129, 203, 206, 216, 212, 214]), np.array([358, 423, 426, 436, 432, 434]))
LINE_WIDTH = 0.08  # IOD either side of a fold's line that the band covers fully
LINE_RAMP = 0.04  # IOD beyond that over which it fades out
LINE_SURROUND = 0.15  # IOD: the scale of the cheek's own skin colour the fold is compared with
LINE_SCALE = 0.02  # IOD: the local mean that is compared and moved (finer detail stays)
LINE_TOLERANCE = 0.03  # darker than the cheek round it by less than this share is left


def lift_smile_lines(
    crop: np.ndarray, mesh: np.ndarray, face: np.ndarray, iod: float, strength: float
) -> np.ndarray:
    """`crop` (float32 BGR 0-255) with a band along each smile line moved `strength` (0-1) of the
    way toward the skin round it where it is darker than that; `mesh` in crop pixels, `face`
    ([h,w] bool) the cut-out's face without its features (eyes, brows, lips)."""
    if strength <= 0:
        return crop
    h, w = crop.shape[:2]
    lines: np.ndarray = np.zeros((h, w), np.uint8)
    for line in SMILE_LINES:
        cv2.polylines(lines, [np.round(mesh[line, :2]).astype(np.int32)], False, 255, 1)
    dist = cv2.distanceTransform((lines == 0).astype(np.uint8), cv2.DIST_L2, 5)
    ramp = max(LINE_RAMP * iod, 1.0)
    band = np.clip((LINE_WIDTH * iod + ramp - dist) / ramp, 0.0, 1.0).astype(np.float32)
    band *= face
    around = (face & (band == 0)).astype(np.float32)  # the cheeks' and the upper lip's skin
    sigma = max(1.0, LINE_SURROUND * iod)
    weight = cv2.GaussianBlur(around, (0, 0), sigma)
    reached = weight > 1e-3
    if not (band > 0).any() or not reached.any():
        return crop
    colour = cv2.GaussianBlur(crop * around[..., None], (0, 0), sigma) / np.maximum(weight, 1e-3)[..., None]
    level = colour @ GREY
    return lift_darker(crop, strength * band * reached, colour, level, LINE_SCALE * iod, LINE_TOLERANCE)
