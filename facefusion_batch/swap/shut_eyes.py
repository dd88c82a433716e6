"""A source's own eyes drawn shut, for the targets whose eyes are closed.

A closed target eye kept as the target's own (its lid, lashes and lid crease) carries the
target's identity: the recogniser (and an editor) reads it there, so where a person blinks,
winks or looks down the swap would fall back to the original face (docs/default-swap.md). A
shut eye is lid skin over the opening and a lash line along its bottom; both can be drawn from
the source photo itself: the skin just above the opening (the upper lid, mirrored down and
squeezed) fills the opening and the upper lash line, and a line of the photo's own darkest
eye colour (its lashes) runs along the lower lid. The target's light and shading still come
through the local colour transfer, so the lid takes the target's roundness.

One layer per source photo, made once: numpy/OpenCV, no model call.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.swap.regions import FaceRegions

# in IOD: how far the drawn lid reaches above the loop's upper arc (the upper lashes lie
# there, outside the mesh's loop), below its lower arc and past its corners
LID_ABOVE, LID_BELOW, LID_PAST = 0.08, 0.035, 0.04
# in IOD: the gap above the lid's top edge from which skin is mirrored down, and how much the
# mirrored band is squeezed (0.5: a band half the lid's height, the skin nearest the lashes)
SKIN_GAP, SKIN_SQUEEZE = 0.02, 0.5
# in IOD: the ring round the drawn lid whose mean colour it takes, and the blur of its edge;
# how far that colour is lifted toward the face's median skin colour. The lifted lid can be
# paler than the target's own shut lid, but taking that lid's colour instead cost identity
# (docs/default-swap.md)
LID_RING, LID_SOFT, SKIN_LIFT = 0.05, 0.03, 0.5
# the lash line: its height above the lower arc as a share of the opening, its width (IOD) and
# how dark it is drawn (1: the lashes' own colour)
LASH_LIFT, LASH_WIDTH, LASH_DEPTH = 0.1, 0.025, 0.8
LASH_PERCENTILE = 10  # the darkest share of the opening's pixels taken as the lashes' colour
SUPERSAMPLE = 4  # the lash line is drawn at this many times the photo's resolution


Arc = tuple[np.ndarray, np.ndarray]


def _lab(*bgr: np.ndarray) -> np.ndarray:
    """[n, 3] float L*a*b* of BGR colours (0-255)."""
    return cv2.cvtColor((np.stack(bgr) / 255).astype(np.float32)[None], cv2.COLOR_BGR2LAB)[0]


def _bgr(lab: np.ndarray) -> np.ndarray:
    """One L*a*b* colour back to BGR (0-255), clipped to what 8 bits hold."""
    return np.clip(cv2.cvtColor(lab.astype(np.float32)[None, None], cv2.COLOR_LAB2BGR)[0, 0] * 255, 0, 255)


def lifted(around: np.ndarray, skin: np.ndarray) -> np.ndarray:
    """The drawn lid's BGR colour: `around`'s (the skin round the lid) with its lightness
    lifted SKIN_LIFT toward `skin`'s (the face's median). Its tint stays the socket's: the
    local colour transfer carries the target's tint onto the lid by the difference it finds
    round the socket, and a lid already tinted toward the cheek took that difference twice
    (a grey-teal lid on a pale target: b* 8 or more below the target's on 14-20 % of the
    pixels round the eyes, David as the source)."""
    socket, face = _lab(around, skin)
    return _bgr(np.array([socket[0] + SKIN_LIFT * (face[0] - socket[0]), socket[1], socket[2]]))


def in_tint(colour: np.ndarray, tint: np.ndarray) -> np.ndarray:
    """BGR: `colour`'s lightness in `tint`'s a*/b*. The lash line drawn in the photo's own
    near-neutral lash colour took the same tint shift as the lid round it and, so dark, turned
    a cyan line on a pale target; in the lid's tint it stays a darker lid."""
    dark, lid = _lab(colour, tint)
    return _bgr(np.array([dark[0], lid[1], lid[2]]))


def _arcs(u: np.ndarray, v: np.ndarray) -> tuple[Arc, Arc]:
    """The loop's upper and lower arcs between its corners (extreme u), each sorted by u."""
    n = len(u)
    i0, i1 = int(np.argmin(u)), int(np.argmax(u))
    first = [(i0 + k) % n for k in range((i1 - i0) % n + 1)]
    second = [(i1 + k) % n for k in range((i0 - i1) % n + 1)]
    upper, lower = (first, second) if v[first].mean() < v[second].mean() else (second, first)

    def arc(idx: list[int]) -> Arc:
        order = np.argsort(u[idx], kind="stable")
        return u[idx][order], v[idx][order]

    return arc(upper), arc(lower)


def shut_eye_layer(
    image: np.ndarray,
    mesh: np.ndarray,
    regions: FaceRegions,
    skin: np.ndarray,
    open_share: tuple[float, float] = (1.0, 1.0),
) -> tuple[np.ndarray, np.ndarray]:
    """`image` ([h,w,3] float32 BGR) with both eyes drawn shut, and [h,w] float32 which eye each
    pixel belongs to (1: the left eye's half of the face, 0: the right's). `skin` [h,w] bool:
    the face's skin, whose median colour the drawn lid takes; `open_share`: per eye, how much of
    the drawing to use (0 where the photo's eye is shut already: its own lid stays)."""
    skin_colour = np.median(image[skin], axis=0) if skin.any() else None
    angle, span, _ = eye_frame(mesh)
    iod = 0.7 * span
    c, s = np.cos(angle), np.sin(angle)
    h, w = image.shape[:2]
    out = image.copy()
    for loop, share in zip((regions.left_eye, regions.right_eye), open_share, strict=True):
        if share <= 0:
            continue
        p = mesh[loop, :2].astype(np.float64)
        u, v = p[:, 0] * c + p[:, 1] * s, -p[:, 0] * s + p[:, 1] * c
        (uu, vu), (ul, vl) = _arcs(u, v)
        t = np.linspace(u.min() - LID_PAST * iod, u.max() + LID_PAST * iod, 48)
        top_arc, bottom_arc = np.interp(t, uu, vu), np.interp(t, ul, vl)
        middle = (top_arc + bottom_arc) / 2
        ends = np.sqrt(np.clip(1 - ((t - t.mean()) / (np.ptp(t) / 2)) ** 2, 0, 1))  # 0 at the corners
        top = middle + (top_arc - LID_ABOVE * iod - middle) * ends
        bottom = middle + (bottom_arc + LID_BELOW * iod - middle) * ends
        outline = np.concatenate([np.stack([t, top], 1), np.stack([t, bottom], 1)[::-1]])
        mask = np.zeros((h, w), np.uint8)
        cv2.fillPoly(mask, [np.round(_to_xy(outline, c, s)).astype(np.int32)], 255)
        ys, xs = np.nonzero(mask)
        if not len(ys):
            continue
        # the lid: above the lash line, skin from just above the lid's top edge mirrored down
        # and squeezed; below it, the lower lid's skin from just under the bottom edge
        pu, pv = xs * c + ys * s, -xs * s + ys * c
        lash_v = middle + (bottom_arc - LASH_LIFT * (bottom_arc - top_arc) - middle) * ends
        upper, lower = np.interp(pu, t, top), np.interp(pu, t, bottom)
        below = pv > np.interp(pu, t, lash_v)
        sv = np.where(
            below,
            lower + SKIN_GAP * iod + (lower - pv) * SKIN_SQUEEZE,
            upper - SKIN_GAP * iod - (pv - upper) * SKIN_SQUEEZE,
        )
        sx, sy = pu * c - sv * s, pu * s + sv * c
        lid = cv2.remap(
            image,
            sx.astype(np.float32)[:, None],
            sy.astype(np.float32)[:, None],
            cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_REPLICATE,
        ).reshape(-1, 3)
        # at the colour of the skin round it, its lightness lifted halfway to the face's skin:
        # the skin just above a made-up or shadowed socket drew a dark lid, the face's skin
        # lightness alone a pale patch in a shadowed socket (the target's own shading comes on
        # it through the local colour)
        grow = max(2, int(round(LID_RING * iod)))
        ring = cv2.dilate(mask, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2)) > mask
        around = image[ring].mean(axis=0) if ring.any() else lid.mean(axis=0)
        goal = around if skin_colour is None else lifted(around, skin_colour)
        lid += goal - lid.mean(axis=0)
        layer = image.copy()
        layer[ys, xs] = lid
        # the lash line along the lower lid, as dark as the photo's own lashes, in the lid's tint
        opening = np.zeros((h, w), np.uint8)
        cv2.fillPoly(opening, [np.round(p).astype(np.int32)], 1)
        pixels = image[opening > 0] if opening.any() else image[ys, xs]
        grey = pixels.mean(axis=1)
        lash = in_tint(pixels[grey <= np.percentile(grey, LASH_PERCENTILE)].mean(axis=0), goal)
        line = np.zeros((h * SUPERSAMPLE, w * SUPERSAMPLE), np.uint8)
        points = np.round(_to_xy(np.stack([t, lash_v], 1), c, s) * SUPERSAMPLE).astype(np.int32)
        width = max(1, int(round(SUPERSAMPLE * LASH_WIDTH * iod)))
        cv2.polylines(line, [points], False, 255, width, cv2.LINE_AA)
        line = cv2.resize(line, (w, h), interpolation=cv2.INTER_AREA).astype(np.float32) / 255
        layer += LASH_DEPTH * line[..., None] * (lash - layer)
        # a soft edge, so the drawn lid meets the photo's skin without a line
        soft = cv2.GaussianBlur(mask.astype(np.float32) / 255, (0, 0), max(0.7, LID_SOFT * iod))
        soft = np.maximum(soft, mask / 255.0) * float(min(share, 1.0))
        out += soft[..., None] * (layer - out)
    # which eye: the side of the line through the face's centre, across the eyes
    centre = (mesh[regions.left_eye, :2].mean(0) + mesh[regions.right_eye, :2].mean(0)) / 2
    left_side = np.sign((mesh[regions.left_eye, :2].mean(0) - centre) @ np.array([c, s]))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    along = (xx - centre[0]) * c + (yy - centre[1]) * s
    side = ((along * left_side) > 0).astype(np.float32)
    return out.astype(np.float32), side


def _to_xy(uv: np.ndarray, c: float, s: float) -> np.ndarray:
    """Points in the eye-line frame (u along it, v across, down the face) back to pixels."""
    return np.stack([uv[:, 0] * c - uv[:, 1] * s, uv[:, 0] * s + uv[:, 1] * c], 1)
