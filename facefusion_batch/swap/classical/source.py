"""A source photo's face made ready to paint, once: the cut-out texture (colour, alpha, skin, the
held eyes' masks), its mesh, head turn, eyes and gaze, and the mirror fill's atlas (symmetry.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import cv2
import numpy as np

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.swap.classical.features import (
    drawn_features,
    eye_hole,
    eye_openness,
    feature_mask,
    fill_poly,
    filled_holes,
    grown_features,
    hair_above_brows,
    temple_hair,
)
from facefusion_batch.swap.classical.fit import gaze_offsets
from facefusion_batch.swap.classical.lip_shadow import lift_lip_shadow
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.smile_lines import lift_smile_lines
from facefusion_batch.swap.classical.symmetry import (
    atlas,
    inset_midline,
    shut_eye_weights,
    symmetric_pair,
    wink_shares,
)
from facefusion_batch.swap.regions import FaceRegions

# IOD by which the target's own inner mouth (teeth, tongue) is grown into its lips (none: the
# recogniser reads a target's inner lip rim as its own), and its eyes with --eyes-mouth target
MOUTH_HOLE_GROW, EYE_HOLE_GROW = 0.0, 0.06
# IOD over which the mask ramps up from the inner mouth (the rest of its edge: `feather`): a
# wider ramp covers a thin lip with the target's (docs/default-swap.md)
MOUTH_FEATHER = 0.05
# the skin channel's value on that ring: left out of the statistics, the shading and the shade
# limit (> 0.5 is skin), but inside what the tint limit holds to the target's (> TINT_LEVEL), so
# the source's own tint there shows no grey-blue or red patch (docs/default-swap.md)
TINT_RING = 0.4


@dataclass(frozen=True)
class SourceFace:
    """One source face ready to paint: texture channels BGR + alpha + skin, and its mesh."""

    # [h,w,7] float32: B, G, R (0–255), alpha (0–1), skin (0/1), and soft masks (0–1) of the
    # left and right eye with their lids, through which a target's held eye stays its own
    texture: np.ndarray
    mesh: np.ndarray  # [468,3] in texture pixels
    yaw: float
    eye_open: tuple[float, float] = (0.0, 0.0)  # eye_openness of the left and right eye
    # mirror fill (swap/classical/symmetry.py): the flipped photo's mesh in the same texture (an atlas),
    # and per triangle of the swap, whether it is painted from there
    mirror_mesh: np.ndarray | None = None
    use_mirror: np.ndarray | None = None
    # the mesh as the photo was measured, for the shape transfer (`mesh` is where the texture
    # is sampled: on a turned photo its upper midline is moved inward, swap/classical/symmetry.py)
    shape_mesh: np.ndarray | None = None
    # how shut the photo's own left and right eye are by their lids (swap/classical/lids.py): a source
    # with shut eyes has no open eye to give, and every target keeps its own there
    lid_shut: tuple[float, float] = (0.0, 0.0)
    # swap/classical/fit.gaze_offsets of the photo's eyes (NaN: not measured)
    gaze: np.ndarray = field(default_factory=lambda: np.full((2, 2), np.nan))

    @property
    def geometry(self) -> np.ndarray:
        return self.mesh if self.shape_mesh is None else self.shape_mesh


def with_mirror(
    source: SourceFace,
    mirror: SourceFace,
    triangles: np.ndarray,
    regions: FaceRegions,
    open_wink: bool = True,
) -> SourceFace:
    """`source` whose squeezed side is painted from `mirror`, the same face in the photo
    flipped left-right (prepared the same way), over `triangles` (the swap's); an eye the
    photo has shut while the other is open (a wink) is painted from there too (the flipped
    photo's open eye), and with `open_wink` counts as open from then on. Without it (the fit,
    swap/classical/fit.py) the photo keeps its reading: one eye read shut is most often a smile's
    squint, and its other eye, read open, a narrowed one that painted open eyes as slits."""
    shut = source.lid_shut
    extra = shut_eye_weights(source.mesh, shut, (regions.left_eye, regions.right_eye))
    own, flipped, use = symmetric_pair(
        source.texture, source.mesh, mirror.texture, mirror.mesh, triangles, extra
    )
    texture, offset = atlas(own, flipped)
    mirror_mesh = mirror.mesh + np.array([offset, 0.0, 0.0], np.float32)
    if not open_wink:
        return replace(source, texture=texture, mirror_mesh=mirror_mesh, use_mirror=use)
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


def prepare_source(
    image: np.ndarray,
    mesh: np.ndarray,
    regions: FaceRegions,
    settings: ClassicalSettings,
    lid_shut: tuple[float, float] = (0.0, 0.0),
) -> SourceFace:
    """Cut the source face out once: texture, soft alpha and a skin mask for colour statistics;
    `lid_shut`: how shut the photo's own eyes are (swap/classical/lids.py)."""
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
    fill_poly(area, local[regions.face_oval], 255)
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
    solid = cv2.bitwise_and(
        area, cv2.bitwise_not(filled_holes(local, eye_holes, EYE_HOLE_GROW * iod, (h, w)))
    )
    dist = cv2.distanceTransform((solid > 0).astype(np.uint8), cv2.DIST_L2, 5)
    ramp = np.clip(dist / max(settings.feather * iod, 1.0), 0.0, 1.0)
    if settings.eyes_mouth != "source":
        mouth = filled_holes(local, [regions.lips_inner], MOUTH_HOLE_GROW * iod, (h, w))
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
    crop = lift_smile_lines(crop, local, (alpha > 0.5) & (features == 0), iod, settings.smile_lines)

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
