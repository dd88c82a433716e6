"""The classical paint's element-wise formulas, written once for both kernel sets.

Each formula takes `ops`, its kernel set's `Primitives`: the array namespace (numpy or torch:
both speak the Python array API for what is used here) and the operations that rightly differ
per set (LAB conversion, masked blurs, statistics over a mask; OpenCV on the host, batched tensor
operations on the device). Images are channel-last on the host ([H, W, C]) and channel-first on
the torch set ([..., C, H, W]); a formula reaches channels only through `ops.channels` and
`ops.join_channels`, spreads a plane over the channels with `ops.per_pixel`, and gets
per-channel values (statistics, constants) shaped by the set to broadcast against its images.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from facefusion_batch.kernels.base import (
    DETAIL_SIGMA,
    LAB_NEUTRAL,
    SH_FLOOR,
    SH_RATIO,
    SHADE_LIMIT,
    STD_RATIO_RANGE,
    TINT_LEVEL,
    TINT_LIMIT,
    TINT_SCALE,
    Array,
)


@dataclass(frozen=True)
class Primitives:
    """What a kernel set gives the formulas: its array namespace and its own operations."""

    xp: Any  # the array namespace: numpy or torch
    # BGR float 0–255 → OpenCV's 8-bit LAB, rounded to whole levels, as float (and back)
    to_lab8: Callable[[Array], Array]
    from_lab8: Callable[[Array], Array]
    # per-channel mean and spread (+1e-3) of an image over a bool mask
    mask_stats: Callable[[Array, Array], tuple[Array, Array]]
    # Gaussian blur averaging only over a mask (normalised convolution); sigma one or one per image
    masked_blur: Callable[[Array, Array, Any], Array]
    # whether a mask holds at least n pixels: a bool on the host, a per-image bool array on the
    # device (where asking would wait for it)
    has_pixels: Callable[[Array, int], Any]
    channels: Callable[[Array, int, int], Array]  # channels [start, stop) of an image or a statistic
    join_channels: Callable[[list[Array]], Array]
    per_pixel: Callable[[Array], Array]  # a plane [..., H, W] shaped to broadcast over channels
    per_channel: Callable[[Array], Array]  # a vector [..., C] shaped like a statistic
    constant: Callable[[Sequence[float], Array], Array]  # per-channel values, shaped like a statistic
    # OpenCV's pyrDown, and pyrUp to a size (height, width); an image's or a plane's size
    pyr_down: Callable[[Array], Array]
    pyr_up: Callable[[Array, tuple[int, int]], Array]
    size: Callable[[Array], tuple[int, int]]
    blur: Callable[[Array, float], Array]  # OpenCV's GaussianBlur, kernel size from sigma
    grey: Callable[[Array], Array]  # BGR → grey plane (LUMA_BGR)
    # the mean of a plane over a bool mask: a float on the host, one per image on the device
    mask_mean: Callable[[Array, Array], Any]
    plane: Callable[[Array, int], Array]  # one channel of an image as a plane [..., H, W]
    # a bool mask as levels (0/1) an erosion takes, and its 3x3 erosion (outside counts as 1)
    levels: Callable[[Array], Array]
    erode: Callable[[Array], Array]
    # least squares over a bool mask of each image's channels on a basis (an image of K channels,
    # a small ridge added): the fitted image, as many channels as the values (relight)
    fit_basis: Callable[[Array, Array, Array], Array]


def transfer_colour(
    ops: Primitives,
    swapped: Array,
    target: Array,
    skin: Array,
    strength: float = 1.0,
    mode: str = "local",
    sigma: Any = 8.0,
    limit: Sequence[float] = (60.0, 30.0, 30.0),
    tint_limit: float = TINT_LIMIT,
    fix: Array | None = None,
    shade_limit: float = SHADE_LIMIT,
    tinted: Array | None = None,
) -> Array:
    """`swapped` (BGR float 0–255) recoloured to match `target` on `skin` (bool); fewer than 16
    skin pixels: the face as it is.

    `global` matches LAB mean and standard deviation on skin only (eyes, brows and lips
    excluded); `local` also carries the target's low-frequency shading (its light, at the scale
    `sigma` in pixels: one, or one per image), so a flat-lit source does not look pasted onto a
    side-lit face, and matches the spread of lightness: the target's tint arrives with its
    shading, and stretching the source's a*/b* spread to the target's (whose skin mask also
    covers lashes, lids and lip rims) reddened the source's lids and the rims of its features
    (scripts/bench_quality.py, two sources: skin blocks with a*/b* off by more than 4, 5.66 ->
    3.46 % and 2.17 -> 1.10 %, identity unchanged; the lightness ratio is what carries it). The
    a*/b* spread is only ever shrunk to the target's, never stretched: on a grey or desaturated
    shot the source's red lips and pink cheeks otherwise stayed, a coloured face on a grey frame.
    Where that ratio darkens a pixel (a dark eye, a socket), its chroma darkens by the same
    share (LAB_NEUTRAL), as under less light: at full chroma a brown eye turned maroon.
    After the shading, what is left of the tint's difference at the finer scale TINT_SCALE ×
    `sigma` is held to `tint_limit` (inf: not held): the source's own red lids or sallow cheek
    do not survive it. Where the lightness's local mean at that scale is more than
    `shade_limit` darker than the target's (inf: free), it is lifted by the excess, one way
    only: the darkest of a source's beard or deep-set brow root on a flat, beardless target
    (SHADE_LIMIT). `tinted` (bool, default `skin`): where the tint is measured and held; the
    classical swap adds the ring round the eyes, brows and lips that `skin` leaves out (its
    lightness is the source's identity, but left to the source its tint made grey-blue patches
    at the inner eye corners and the nose bridge: swap/classical/source.py TINT_RING). The target's
    darkest skin pixels count in its shading too: left out below 0.6 / 0.75 of its median
    lightness (its hair at a hairline, but also its deepest shadows), the astronaut's faces with
    every skin block within 8 ΔE fell from 86.6 to 79.8 / 44.5 % (scripts/bench_quality.py).
    `fix` ([..., 2, 3]): the target's spread multiplied by its first row and its mean shifted by
    its second (the track's statistics, swap/classical/colour_track.py).
    """
    xp = ops.xp
    if mode == "none" or strength <= 0:
        return swapped
    enough = ops.has_pixels(skin, 16)
    if enough is False:
        return swapped
    src = ops.to_lab8(swapped)
    dst = ops.to_lab8(target)
    mu_s, sd_s = ops.mask_stats(src, skin)
    mu_t, sd_t = ops.mask_stats(dst, skin)
    if fix is not None:  # toward the face's track: spread factor, mean shift
        sd_t = sd_t * ops.per_channel(fix[..., 0, :])
        mu_t = mu_t + ops.per_channel(fix[..., 1, :])
    spread = sd_t / sd_s
    ratio = xp.clip(spread, *STD_RATIO_RANGE)
    if mode == "local":  # the lightness spread; the tint's only ever shrunk to the target's
        lightness = ops.constant((1.0, 0.0, 0.0), src)
        ratio = ratio * lightness + xp.clip(spread, 0.0, 1.0) * (1 - lightness)
    moved = (src - mu_s) * ratio + mu_t
    if mode == "local":
        light, tint = _light_and_tint(ops)
        # where the stretch darkens a pixel, its chroma darkens with it (about neutral)
        stretched = (light(src) - light(mu_s)) * light(ratio) + light(mu_s)
        follow = xp.clip(xp.clip(stretched, 1.0, None) / xp.clip(light(src), 1.0, None), 0.0, 1.0)
        own = tint(mu_s) + tint(ratio) * (tint(src) - tint(mu_s))
        chroma = LAB_NEUTRAL + follow * (own - LAB_NEUTRAL) + tint(mu_t - mu_s)
        moved = ops.join_channels([light(moved), chroma])
        # swap the low frequencies: target light and tint, source detail
        shading = ops.masked_blur(dst, skin, sigma) - ops.masked_blur(moved, skin, sigma)
        bound = ops.constant(tuple(limit), src)
        moved = moved + xp.clip(shading, -bound, bound)
        if math.isfinite(tint_limit) or math.isfinite(shade_limit):
            moved = _hold_fine(ops, moved, dst, skin, tinted, TINT_SCALE * sigma, tint_limit, shade_limit)
    moved = src + strength * (moved - src)
    out = ops.from_lab8(moved)
    return out if enough is True else xp.where(enough, out, swapped)


def _light_and_tint(ops: Primitives) -> tuple[Callable[[Array], Array], Callable[[Array], Array]]:
    """LAB's lightness channel and its two tint channels (a*, b*), of an image or a statistic."""
    return (lambda x: ops.channels(x, 0, 1)), (lambda x: ops.channels(x, 1, 3))


def _hold_fine(
    ops: Primitives,
    moved: Array,
    dst: Array,
    skin: Array,
    tinted: Array | None,
    fine: Any,
    tint_limit: float,
    shade_limit: float,
) -> Array:
    """What is left of the target's difference at the finer scale `fine`: its tint held to
    `tint_limit` both ways (over `tinted`: the ring round the features too), its lightness to
    `shade_limit` one way (over the skin alone: a socket's depth is the source's)."""
    xp = ops.xp
    light, tint = _light_and_tint(ops)
    left = dst - moved
    lightness, chroma = light(moved), tint(moved)
    if math.isfinite(tint_limit):
        off = ops.masked_blur(tint(left), skin if tinted is None else tinted, fine)
        chroma = chroma + (off - xp.clip(off, -tint_limit, tint_limit))
    if math.isfinite(shade_limit):
        darker = ops.masked_blur(light(left), skin, fine)
        lightness = lightness + xp.clip(darker - shade_limit, 0.0, None)
    return ops.join_channels([lightness, chroma])


# --- relighting ------------------------------------------------------------------------------------


def sh_basis(ops: Primitives, normals: Array) -> Array:
    """The 9 real spherical harmonics up to order 2 of unit `normals` (3 channels: x, y, z), as
    9 channels, up to each term's constant (a fit takes it): 1; y, z, x; xy, yz, 3z² − 1, xz,
    x² − y²."""
    x, y, z = (ops.channels(normals, i, i + 1) for i in range(3))
    return ops.join_channels(
        [ops.xp.ones_like(x), y, z, x, x * y, y * z, 3 * z * z - 1, x * z, x * x - y * y]
    )


def rotate_normals(ops: Primitives, normals: Array, rotation: Array) -> Array:
    """`normals` (3 channels) turned by `rotation` ([..., 3, 3]: a 3x3 on the host, one per
    image on the device), unit length again (a sampled normal is a blend of its neighbours')."""
    parts = [ops.channels(normals, i, i + 1) for i in range(3)]
    rows = []
    for i in range(3):
        r = ops.per_channel(rotation[..., i, :])
        rows.append(sum(ops.channels(r, j, j + 1) * parts[j] for j in range(3)))
    return unit(ops, ops.join_channels(rows))


def unit(ops: Primitives, vectors: Array) -> Array:
    """3-channel `vectors` at unit length."""
    x, y, z = (ops.channels(vectors, i, i + 1) for i in range(3))
    return vectors / ops.xp.clip(ops.xp.sqrt(x * x + y * y + z * z), 1e-3, None)


def relight(
    ops: Primitives,
    face: Array,
    target: Array,
    skin: Array,
    normals: Array,
    rotation: Array,
    sigma: Any,
) -> Array:
    """The source face under the target's light, before `local` colour (transfer_colour) matches
    the rest: each face's shading as order-2 spherical harmonics of its surface normals (9
    coefficients, least squares on its skin's linear-light luminance), the target's through the
    mesh's normals turned to its pose (`normals`: the source's, sampled through the warp;
    `rotation`: source → target, [..., 3, 3]), the source's through its own; the face is
    multiplied by the ratio, target over source, in linear light: relit = face ·
    ratio^(1/2.2). Each shading is held above SH_FLOOR of its mean over the skin (a quadratic
    can dip toward 0 at normals the skin hardly covers), the ratio within SH_RATIO either way and
    blurred over the skin at `sigma` (the shading's scale: a ratio as sharp as the normals drew
    bright streaks along the mesh's folds). Luminance only: colour is transfer_colour's. Fewer
    than 16 skin pixels: the face as it is."""
    xp = ops.xp
    enough = ops.has_pixels(skin, 16)
    if enough is False:
        return face

    def shading(lin: Array, turned: Array) -> Array:
        fitted = ops.fit_basis(sh_basis(ops, turned), ops.per_pixel(ops.grey(lin)), skin)
        return xp.clip(fitted, SH_FLOOR * ops.mask_stats(fitted, skin)[0] + 1e-4, None)

    lin_face = (xp.clip(face, 0.0, 255.0) / 255.0) ** 2.2
    lin_target = (xp.clip(target, 0.0, 255.0) / 255.0) ** 2.2
    s_source = shading(lin_face, unit(ops, normals))
    s_target = shading(lin_target, rotate_normals(ops, normals, rotation))
    ratio = ops.masked_blur(xp.clip(s_target / s_source, 1 / SH_RATIO, SH_RATIO), skin, sigma)
    relit = face * ratio ** (1 / 2.2)
    return relit if enough is True else xp.where(enough, relit, face)


# --- blends ---------------------------------------------------------------------------------------


def pyramid_levels(h: int, w: int, limit: int = 5) -> int:
    """Levels of the multi-band blend for an h x w region: halve while the smaller side stays >= 8."""
    levels = 0
    while levels < limit and min(h, w) >> (levels + 1) >= 8:
        levels += 1
    return levels


def feather(ops: Primitives, target: Array, face: Array, alpha: Array) -> Array:
    """`face` over `target` by `alpha` (a plane, 0–1)."""
    a = ops.per_pixel(alpha)
    return target * (1.0 - a) + face * a


def multiband(ops: Primitives, target: Array, face: Array, alpha: Array, levels: int | None = None) -> Array:
    """Laplacian-pyramid blend: low frequencies mix over wide seams, fine detail over narrow ones;
    `levels` as many as `pyramid_levels` gives the region unless given."""
    levels = pyramid_levels(*alpha.shape[-2:]) if levels is None else levels
    if levels == 0:
        return feather(ops, target, face, alpha)
    gauss_a = [alpha]
    lap_t, lap_f = [], []
    cur_t, cur_f = target, face
    for _ in range(levels):
        down_t, down_f = ops.pyr_down(cur_t), ops.pyr_down(cur_f)
        size = ops.size(cur_t)
        lap_t.append(cur_t - ops.pyr_up(down_t, size))
        lap_f.append(cur_f - ops.pyr_up(down_f, size))
        gauss_a.append(ops.pyr_down(gauss_a[-1]))
        cur_t, cur_f = down_t, down_f
    out = feather(ops, cur_t, cur_f, gauss_a[levels])
    for level in range(levels - 1, -1, -1):
        out = ops.pyr_up(out, ops.size(lap_t[level])) + feather(
            ops, lap_t[level], lap_f[level], gauss_a[level]
        )
    return out


def multiband_weights(ops: Primitives, alpha: Array, levels: int | None = None) -> Array:
    """The widest weight `multiband` gives the face at each pixel: every level's mask brought back
    to full size, the largest of them (low frequencies blend well beyond `alpha` itself)."""
    levels = pyramid_levels(*alpha.shape[-2:]) if levels is None else levels
    gauss = [alpha]
    for _ in range(levels):
        gauss.append(ops.pyr_down(gauss[-1]))
    weights = alpha
    for level in range(1, levels + 1):
        up = gauss[level]
        for finer in range(level - 1, -1, -1):
            up = ops.pyr_up(up, ops.size(gauss[finer]))
        weights = ops.xp.maximum(weights, up)
    return ops.xp.clip(weights, 0.0, 1.0)


# --- sharpness and grain ------------------------------------------------------------------------------


def fine_detail(ops: Primitives, bgr: Array, mask: Array) -> Any:
    """How much fine detail `bgr` holds on `mask`: the mean of |grey − its blur at DETAIL_SIGMA|."""
    grey = ops.grey(bgr)
    return ops.mask_mean(ops.xp.abs(grey - ops.blur(grey, DETAIL_SIGMA)), mask)


def mix(weights: Sequence[Any], images: Sequence[Array]) -> Array:
    """The images weighted and summed (each weight a number, or per image, shaped to broadcast):
    the sharpness match's blend of the two blurs around the target's detail."""
    out = weights[0] * images[0]
    for w, image in zip(weights[1:], images[1:], strict=True):
        out = out + w * image
    return out


def add_grain(ops: Primitives, face: Array, target: Array, skin: Array, gain: Any, limit: Any) -> Array:
    """`face` with `gain` times the target's own fine residual (its grain: the target less its blur
    at DETAIL_SIGMA, held to ±`limit` so the strong edges of its features do not ghost) on `skin`."""
    residual = ops.xp.clip(target - ops.blur(target, DETAIL_SIGMA), -limit, limit)
    return face + gain * residual * ops.per_pixel(skin)


# --- the region paint ----------------------------------------------------------------------------------


def inset_ramp(ops: Primitives, covered: Array, width: Any, steps: int) -> Array:
    """[..., H, W] float32: 0 on the outermost ring of `covered`, rising by 1/`width` a ring inward
    (the mean of `width` successive 3x3 erosions); outside the array counts as covered, so a face
    cut by the frame's edge keeps its full weight there. `width` (>= 1): one, or one per mask
    shaped to broadcast, each mask counting its first `width` of the `steps` erosions made."""
    eroded = ops.levels(covered)
    total = ops.xp.zeros_like(eroded, dtype=ops.xp.float32)
    for step in range(steps):
        eroded = ops.erode(eroded)
        total = total + eroded * (step < width)
    return total / width


def face_layers(
    ops: Primitives,
    warped: Array,
    target: Array,
    covered: Array,
    ramp: Array,
    hold: tuple[Any, Any] | None = None,
    visible: Array | None = None,
) -> tuple[Array, Array, Array, Array]:
    """The painted face's layers over a region, from the source texture sampled there (`warped`:
    BGR, alpha, skin, then the eye masks (5, 6)) and the target's pixels: (face, alpha, skin,
    tinted).

    `covered`: where the warp map reaches (elsewhere the target stays and the alpha is 0);
    `ramp`: the weight's fall toward that edge (`inset_ramp`); `hold`: how much of each eye
    (subject's left, right) stays the target's; `visible`: how visible the target face is (an
    occluder stays in front, and counts as no one's skin). `skin` (where the colour statistics
    and shading are measured) and `tinted` (where the tint is held, TINT_LEVEL: the skin and the
    ring round the features) are bool. `hold` is numbers on the host, one per face on the
    device; None: not asked for, or the texture has no such channels."""
    xp = ops.xp
    colour = ops.channels(warped, 0, 3)
    face = xp.where(ops.per_pixel(covered), colour, target)
    alpha = xp.where(covered, ops.plane(warped, 3), 0.0) * ramp
    if hold is not None:
        alpha = alpha * ((1 - hold[0] * ops.plane(warped, 5)) * (1 - hold[1] * ops.plane(warped, 6)))
    if visible is not None:
        alpha = alpha * visible
    skin = covered & (ops.plane(warped, 4) > 0.5)
    tinted = covered & (ops.plane(warped, 4) > TINT_LEVEL)
    if visible is not None:  # an occluder is not the target's skin: its colour counts nowhere
        seen = visible > 0.5
        skin, tinted = skin & seen, tinted & seen
    return face, alpha, skin, tinted
