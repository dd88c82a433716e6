"""The host kernel set's operations: OpenCV and numpy, one face or one picture at a time.

On a CPU these are 2–24× faster than the same operations in torch (measured), which is why
there are two kernel sets. Colour transfer and blending are the classical swap's paint: their
formulas are kernels/formulas.py's, run here on this set's primitives (`PRIMITIVES`: OpenCV's
LAB, blurs, pyramids and erosion; channel-last images), and kernels/host_paint.py paints a
region with them. The masks are FaceFusion's conventions (box: zero a border, blur; model
masks: resize, blur, and rescale the 0.5–1 band).
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np
from numpy.typing import ArrayLike

from facefusion_batch.kernels import formulas
from facefusion_batch.kernels.base import (
    GRAIN_CLIP,
    LUMA_BGR,
    MODEL_MASK_BLUR,
    SH_FIT_STEP,
    SH_RIDGE,
    SHADE_LIMIT,
    SHARPNESS_SIGMAS,
    SHARPNESS_SLACK,
    TINT_LIMIT,
    grain_gain,
    sharpness_weights,
)
from facefusion_batch.kernels.geometry import letterbox_canvas

# --- model inputs ------------------------------------------------------------------------------------


def letterbox(images: list[np.ndarray], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Resize each image to fit `size`×`size` keeping aspect, pad bottom/right with zeros.

    Returns the batch as [N,3,H,W] float32 BGR 0–255 (H, W from `letterbox_canvas`)
    and the scale per image. Images may differ in size (source photos share one batch).
    """
    height, width = letterbox_canvas([im.shape for im in images], size)
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


def warp_crops(
    images: list[np.ndarray], frame_index: np.ndarray, affines: np.ndarray, size: int, border: str
) -> np.ndarray:
    """[F,size,size,C] crops, each image warped through its face's affine (bilinear); outside the
    frame zero (`border="zeros"`) or the edge pixel (`"replicate"`, as learned models were
    trained on)."""
    mode = cv2.BORDER_REPLICATE if border == "replicate" else cv2.BORDER_CONSTANT
    channels = images[0].shape[2] if images and images[0].ndim == 3 else 3
    crops = np.empty((len(frame_index), size, size, channels), images[0].dtype if images else np.uint8)
    for i, (fi, m) in enumerate(zip(frame_index, affines, strict=True)):
        crops[i] = cv2.warpAffine(
            images[fi], m, (size, size), flags=cv2.INTER_LINEAR, borderMode=mode, borderValue=0
        ).reshape(size, size, channels)
    return crops


def resize_crops(crops: np.ndarray, size: int) -> np.ndarray:
    if crops.shape[1] == size:
        return crops
    # bilinear both ways, as FaceFusion feeds its mask models (INTER_AREA would be kinder to a
    # 1024-px crop, but the masks would then differ from FaceFusion's by up to a whole level)
    return np.stack([cv2.resize(c, (size, size), interpolation=cv2.INTER_LINEAR) for c in crops])


def model_input(
    crops: np.ndarray, mean: ArrayLike = 0.0, std: ArrayLike = 1.0, *, rgb: bool = True, nhwc: bool = False
) -> np.ndarray:
    """uint8-valued BGR crops [F,S,S,3] → float32: RGB (or BGR), /255, then (x − mean) / std; NCHW
    unless `nhwc`."""
    mean, std = np.asarray(mean, np.float32), np.asarray(std, np.float32)
    pixels = crops[..., ::-1] if rgb else crops
    if not (mean == 0).all() or not (std == 1).all():
        x: np.ndarray = (pixels.astype(np.float32) / 255.0 - mean) / std
        return np.ascontiguousarray(x if nhwc else x.transpose(0, 3, 1, 2))
    # 0–1 as they are (− 0 and / 1 change no value): converted straight into the layout
    out = np.empty(pixels.shape if nhwc else pixels.transpose(0, 3, 1, 2).shape, np.float32)
    out[...] = pixels if nhwc else pixels.transpose(0, 3, 1, 2)
    out /= np.float32(255.0)
    return out


def model_output(
    out: np.ndarray, mean: ArrayLike, std: ArrayLike, *, denormalise: bool, pre_clip: bool = False
) -> np.ndarray:
    """Model output NCHW RGB → BGR float32 0–255 NHWC (`x·std + mean` first when `denormalise`;
    `pre_clip`: the output is clipped to [-1, 1] before that, as the enhancers' are)."""
    if pre_clip:
        out = np.clip(out, -1.0, 1.0)
    x = out.transpose(0, 2, 3, 1)
    if denormalise:
        x = x * np.asarray(std, np.float32) + np.asarray(mean, np.float32)
    return np.clip(x, 0.0, 1.0)[..., ::-1] * 255.0


# --- masks ------------------------------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _box_mask(size: int, blur: float, padding: tuple[int, int, int, int]) -> np.ndarray:
    blur_px = int(size * 0.5 * blur)
    border = max(blur_px // 2, 1)
    top, right, bottom, left = (max(border, int(size * p / 100)) for p in padding)
    mask: np.ndarray = np.zeros((size, size), np.float32)
    mask[top : size - bottom, left : size - right] = 1.0
    if blur_px > 0:
        mask = cv2.GaussianBlur(mask, (0, 0), blur_px * 0.25)
    mask.setflags(write=False)
    return mask


def box_mask(size: int, blur: float = 0.3, padding: tuple[int, int, int, int] = (0, 0, 0, 0)) -> np.ndarray:
    """[size,size] float32 in 0–1: one at the centre, ramping to zero at the borders (read-only).

    FaceFusion's box mask: zero a border (at least half the blur width, or `padding` percent per
    side: top, right, bottom, left), then a Gaussian blur with σ = size · 0.125 · blur."""
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


# --- paste-back ---------------------------------------------------------------------------------------------


def paste_one(
    frame: np.ndarray, crop: np.ndarray, mask: np.ndarray, affine: np.ndarray, rect: tuple[int, int, int, int]
) -> np.ndarray:
    """Blend `crop` (0–255, [S,S,3]) into `frame` through `mask` ([S,S], 0–1), in place, inside
    `rect` (x0, y0, x1, y1: the crop's footprint): inverse warp, then alpha blend. Returns the
    alpha used over `rect` ([h, w], 0–1), for a matte."""
    x0, y0, x1, y1 = rect
    # the inverse alignment, shifted to the rectangle's corner, warped forward in float64 as
    # FaceFusion does: OpenCV's float32 path interpolates on a coarser grid, which moves sharp
    # edges of the crop by up to 3 levels against FaceFusion's result
    m = cv2.invertAffineTransform(np.asarray(affine, np.float64))
    m[:, 2] -= np.array([x0, y0], np.float64)
    dsize = (x1 - x0, y1 - y0)
    face = cv2.warpAffine(
        np.ascontiguousarray(crop, np.float64),
        m,
        dsize,
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_REPLICATE,
    )
    alpha = cv2.warpAffine(
        np.ascontiguousarray(mask, np.float64),
        m,
        dsize,
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT,
    )
    alpha = np.clip(alpha, 0.0, 1.0)[..., None]
    region = frame[y0:y1, x0:x1].astype(np.float64)
    # truncated, not rounded, as FaceFusion's paste_back does (rounding is +1 level on ~4% of pixels)
    frame[y0:y1, x0:x1] = np.clip(region * (1 - alpha) + face * alpha, 0, 255).astype(np.uint8)
    return alpha[..., 0]


# --- the classical paint: colour transfer and blends ------------------------------------------------------


def lab_stats(lab: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = lab[mask]
    return values.mean(axis=0), values.std(axis=0) + 1e-3


def to_lab8(bgr: np.ndarray) -> np.ndarray:
    """BGR float 0–255 [H, W, 3] → OpenCV's 8-bit LAB as float32 (8-bit: table-driven, several
    times faster than float, and precise enough for statistics)."""
    return cv2.cvtColor(np.clip(bgr + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_BGR2LAB).astype(np.float32)


def from_lab8(lab: np.ndarray) -> np.ndarray:
    """8-bit LAB float [H, W, 3] → BGR float32 0–255 (whole levels)."""
    return cv2.cvtColor(np.clip(lab + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR).astype(np.float32)


def masked_blur(image: np.ndarray, mask: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian blur that averages only over `mask` (normalised convolution).

    A wide blur is computed on a downscaled copy: the result is smooth anyway.
    """
    h, w = mask.shape
    step = max(1, int(sigma // 3))
    small = (max(1, w // step), max(1, h // step))
    m = mask.astype(np.float32)
    n = image.shape[2]
    both: np.ndarray = np.empty((h, w, n + 1), np.result_type(image.dtype, np.float32))  # image·mask, mask
    np.multiply(image, m[..., None], out=both[..., :n])
    both[..., n] = m
    if step > 1:
        both = cv2.resize(both, small, interpolation=cv2.INTER_AREA)
    both = cv2.GaussianBlur(both, (0, 0), sigma / step)
    if step > 1:
        both = cv2.resize(both, (w, h), interpolation=cv2.INTER_LINEAR)
    return both[..., :n] / np.maximum(both[..., n:], 1e-4)


def transfer_colour(
    swapped_bgr: np.ndarray,
    target_bgr: np.ndarray,
    skin: np.ndarray,
    strength: float = 1.0,
    mode: str = "local",
    sigma: float = 8.0,
    limit: tuple[float, float, float] = (60.0, 30.0, 30.0),
    tint_limit: float = TINT_LIMIT,
    fix: np.ndarray | None = None,
    shade_limit: float = SHADE_LIMIT,
    tinted: np.ndarray | None = None,
) -> np.ndarray:
    """formulas.transfer_colour on one face: BGR float32 [H, W, 3], skin bool [H, W]; `fix` [2, 3]."""
    return formulas.transfer_colour(
        PRIMITIVES,
        swapped_bgr,
        target_bgr,
        skin,
        strength,
        mode,
        sigma,
        limit,
        tint_limit,
        fix,
        shade_limit,
        tinted,
    )


def _detail(bgr: np.ndarray, mask: np.ndarray) -> float:
    return float(formulas.fine_detail(PRIMITIVES, bgr, mask))


def match_sharpness(
    face: np.ndarray, target: np.ndarray, skin: np.ndarray
) -> tuple[np.ndarray, float | None, float | None]:
    """`face` (float32 BGR) blurred until its fine detail on `skin` is the target's; with the
    result's detail (the chosen blurs' mix) and the target's, for grain matching (None: too
    little skin to tell)."""
    if skin.sum() < 64:
        return face, None, None
    goal = _detail(target, skin)
    # blurs in rising width until the first at or below the goal (sharpness_weights reads no
    # further: the widths past it stay unmade, their detail 0 and their weight 0)
    blurs, detail = [face], np.zeros((1, 1 + len(SHARPNESS_SIGMAS)))
    detail[0, 0] = _detail(face, skin)
    for i, sigma in enumerate(SHARPNESS_SIGMAS, start=1):
        if detail[0, i - 1] <= goal * SHARPNESS_SLACK:
            break
        blurs.append(cv2.GaussianBlur(face, (0, 0), sigma))
        detail[0, i] = _detail(blurs[-1], skin)
    weights = sharpness_weights(detail, np.array([goal]))[0]
    chosen = [(weights[i], b) for i, b in enumerate(blurs) if weights[i] > 0]
    mixed = formulas.mix([w for w, _ in chosen], [b for _, b in chosen]).astype(np.float32)
    return mixed, float(weights @ detail[0]), goal


def match_grain(
    face: np.ndarray,
    target: np.ndarray,
    skin: np.ndarray,
    have: float | None = None,
    goal: float | None = None,
) -> np.ndarray:
    """`face` (float32 BGR) with the target's own fine residual (its grain) added on `skin`, as
    much as brings the face's fine detail up to the target's; a face as detailed is unchanged.
    `have`/`goal`: the face's and the target's fine detail where sharpness matching measured
    them already (the same blurs are not made twice)."""
    if skin.sum() < 64:
        return face
    goal = _detail(target, skin) if goal is None else goal
    have = _detail(face, skin) if have is None else have
    gain = float(grain_gain(have, goal))
    if gain <= 0:
        return face
    return formulas.add_grain(PRIMITIVES, face, target, skin, gain, GRAIN_CLIP * goal).astype(np.float32)


def feather(target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return formulas.feather(PRIMITIVES, target, face, alpha)


def multiband(target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """formulas.multiband of one region: images [H, W, 3], alpha [H, W]."""
    return formulas.multiband(PRIMITIVES, target, face, alpha)


def multiband_weights(alpha: np.ndarray) -> np.ndarray:
    """formulas.multiband_weights of one region's alpha [H, W]."""
    return formulas.multiband_weights(PRIMITIVES, alpha)


def poisson(target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """cv2.seamlessClone inside the mask's core; its soft edge feathered outside."""
    mask = (alpha > 0.5).astype(np.uint8) * 255
    if mask.sum() == 0:
        return target
    ys, xs = np.nonzero(mask)
    centre = (int((xs.min() + xs.max() + 1) // 2), int((ys.min() + ys.max() + 1) // 2))
    t8 = np.clip(target, 0, 255).astype(np.uint8)
    f8 = np.clip(face, 0, 255).astype(np.uint8)
    try:
        cloned = cv2.seamlessClone(f8, t8, mask, centre, cv2.NORMAL_CLONE).astype(np.float32)
    except cv2.error:
        return feather(target, face, alpha)
    # keep the soft edge of the mask outside the cloned core
    return feather(target, cloned, np.clip(alpha * 1.5, 0, 1))


def blend(mode: str, target: np.ndarray, face: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """All arrays float32; target/face HxWx3 0–255, alpha HxW 0–1."""
    if mode == "feather":
        return feather(target, face, alpha)
    if mode == "multiband":
        return multiband(target, face, alpha)
    if mode == "poisson":
        return poisson(target, face, alpha)
    raise ValueError(f"unknown blend mode {mode!r}")


def inset_ramp(covered: np.ndarray, width: int) -> np.ndarray:
    """[h, w] float32: 0 on the outermost ring of `covered`, rising by 1/`width` a ring inward
    (the mean of `width` successive 3x3 erosions); outside the array counts as covered, so a
    face cut by the frame's edge keeps its full weight there."""
    width = max(1, width)
    return formulas.inset_ramp(PRIMITIVES, covered, width, width)


def fit_basis(basis: np.ndarray, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Least squares of `values` [H, W, C] on `basis` [H, W, K] over `mask` (bool [H, W]), with
    a ridge of SH_RIDGE of the mean diagonal, fitted on every SH_FIT_STEP-th pixel each way (the
    fit is smooth): the fitted image [H, W, C] (float32)."""
    step = (slice(None, None, SH_FIT_STEP),) * 2
    chosen = mask[step]
    b = basis[step][chosen].astype(np.float64)
    if len(b) < basis.shape[-1]:
        return values.astype(np.float32)
    gram = b.T @ b / len(b)
    rhs = b.T @ values[step][chosen].astype(np.float64) / len(b)
    gram += SH_RIDGE * np.trace(gram) / len(gram) * np.eye(len(gram))
    coefs = np.linalg.solve(gram, rhs).astype(np.float32)
    return basis @ coefs


_CROSS3 = np.ones((3, 3), np.uint8)  # a 3x3 erosion's kernel

# the host set's primitives for the shared formulas (kernels/formulas.py): channel-last images
PRIMITIVES = formulas.Primitives(
    xp=np,
    to_lab8=to_lab8,
    from_lab8=from_lab8,
    mask_stats=lab_stats,
    masked_blur=masked_blur,
    has_pixels=lambda mask, n: bool(mask.sum() >= n),
    channels=lambda x, start, stop: x[..., start:stop],
    join_channels=lambda parts: np.concatenate(parts, axis=-1),
    per_pixel=lambda plane: plane[..., None],
    per_channel=lambda vector: vector,
    constant=lambda values, like: np.asarray(values, np.float32),
    pyr_down=cv2.pyrDown,
    pyr_up=lambda x, size: cv2.pyrUp(x, dstsize=(size[1], size[0])),
    size=lambda x: (x.shape[0], x.shape[1]),
    blur=lambda x, sigma: cv2.GaussianBlur(x, (0, 0), sigma),
    grey=lambda bgr: bgr @ np.array(LUMA_BGR, np.float32),
    mask_mean=lambda plane, mask: float(plane[mask].mean()),
    plane=lambda x, i: x[..., i],
    levels=lambda mask: mask.astype(np.uint8),
    erode=lambda x: cv2.erode(x, _CROSS3, borderType=cv2.BORDER_CONSTANT, borderValue=1),
    fit_basis=fit_basis,
)
