"""Colour transfer: match the swapped face's skin to the target's in LAB space.

Without it the source skin looks grey or wrongly tinted under the target's
light. `global` matches mean and standard deviation on skin only (eyes, brows
and lips excluded; the std ratio clipped so a noisy region cannot blow it up).
`local` also carries the target's low-frequency shading (its light), so a
flat-lit source does not look pasted onto a side-lit face.
"""

from __future__ import annotations

import cv2
import numpy as np

STD_RATIO_RANGE = (0.7, 1.4)
# 8-bit LAB units (L scaled to 0–255): light may move, tint a little
SHADING_LIMIT = np.array([30.0, 6.0, 6.0], np.float32)
COLOUR_MODES = ("local", "global", "none")


def lab_stats(lab: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = lab[mask]
    return values.mean(axis=0), values.std(axis=0) + 1e-3


def masked_blur(image: np.ndarray, mask: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur that averages only over `mask` (normalised convolution).

    A wide blur is computed on a downscaled copy: the result is smooth anyway.
    """
    h, w = mask.shape
    step = max(1, int(sigma // 3))
    small = (max(1, w // step), max(1, h // step))
    m = mask.astype(np.float32)
    both = np.dstack([image * m[..., None], m])
    if step > 1:
        both = cv2.resize(both, small, interpolation=cv2.INTER_AREA)
    both = cv2.GaussianBlur(both, (0, 0), sigma / step)
    if step > 1:
        both = cv2.resize(both, (w, h), interpolation=cv2.INTER_LINEAR)
    return both[..., :3] / np.maximum(both[..., 3:], 1e-4)


def transfer_colour(
    swapped_bgr: np.ndarray,
    target_bgr: np.ndarray,
    skin: np.ndarray,
    strength: float = 1.0,
    mode: str = "local",
    sigma: float = 8.0,
) -> np.ndarray:
    """Return `swapped_bgr` (float32 0–255) recoloured to match `target_bgr` on `skin` (bool).

    `sigma` (pixels) sets the scale of the shading carried over in `local` mode.
    """
    if mode == "none" or strength <= 0 or skin.sum() < 16:
        return swapped_bgr
    # 8-bit LAB (table-driven, several times faster than float) is precise enough for statistics
    src_lab = cv2.cvtColor(np.clip(swapped_bgr + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB)
    dst_lab = cv2.cvtColor(np.clip(target_bgr + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB)
    src_lab = src_lab.astype(np.float32)
    dst_lab = dst_lab.astype(np.float32)
    mu_s, sd_s = lab_stats(src_lab, skin)
    mu_t, sd_t = lab_stats(dst_lab, skin)
    ratio = np.clip(sd_t / sd_s, *STD_RATIO_RANGE)
    moved = (src_lab - mu_s) * ratio + mu_t
    if mode == "local":
        # swap the low frequencies: target light and tint, source detail
        shading = masked_blur(dst_lab, skin, sigma) - masked_blur(moved, skin, sigma)
        moved = moved + np.clip(shading, -SHADING_LIMIT, SHADING_LIMIT)
    moved = src_lab + strength * (moved - src_lab)
    out = cv2.cvtColor(np.clip(moved + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR)
    return out.astype(np.float32)
