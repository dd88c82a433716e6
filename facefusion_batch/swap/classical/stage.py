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
from dataclasses import replace
from typing import Any

import cv2
import numpy as np

from facefusion_batch.faces.align import align_crops, host_crops, host_lumas, transform_points
from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER, eye_frame
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.base import EDGE_RAMP, STREAK_MIN, FaceRegion, Frames, Kernels
from facefusion_batch.swap.classical.colour_track import ColourTracks
from facefusion_batch.swap.classical.features import eye_openness
from facefusion_batch.swap.classical.fit import (
    EYE_REASONS,
    NOT_SWAPPED,
    FitInputs,
    FitTracks,
    eye_holds_of,
    far_eye_hidden,
    held_eyes,
    reason_holds,
    reason_of,
    strengths,
    target_gazes,
)
from facefusion_batch.swap.classical.lids import shut_lids
from facefusion_batch.swap.classical.raster import rasterize
from facefusion_batch.swap.classical.relight import normal_texture, rotations
from facefusion_batch.swap.classical.rims import rim_visibility
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.shape import mouth_weight, shaped_meshes
from facefusion_batch.swap.classical.skin import skin_visibility
from facefusion_batch.swap.classical.source import SourceFace
from facefusion_batch.swap.classical.symmetry import mirror_corners, turned
from facefusion_batch.swap.masks import Occluder
from facefusion_batch.swap.regions import FaceRegions

RASTER_SPAN = 40.0  # eye-corner span (px) at which the warp map is rasterised
# the occlusion model's crop (as the learned swap's inswapper crop: FaceFusion's xseg setting)
OCCLUSION_TEMPLATE, OCCLUSION_CROP = "arcface_128", 256


def fan_triangles(loop: np.ndarray) -> np.ndarray:
    """Triangles filling a (roughly convex) closed loop: a fan from its first vertex."""
    return np.stack([np.full(len(loop) - 2, loop[0]), loop[1:-1], loop[2:]], axis=1).astype(np.int32)


def source_normals(source: SourceFace, triangles: np.ndarray) -> np.ndarray:
    """[h, w, 3] the source's normals over its texture (swap/classical/relight.py), the atlas's flipped
    half included."""
    return normal_texture(
        source.texture.shape[:2],
        source.geometry,
        source.mesh,
        triangles,
        source.mirror_mesh,
        source.use_mirror,
    )


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
    drop_reason = NOT_SWAPPED  # the only faces it leaves unpainted on purpose (swap/classical/fit.py)

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
        self.surface = np.ascontiguousarray(triangles, np.int32)  # the face's own, no fans: what hides what
        self.relit = settings.relight and settings.colour == "local"
        if self.relit:  # the source's normals over its texture, channels 7–9 (swap/classical/relight.py)
            self.sources = sources = [
                replace(s, texture=np.dstack([s.texture, source_normals(s, self.triangles)])) for s in sources
            ]
        self.occluder = occluder
        self.skin_occlusion = skin_occlusion  # `--mask skin`: swap/classical/skin.py on the aligned crops
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
        # the do-no-harm fit along each track (swap/classical/fit.py): its eye reasons with the
        # default `--eyes-mouth eyes` only, its profile rule with every mode
        self.fit_tracks = FitTracks() if settings.fit else None
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
        occlusion: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        lids: np.ndarray | None = None,
        gaze: np.ndarray | None = None,
        seq: int | None = None,
        decided: list[str] | None = None,
    ) -> list[FaceRegion]:
        """Every face's warp map (source texture coordinates over its region of the frame);
        `frame_shapes` [B, 2]: (height, width) of each frame of the batch; `occlusion`: per
        face, an occlusion mask on an aligned crop, the crop's affine and whether the face takes
        it; `lids` [F, 2]:
        how much of each eye a lowered lid keeps the target's (swap/classical/lids.py); `gaze` [F, 2, 2]:
        each eye's swap/classical/fit.gaze_offsets; `seq`: the batch's number, for the fit's track step;
        `decided`: filled with each face's fit decision (swap/classical/fit.reason_of)."""
        choice = self.choose_sources(table)
        scales = self.raster_scales(table)
        shapes = frame_shapes[table.frame_index].astype(np.float64)
        bounds = np.ceil(shapes * scales[:, None]).astype(np.int64)
        mesh = table.required("mesh")
        if self.fit_tracks is not None:
            holds, names, strength = self.fit_holds(table, choice, lids, gaze, seq)
            if decided is not None:
                decided[:] = names
        else:
            holds, strength = self.eye_holds(table, choice, lids), np.ones(len(table))
        painted = np.flatnonzero(strength > 0)  # a face in full profile keeps its own
        if not len(painted):
            return []
        geometry = mesh[painted]
        if self.settings.shape > 0 and self.settings.eyes_mouth != "target":  # the target's eyes stay put
            sources = np.stack([self.sources[c].geometry for c in choice[painted]])
            mouth = mouth_weight(self.source_yaw[choice[painted]]) if self.settings.mouth_shape else None
            amount = self.settings.shape * strength[painted]
            geometry = shaped_meshes(geometry, sources, self.face_regions, amount, mouth)
        maps = self.warp_maps(
            choice[painted],
            geometry[:, :, :2] * scales[painted, None, None],
            mesh[painted, :, 2],
            bounds[painted],
            scales[painted],
            shapes[painted],
        )
        turns = rotations(np.stack([self.sources[c].geometry for c in choice]), mesh) if self.relit else None
        streaks = self.streaks(table)
        out: list[FaceRegion] = []
        for f, face_maps in zip(painted.tolist(), maps, strict=True):
            if face_maps is None:
                continue
            map_x, map_y, (x0, y0) = face_maps
            iod = 0.7 * eye_frame(mesh[f])[1]
            sigma = max(1.0, self.settings.shading_scale * iod)
            hold = (float(holds[f, 0]), float(holds[f, 1]))
            visible = None
            if occlusion is not None and occlusion[2][f]:
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
                    strength=float(strength[f]),
                    streak=streaks[f],
                )
            )
        return out

    def streaks(self, table: FaceTable) -> list[tuple[float, float]]:
        """Per face, the shutter's smear over it (FaceRegion.streak): its track's motion a frame
        times the share of the frame the shutter was open; (0, 0) under STREAK_MIN px, with no
        shutter given or no track."""
        open_share = self.settings.shutter / 360.0
        if open_share <= 0 or table.motion is None:
            return [(0.0, 0.0)] * len(table)
        smear = table.motion.astype(np.float64) * open_share
        long_enough = np.hypot(smear[:, 0], smear[:, 1]) >= STREAK_MIN
        return [
            (float(x), float(y)) if ok else (0.0, 0.0) for (x, y), ok in zip(smear, long_enough, strict=True)
        ]

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
            far_eye_hidden=np.array([far_eye_hidden(m, self.surface, self.face_regions) for m in mesh]),
        )

    def fit_holds(
        self,
        table: FaceTable,
        choice: np.ndarray,
        lids: np.ndarray | None,
        gaze: np.ndarray | None,
        seq: int | None,
    ) -> tuple[np.ndarray, list[str], np.ndarray]:
        """[F,2] as `eye_holds`, each face's decision's name and [F] how much of its swap is
        painted (fit.strengths): with the fit (swap/classical/fit.py) a
        face whose eyes the source cannot give keeps both its own, along its track; a turned
        face's far eye as before."""
        holds = reason_holds(self.fit_inputs(table, choice, lids, gaze))
        if self.settings.eyes_mouth != "eyes":  # the eyes are the mode's; only a profile weakens a face
            holds[:, : len(EYE_REASONS)] = 0.0
        if self.fit_tracks is not None and table.track is not None and table.frame_no is not None:
            holds = self.fit_tracks.step(seq, table.track, table.frame_no, holds)
        names = reason_of(holds)
        if self.settings.eyes_mouth != "eyes":
            return self.eye_holds(table, choice, lids), names, strengths(holds)
        whole = eye_holds_of(holds)[:, None]
        far = far_eye_holds(table.required("mesh"))
        return np.maximum(far, whole), names, strengths(holds)

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
        if self.occluder is not None or self.skin_occlusion or self.settings.glasses:
            crops, affines = align_crops(
                k, frames, table.frame_index, table.landmarks5, OCCLUSION_TEMPLATE, OCCLUSION_CROP
            )
            masks = []
            # which faces take the masks: all of them with an occlusion mask asked for, else only
            # those with glasses found (the others paint exactly as without)
            present = np.full(len(table), self.occluder is not None or self.skin_occlusion)
            if self.occluder is not None:  # one batched model call over every face's aligned crop
                masks.append(np.asarray(k.to_host(self.occluder(k, crops, len(table), OCCLUSION_CROP))))
            meshes = transform_points(table.mesh[:, :, :2].astype(np.float64), affines)
            if self.skin_occlusion:  # what is not skin in front of the face, from the crop itself
                masks.append(skin_visibility(host_crops(k, crops), meshes, self.face_regions))
            if self.settings.glasses:  # glasses' rims round the eyes stay in front
                rims = rim_visibility(host_lumas(k, crops), meshes, self.face_regions)
                present |= (rims < 1).any(axis=(1, 2))
                masks.append(rims)
            if present.any():
                occlusion = (np.prod(masks, axis=0).astype(np.float32), affines, present)
        lids = table.lids  # read before the tracker (LidReader), and averaged along each track
        if lids is None and self.settings.eyes_mouth == "eyes" and self.settings.lids:
            lids = shut_lids(k, frames, table, self.face_regions)  # no reader ran: this batch's own
        eye_fit = self.fit_tracks is not None and self.settings.eyes_mouth == "eyes"
        gaze = target_gazes(k, frames, table, self.face_regions) if eye_fit else None
        decided: list[str] = []
        regions = self.regions(table, frames.sizes, occlusion, lids, gaze, frames.seq, decided)
        for region in regions if decided else []:  # what the report counts: painted faces, by decision
            counts = frames.decisions.setdefault(decided[region.face], np.zeros(frames.count, np.int64))
            counts[region.frame] += 1
        if NOT_SWAPPED in decided:  # left as they came: the report counts them as not swapped
            kept = np.array([name != NOT_SWAPPED for name in decided])
            row = np.cumsum(kept) - 1  # each kept face's row in the table without the others
            regions = [replace(r, face=int(row[r.face])) for r in regions]
            table = table.select(kept)
        textures = self.textures_for(k)
        if self.colour_tracks is not None and table.track is not None and table.frame_no is not None:
            regions = self.track_colours(k, frames, table, regions, textures)
        k.paint_faces(frames, regions, textures, self.settings.paint)
        return table

    def track_colours(
        self, k: Kernels, frames: Frames, table: FaceTable, regions: list[FaceRegion], textures: Any
    ) -> list[FaceRegion]:
        """`regions` with their colour fixes toward their tracks' statistics (swap/classical/colour_track.py):
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
