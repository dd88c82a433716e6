"""Do no harm: per face, whether the source photo can supply what the target shows.

A source photo gives one face in one state: its eyes open so far, looking one way, at one head
turn. Where a target's eyes are in another state (closed, squinting, wider open, looking down
or aside) or its head is turned further from the camera than the photo's, a source eye warped
there is a guess, and at 1:1 it shows as a painted or bruised eye (issue 35). Such a face keeps
its own eyes wholesale, inside a feathered ring (the classical swap's eye channels), so its
expression is the target's by construction; the source still brings the rest of the face. The
mouth needs no decision: the target's inner mouth always stays its own (swap/classical/source.py).
A face in profile, its far eye half hidden behind its own nose and cheek while the near one is
in view, has half a mesh the model can only guess; painted onto that guess the swap is a
patchwork of stretched skin and a smeared far eye whatever the source. Such a face is painted at
less strength, and with half of its far eye's outline hidden not at all (`profile_holds`): it
keeps its own face.

The decision uses no recogniser: the mesh's eye openings, the lids read from the picture
(swap/classical/lids.py), where each eye's darkest quarter (iris and pupil) lies, and the yaw proxy
(faces/mesh.eye_frame). Mesh presence needs none here: the tracker already stops a track whose
presence falls (faces/track.py, counted in the report as its drop reason). Along a track, a
face keeps its eyes for FIT_WINDOW frames after the last frame that asked for it, so the eyes do
not switch back and forth inside a track; the history is the last FIT_WINDOW frames only, so
chunks and segments render as a whole render does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from facefusion_batch.faces.align import align_crops, host_crops, transform_points
from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.faces.track import InOrder
from facefusion_batch.kernels.base import Frames, Kernels
from facefusion_batch.swap.classical.lids import LID_CROP, LID_TEMPLATE
from facefusion_batch.swap.regions import FaceRegions

# frames a face keeps its own eyes after the last one that asked for it (within the tracker's
# warm-up, TrackSettings.memory)
FIT_WINDOW = 8
# target/source eye-opening ratio: the target's eye much more closed (a blink, a squint, a look
# down) or much more open (a source's squint on an open eye) from / fully at these
EYE_OPEN, EYE_CLOSED = 0.6, 0.35
# change of where the darkest quarter of an eye lies (a share of the eye's width) from which the
# target keeps its eyes / fully does: a look down or aside the source's iris cannot give. On the
# tuning half 0.08 held the eyes of nearly every face for the same harm (docs/default-swap.md)
GAZE_FROM, GAZE_FULL = 0.2, 0.3
GAZE_MIN_OPENING = 0.12  # an eye opened less than this (height over width) holds no iris to find
GAZE_MIN_WIDTH = 8  # px: a smaller eye is too small to tell
# head turn (yaw proxy) beyond the source photo's from which the target keeps its eyes / fully
POSE_FROM, POSE_FULL = 0.25, 0.4
# share of the far eye's outline hidden behind the face's own surface (its mesh, depth-tested),
# less the near eye's, from which the whole face weakens / is not painted at all: a quarter /
# half. The tuning half's most turned faces (Matt in t1.jpg, 0.43 of the yaw proxy) hide up to
# an eighth and transfer; the span is two round shares above that, not a fitted value
# (docs/default-swap.md, "Profiles")
HIDDEN_FROM, HIDDEN_NONE = 0.25, 0.5
# why a face keeps its own eyes, in the order a tie is named (the report counts each face once);
# the last, `profile`, weakens the whole face instead (`strengths`)
REASONS = ("eyes_closed", "eyes_wider", "lids", "gaze", "pose", "source_shut", "profile")
EYE_REASONS = REASONS[:-1]
HELD = 0.5  # a face whose eyes stay its own by at least this much is counted under its reason
WEAKER = "weaker_profile"  # the decision's name for a face painted at reduced strength
# the report's reason (faces_not_swapped) for a face so far in profile that none of
# the swap is painted: it leaves the frame as it came
NOT_SWAPPED = "profile_far_eye_hidden"


def smoothstep(t: np.ndarray) -> np.ndarray:
    t = np.clip(t, 0.0, 1.0)
    return t * t * (3 - 2 * t)


def gaze_offsets(image: np.ndarray, mesh: np.ndarray, regions: FaceRegions) -> np.ndarray:
    """[2, 2] per eye (the face's left, then right): where its darkest quarter lies from the
    loop's centre, along and across the eye line, as a share of the eye's width; NaN where the
    eye is too small or too shut to hold an iris. `image` BGR (uint8 or float), `mesh` in its
    pixels."""
    angle = eye_frame(mesh)[0]
    u = np.array([np.cos(angle), np.sin(angle)])
    v = np.array([-u[1], u[0]])
    grey = cv2.cvtColor(np.clip(image, 0, 255).astype(np.uint8), cv2.COLOR_BGR2GRAY)
    out = np.full((2, 2), np.nan)
    for e, loop in enumerate((regions.left_eye, regions.right_eye)):
        pts = mesh[loop, :2].astype(np.float64)
        pu, pv = pts @ u, pts @ v
        width = float(np.ptp(pu))
        if width < GAZE_MIN_WIDTH or np.ptp(pv) / width < GAZE_MIN_OPENING:
            continue
        mask = np.zeros(grey.shape, np.uint8)
        cv2.fillPoly(mask, [np.round(pts).astype(np.int32)], 1)
        ys, xs = np.nonzero(mask)
        if len(ys) < 12:
            continue
        values = grey[ys, xs]
        dark = values <= np.percentile(values, 25)
        spot = np.array([xs[dark].mean(), ys[dark].mean()]) - pts.mean(axis=0)
        out[e] = [spot @ u / width, spot @ v / width]
    return out


def target_gazes(k: Kernels, frames: Frames, table: FaceTable, regions: FaceRegions) -> np.ndarray:
    """[F, 2, 2] `gaze_offsets` of every face of the batch, on the small aligned crops the lids
    are read from (swap/classical/lids.py): one crop call on the kernel set, then numpy."""
    if len(table) == 0:
        return np.zeros((0, 2, 2))
    crops, affines = align_crops(k, frames, table.frame_index, table.landmarks5, LID_TEMPLATE, LID_CROP)
    meshes = transform_points(table.required("mesh")[:, :, :2].astype(np.float64), affines)
    return np.stack([gaze_offsets(c, m, regions) for c, m in zip(host_crops(k, crops), meshes, strict=True)])


@dataclass(frozen=True)
class FitInputs:
    """Per target face [F, ...] and its chosen source's: what the decision is taken from."""

    target_open: np.ndarray  # [F, 2] eye openings (classical.eye_openness)
    source_open: np.ndarray  # [F, 2]
    lids: np.ndarray | None  # [F, 2] how shut each target eye is by its lid (swap/classical/lids.py)
    target_gaze: np.ndarray | None  # [F, 2, 2] gaze_offsets (NaN: not measured)
    source_gaze: np.ndarray  # [F, 2, 2]
    target_yaw: np.ndarray  # [F]
    source_yaw: np.ndarray  # [F]
    source_shut: np.ndarray  # [F, 2] how shut the source photo's own eyes are
    far_eye_hidden: np.ndarray  # [F] how much of its far eye the target's own face hides


def held_eyes(target_open: np.ndarray, source_open: np.ndarray) -> np.ndarray:
    """[F,2] how much of each eye stays the target's: none while the target's eye is about as
    open as the source's, all of it once it is much more closed (a blink, a squint, a look
    down), smoothly in between so a blink fades rather than switches."""
    ratio = target_open / np.maximum(source_open, 1e-6)
    return smoothstep((EYE_OPEN - ratio) / (EYE_OPEN - EYE_CLOSED))


def reason_holds(x: FitInputs) -> np.ndarray:
    """[F, len(REASONS)] per face and reason, how much that reason asks the face to keep its own
    eyes (0–1; an eye pair is kept whole: either eye's reason counts for both)."""
    closed = held_eyes(x.target_open, x.source_open)
    wider = held_eyes(x.source_open, x.target_open)  # the same rule the other way round
    lids = np.zeros_like(closed) if x.lids is None else np.asarray(x.lids, np.float64)
    gaze = np.zeros_like(closed)
    if x.target_gaze is not None:
        moved = np.linalg.norm(x.target_gaze - x.source_gaze, axis=2)
        gaze = smoothstep((np.nan_to_num(moved, nan=0.0) - GAZE_FROM) / (GAZE_FULL - GAZE_FROM))
    pose = smoothstep((np.abs(x.target_yaw - x.source_yaw) - POSE_FROM) / (POSE_FULL - POSE_FROM))
    per_eye = [closed, wider, lids, gaze, np.repeat(pose[:, None], 2, axis=1), x.source_shut]
    profile = profile_holds(x.far_eye_hidden)
    return np.concatenate([np.stack([np.max(h, axis=1) for h in per_eye], axis=1), profile[:, None]], axis=1)


def hidden_share(mesh: np.ndarray, triangles: np.ndarray, loop: Sequence[int] | np.ndarray) -> float:
    """The share of `loop`'s points (an eye's outline) that the face's own surface hides: a
    triangle of `triangles` not among the point's own covers it in the picture and lies nearer the
    camera (the mesh's depth: smaller is nearer). A frontal face hides none; in profile the nose
    and cheek hide the far eye."""
    p, z = mesh[:, :2].astype(np.float64), mesh[:, 2].astype(np.float64)
    points = np.asarray(loop)
    q = p[points][:, None]  # [P, 1, 2]
    corners = p[triangles]  # [T, 3, 2]: only triangles that reach over the outline's box can hide it
    low, high = q[:, 0].min(axis=0), q[:, 0].max(axis=0)
    triangles = triangles[np.all((corners.max(axis=1) >= low) & (corners.min(axis=1) <= high), axis=1)]
    a, b, c = (p[triangles[:, i]][None] for i in range(3))  # [1, T, 2]

    def side(u: np.ndarray, v: np.ndarray) -> np.ndarray:  # which side of the edge u→v each point is on
        edge, to_point = v - u, q - u
        return edge[..., 0] * to_point[..., 1] - edge[..., 1] * to_point[..., 0]

    d1, d2, d3 = side(a, b), side(b, c), side(c, a)  # [P, T]
    inside = ((d1 >= 0) & (d2 >= 0) & (d3 >= 0)) | ((d1 <= 0) & (d2 <= 0) & (d3 <= 0))
    own = (triangles[None] == points[:, None, None]).any(axis=2)
    nearer = z[triangles].mean(axis=1)[None] < z[points][:, None] - 1e-3 * np.ptp(z)
    return float(np.mean(np.any(inside & ~own & nearer, axis=1)))


def far_eye_hidden(mesh: np.ndarray, triangles: np.ndarray, regions: FaceRegions) -> float:
    """How much more of one eye's outline than of the other's the face's own surface hides
    (`hidden_share`, 0–1): in profile the nose and cheek hide the far eye and leave the near one
    in view; a bowed head hides the two alike under its brows, and counts 0 here."""
    left, right = (hidden_share(mesh, triangles, loop) for loop in (regions.left_eye, regions.right_eye))
    return abs(left - right)


def profile_holds(hidden: np.ndarray) -> np.ndarray:
    """[F] how much a face's far eye hidden behind its own nose and cheek (`far_eye_hidden`) asks
    it to be left as it is: 0 up to HIDDEN_FROM of the eye's outline, 1 from HIDDEN_NONE."""
    return smoothstep((np.asarray(hidden, np.float64) - HIDDEN_FROM) / (HIDDEN_NONE - HIDDEN_FROM))


def strengths(holds: np.ndarray) -> np.ndarray:
    """[F] how much of each face's swap is painted (1 all of it, 0 none), from its reason holds
    after the track's smoothing: less the more of its far eye its own face hides."""
    return 1.0 - holds[:, REASONS.index("profile")]


def eye_holds_of(holds: np.ndarray) -> np.ndarray:
    """[F] how much of both eyes stays the target's: the most any eye reason asks."""
    return holds[:, : len(EYE_REASONS)].max(axis=1)


def reason_of(holds: np.ndarray) -> list[str]:
    """Per face, the report's name of its decision: `weaker_profile` for a face painted at half
    strength or less (`strengths`; at none it is not painted and counted as not swapped,
    NOT_SWAPPED), else `full`, or `own_eyes_<reason>` by the eye reason that asks most (holds
    [F, len(REASONS)] after the track's smoothing)."""
    out = []
    for row, strength in zip(holds, strengths(holds), strict=True):
        best = int(np.argmax(row[: len(EYE_REASONS)]))
        if strength <= 0:
            out.append(NOT_SWAPPED)
        elif strength <= 1 - HELD:
            out.append(WEAKER)
        else:
            out.append("full" if row[best] < HELD else f"own_eyes_{EYE_REASONS[best]}")
    return out


@dataclass
class FitTracks:
    """The ordered state of one job: per track, the (frame, reason holds) of its last `window`
    frames; a face's holds are the most each reason asked over them."""

    window: int = FIT_WINDOW
    history: dict[int, list[tuple[int, np.ndarray]]] = field(default_factory=dict)
    order: InOrder = field(default_factory=InOrder)

    def reset(self) -> None:
        self.history = {}
        self.order.reset()

    def _update(self, tracks: np.ndarray, frame_no: np.ndarray, holds: np.ndarray) -> np.ndarray:
        out = holds.copy()
        for row in np.argsort(frame_no, kind="stable"):
            if tracks[row] < 0:
                continue
            now = int(frame_no[row])
            kept = [(f, h) for f, h in self.history.get(int(tracks[row]), []) if 0 <= now - f < self.window]
            kept.append((now, holds[row]))
            self.history[int(tracks[row])] = kept
            out[row] = np.max(np.stack([h for _, h in kept]), axis=0)
        latest = int(frame_no.max()) if len(frame_no) else 0
        for t in [t for t, h in self.history.items() if latest - h[-1][0] >= self.window]:
            del self.history[t]
        return out

    def step(
        self, seq: int | None, tracks: np.ndarray, frame_no: np.ndarray, holds: np.ndarray
    ) -> np.ndarray:
        """[F, len(REASONS)] `holds` smoothed along each face's track (rows without a track: as
        they are). `seq`: the batch's number (None: a batch on its own, from an empty history)."""
        if seq is None:
            return FitTracks(self.window)._update(tracks, frame_no, holds)
        self.order.wait(seq)
        try:
            return self._update(tracks, frame_no, holds)
        finally:
            self.order.done(seq)
