"""The embedded default swap: the source face's texture warped onto each target mesh.

For each target face, every pixel inside the target's 468-point mesh takes the
colour of the matching point of the source face (piecewise affine over a fixed
triangulation), the result is recoloured to the target's skin and blended in.
The target keeps its head pose and, by default, its own eyes and mouth (its
expression); the source brings its skin, brows, nose and face shape texture.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

import cv2
import numpy as np

from facefusion_batch.faces.align import align_crops, host_crops, transform_points
from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER, eye_frame
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import (
    BLEND_MODES,
    COLOUR_MODES,
    EDGE_RAMP,
    LUMA_BGR,
    SHADE_LIMIT,
    TINT_LIMIT,
    BlendMode,
    ColourMode,
    FaceRegion,
    Frames,
    Kernels,
    PaintSettings,
)
from facefusion_batch.swap.colour_track import COLOUR_WINDOW, ColourTracks
from facefusion_batch.swap.fit import (
    FitInputs,
    FitTracks,
    gaze_offsets,
    held_eyes,
    reason_holds,
    reason_of,
    target_gazes,
)
from facefusion_batch.swap.lids import shut_lids
from facefusion_batch.swap.lip_shadow import lift_lip_shadow
from facefusion_batch.swap.masks import Occluder
from facefusion_batch.swap.raster import rasterize
from facefusion_batch.swap.regions import FaceRegions
from facefusion_batch.swap.relight import normal_texture, rotations
from facefusion_batch.swap.shape import mouth_weight, shaped_meshes
from facefusion_batch.swap.skin import skin_visibility
from facefusion_batch.swap.symmetry import (
    atlas,
    inset_midline,
    mirror_corners,
    shut_eye_weights,
    symmetric_pair,
    turned,
    wink_shares,
)

EyesMouth = Literal["eyes", "target", "source"]
EYES_MOUTH_CHOICES: tuple[EyesMouth, ...] = get_args(EyesMouth)
RASTER_SPAN = 40.0  # eye-corner span (px) at which the warp map is rasterised
# the occlusion model's crop (as the learned swap's inswapper crop: FaceFusion's xseg setting)
OCCLUSION_TEMPLATE, OCCLUSION_CROP = "arcface_128", 256
# IOD around each eye opening that stays the target's with a held eye: a pixel or two, so the
# source's lid and brow bone stay and carry its identity (docs/default-swap.md)
EYE_MARGIN = 0.015
# IOD: with the do-no-harm fit (swap/fit.py) the held eye is the target's whole eye with its lids,
# its edge ramped over HELD_FEATHER so no lid line of either face shows at the seam
# (tuning half: 0.015 and 0.06 both moved fewer faces to the source, docs/default-swap.md)
HELD_MARGIN, HELD_FEATHER = 0.03, 0.03
# above the brows, a source pixel darker than this share of the face's median grey is hair (a
# fringe); cutting lighter hair too cost identity (docs/default-swap.md)
HAIR_DARKER = 0.6
# IOD: dark pixels at the temples (beside the eyes and brows) that come within this of the
# cut-out's edge are hair that reaches it (a bob), cut like the fringe (docs/default-swap.md)
TEMPLE_EDGE = 0.05
# IOD by which the target's own inner mouth (teeth, tongue) is grown into its lips (none: the
# recogniser reads a target's inner lip rim as its own), and its eyes with --eyes-mouth target
MOUTH_HOLE_GROW, EYE_HOLE_GROW = 0.0, 0.06
# IOD over which the mask ramps up from the inner mouth (the rest of its edge: `feather`): a
# wider ramp covers a thin lip with the target's (docs/default-swap.md)
MOUTH_FEATHER = 0.05
# IOD round the eyes, brows and lips left out of the skin's colour statistics: nearer the
# features the local colour takes over the source's own shading there, which is identity
FEATURE_GROW = 0.08
# the skin channel's value on that ring: left out of the statistics, the shading and the shade
# limit (> 0.5 is skin), but inside what the tint limit holds to the target's (> TINT_LEVEL), so
# the source's own tint there shows no grey-blue or red patch (docs/default-swap.md)
TINT_RING = 0.4
# how far the shadow under a top-lit source's lower lip is lifted toward its chin's skin
# (swap/lip_shadow.py): a grey goatee on pale targets weighed against identity, which the
# recogniser reads in it; `--lip-shadow` leaves the choice to the user (docs/default-swap.md)
LIP_SHADOW_LIFT = 0.3


@dataclass(frozen=True)
class ClassicalSettings:
    blend: BlendMode = "multiband"
    # whose eyes and mouth show: eyes, the source's eyes warped to the target's eyelids and the
    # target's inner mouth (teeth, tongue); target, the target's own; source, the source's both
    eyes_mouth: EyesMouth = "eyes"
    colour: ColourMode = "local"  # local (target light and tint) | global (LAB mean/std) | none
    colour_strength: float = 1.0  # 0–1: how far the colour moves toward the target
    shading_scale: float = 0.12  # local colour: Gaussian sigma of the carried shading, in IOD
    shading_limit: tuple[float, float, float] = (60.0, 30.0, 30.0)  # local colour: LAB bounds
    tint_limit: float = TINT_LIMIT  # local colour: tint left off at the finer scale (inf: free)
    # local colour: how much darker than the target's skin the source's shading may paint at that
    # finer scale (8-bit L levels; inf: free). SHADE_LIMIT (kernels/base.py) says what each costs
    shade_limit: float = SHADE_LIMIT
    forehead_margin: float = 0.1  # IOD above the brows kept from the source (hair stays out)
    # IOD over which the mask ramps from 0 to 1 at its edges: narrower transfers more identity,
    # but at 0.1 the top edge shows as a line across the forehead (docs/default-swap.md)
    feather: float = 0.15
    # how far the target mesh moves toward the source's brows, nose, eye spacing and size
    # (swap/shape.py); 0 paints the source's texture on the target's own geometry
    shape: float = 1.0
    # the mouth's width and lip thickness from a frontal source too (swap/shape.py): identity,
    # with the inner mouth kept only to the inner lip line (docs/default-swap.md)
    mouth_shape: bool = True
    # the squeezed side of a turned source face painted from its visible side (swap/symmetry.py)
    mirror_fill: bool = True
    # the source texture blurred to the target face's sharpness (a soft face stays soft)
    match_sharpness: bool = True
    # the target's own grain carried onto a face smoother than it (a noisy shot stays noisy)
    match_grain: bool = True
    # closed eyes the mesh keeps open (a shut or lowered lid) told from the picture (swap/lids.py)
    lids: bool = True
    # do no harm (swap/fit.py): a face whose eyes are in a state the source photo cannot give
    # (closed, wider, looking elsewhere, turned past the photo) keeps its own eyes whole
    fit: bool = True
    # 0–1: how far the shadow under a top-lit source's lower lip is lifted toward its chin's skin
    # before it is painted (swap/lip_shadow.py; LIP_SHADOW_LIFT says what each step costs): 1
    # takes the grey goatee it leaves on pale targets away, and some of the source's identity
    lip_shadow: float = LIP_SHADOW_LIFT
    # frames of a track whose median colour statistics the paint follows (swap/colour_track.py):
    # something passing in front of a face for a few frames does not pump it; 0: each frame's own
    colour_window: int = COLOUR_WINDOW
    # local colour relights the source with the target's shading first, spherical harmonics
    # through the mesh's normals (swap/relight.py, kernels/formulas.py relight): the judging half
    # agreed (docs/default-swap.md)
    relight: bool = True

    def __post_init__(self) -> None:
        if self.colour not in COLOUR_MODES:
            raise ValueError(f"colour must be one of {', '.join(COLOUR_MODES)}")
        if self.blend not in BLEND_MODES:
            raise ValueError(f"blend must be one of {', '.join(BLEND_MODES)}")
        if self.eyes_mouth not in EYES_MOUTH_CHOICES:
            raise ValueError(f"eyes_mouth must be one of {', '.join(EYES_MOUTH_CHOICES)}")

    @property
    def paint(self) -> PaintSettings:
        return PaintSettings(
            colour=self.colour,
            colour_strength=self.colour_strength,
            blend=self.blend,
            shading_limit=self.shading_limit,
            tint_limit=self.tint_limit,
            shade_limit=self.shade_limit,
            match_sharpness=self.match_sharpness,
            match_grain=self.match_grain,
            relight=self.relight,
        )


def fan_triangles(loop: np.ndarray) -> np.ndarray:
    """Triangles filling a (roughly convex) closed loop: a fan from its first vertex."""
    return np.stack([np.full(len(loop) - 2, loop[0]), loop[1:-1], loop[2:]], axis=1).astype(np.int32)


@dataclass(frozen=True)
class SourceFace:
    """One source face ready to paint: texture channels BGR + alpha + skin, and its mesh."""

    # [h,w,7] float32: B, G, R (0–255), alpha (0–1), skin (0/1), and soft masks (0–1) of the
    # left and right eye with their lids, through which a target's held eye stays its own
    texture: np.ndarray
    mesh: np.ndarray  # [468,3] in texture pixels
    yaw: float
    eye_open: tuple[float, float] = (0.0, 0.0)  # eye_openness of the left and right eye
    # mirror fill (swap/symmetry.py): the flipped photo's mesh in the same texture (an atlas),
    # and per triangle of the swap, whether it is painted from there
    mirror_mesh: np.ndarray | None = None
    use_mirror: np.ndarray | None = None
    # the mesh as the photo was measured, for the shape transfer (`mesh` is where the texture
    # is sampled: on a turned photo its upper midline is moved inward, swap/symmetry.py)
    shape_mesh: np.ndarray | None = None
    # how shut the photo's own left and right eye are by their lids (swap/lids.py): a source
    # with shut eyes has no open eye to give, and every target keeps its own there
    lid_shut: tuple[float, float] = (0.0, 0.0)
    # swap/fit.gaze_offsets of the photo's eyes (NaN: not measured)
    gaze: np.ndarray = field(default_factory=lambda: np.full((2, 2), np.nan))

    @property
    def geometry(self) -> np.ndarray:
        return self.mesh if self.shape_mesh is None else self.shape_mesh


def with_mirror(
    source: SourceFace, mirror: SourceFace, triangles: np.ndarray, regions: FaceRegions
) -> SourceFace:
    """`source` whose squeezed side is painted from `mirror`, the same face in the photo
    flipped left-right (prepared the same way), over `triangles` (the swap's); an eye the
    photo has shut while the other is open (a wink) is painted from there too (the flipped
    photo's open eye), and counts as open from then on."""
    shut = source.lid_shut
    extra = shut_eye_weights(source.mesh, shut, (regions.left_eye, regions.right_eye))
    own, flipped, use = symmetric_pair(
        source.texture, source.mesh, mirror.texture, mirror.mesh, triangles, extra
    )
    texture, offset = atlas(own, flipped)
    mirror_mesh = mirror.mesh + np.array([offset, 0.0, 0.0], np.float32)
    # a wink's shut eye is the open one now, as open as it (a shut pair stays shut)
    wink, opening = wink_shares(shut), source.eye_open
    lid_shut = (shut[0] + wink[0] * (shut[1] - shut[0]), shut[1] + wink[1] * (shut[0] - shut[1]))
    eye_open = (
        opening[0] + wink[0] * (opening[1] - opening[0]),
        opening[1] + wink[1] * (opening[0] - opening[1]),
    )
    return replace(
        source, texture=texture, mirror_mesh=mirror_mesh, use_mirror=use, lid_shut=lid_shut, eye_open=eye_open
    )


def _poly(mask: np.ndarray, points: np.ndarray, value: int) -> None:
    cv2.fillPoly(mask, [np.round(points[:, :2]).astype(np.int32)], value, lineType=cv2.LINE_8)


def _holes(mesh: np.ndarray, loops: list[np.ndarray], grow: float, shape: tuple[int, int]) -> np.ndarray:
    """[h,w] uint8: the loops filled, grown by `grow` px (at least one)."""
    holes = np.zeros(shape, np.uint8)
    if not loops:
        return holes
    for loop in loops:
        _poly(holes, mesh[loop], 255)
    size = 2 * max(1, int(round(grow))) + 1
    return cv2.dilate(holes, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (size, size)))


def hair_grey(crop: np.ndarray, iod: float) -> np.ndarray:
    """The crop's grey, blurred a little (single hairs and pores do not count), that hair is told
    from skin by."""
    return cv2.GaussianBlur(crop @ np.array(LUMA_BGR, np.float32), (0, 0), max(1.0, 0.02 * iod))


def hair_above_brows(
    crop: np.ndarray, mesh: np.ndarray, regions: FaceRegions, above: np.ndarray, iod: float
) -> np.ndarray:
    """[h,w] bool: the pixels of `above` (the band over the brows) darker than HAIR_DARKER of the
    face's median grey below the brows: a fringe, a dark hairline. Fair hair is as light as
    skin and is kept (it cannot be told from it here, and it lifts no orange streak)."""
    grey = hair_grey(crop, iod)
    face = np.zeros(above.shape, np.uint8)
    _poly(face, mesh[regions.face_oval], 255)
    below = (face > 0) & ~above
    if not below.any():
        return np.zeros(above.shape, bool)
    return above & (grey < HAIR_DARKER * float(np.median(grey[below])))


def drawn_features(
    mesh: np.ndarray, regions: FaceRegions, loops: tuple[np.ndarray, ...], shape: tuple[int, int]
) -> np.ndarray:
    """[h,w] uint8: `loops` and the brows' hull filled."""
    mask = np.zeros(shape, np.uint8)
    for loop in loops:
        _poly(mask, mesh[loop], 255)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.round(mesh[regions.brows, :2]).astype(np.int32)), 255)
    return mask


def grown_features(drawn: np.ndarray, iod: float) -> np.ndarray:
    """`drawn` (drawn_features) grown by FEATURE_GROW IOD."""
    grow = max(1, int(round(FEATURE_GROW * iod)))
    return cv2.dilate(drawn, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))


def feature_mask(
    mesh: np.ndarray, regions: FaceRegions, loops: tuple[np.ndarray, ...], iod: float, shape: tuple[int, int]
) -> np.ndarray:
    """[h,w] uint8: `loops` and the brows' hull filled, grown by FEATURE_GROW IOD."""
    return grown_features(drawn_features(mesh, regions, loops, shape), iod)


def temple_hair(crop: np.ndarray, area: np.ndarray, beside: np.ndarray, iod: float) -> np.ndarray:
    """[h,w] bool: hair that falls over the sides of the face beside the eyes and brows (a bob,
    curls at the temples): the pixels of `beside` darker than HAIR_DARKER of the face's median
    grey that reach the edge of `area` (the cut-out), as hair does; a dark eye corner or socket
    inside the face is left."""
    grey = hair_grey(crop, iod)
    inside = area > 0
    if not (inside & ~beside).any():  # no skin of the face's own to compare with
        return np.zeros(area.shape, bool)
    dark = beside & inside & (grey < HAIR_DARKER * float(np.median(grey[inside & ~beside])))
    count, labels = cv2.connectedComponents(dark.astype(np.uint8), connectivity=8)
    if count <= 1:  # nothing dark there
        return dark
    ring = max(1, int(round(TEMPLE_EDGE * iod)))
    core = cv2.erode(area, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * ring + 1,) * 2))
    edge = inside & (core == 0)
    reaching = np.unique(labels[edge & dark])
    return np.isin(labels, reaching[reaching > 0])


def prepare_source(
    image: np.ndarray,
    mesh: np.ndarray,
    regions: FaceRegions,
    settings: ClassicalSettings,
    lid_shut: tuple[float, float] = (0.0, 0.0),
) -> SourceFace:
    """Cut the source face out once: texture, soft alpha and a skin mask for colour statistics;
    `lid_shut`: how shut the photo's own eyes are (swap/lids.py)."""
    angle, span, yaw = eye_frame(mesh)
    iod = span * 0.7  # eye-centre distance is about 0.7 of the outer-corner span
    pad = int(0.3 * span) + 4
    x0 = max(int(np.floor(mesh[:, 0].min())) - pad, 0)
    y0 = max(int(np.floor(mesh[:, 1].min())) - pad, 0)
    x1 = min(int(np.ceil(mesh[:, 0].max())) + pad, image.shape[1])
    y1 = min(int(np.ceil(mesh[:, 1].max())) + pad, image.shape[0])
    crop = image[y0:y1, x0:x1].astype(np.float32)
    local = mesh.copy()
    local[:, 0] -= x0
    local[:, 1] -= y0
    h, w = crop.shape[:2]

    # keep only the face below a line a little above the brows (hair and background stay out)
    area = np.zeros((h, w), np.uint8)
    _poly(area, local[regions.face_oval], 255)
    cos, sin = np.cos(angle), np.sin(angle)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    v = -xx * sin + yy * cos
    brow_v = (-local[regions.brows, 0] * sin + local[regions.brows, 1] * cos).min()
    area[v < brow_v - settings.forehead_margin * iod] = 0
    # hair that falls over that band (a fringe just above the brows) is no part of the face: the
    # shading lifted it to the target's skin and it showed as a bright orange streak at the brow
    area[hair_above_brows(crop, local, regions, v < brow_v, iod)] = 0
    # and hair at the temples, beside the eyes and brows, above the eyes' lowest point: painted,
    # it showed as a dark streak along the target's hairline
    features = feature_mask(local, regions, (regions.left_eye, regions.right_eye), iod, (h, w))
    eyes = np.r_[regions.left_eye, regions.right_eye]
    eye_v = float((-local[eyes, 0] * sin + local[eyes, 1] * cos).max())
    area[temple_hair(crop, area, (v >= brow_v) & (v < eye_v) & (features == 0), iod)] = 0

    # the target's own eyes (--eyes-mouth target) are holes with the mask's own soft edge; its
    # inner mouth (teeth, tongue; not with --eyes-mouth source) one with a short ramp, since the
    # inner lip line is an edge of the picture itself
    eye_holes = [regions.left_eye, regions.right_eye] if settings.eyes_mouth == "target" else []
    solid = cv2.bitwise_and(area, cv2.bitwise_not(_holes(local, eye_holes, EYE_HOLE_GROW * iod, (h, w))))
    dist = cv2.distanceTransform((solid > 0).astype(np.uint8), cv2.DIST_L2, 5)
    ramp = np.clip(dist / max(settings.feather * iod, 1.0), 0.0, 1.0)
    if settings.eyes_mouth != "source":
        mouth = _holes(local, [regions.lips_inner], MOUTH_HOLE_GROW * iod, (h, w))
        dist = cv2.distanceTransform((mouth == 0).astype(np.uint8), cv2.DIST_L2, 5)
        ramp = np.minimum(ramp, np.clip(dist / max(MOUTH_FEATHER * iod, 1.0), 0.0, 1.0))
    alpha = ramp * ramp * (3 - 2 * ramp)  # smoothstep: zero at every edge, flat inside

    loops = (regions.left_eye, regions.right_eye, regions.lips_outer)
    features = drawn_features(local, regions, loops, (h, w))
    not_skin = grown_features(features, iod)
    skin = ((alpha > 0.5) & (not_skin == 0)).astype(np.float32)
    # the ring round the features: skin whose tint is matched, not its lightness (TINT_RING)
    ring = (alpha > 0.5) & (not_skin > 0) & (features == 0)
    crop = lift_lip_shadow(crop, local, regions, skin, iod, settings.lip_shadow)

    eyes = [eye_hole(local[e], iod, (h, w), settings.fit) for e in (regions.left_eye, regions.right_eye)]
    layers = [crop, alpha.astype(np.float32), np.where(ring, TINT_RING, skin).astype(np.float32), *eyes]
    texture = np.dstack(layers)
    opening = eye_openness(local[None], regions)[0]
    return SourceFace(
        texture=texture,
        mesh=inset_midline(local).astype(np.float32),
        yaw=yaw,
        eye_open=tuple(opening),
        shape_mesh=local.astype(np.float32),
        lid_shut=(float(lid_shut[0]), float(lid_shut[1])),
        gaze=gaze_offsets(crop, local, regions),
    )


def source_normals(source: SourceFace, triangles: np.ndarray) -> np.ndarray:
    """[h, w, 3] the source's normals over its texture (swap/relight.py), the atlas's flipped
    half included."""
    return normal_texture(
        source.texture.shape[:2],
        source.geometry,
        source.mesh,
        triangles,
        source.mirror_mesh,
        source.use_mirror,
    )


def eye_hole(loop: np.ndarray, iod: float, shape: tuple[int, int], whole: bool) -> np.ndarray:
    """[h,w] float32 0–1: where a held eye shows the target's (texture channel 5 or 6): the
    loop grown by EYE_MARGIN with a soft edge, or with `whole` (the fit) by HELD_MARGIN and
    ramped down over HELD_FEATHER outside it."""
    eye: np.ndarray = np.zeros(shape, np.uint8)
    _poly(eye, loop, 255)
    grow = max(1, int(round((HELD_MARGIN if whole else EYE_MARGIN) * iod)))
    eye = cv2.dilate(eye, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1,) * 2))
    if whole:
        dist = cv2.distanceTransform((eye == 0).astype(np.uint8), cv2.DIST_L2, 5)
        ramp = 1 - np.clip(dist / max(HELD_FEATHER * iod, 1.0), 0.0, 1.0)
        return (ramp * ramp * (3 - 2 * ramp)).astype(np.float32)
    soft = cv2.GaussianBlur(eye.astype(np.float32) / 255, (0, 0), max(1.0, 0.5 * EYE_MARGIN * iod))
    return np.maximum(soft, eye / 255.0).astype(np.float32)


def eye_openness(meshes: np.ndarray, regions: FaceRegions) -> np.ndarray:
    """[F,2]: height over width of the left and right eye openings, along each face's eye line."""
    d = meshes[:, RIGHT_EYE_OUTER, :2] - meshes[:, LEFT_EYE_OUTER, :2]
    angle = np.arctan2(d[:, 1], d[:, 0])[:, None]
    out = []
    for loop in (regions.left_eye, regions.right_eye):
        x, y = meshes[:, loop, 0], meshes[:, loop, 1]
        u = x * np.cos(angle) + y * np.sin(angle)
        v = -x * np.sin(angle) + y * np.cos(angle)
        out.append(np.ptp(v, axis=1) / np.maximum(np.ptp(u, axis=1), 1e-6))
    return np.stack(out, axis=1)


def far_eye_holds(meshes: np.ndarray) -> np.ndarray:
    """[F,2] how much of each eye stays the target's because the face is turned away from it:
    as turned as `symmetry.turned` counts it (Matt's near profile in t1.jpg: 0.41 of the yaw
    proxy, fully; Courteney, about 35 degrees: 0.30, not at all), the far eye sits in the nose's
    shadow at the silhouette, and a frontal source's eye squeezed in there showed its white as a
    pale speck beside the nose bridge. Indexed as `eye_openness` (the face's own left eye
    first, which lies on the image's right)."""
    yaw = np.array([eye_frame(m)[2] for m in meshes]).reshape(-1)
    far = turned(yaw)
    # a nose moved toward the image's left (yaw < 0): the eye on that side, the face's right, is far
    return np.stack([np.where(yaw > 0, far, 0.0), np.where(yaw < 0, far, 0.0)], axis=1)


def swap_triangles(triangles: np.ndarray, regions: FaceRegions, eyes_mouth: str) -> np.ndarray:
    """The tessellation plus fans over the loops painted from the source (eyes, mouth)."""
    filled = {
        "source": (regions.left_eye, regions.right_eye, regions.lips_inner),
        "eyes": (regions.left_eye, regions.right_eye),  # warped to the target's eyelids
    }.get(eyes_mouth, ())
    if filled:
        triangles = np.concatenate([triangles, *(fan_triangles(loop) for loop in filled)], axis=0)
    return np.ascontiguousarray(triangles, np.int32)


class ClassicalSwapper:
    """A stage: frames + face table (with mesh) → every listed face painted over by its source.

    The geometry (source choice, rasteriser, warp maps) is numpy on the host; the kernel set
    samples the source textures, recolours and blends every face of the batch."""

    name = "swap"

    def __init__(
        self,
        sources: list[SourceFace],
        triangles: np.ndarray,
        regions: FaceRegions,
        settings: ClassicalSettings = ClassicalSettings(),
        occluder: Occluder | None = None,
        skin_occlusion: bool = False,
    ) -> None:
        if not sources:
            raise ValueError("at least one source face is needed")
        self.sources = sources
        self.settings = settings
        self.face_regions = regions
        self.triangles = swap_triangles(triangles, regions, settings.eyes_mouth)
        self.relit = settings.relight and settings.colour == "local"
        if self.relit:  # the source's normals over its texture, channels 7–9 (swap/relight.py)
            self.sources = sources = [
                replace(s, texture=np.dstack([s.texture, source_normals(s, self.triangles)])) for s in sources
            ]
        self.occluder = occluder
        self.skin_occlusion = skin_occlusion  # `--mask skin`: swap/skin.py on the aligned crops
        # per source, every triangle's texture corners in the photo and, where the source is
        # mirror-filled, in the flipped photo, with which triangles take the latter (1) or not (0)
        self.own_corners = [s.mesh[self.triangles, :2] for s in sources]
        self.mirror_corners, self.mirror_labels = zip(
            *(mirror_corners(s.mirror_mesh, s.use_mirror, self.triangles) for s in sources), strict=True
        )
        self.source_yaw = np.array([s.yaw for s in sources], np.float32)
        self._textures: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # the paint's colour statistics along each track (None: each frame's own)
        self.colour_tracks = ColourTracks(settings.colour_window) if settings.colour_window > 0 else None
        # the do-no-harm fit along each track (swap/fit.py)
        self.fit_tracks = FitTracks() if settings.fit and settings.eyes_mouth == "eyes" else None
        self.source_gaze = np.stack([s.gaze for s in sources])
        self._lock = threading.Lock()

    def choose_sources(self, table: FaceTable) -> np.ndarray:
        """Per target face, the source whose head turn (yaw) is closest."""
        yaws = np.array([eye_frame(m)[2] for m in table.required("mesh")], np.float32)
        return np.argmin(np.abs(yaws[:, None] - self.source_yaw[None, :]), axis=1)

    @staticmethod
    def raster_scales(table: FaceTable) -> np.ndarray:
        """Per face, the resolution of its warp map relative to the frame.

        The map is piecewise affine, so bilinear upsampling recovers it almost
        exactly; rasterising a large face at a reduced scale costs a fraction.
        Each face's scale depends on that face alone (in steps of 1/8), so a
        frame renders the same whichever frames share its batch.
        """
        mesh = table.required("mesh")
        spans = np.hypot(*(mesh[:, RIGHT_EYE_OUTER, :2] - mesh[:, LEFT_EYE_OUTER, :2]).T)
        scales = np.clip(RASTER_SPAN / np.maximum(spans, 1.0), 0.25, 1.0)
        return np.ceil(scales * 8) / 8

    def regions(
        self,
        table: FaceTable,
        frame_shapes: np.ndarray,
        occlusion: tuple[np.ndarray, np.ndarray] | None = None,
        lids: np.ndarray | None = None,
        gaze: np.ndarray | None = None,
        seq: int | None = None,
        decided: list[str] | None = None,
    ) -> list[FaceRegion]:
        """Every face's warp map (source texture coordinates over its region of the frame);
        `frame_shapes` [B, 2]: (height, width) of each frame of the batch; `occlusion`: per
        face, an occlusion model's mask on an aligned crop and the crop's affine; `lids` [F, 2]:
        how much of each eye a lowered lid keeps the target's (swap/lids.py); `gaze` [F, 2, 2]:
        each eye's swap/fit.gaze_offsets; `seq`: the batch's number, for the fit's track step;
        `decided`: filled with each face's fit decision (swap/fit.reason_of)."""
        choice = self.choose_sources(table)
        scales = self.raster_scales(table)
        shapes = frame_shapes[table.frame_index].astype(np.float64)
        bounds = np.ceil(shapes * scales[:, None]).astype(np.int64)
        mesh = geometry = table.required("mesh")
        if self.settings.shape > 0 and self.settings.eyes_mouth != "target":  # the target's eyes stay put
            sources = np.stack([self.sources[c].geometry for c in choice])
            mouth = mouth_weight(self.source_yaw[choice]) if self.settings.mouth_shape else None
            geometry = shaped_meshes(mesh, sources, self.face_regions, self.settings.shape, mouth)
        maps = self.warp_maps(
            choice, geometry[:, :, :2] * scales[:, None, None], mesh[:, :, 2], bounds, scales, shapes
        )
        if self.fit_tracks is not None:
            holds, names = self.fit_holds(table, choice, lids, gaze, seq)
            if decided is not None:
                decided[:] = names
        else:
            holds = self.eye_holds(table, choice, lids)
        turns = rotations(np.stack([self.sources[c].geometry for c in choice]), mesh) if self.relit else None
        out: list[FaceRegion] = []
        for f, face_maps in enumerate(maps):
            if face_maps is None:
                continue
            map_x, map_y, (x0, y0) = face_maps
            iod = 0.7 * eye_frame(mesh[f])[1]
            sigma = max(1.0, self.settings.shading_scale * iod)
            hold = (float(holds[f, 0]), float(holds[f, 1]))
            visible = None
            if occlusion is not None:
                visible = crop_to_region(occlusion[0][f], occlusion[1][f], x0, y0, map_x.shape)
            frame = int(table.frame_index[f])
            edge = max(1, round(EDGE_RAMP * iod))
            out.append(
                FaceRegion(
                    frame,
                    int(x0),
                    int(y0),
                    map_x,
                    map_y,
                    int(choice[f]),
                    sigma,
                    hold,
                    visible,
                    edge,
                    face=f,
                    rotation=None if turns is None else turns[f],
                )
            )
        return out

    def eye_holds(self, table: FaceTable, choice: np.ndarray, lids: np.ndarray | None) -> np.ndarray:
        """[F,2] the rules with the fit off: how much of each eye stays the target's own. A
        target's closed eye (a blink the mesh sees, a lid read from the picture), a far eye of a
        turned face and an eye the source photo has shut stay the target's."""
        if self.settings.eyes_mouth != "eyes":
            return np.zeros((len(table), 2))
        source_open = np.array([self.sources[c].eye_open for c in choice])
        closed = held_eyes(eye_openness(table.required("mesh"), self.face_regions), source_open)
        if lids is not None:
            closed = np.maximum(closed, lids)
        far = far_eye_holds(table.required("mesh"))
        source_shut = np.array([self.sources[c].lid_shut for c in choice]).reshape(-1, 2)
        return np.maximum(np.maximum(closed, far), source_shut)

    def fit_inputs(
        self, table: FaceTable, choice: np.ndarray, lids: np.ndarray | None, gaze: np.ndarray | None
    ) -> FitInputs:
        mesh = table.required("mesh")
        return FitInputs(
            target_open=eye_openness(mesh, self.face_regions),
            source_open=np.array([self.sources[c].eye_open for c in choice]).reshape(-1, 2),
            lids=lids,
            target_gaze=gaze,
            source_gaze=self.source_gaze[choice],
            target_yaw=np.array([eye_frame(m)[2] for m in mesh]).reshape(-1),
            source_yaw=self.source_yaw[choice].astype(np.float64),
            source_shut=np.array([self.sources[c].lid_shut for c in choice]).reshape(-1, 2),
        )

    def fit_holds(
        self,
        table: FaceTable,
        choice: np.ndarray,
        lids: np.ndarray | None,
        gaze: np.ndarray | None,
        seq: int | None,
    ) -> tuple[np.ndarray, list[str]]:
        """[F,2] as `eye_holds`, and each face's decision's name: with the fit (swap/fit.py) a
        face whose eyes the source cannot give keeps both its own, along its track; a turned
        face's far eye as before."""
        holds = reason_holds(self.fit_inputs(table, choice, lids, gaze))
        if self.fit_tracks is not None and table.track is not None and table.frame_no is not None:
            holds = self.fit_tracks.step(seq, table.track, table.frame_no, holds)
        names = reason_of(holds)
        whole = holds.max(axis=1)[:, None]
        far = far_eye_holds(table.required("mesh"))
        return np.maximum(far, whole), names

    def warp_maps(
        self,
        choice: np.ndarray,
        dst: np.ndarray,
        depth: np.ndarray,
        bounds: np.ndarray,
        scales: np.ndarray,
        shapes: np.ndarray,
    ) -> list[tuple[np.ndarray, np.ndarray, tuple[int, int]] | None]:
        """Per face, its full-resolution warp map and origin (None: too few pixels covered).

        Faces with a mirror-filled source are rasterised twice more in the same pass: with the
        texture corners from the flipped photo, and with which triangles take them. Each map
        is upsampled on its own and the choice made at full resolution (interpolating between
        the two halves of the atlas would sample the space between them)."""
        faces = len(choice)
        mirrored = np.flatnonzero([self.mirror_corners[c] is not None for c in choice])
        corners = [self.own_corners[c] for c in choice]
        corners += [self.mirror_corners[choice[f]] for f in mirrored]
        corners += [self.mirror_labels[choice[f]] for f in mirrored]
        rows = np.concatenate([np.arange(faces), mirrored, mirrored])
        cov = rasterize(dst[rows], np.stack(corners), depth[rows], self.triangles, bounds[rows])
        order = np.argsort(cov.face, kind="stable")
        starts = np.searchsorted(cov.face[order], np.arange(len(rows) + 1))

        def upsampled(row: int, f: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
            picked = order[starts[row] : starts[row + 1]]
            frame_hw = (int(shapes[f, 0]), int(shapes[f, 1]))
            return warp_map(
                cov.x[picked], cov.y[picked], cov.src_x[picked], cov.src_y[picked], float(scales[f]), frame_hw
            )

        out: list = []
        for f in range(faces):
            if starts[f + 1] - starts[f] < 16:
                out.append(None)
                continue
            map_x, map_y, origin = upsampled(f, f)
            if f in mirrored:
                j = int(np.searchsorted(mirrored, f))
                mirror_x, mirror_y, _ = upsampled(faces + j, f)
                use = upsampled(faces + len(mirrored) + j, f)[0] > 0.5
                map_x, map_y = np.where(use, mirror_x, map_x), np.where(use, mirror_y, map_y)
            out.append((map_x, map_y, origin))
        return out

    def textures_for(self, k: Kernels) -> Any:
        """The source textures as `k` holds them (uploaded once per kernel set, on a GPU)."""
        with self._lock:
            textures = self._textures.get(k)
            if textures is None:
                textures = self._textures[k] = k.textures([s.texture for s in self.sources])
        return textures

    def __call__(self, k: Kernels, frames: Frames, table: FaceTable) -> FaceTable:
        if len(table) == 0:
            return table
        if table.mesh is None:
            raise ValueError("the classical swap needs the face mesh (run FaceMesh first)")
        occlusion = None
        if self.occluder is not None or self.skin_occlusion:
            crops, affines = align_crops(
                k, frames, table.frame_index, table.landmarks5, OCCLUSION_TEMPLATE, OCCLUSION_CROP
            )
            masks = []
            if self.occluder is not None:  # one batched model call over every face's aligned crop
                masks.append(np.asarray(k.to_host(self.occluder(k, crops, len(table), OCCLUSION_CROP))))
            if self.skin_occlusion:  # what is not skin in front of the face, from the crop itself
                meshes = transform_points(table.mesh[:, :, :2].astype(np.float64), affines)
                masks.append(skin_visibility(host_crops(k, crops), meshes, self.face_regions))
            occlusion = (np.prod(masks, axis=0).astype(np.float32), affines)
        lids = table.lids  # read before the tracker (LidReader), and averaged along each track
        if lids is None and self.settings.eyes_mouth == "eyes" and self.settings.lids:
            lids = shut_lids(k, frames, table, self.face_regions)  # no reader ran: this batch's own
        gaze = None if self.fit_tracks is None else target_gazes(k, frames, table, self.face_regions)
        decided: list[str] = []
        regions = self.regions(table, frames.sizes, occlusion, lids, gaze, frames.seq, decided)
        for region in regions if decided else []:  # what the report counts: painted faces, by decision
            counts = frames.decisions.setdefault(decided[region.face], np.zeros(frames.count, np.int64))
            counts[region.frame] += 1
        textures = self.textures_for(k)
        if self.colour_tracks is not None and table.track is not None and table.frame_no is not None:
            regions = self.track_colours(k, frames, table, regions, textures)
        k.paint_faces(frames, regions, textures, self.settings.paint)
        return table

    def track_colours(
        self, k: Kernels, frames: Frames, table: FaceTable, regions: list[FaceRegion], textures: Any
    ) -> list[FaceRegion]:
        """`regions` with their colour fixes toward their tracks' statistics (swap/colour_track.py):
        one batched statistics call, then the light ordered step."""
        tracks, track, frame_no = self.colour_tracks, table.track, table.frame_no
        if (
            self.settings.colour == "none"
            or not regions
            or tracks is None
            or track is None
            or frame_no is None
        ):
            return regions
        stats = k.colour_stats(frames, regions, textures)
        rows = np.array([r.face for r in regions], np.int64)
        fixed = tracks.step(frames.seq, track[rows], frame_no[rows], stats)
        return [
            r if not np.isfinite(fix).all() else replace(r, colour_fix=fix)
            for r, fix in zip(regions, fixed, strict=True)
        ]

    def reset(self) -> None:
        """A new job: the colour and fit histories start empty."""
        if self.colour_tracks is not None:
            self.colour_tracks.reset()
        if self.fit_tracks is not None:
            self.fit_tracks.reset()

    def release(self, seq: int | None) -> None:
        """Batch `seq` is done with this stage (or never reached it): the next may take its turn."""
        for tracks in (self.colour_tracks, self.fit_tracks):
            if tracks is not None and seq is not None:
                tracks.order.done(seq)

    def abort(self) -> None:
        for tracks in (self.colour_tracks, self.fit_tracks):
            if tracks is not None:
                tracks.order.abort()


def crop_to_region(
    mask: np.ndarray, affine: np.ndarray, x0: int, y0: int, shape: tuple[int, ...]
) -> np.ndarray:
    """A mask on an aligned crop (`affine`: frame → crop) resampled over the frame region at
    (x0, y0) of `shape`; 1 (visible) where the crop does not reach."""
    shifted = affine.astype(np.float64).copy()
    shifted[:, 2] += shifted[:, :2] @ np.array([x0, y0], np.float64)
    return cv2.warpAffine(
        mask.astype(np.float32),
        shifted,
        (int(shape[1]), int(shape[0])),
        flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=1.0,
    )


def warp_map(
    x: np.ndarray,
    y: np.ndarray,
    src_x: np.ndarray,
    src_y: np.ndarray,
    scale: float,
    frame_shape: tuple[int, int],
    margin: int = 8,
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Full-resolution source coordinates for one face's region of the frame.

    (x, y) are covered pixels of the map at `scale`; the region returned is the
    face's bounding box in frame pixels plus `margin`, NaN where not covered.
    """
    lx0, ly0 = int(x.min()), int(y.min())
    low_x = np.full((int(y.max()) - ly0 + 1, int(x.max()) - lx0 + 1), np.nan, np.float32)
    low_y = low_x.copy()
    low_x[y - ly0, x - lx0] = src_x
    low_y[y - ly0, x - lx0] = src_y
    height, width = frame_shape
    x0 = max(int(np.floor(lx0 / scale)) - margin, 0)
    y0 = max(int(np.floor(ly0 / scale)) - margin, 0)
    x1 = min(int(np.ceil((lx0 + low_x.shape[1] - 1) / scale)) + margin + 1, width)
    y1 = min(int(np.ceil((ly0 + low_x.shape[0] - 1) / scale)) + margin + 1, height)
    gx = (np.arange(x0, x1, dtype=np.float32) * scale - lx0)[None, :].repeat(y1 - y0, 0)
    gy = (np.arange(y0, y1, dtype=np.float32) * scale - ly0)[:, None].repeat(x1 - x0, 1)
    nan = float("nan")
    interpolation = cv2.INTER_NEAREST if scale == 1.0 else cv2.INTER_LINEAR
    map_x = cv2.remap(
        low_x, gx, gy, interpolation=interpolation, borderMode=cv2.BORDER_CONSTANT, borderValue=nan
    )
    map_y = cv2.remap(
        low_y, gx, gy, interpolation=interpolation, borderMode=cv2.BORDER_CONSTANT, borderValue=nan
    )
    return map_x, map_y, (x0, y0)
