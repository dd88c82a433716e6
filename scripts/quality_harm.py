"""Harm to a face that needs no recogniser: the face mesh run on the output against the input
(eye and mouth openings and gaze, each as a share of that eye's or the mouth's width) and the
detector's confidence on the output face against the input's; and how much deeper the smile
lines (nose wing to mouth corner) are on the output than on the input: the target's expression."""

from __future__ import annotations

import cv2
import numpy as np

from facefusion_batch.faces.mesh import eye_frame
from facefusion_batch.swap.classical.smile_lines import SMILE_LINES

OPENING_LIMIT = 0.20  # the target: openings within 20 % of the eye/mouth width
CONFIDENCE_LIMIT = 0.5  # the output face found with under half the input's confidence
GAZE_FLAG = 0.25  # a gaze moved by a quarter of the eye's width: counted, no target of the issue's
LID_FLAG = 0.5  # an eye's lid read (swap/classical/lids.py, 0 open to 1 shut) moved by half: counted likewise
# detail along the input face's blurriest direction, output over input (`blur_mismatch`): counted
# likewise when the swap is half again as sharp there as its frame (a crisp face pasted into a
# motion blur), or has lost half of it (edges of the input gone: a glasses rim painted over)
SHARPER_FLAG, SOFTER_FLAG = 1.5, 0.5
# a smile line darker against the cheek round it by a tenth of the cheek's grey more than the input's
# (`fold_deepening`): counted likewise
FOLD_FLAG = 0.10
# IOD from a fold's line: the band its darkest quarter is read in, and the ring of cheek round it
FOLD_BAND, FOLD_RING = (0.0, 0.04), (0.08, 0.2)


def loop_opening(points: np.ndarray, angle: float) -> float:
    """Gap across the middle third of a closed loop (an eye's lids, the inner lips) over its width
    along the face's eye line (`angle`, radians)."""
    u = np.array([np.cos(angle), np.sin(angle)])
    v = np.array([-u[1], u[0]])
    pu, pv = points @ u, points @ v
    width = float(np.ptp(pu))
    middle = np.abs(pu - (pu.min() + pu.max()) / 2) <= width / 6
    if width < 1e-6 or middle.sum() < 2:
        return 0.0
    return float(np.ptp(pv[middle]) / width)


def openings(mesh: np.ndarray, regions) -> np.ndarray:
    """[3]: the image-left eye's, the image-right eye's and the mouth's opening (loop_opening)."""
    angle = eye_frame(mesh)[0]
    loops = (regions.right_eye, regions.left_eye, regions.lips_inner)  # right_eye is image-left
    return np.array([loop_opening(mesh[loop, :2], angle) for loop in loops])


def gazes(image: np.ndarray, mesh: np.ndarray, regions) -> np.ndarray:
    """[2, 2]: per eye (image-left first), where its darkest quarter (iris and pupil) lies from
    the eye's centre, along and across the eye line, as a share of the eye's width; NaN for an
    eye too shut or too small to hold one."""
    angle = eye_frame(mesh)[0]
    u = np.array([np.cos(angle), np.sin(angle)])
    v = np.array([-u[1], u[0]])
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    out = np.full((2, 2), np.nan)
    for i, loop in enumerate((regions.right_eye, regions.left_eye)):
        pts = mesh[loop, :2]
        width = float(np.ptp(pts @ u))
        if width < 8 or loop_opening(pts, angle) < 0.12:
            continue
        mask = np.zeros(grey.shape, np.uint8)
        cv2.fillPoly(mask, [np.round(pts).astype(np.int32)], 1)
        ys, xs = np.nonzero(mask)
        if len(ys) < 12:
            continue
        values = grey[ys, xs]
        dark = values <= np.percentile(values, 25)
        spot = np.array([xs[dark].mean(), ys[dark].mean()]) - pts.mean(axis=0)
        out[i] = [spot @ u / width, spot @ v / width]
    return out


def face_harm(
    before: np.ndarray, after: np.ndarray, mesh_in: np.ndarray, mesh_out: np.ndarray | None, regions
) -> dict[str, float]:
    """The largest opening change and gaze change of one face (NaN where the output has no mesh)."""
    if mesh_out is None:
        return {"opening_change": float("nan"), "gaze_change": float("nan")}
    change = np.abs(openings(mesh_out, regions) - openings(mesh_in, regions))
    gaze = np.linalg.norm(gazes(after, mesh_out, regions) - gazes(before, mesh_in, regions), axis=1)
    return {
        "opening_change": float(change.max()),
        "gaze_change": float(np.nanmax(gaze)) if np.isfinite(gaze).any() else float("nan"),
    }


def blur_mismatch(before: np.ndarray, after: np.ndarray, mesh_in: np.ndarray, regions) -> float:
    """How much sharper the output face is than the input along the input face's blurriest
    direction: the gradient energy inside the face oval along the least eigenvector of the
    input's structure tensor, output over input (1: as soft; a face blurred along one direction,
    a motion blur, shows a swap that stays crisp there as much more than 1). NaN where the face
    is too small to tell."""
    h, w = before.shape[:2]
    oval = np.zeros((h, w), np.uint8)
    cv2.fillPoly(oval, [np.round(mesh_in[regions.face_oval, :2]).astype(np.int32)], 1)
    inside = oval > 0
    if inside.sum() < 400:
        return float("nan")

    def tensor(image: np.ndarray) -> np.ndarray:
        grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
        gx, gy = cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1)
        gx, gy = gx[inside].astype(np.float64), gy[inside].astype(np.float64)
        return np.array([[np.mean(gx * gx), np.mean(gx * gy)], [np.mean(gx * gy), np.mean(gy * gy)]])

    t_in, t_out = tensor(before), tensor(after)
    values, vectors = np.linalg.eigh(t_in)
    soft = vectors[:, 0]  # the direction the input face has least detail along
    return float((soft @ t_out @ soft) / max(values[0], 1e-6))


def fold_depths(image: np.ndarray, mesh: np.ndarray, regions) -> np.ndarray:
    """[2]: how much darker each smile line's darkest quarter is than the median of the cheek
    round it, as a share of that median (NaN where the face is too small to tell): a fold that
    is deep on the picture reads about 0.1-0.3, a smooth cheek about 0."""
    h, w = image.shape[:2]
    iod = 0.7 * eye_frame(mesh)[1]
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY).astype(np.float32)
    face = np.zeros((h, w), np.uint8)
    cv2.fillPoly(face, [np.round(mesh[regions.face_oval, :2]).astype(np.int32)], 1)
    for loop in (regions.lips_outer, regions.left_eye, regions.right_eye):
        cv2.fillPoly(face, [np.round(mesh[loop, :2]).astype(np.int32)], 0)
    face = cv2.erode(face, np.ones((3, 3), np.uint8)) > 0  # the lips' rim is no fold
    out = np.full(2, np.nan)
    for i, line in enumerate(SMILE_LINES):
        drawn = np.zeros((h, w), np.uint8)
        cv2.polylines(drawn, [np.round(mesh[line, :2]).astype(np.int32)], False, 1, 1)
        dist = cv2.distanceTransform((drawn == 0).astype(np.uint8), cv2.DIST_L2, 5) / max(iod, 1e-6)
        band = face & (dist >= FOLD_BAND[0]) & (dist <= FOLD_BAND[1])
        ring = face & (dist >= FOLD_RING[0]) & (dist <= FOLD_RING[1])
        if band.sum() < 8 or ring.sum() < 16:
            continue
        cheek = float(np.median(grey[ring]))
        out[i] = (cheek - float(np.percentile(grey[band], 25))) / max(cheek, 1.0)
    return out


def fold_deepening(before: np.ndarray, after: np.ndarray, mesh_in: np.ndarray, regions) -> float:
    """How much deeper the output's smile lines are than the input's at the input face's mesh
    (`fold_depths`, the larger of the two; negative: shallower). NaN where it cannot tell."""
    change = fold_depths(after, mesh_in, regions) - fold_depths(before, mesh_in, regions)
    return float(np.nanmax(change)) if np.isfinite(change).any() else float("nan")


def match(box: np.ndarray, boxes: np.ndarray) -> int:
    """The row of `boxes` that overlaps `box` most (IoU over 0.3), or -1."""
    if not len(boxes):
        return -1
    x0 = np.maximum(box[0], boxes[:, 0])
    y0 = np.maximum(box[1], boxes[:, 1])
    x1 = np.minimum(box[2], boxes[:, 2])
    y1 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    iou = inter / (area(box) + area(boxes) - inter + 1e-6)
    best = int(np.argmax(iou))
    return best if iou[best] > 0.3 else -1
