"""YuNet detection and the 468-point face mesh on real photos, against OpenCV's own YuNet.

The oracle is `cv2.FaceDetectorYN` running the original (batch-1) YuNet 2023mar
ONNX file; ffbatch runs its batch-capable copy through onnxruntime and decodes
the anchors itself. Fed the very same letterboxed picture both must agree to
within float noise (2 px is generous); at full resolution the oracle sees a
different picture, so only the boxes' overlap is compared.
"""

from __future__ import annotations

import cv2
import hostk
import numpy as np
import pytest

from facefusion_batch.faces.mesh import FaceMesh, MeshSettings
from facefusion_batch.faces.select import select_faces
from facefusion_batch.faces.table import FaceTable
from facefusion_batch.kernels.host_ops import letterbox
from facefusion_batch.models.store import model_path
from facefusion_batch.pipeline.build import meshing
from facefusion_batch.runtime.batching import BatchPolicy

PX = 2.0  # agreement with the oracle on the same input, in original-image pixels


def oracle_detect(image: np.ndarray, score: float = 0.6, nms: float = 0.3):
    """OpenCV's YuNet on `image`: boxes [K,4] x1y1x2y2, landmarks [K,5,2], scores [K]."""
    h, w = image.shape[:2]
    detector = cv2.FaceDetectorYN.create(str(model_path("yunet_2023mar")), "", (w, h), score, nms, 5000)
    _, faces = detector.detect(np.ascontiguousarray(image))
    if faces is None:
        return np.zeros((0, 4)), np.zeros((0, 5, 2)), np.zeros((0,))
    boxes = faces[:, :4].astype(np.float64).copy()
    boxes[:, 2:] += boxes[:, :2]
    return boxes, faces[:, 4:14].reshape(-1, 5, 2).astype(np.float64), faces[:, 14].astype(np.float64)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    x1, y1 = np.maximum(a[:2], b[:2])
    x2, y2 = np.minimum(a[2:], b[2:])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2]) - inter
    return float(inter / union)


def greedy_match(boxes_a: np.ndarray, boxes_b: np.ndarray) -> list[tuple[int, int, float]]:
    """Pairs (i, j, IoU), best overlap first, each box used once."""
    pairs = sorted(
        ((iou(a, b), i, j) for i, a in enumerate(boxes_a) for j, b in enumerate(boxes_b)), reverse=True
    )
    used_a, used_b, out = set(), set(), []
    for value, i, j in pairs:
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            out.append((i, j, value))
    return out


# -- detection --------------------------------------------------------------------------------------


def test_t1_six_faces_match_opencv_on_the_same_letterboxed_picture(models, t1_image):
    table = hostk.detect(models, [t1_image])
    assert len(table) == 6
    assert table.box.dtype == np.float32 and table.landmarks5.shape == (6, 5, 2)
    assert np.all(np.diff(table.score) <= 0), "rows are ordered by score"

    settings = models.detector.settings
    batch, scales = letterbox([t1_image], settings.input_size)
    assert np.array_equal(batch, np.round(batch)) and batch.min() >= 0 and batch.max() <= 255
    canvas = batch[0].transpose(1, 2, 0).astype(np.uint8)  # exactly the picture ffbatch feeds
    boxes, landmarks, scores = oracle_detect(canvas, settings.score_threshold, settings.nms_iou)
    boxes, landmarks = boxes / scales[0], landmarks / scales[0]
    assert len(boxes) == 6

    matches = greedy_match(table.box.astype(np.float64), boxes)
    assert len(matches) == 6
    for i, j, overlap in matches:
        assert overlap > 0.95
        np.testing.assert_allclose(table.box[i], boxes[j], atol=PX, err_msg=f"face {i} box")
        np.testing.assert_allclose(table.landmarks5[i], landmarks[j], atol=PX, err_msg=f"face {i} landmarks")
        assert abs(float(table.score[i]) - scores[j]) < 0.01


def test_t1_agrees_with_opencv_at_full_resolution(models, t1_image):
    table = hostk.detect(models, [t1_image])
    boxes, landmarks, _ = oracle_detect(t1_image)
    assert len(boxes) == len(table) == 6
    matches = greedy_match(table.box.astype(np.float64), boxes)
    assert len(matches) == 6
    for i, j, overlap in matches:
        assert overlap > 0.7, f"face {i}: IoU {overlap:.2f} with the full-resolution oracle"
        # landmarks land on the same features: within a tenth of the face width
        width = table.box[i, 2] - table.box[i, 0]
        assert np.abs(table.landmarks5[i] - landmarks[j]).max() < 0.1 * width


def test_astronaut_has_one_face_with_landmarks_inside_its_box(models, astronaut_image):
    table = hostk.detect(models, [astronaut_image])
    assert len(table) == 1
    x1, y1, x2, y2 = table.box[0]
    assert 0 <= x1 < x2 <= 512 and 0 <= y1 < y2 <= 512
    lm = table.landmarks5[0]
    assert np.all((lm[:, 0] > x1) & (lm[:, 0] < x2) & (lm[:, 1] > y1) & (lm[:, 1] < y2))
    assert lm[0, 0] < lm[1, 0], "image-left eye comes first"
    assert lm[2, 1] > lm[:2, 1].max() and lm[3:, 1].min() > lm[2, 1], "eyes above nose above mouth"


def test_batched_detection_equals_each_image_alone(models, t1_image, astronaut_image):
    crop_origin = np.array([200, 100])
    crop = np.ascontiguousarray(t1_image[100:700, 200:1000])
    images = [t1_image, astronaut_image, crop]
    batched = hostk.detect(models, images)
    assert np.all(np.diff(batched.frame_index) >= 0), "rows are grouped by frame"
    for i, image in enumerate(images):
        alone = hostk.detect(models, [image])
        rows = batched.select(batched.frame_index == i)
        assert len(rows) == len(alone) > 0, f"image {i}"
        np.testing.assert_allclose(rows.box, alone.box, atol=1e-3)
        np.testing.assert_allclose(rows.landmarks5, alone.landmarks5, atol=1e-3)
        np.testing.assert_allclose(rows.score, alone.score, atol=1e-5)
        assert np.all(alone.frame_index == 0)

    # the crop's faces are t1's faces, moved by the crop origin (seen at another scale: loosely)
    in_crop = batched.select(batched.frame_index == 2)
    shifted = in_crop.box + np.tile(crop_origin, 2)
    matches = greedy_match(shifted.astype(np.float64), batched.select(batched.frame_index == 0).box)
    assert len(matches) == len(in_crop)
    assert all(overlap > 0.6 for _, _, overlap in matches)


def test_no_face_and_empty_batch(models):
    yy, xx = np.mgrid[0:300, 0:400]
    gradient = np.dstack([xx * 255 // 400, yy * 255 // 300, np.full_like(xx, 128)]).astype(np.uint8)
    assert len(hostk.detect(models, [gradient])) == 0
    assert len(hostk.detect(models, [])) == 0
    empty = hostk.analyse(models, [gradient], FaceTable.empty())
    assert len(empty) == 0 and empty.mesh.shape == (0, 468, 3)


# -- face mesh --------------------------------------------------------------------------------------


def test_mesh_keeps_every_t1_face_with_points_inside_its_box(models, t1_image):
    table = hostk.detect(models, [t1_image])
    meshed = hostk.analyse(models, [t1_image], table)
    assert len(meshed) == 6
    assert meshed.mesh.shape == (6, 468, 3) and meshed.mesh.dtype == np.float32
    assert np.all(meshed.presence > 10), meshed.presence
    np.testing.assert_array_equal(meshed.box, table.box)  # rows kept in order, columns untouched
    for box, mesh in zip(meshed.box, meshed.mesh, strict=True):
        centre, half = (box[:2] + box[2:]) / 2, (box[2:] - box[:2]) / 2
        reach = np.abs(mesh[:, :2] - centre) / half
        assert reach.max() < 1.3, "mesh points stay inside the box grown by 30%"
        assert reach.max() > 0.7, "the mesh spans the face, not a point"
        # anatomy: eye corners either side of the nose tip, chin (152) below the forehead (10)
        assert mesh[33, 0] < mesh[4, 0] < mesh[263, 0]
        assert mesh[10, 1] < mesh[4, 1] < mesh[152, 1]


def test_batched_mesh_equals_each_face_alone(models, t1_image, astronaut_image):
    images = [t1_image, astronaut_image]
    table = hostk.detect(models, images)
    assert len(table) == 7
    batched = hostk.analyse(models, images, table)
    assert len(batched) == 7
    for row in range(len(table)):
        frame = int(table.frame_index[row])
        one = table.select(np.array([row])).with_columns(frame_index=np.zeros(1, np.int32))
        alone = hostk.analyse(models, [images[frame]], one)
        assert len(alone) == 1
        np.testing.assert_allclose(batched.mesh[row], alone.mesh[0], atol=1e-3)
        np.testing.assert_allclose(batched.presence[row], alone.presence[0], atol=1e-3)


def test_the_cpu_runs_the_mesh_a_few_crops_a_call_with_the_same_points(models, t1_image, astronaut_image):
    """On the CPU the mesh takes its crops a cache-sized few a call (BatchPolicy.cache_items), a
    GPU all in one; the points are the same bits either way, and the keep-all mesh the pipeline
    builds for the person map keeps the call size."""
    images = [t1_image, astronaut_image]
    table = hostk.detect(models, images)
    session = models.mesh.session
    chunked = FaceMesh(session, MeshSettings(), policy=BatchPolicy())
    whole = FaceMesh(session, MeshSettings(), policy=BatchPolicy(on_gpu=True))
    assert chunked.max_batch == 2 and whole.max_batch is None
    calls: list[int] = []
    counted = _CountingSession(session, calls)
    chunked.session, whole.session = counted, counted
    a = chunked(hostk.HOST, hostk.frames(images), table)
    assert calls == [2, 2, 2, 1] * 2, calls  # 7 crops, two passes
    calls.clear()
    b = whole(hostk.HOST, hostk.frames(images), table)
    assert calls == [7, 7]
    np.testing.assert_array_equal(a.mesh, b.mesh)
    np.testing.assert_array_equal(a.presence, b.presence)
    saved = models.__dict__["mesh"]
    models.__dict__["mesh"] = whole  # a GPU's mesh: its keep-all twin takes all crops in one call too
    try:
        assert meshing(models, keep_all=True).max_batch is None
    finally:
        models.__dict__["mesh"] = saved


class _CountingSession:
    """A session that records how many items each call holds."""

    def __init__(self, inner, calls: list[int]) -> None:
        self.inner, self.calls = inner, calls
        self.inputs, self.outputs, self.label = inner.inputs, inner.outputs, inner.label

    def run(self, feeds):
        self.calls.append(len(next(iter(feeds.values()))))
        return self.inner.run(feeds)


def test_a_non_face_row_gets_negative_presence_and_is_dropped(models, t1_image):
    faces = hostk.detect(models, [t1_image])
    x0, y0, x1, y1 = 400.0, 780.0, 600.0, 880.0  # the wooden poker table, bottom middle
    w, h = x1 - x0, y1 - y0
    fake_landmarks = np.array(
        [[0.3, 0.4], [0.7, 0.4], [0.5, 0.6], [0.35, 0.8], [0.65, 0.8]], np.float32
    ) * np.array([w, h], np.float32) + np.array([x0, y0], np.float32)
    fake = FaceTable(
        frame_index=np.zeros(1, np.int32),
        box=np.array([[x0, y0, x1, y1]], np.float32),
        landmarks5=fake_landmarks[None],
        score=np.array([0.99], np.float32),
    )
    table = FaceTable.concat([faces, fake], [0, 0])
    assert len(table) == 7

    keep_all = FaceMesh(models.mesh.session, MeshSettings(presence_threshold=-np.inf))
    scored = keep_all(hostk.HOST, hostk.frames([t1_image]), table)
    assert len(scored) == 7
    assert scored.presence[6] < 0, f"the table scored {scored.presence[6]:.1f}"
    assert np.all(scored.presence[:6] > 10)

    kept = hostk.analyse(models, [t1_image], table)
    assert len(kept) == 6
    np.testing.assert_array_equal(kept.box, faces.box)


# -- selection ----------------------------------------------------------------------------------


def _table(frame_index, boxes) -> FaceTable:
    n = len(frame_index)
    return FaceTable(
        frame_index=np.asarray(frame_index, np.int32),
        box=np.asarray(boxes, np.float32),
        landmarks5=np.zeros((n, 5, 2), np.float32),
        score=np.linspace(0.99, 0.7, n).astype(np.float32),  # by score, not by size
    )


def test_select_one_keeps_the_largest_face_of_each_frame():
    table = _table(
        [0, 0, 0, 2, 2, 3],
        [
            [0, 0, 10, 10],  # 100
            [0, 0, 30, 20],  # 600  <- frame 0
            [0, 0, 20, 20],  # 400
            [5, 5, 55, 55],  # 2500 <- frame 2
            [0, 0, 10, 100],  # 1000
            [1, 1, 2, 2],  # 1 <- frame 3, alone
        ],
    )
    one = select_faces(table, "one", 4)
    assert one.frame_index.tolist() == [0, 2, 3]
    np.testing.assert_array_equal(one.box, table.box[[1, 3, 5]])
    np.testing.assert_array_equal(one.score, table.score[[1, 3, 5]])  # every column follows
    assert one.counts_per_frame(4).tolist() == [1, 0, 1, 1]
    assert select_faces(table, "many", 4) is table
    assert len(select_faces(FaceTable.empty(), "one", 3)) == 0


def test_select_one_on_t1_is_the_biggest_face(models, t1_image):
    table = hostk.detect(models, [t1_image, t1_image])
    one = select_faces(table, "one", 2)
    assert one.frame_index.tolist() == [0, 1]
    assert one.areas()[0] == pytest.approx(table.areas()[table.frame_index == 0].max())
