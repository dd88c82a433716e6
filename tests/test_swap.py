"""The classical swap on real photos: what changes, what must not, and that identity moves.

Thresholds were measured on t1.jpg (six faces) with astronaut.png as the source
(values per face, mean absolute difference in grey levels, 0-255):

* default settings: detector box 6.0-7.6, inside the target's face oval 8.6-11.9,
  on the cheeks 9.9-25.7 when first measured, 6.3-14.3 now; every blend/colour/eyes_mouth
  variant changes the cheeks by >= 3.8 (poisson on Matt's near profile, its solve pinned
  to the target round the inner mouth too). Untouched pixels differ by exactly 0 (the
  input array is reused), so any threshold well above 0 and well under ~4 separates
  "swapped" from "not"; the tests use about 80 % of the smallest measured value.
* the farthest changed pixel sits 0.64 box sizes (longest side) from its face's
  box centre; the tests require bit-identity beyond 0.75.
* eyes: with eyes_mouth="target" the target's eye openings change by 1.0-6.0
  (only the blend's soft edge reaches them), with "source" by 50-65.
"""

from __future__ import annotations

import cv2
import hostk
import numpy as np
import pytest

from facefusion_batch.errors import EXIT_USAGE, InputError, NoFaceError
from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.pipeline.build import build_pipeline, prepare_sources
from facefusion_batch.settings.types import SwapSettings
from facefusion_batch.swap.classical.settings import ClassicalSettings
from facefusion_batch.swap.classical.source import SourceFace
from facefusion_batch.swap.classical.stage import ClassicalSwapper
from facefusion_batch.video.pictures.stills import read_image

FAR = 0.75  # box sizes from a face's box centre beyond which nothing may change
CLASSICAL = SwapSettings(swapper="classical")
CHEEK_POINTS = (50, 280, 36, 266)  # MediaPipe mesh points on both cheeks


def abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int16) - b.astype(np.int16)).mean(axis=-1)


def polygon_mask(shape, points: np.ndarray) -> np.ndarray:
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(mask, [np.round(points[:, :2]).astype(np.int32)], 1)
    return mask.astype(bool)


def cheek_mask(shape, mesh: np.ndarray) -> np.ndarray:
    mask = np.zeros(shape[:2], np.uint8)
    span = float(np.hypot(*(mesh[263, :2] - mesh[33, :2])))
    for index in CHEEK_POINTS:
        cv2.circle(mask, tuple(int(v) for v in np.round(mesh[index, :2])), max(2, int(0.08 * span)), 1, -1)
    return mask.astype(bool)


def eye_mask(shape, mesh: np.ndarray, regions) -> np.ndarray:
    return polygon_mask(shape, mesh[regions.left_eye]) | polygon_mask(shape, mesh[regions.right_eye])


def far_mask(shape, boxes: np.ndarray, reach: float = FAR) -> np.ndarray:
    """Pixels farther than `reach` box sizes from every box centre."""
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    far = np.ones(shape[:2], bool)
    for box in boxes:
        cx, cy = (box[:2] + box[2:]) / 2
        far &= np.hypot(xx - cx, yy - cy) > reach * max(box[2] - box[0], box[3] - box[1])
    return far


@pytest.fixture(scope="module")
def swap(models, astronaut_path):
    """Run the pipeline with the astronaut as source and `settings` on `images`."""

    def run(images, settings: ClassicalSettings = ClassicalSettings(), sources=None, faces="many"):
        swap = SwapSettings(swapper="classical", classical=settings)
        pipeline = build_pipeline(models, tuple(sources or (astronaut_path,)), swap, faces)
        return hostk.run(pipeline, images)

    return run


@pytest.fixture(scope="module")
def default_result(swap, t1_image):
    return swap([t1_image])


# -- what changes and what does not -------------------------------------------------------------


def test_every_face_changes_and_the_rest_is_bit_identical(default_result, t1_image, t1_faces, models):
    before = t1_image.copy()
    result = default_result
    assert (result.faces_found, result.faces_swapped, result.frames_with_faces) == (6, 6, 1)
    out = result.frames[0]
    assert out.dtype == np.uint8 and out.shape == t1_image.shape
    assert out is not t1_image
    np.testing.assert_array_equal(t1_image, before)  # (t1_image is read-only anyway)

    diff = abs_diff(out, t1_image)
    for f, (box, mesh) in enumerate(zip(t1_faces.box, t1_faces.mesh, strict=True)):
        x1, y1, x2, y2 = np.round(box).astype(int)
        in_box = diff[y1:y2, x1:x2].mean()
        in_oval = diff[polygon_mask(diff.shape, mesh[models.regions.face_oval])].mean()
        assert in_box > 3.0, f"face {f}: box changed by {in_box:.1f} only"
        assert in_oval > 5.0, f"face {f}: face oval changed by {in_oval:.1f} only"

    far = far_mask(diff.shape, t1_faces.box)
    assert far.mean() > 0.8  # most of the photo is far from any face
    changed = np.argwhere(far & (diff > 0))
    assert changed.size == 0, f"{len(changed)} pixels changed far from every face, e.g. {changed[:3]}"


def _plain(height: int = 200, width: int = 300) -> np.ndarray:
    yy, xx = np.mgrid[0:height, 0:width]
    return np.dstack([xx * 255 // width, yy * 255 // height, np.full_like(xx, 90)]).astype(np.uint8)


def test_a_batch_keeps_frames_apart(swap, models, t1_image, t1_faces, astronaut_image, default_result):
    plain = _plain()
    result = swap([t1_image, plain, astronaut_image])
    assert len(result.frames) == 3
    assert (result.faces_found, result.faces_swapped, result.frames_with_faces) == (7, 7, 2)
    np.testing.assert_array_equal(result.frames[1], plain)
    # the astronaut swapped onto itself: small changes, all on the face
    self_swap = abs_diff(result.frames[2], astronaut_image)
    assert self_swap.max() > 0
    assert not np.any(self_swap[far_mask(self_swap.shape, hostk.detect(models, [astronaut_image]).box)])
    # t1 comes out as when it was swapped alone. (Not bit for bit: the warp map's resolution
    # follows the median face size of the batch; measured 0.17-0.33 per box.)
    batched, alone = abs_diff(result.frames[0], t1_image), default_result.frames[0]
    between = abs_diff(result.frames[0], alone)
    for f, box in enumerate(np.round(t1_faces.box).astype(int)):
        x1, y1, x2, y2 = box
        assert between[y1:y2, x1:x2].mean() < 1.0, f"face {f}"
        assert batched[y1:y2, x1:x2].mean() > 3.0, f"face {f}"
    assert not np.any(between[far_mask(between.shape, t1_faces.box)])


def test_a_small_first_frame_does_not_clip_the_faces_of_a_larger_one(swap, t1_image, t1_faces):
    result = swap([_plain(), t1_image])
    assert result.faces_swapped == 6
    diff = abs_diff(result.frames[1], t1_image)
    cheeks = [diff[cheek_mask(diff.shape, mesh)].mean() for mesh in t1_faces.mesh]
    assert min(cheeks) > 5.0, [round(c, 1) for c in cheeks]


VARIANTS = [
    ClassicalSettings(blend="multiband"),
    ClassicalSettings(blend="feather"),
    ClassicalSettings(blend="poisson"),
    ClassicalSettings(colour="global"),
    ClassicalSettings(colour="none"),
    ClassicalSettings(eyes_mouth="source"),
    ClassicalSettings(blend="poisson", colour="none", eyes_mouth="source"),
]


@pytest.mark.parametrize("settings", VARIANTS, ids=[f"{s.blend}-{s.colour}-{s.eyes_mouth}" for s in VARIANTS])
def test_every_blend_colour_and_eyes_mouth_mode_swaps(swap, settings, t1_image, t1_faces):
    out = swap([t1_image], settings).frames[0]
    diff = abs_diff(out, t1_image)
    for f, mesh in enumerate(t1_faces.mesh):
        cheeks = diff[cheek_mask(diff.shape, mesh)].mean()
        assert cheeks > 3.0, f"face {f}: cheeks changed by {cheeks:.1f} only"
    assert not np.any(diff[far_mask(diff.shape, t1_faces.box)])


def test_eyes_mouth_target_keeps_the_targets_eyes(swap, t1_image, t1_faces, models):
    # the cheeks as the wider colour transfer and softer mask edge of before leave them (this is
    # about the eye holes; the default feather of 0.2 IOD paints the lids around them harder)
    old = dict(shading_scale=0.25, shading_limit=(30.0, 6.0, 6.0), feather=0.25)
    keep = abs_diff(swap([t1_image], ClassicalSettings(eyes_mouth="target", **old)).frames[0], t1_image)
    paint = abs_diff(swap([t1_image], ClassicalSettings(eyes_mouth="source", **old)).frames[0], t1_image)
    ratios = []
    for f, mesh in enumerate(t1_faces.mesh):
        eyes = eye_mask(keep.shape, mesh, models.regions)
        cheeks = cheek_mask(keep.shape, mesh)
        kept_eyes, painted_eyes, kept_cheeks = keep[eyes].mean(), paint[eyes].mean(), keep[cheeks].mean()
        assert painted_eyes > 25.0, f"face {f}: eyes_mouth=source changed the eyes by {painted_eyes:.1f}"
        assert kept_eyes < 0.25 * painted_eyes, f"face {f}: eyes {kept_eyes:.1f} vs {painted_eyes:.1f}"
        assert kept_eyes < 0.7 * kept_cheeks, f"face {f}: eyes {kept_eyes:.1f}, cheeks {kept_cheeks:.1f}"
        ratios.append(kept_eyes / kept_cheeks)
    assert np.mean(ratios) < 0.4, ratios


def test_the_source_lips_reach_the_targets_teeth_which_stay_its_own(
    default_result, t1_image, t1_faces, models
):
    # measured (astronaut onto t1, default settings): the lips between the loops, away from the
    # opening, change by 13.5-34.4, the open mouths' teeth by 2.3-6.1 (a multiband blend's coarse
    # levels reach a little past the mask); with the target's inner lip rim kept (the hole grown
    # 0.06 IOD, its edge ramped over 0.15 IOD) the lips changed by 3.8-11.7, with the hole at the
    # lip line but that ramp 7.3-21.3
    diff = abs_diff(default_result.frames[0], t1_image)
    regions = models.regions
    opened = 0
    for f, mesh in enumerate(t1_faces.mesh):
        span = float(np.hypot(*(mesh[263, :2] - mesh[33, :2])))
        grow = np.ones((2 * max(1, int(0.021 * span)) + 1,) * 2, np.uint8)
        inner = polygon_mask(diff.shape, mesh[regions.lips_inner]).astype(np.uint8)
        teeth = cv2.erode(inner, grow) > 0
        lips = polygon_mask(diff.shape, mesh[regions.lips_outer]) & ~(cv2.dilate(inner, grow) > 0)
        assert diff[lips].mean() > 10.0, f"face {f}: its lips changed by {diff[lips].mean():.1f} only"
        if teeth.sum() >= 20:  # an open mouth
            opened += 1
            assert diff[teeth].mean() < min(8.0, 0.4 * diff[lips].mean()), f"face {f}: teeth painted over"
    assert opened >= 3


# -- identity ------------------------------------------------------------------------------------


class CanonicalFrame:
    """Piecewise-affine alignment of any face to one fixed frame, through its 468-point mesh.

    The frame is the source's own mesh, scaled into `size`². Each pixel of the frame
    inside a mesh triangle takes the image point at the same barycentric
    coordinates of the matching triangle of the face's mesh, so faces of any pose,
    size or position line up point for point (an implementation independent of
    ffbatch's rasteriser).
    """

    def __init__(self, reference_mesh: np.ndarray, triangles: np.ndarray, regions, size: int = 112):
        pts = reference_mesh[:, :2].astype(np.float64)
        lo, hi = pts.min(0), pts.max(0)
        self.ref = (pts - lo) / (hi - lo).max() * (size - 9) + 4
        self.size = size
        self.triangles = triangles
        label = np.full((size, size), -1, np.int32)
        for t, tri in enumerate(triangles):
            cv2.fillConvexPoly(label, np.round(self.ref[tri]).astype(np.int32), int(t))
        self.inside = label >= 0
        self.tri = label[self.inside]
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
        p = np.stack([xx[self.inside], yy[self.inside]], -1)
        a = self.ref[triangles[self.tri]]
        e1, e2, d = a[:, 1] - a[:, 0], a[:, 2] - a[:, 0], p - a[:, 0]
        det = e1[:, 0] * e2[:, 1] - e2[:, 0] * e1[:, 1]
        det = np.where(np.abs(det) < 1e-9, 1e-9, det)
        b1 = (d[:, 0] * e2[:, 1] - e2[:, 0] * d[:, 1]) / det
        b2 = (e1[:, 0] * d[:, 1] - d[:, 0] * e1[:, 1]) / det
        self.bary = np.stack([1 - b1 - b2, b1, b2], -1)
        # skin only: inside the face oval, away from the eyes and lips (which may stay the target's)
        mask = polygon_mask((size, size), self.ref[regions.face_oval]).astype(np.uint8)
        for loop in (regions.left_eye, regions.right_eye, regions.lips_outer):
            cv2.fillPoly(mask, [np.round(self.ref[loop]).astype(np.int32)], 0)
        self.mask = cv2.erode(mask, np.ones((7, 7), np.uint8)).astype(bool) & self.inside

    def warp(self, image: np.ndarray, mesh: np.ndarray) -> np.ndarray:
        corners = mesh[:, :2].astype(np.float64)[self.triangles[self.tri]]
        points = np.einsum("pk,pkc->pc", self.bary, corners)
        map_x = np.full((self.size, self.size), -1, np.float32)
        map_y = np.full((self.size, self.size), -1, np.float32)
        map_x[self.inside], map_y[self.inside] = points[:, 0], points[:, 1]
        grey = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_BGR2GRAY).astype(np.float32)
        return cv2.remap(grey, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)

    def similarity(self, a: np.ndarray, b: np.ndarray) -> float:
        """Normalised correlation of the high-pass detail (pores, creases, brows, nose) over the skin.

        The high pass (minus a Gaussian of sigma 3 px, ~2.5% of the frame) drops the
        light and tint, which the local colour mode deliberately takes from the target.
        """
        a = (a - cv2.GaussianBlur(a, (0, 0), 3))[self.mask]
        b = (b - cv2.GaussianBlur(b, (0, 0), 3))[self.mask]
        a, b = a - a.mean(), b - b.mean()
        return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def test_identity_moves_to_the_source(default_result, models, astronaut_image, t1_image, t1_faces):
    """Aligned to the source's face, each swapped face correlates with the source far more than
    the original target did.

    Measured (high-pass NCC with the source, original -> swapped): 0.40->0.71, 0.18->0.51,
    0.24->0.64, 0.16->0.47, 0.13->0.54, 0.25->0.65; two unrelated people score 0.1-0.4 here,
    so a rise of 0.15 per face (0.25 on average) cannot come from alignment noise.
    """
    source = hostk.analyse(models, [astronaut_image], hostk.detect(models, [astronaut_image]))
    frame = CanonicalFrame(source.mesh[0], models.triangles, models.regions)
    assert frame.mask.sum() > 3000
    src = frame.warp(astronaut_image, source.mesh[0])
    assert frame.similarity(src, src) == pytest.approx(1.0)
    out = default_result.frames[0]
    gains = []
    for f, mesh in enumerate(t1_faces.mesh):
        # the swap keeps the target's geometry, so the target's mesh aligns both pictures
        before = frame.similarity(frame.warp(t1_image, mesh), src)
        after = frame.similarity(frame.warp(out, mesh), src)
        assert after > before + 0.15, f"face {f}: similarity to the source {before:.2f} -> {after:.2f}"
        assert after > 0.4, f"face {f}: {after:.2f}"
        gains.append(after - before)
    assert np.mean(gains) > 0.25, gains


# -- sources -------------------------------------------------------------------------------------


def test_a_source_without_a_face_is_a_no_face_error(models, tmp_path, astronaut_path):
    yy, xx = np.mgrid[0:256, 0:256]
    plain = tmp_path / "gradient.png"
    cv2.imwrite(str(plain), np.dstack([xx, yy, (xx + yy) // 2]).astype(np.uint8))
    with pytest.raises(NoFaceError) as info:
        build_pipeline(models, (plain,), CLASSICAL, "many")
    assert str(plain) in str(info.value)
    assert info.value.exit_code == EXIT_USAGE == 2
    # among several sources, only the faceless one is named
    with pytest.raises(NoFaceError) as info:
        build_pipeline(models, (astronaut_path, plain), CLASSICAL, "many")
    assert str(plain) in str(info.value) and str(astronaut_path) not in str(info.value)


def test_unreadable_sources_are_input_errors(models, tmp_path):
    text = tmp_path / "notes.png"
    text.write_text("not a picture")
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    for path, words in (
        (tmp_path / "missing.jpg", "no such file"),
        (text, "not an image"),
        (empty, "not an image"),
    ):
        with pytest.raises(InputError, match=words) as info:
            build_pipeline(models, (path,), CLASSICAL, "many")
        assert str(path) in str(info.value) and info.value.exit_code == 2


def test_grayscale_rgba_and_16_bit_sources_work(swap, tmp_path, astronaut_image, t1_image, t1_faces):
    grey = cv2.cvtColor(astronaut_image, cv2.COLOR_BGR2GRAY)
    cv2.imwrite(str(tmp_path / "grey.png"), grey)
    rgba = cv2.cvtColor(astronaut_image, cv2.COLOR_BGR2BGRA)
    rgba[:40, :, 3] = 0  # a transparent band at the top: flattened onto white
    rgba[40:60, :, 3] = 128
    cv2.imwrite(str(tmp_path / "rgba.png"), rgba)
    cv2.imwrite(str(tmp_path / "deep.png"), astronaut_image.astype(np.uint16) * 257)

    loaded = read_image(tmp_path / "grey.png")
    assert loaded.shape == (512, 512, 3) and loaded.dtype == np.uint8
    assert np.array_equal(loaded[..., 0], grey) and np.array_equal(loaded[..., 2], grey)
    loaded = read_image(tmp_path / "rgba.png")
    assert loaded.shape == (512, 512, 3)
    assert np.all(loaded[:40] == 255)
    np.testing.assert_array_equal(loaded[100:], astronaut_image[100:])
    half = loaded[40:60].astype(int) - (astronaut_image[40:60].astype(int) * 128 / 255 + 255 * 127 / 255)
    assert np.abs(half).max() <= 1
    np.testing.assert_array_equal(read_image(tmp_path / "deep.png"), astronaut_image)

    for name in ("grey.png", "rgba.png", "deep.png"):
        result = swap([t1_image], sources=(tmp_path / name,))
        assert result.faces_swapped == 6, name
        diff = abs_diff(result.frames[0], t1_image)
        for mesh in t1_faces.mesh:
            assert diff[cheek_mask(diff.shape, mesh)].mean() > 5.0, name


def _fake_mesh(yaw: float, angle: float = 0.0, scale: float = 1.0, shift=(0.0, 0.0)) -> np.ndarray:
    """A mesh whose only meaningful points are the outer eye corners and the nose tip."""
    mesh = np.zeros((468, 3), np.float32)
    pts = np.array([[0.0, 0.0], [100.0, 0.0], [50.0 + 100.0 * yaw, 45.0]])
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    pts = pts @ rot.T * scale + np.asarray(shift)
    mesh[33, :2], mesh[263, :2], mesh[4, :2] = pts
    return mesh


def test_choose_sources_takes_the_closest_yaw(models):
    sources = [
        SourceFace(
            texture=np.zeros((8, 8, 5), np.float32), mesh=_fake_mesh(y), yaw=eye_frame(_fake_mesh(y))[2]
        )
        for y in (-0.3, 0.0, 0.25)
    ]
    assert [round(s.yaw, 3) for s in sources] == [-0.3, 0.0, 0.25]
    swapper = ClassicalSwapper(sources, models.triangles, models.regions)
    target_yaws = [-0.5, -0.16, -0.14, 0.1, 0.13, 0.9]
    expected = [0, 0, 1, 1, 2, 2]
    angles = (0.0, 0.4, -0.6, 1.0, 0.2, -0.3)
    scales = (1.0, 2.5, 0.4, 1.0, 3.0, 0.7)
    meshes = np.stack(
        [
            _fake_mesh(y, angle=a, scale=s, shift=(300.0, 120.0))
            for y, a, s in zip(target_yaws, angles, scales, strict=True)
        ]
    )
    n = len(target_yaws)
    table = FaceTable(
        frame_index=np.zeros(n, np.int32),
        box=np.zeros((n, 4), np.float32),
        landmarks5=np.zeros((n, 5, 2), np.float32),
        score=np.ones(n, np.float32),
        mesh=meshes,
    )
    # in-plane rotation, size and position do not matter; only the head turn does
    assert swapper.choose_sources(table).tolist() == expected


def test_several_sources_each_face_takes_the_photo_turned_like_it(
    models, tmp_path, astronaut_path, t1_image, t1_faces
):
    yaws = np.array([eye_frame(m)[2] for m in t1_faces.mesh])
    turned = int(np.argmin(yaws))  # the face looking furthest to one side
    assert yaws[turned] < -0.3
    box = t1_faces.box[turned]
    cx, cy = (box[:2] + box[2:]) / 2
    half = 1.2 * max(box[2] - box[0], box[3] - box[1])
    x0, y0 = int(max(cx - half, 0)), int(max(cy - half, 0))
    crop = t1_image[y0 : int(cy + half), x0 : int(cx + half)]
    cv2.imwrite(str(tmp_path / "turned.png"), crop)
    cv2.imwrite(str(tmp_path / "mirrored.png"), crop[:, ::-1])
    paths = (astronaut_path, tmp_path / "turned.png", tmp_path / "mirrored.png")
    sources = prepare_sources(models, paths, ClassicalSettings())
    assert abs(sources[0].yaw) < 0.1 and sources[1].yaw < -0.3 and sources[2].yaw > 0.3

    pipeline = build_pipeline(models, paths, CLASSICAL, "many")
    choice = pipeline.stage("swap").choose_sources(t1_faces)
    assert choice[turned] == 1
    assert np.all(choice[np.abs(yaws) < 0.05] == 0)

    mirrored = np.ascontiguousarray(t1_image[:, ::-1])
    result = hostk.run(pipeline, [mirrored])
    assert result.faces_swapped == 6
    table = hostk.analyse(models, [mirrored], hostk.detect(models, [mirrored]))
    width = t1_image.shape[1]
    mirror_box = np.array([width - 1 - box[2], box[1], width - 1 - box[0], box[3]])
    row = int(np.argmin(np.abs(table.box - mirror_box).sum(axis=1)))
    assert np.abs(table.box[row] - mirror_box).max() < 15
    assert pipeline.stage("swap").choose_sources(table)[row] == 2


def test_a_dark_fringe_above_the_brows_is_left_out_of_the_source(models, astronaut_path, monkeypatch):
    """The source's own hair over the band kept above its brows (the astronaut's fringe) gets no
    alpha: the local shading lifted it to the target's skin, a bright orange streak at the brow.
    Her forehead's skin in that band keeps it."""
    from facefusion_batch.swap.classical import features

    def band_alpha(source):
        texture, mesh = source.texture, source.geometry
        angle = eye_frame(mesh)[0]
        h, w = texture.shape[:2]
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        v = -xx * np.sin(angle) + yy * np.cos(angle)
        brows = (
            -mesh[models.regions.brows, 0] * np.sin(angle) + mesh[models.regions.brows, 1] * np.cos(angle)
        ).min()
        grey = texture[..., :3] @ np.array([0.114, 0.587, 0.299], np.float32)
        face = polygon_mask(texture.shape, mesh[models.regions.face_oval])
        median = np.median(grey[face & (v >= brows)])
        band = face & (v < brows)
        return texture[..., 3][band & (grey < 0.45 * median)], texture[..., 3][band & (grey > 0.8 * median)]

    fringe, skin = band_alpha(prepare_sources(models, (astronaut_path,), ClassicalSettings())[0])
    monkeypatch.setattr(features, "HAIR_DARKER", 0.0)  # no hair told apart: the fringe is painted
    painted, painted_skin = band_alpha(prepare_sources(models, (astronaut_path,), ClassicalSettings())[0])
    assert len(fringe) > 20 and (fringe == 0).mean() > 0.9, (len(fringe), (fringe == 0).mean())
    # measured: the fringe's mean alpha 0.10 without, 0 with; the band's skin 0.27 and 0.26
    assert painted.mean() > 0.05 and (painted > 0).mean() > 0.2, (painted.mean(), (painted > 0).mean())
    assert skin.mean() > 0.8 * painted_skin.mean() > 0, (skin.mean(), painted_skin.mean())


def test_hair_that_reaches_the_cut_outs_edge_is_hair_a_dark_spot_inside_is_not():
    """temple_hair on a plain skin-grey crop: a dark patch running in from the cut-out's edge is
    cut, an as dark spot inside the face (a mole, a shadowed eye corner) stays, and so does the
    patch where it lies outside the zone asked about."""
    from facefusion_batch.swap.classical.features import temple_hair

    crop = np.full((120, 120, 3), 180.0, np.float32)
    area = np.zeros((120, 120), np.uint8)
    cv2.circle(area, (60, 60), 50, 255, -1)
    cv2.rectangle(crop, (5, 40), (25, 60), (40, 40, 50), -1)  # hair over the disc's left edge
    cv2.circle(crop, (75, 50), 5, (40, 40, 50), -1)  # a spot well inside
    zone = np.broadcast_to(np.arange(120) < 90, (120, 120))  # the rest of the disc: its skin
    hair = temple_hair(crop, area, zone, 40.0)
    assert hair[45:56, 16:24].all() and not hair[46:55, 71:80].any()
    assert not hair[area == 0].any()  # nothing outside the cut-out
    assert not temple_hair(crop, area, zone & (np.arange(120) > 40)[None, :], 40.0).any()


def test_the_astronauts_hair_at_her_temples_gets_no_alpha(models, astronaut_path, monkeypatch):
    """Her bob over the sides of her face beside the eyes: painted, it was a dark streak along
    the target's hairline (her worst skin block on Courteney, at the top of the frame)."""
    from facefusion_batch.swap.classical import source as source_prep

    def temple_alpha(source):
        g, alpha = source.geometry, source.texture[..., 3]
        grey = source.texture[..., :3] @ np.array([0.114, 0.587, 0.299], np.float32)
        oval = polygon_mask(alpha.shape, g[models.regions.face_oval])
        angle = eye_frame(g)[0]
        yy, xx = np.mgrid[0 : alpha.shape[0], 0 : alpha.shape[1]].astype(np.float32)
        across = lambda x, y: -x * np.sin(angle) + y * np.cos(angle)  # noqa: E731
        along = lambda x, y: x * np.cos(angle) + y * np.sin(angle)  # noqa: E731
        eyes = np.r_[models.regions.left_eye, models.regions.right_eye]
        v, u = across(xx, yy), along(xx, yy)
        top, low = across(*g[models.regions.brows, :2].T).min(), across(*g[eyes, :2].T).max()
        corners = along(*g[eyes, :2].T)  # beyond the eyes' outer corners: the temples
        beside = (u < corners.min() - 2) | (u > corners.max() + 2)
        return alpha[oval & beside & (v >= top) & (v < low) & (grey < 0.45 * np.median(grey[oval]))]

    settings = ClassicalSettings(mirror_fill=False)
    cut = temple_alpha(prepare_sources(models, (astronaut_path,), settings)[0])
    monkeypatch.setattr(
        source_prep, "temple_hair", lambda crop, area, beside, iod: np.zeros(area.shape, bool)
    )
    painted = temple_alpha(prepare_sources(models, (astronaut_path,), settings)[0])
    assert len(cut) > 20 and painted.mean() > 0.1, (len(cut), painted.mean())
    assert cut.mean() < 0.25 * painted.mean(), (cut.mean(), painted.mean())
