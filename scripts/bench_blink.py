"""Is a blink that only the picture sees drawn shut, and on time? (Not a test: numbers and a sheet.)

The face mesh keeps its eye loops open over a shut eye (t1.jpg's closed eyes measure as open as
David's), so the classical swap reads lowered lids from the picture (swap/classical/lids.py), and the
tracker filters those reads along each track (faces/track.py, `lid_average`). There is no real
clip with a blink here, so this makes one: bench_quality's pan clip of t1.jpg, where frames
--at .. --at + --blink - 1 come from a copy of the photo with the eyes of every face whose
eyes read open painted shut (the skin just below each eye, a dark lash line along its lower
edge). The clip is swapped twice with the astronaut as the source, in the same run: with the
tracker's filter, and with the plain mean of each track's last 8 reads it replaces.

Per painted eye whose lid the picture reads shut on most blink frames, for each filter: the
blink frames drawn shut (hold ≥ 0.95), the frames drawn part shut (a ghost of both eyes:
0.05–0.95) and the frames still drawn shut after the blink; the mesh's own eye opening
before and during the blink. Writes blink.json, blink.png (holds by frame) and
blink_crops.png (the first painted face's eyes, 1:1 shown 3x, each frame around the blink,
one row a filter) to --out.

Measured (2-core x86_64, 44 frames, a 4-frame blink at frame 20): 3 of 6 painted eyes read shut
(the far eyes of turned faces do not); the filter draws them shut on 2 of the 4 blink frames, part
shut on 4 frames (2 before, 2 after) and open from the 6th frame on; the plain mean draws them
shut on none, part shut on 11 (a half-clear double eye), at most 0.5 shut. The mesh's eye opening
is 0.30 before and during the blink: it does not see it.

    .venv/bin/python scripts/bench_blink.py --out out/bench-blink
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "scripts")]

from bench_quality import DURATION, FPS, HOST, SIZE, classical_settings, to_photo  # noqa: E402
from make_inputs import render_frame  # noqa: E402

from facefusion_batch.faces import track  # noqa: E402
from facefusion_batch.models.assets import asset_path  # noqa: E402
from facefusion_batch.pipeline.build import build_pipeline, load_models  # noqa: E402
from facefusion_batch.settings.types import SwapSettings  # noqa: E402
from facefusion_batch.swap.classical.features import eye_openness  # noqa: E402
from facefusion_batch.swap.classical.lids import shut_lids  # noqa: E402

SHUT, PART = 0.95, 0.05  # drawn holds: shut at or above SHUT; a ghost of both eyes between
LID_SHADE = 0.93  # a painted lid: the cheek's colour just below the eye, this much darker


def paint_shut(photo: np.ndarray, mesh: np.ndarray, loops) -> np.ndarray:
    """`photo` with each eye loop of `mesh` [468, 2+] filled with the skin just below it (a
    little darker, as a lid) and a dark lash line along its lower edge, edges softened."""
    out = photo.astype(np.float32)
    for loop in loops:
        pts = mesh[loop, :2]
        width = float(np.ptp(pts[:, 0]))
        inside = np.zeros(photo.shape[:2], np.uint8)
        cv2.fillPoly(inside, [np.round(pts).astype(np.int32)], 255)
        inside = cv2.dilate(inside, np.ones((3, 3), np.uint8))
        cheek = np.zeros_like(inside)  # the skin just below the eye, darkened a little: a lid
        cv2.fillPoly(cheek, [np.round(pts + [0, 0.8 * width]).astype(np.int32)], 255)
        lid = np.zeros_like(photo)
        lid[:] = (np.median(photo[cheek > 0], axis=0) * LID_SHADE).astype(np.uint8)
        a, b = pts[np.argmin(pts[:, 0])], pts[np.argmax(pts[:, 0])]
        below = (b[0] - a[0]) * (pts[:, 1] - a[1]) - (b[1] - a[1]) * (pts[:, 0] - a[0]) > 0
        lash = np.vstack([a, pts[below], b])
        lash = lash[np.argsort(lash[:, 0])]
        cv2.polylines(lid, [np.round(lash).astype(np.int32)], False, (40, 40, 40), 2, cv2.LINE_AA)
        alpha = cv2.GaussianBlur(inside.astype(np.float32) / 255, (5, 5), 1.2)[..., None]
        out = out * (1 - alpha) + lid * alpha
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def swap_clip(models, frames: list[np.ndarray], batch: int) -> tuple[list[np.ndarray], dict]:
    """Swap `frames` in batches as a render does; per track, per frame: its box, the lids read
    from the picture, the lids the tracker hands the swap, and the mesh's eye opening."""
    log: dict[int, list[dict]] = {}
    step = track.FaceTracker.step

    def logged(self, table, frame_count, thumbs=None, sizes=None):
        first = self.frame
        out = step(self, table, frame_count, thumbs, sizes)
        opening = eye_openness(table.mesh, models.regions)
        for r in range(len(out)):
            rows = np.flatnonzero(table.frame_index == out.frame_index[r])
            row = rows[np.argmin(np.abs(table.box[rows] - out.box[r]).sum(axis=1))]
            log.setdefault(int(out.track[r]), []).append(
                {
                    "frame": first + int(out.frame_index[r]),
                    "box": out.box[r].tolist(),
                    "read": table.lids[row].tolist(),
                    "drawn": out.lids[r].tolist(),
                    "opening": opening[row].tolist(),
                }
            )
        return out

    swap = SwapSettings(swapper="classical", classical=classical_settings([]))
    pipe = build_pipeline(models, (asset_path("astronaut.png"),), swap, "many")
    track.FaceTracker.step = logged
    try:
        pipe.start_job()
        swapped = []
        for seq, start in enumerate(range(0, len(frames), batch)):
            swapped += pipe(HOST, frames[start : start + batch], seq=seq).frames
    finally:
        track.FaceTracker.step = step
    return swapped, log


def eye_rows(log: dict, painted: np.ndarray, at: int, blink: int, photo_shape) -> list[dict]:
    """The painted eyes the picture reads shut on most blink frames: track, eye, face."""
    rows = []
    for tid, entries in log.items():
        during = [e for e in entries if at <= e["frame"] < at + blink]
        if not during:
            continue
        box = np.array(during[0]["box"])
        centre = to_photo((box[:2] + box[2:]) / 2, during[0]["frame"] / FPS, photo_shape)
        face = int(np.argmin(np.linalg.norm(painted[:, :2] - centre, axis=1)))
        if np.linalg.norm(painted[face, :2] - centre) > painted[face, 2]:
            continue  # not a painted face
        for eye in range(2):
            reads = np.array([e["read"][eye] for e in during])
            rows.append({"track": tid, "eye": eye, "face": face, "read_shut": int((reads >= 0.5).sum())})
    return rows


def measure(entries: list[dict], eye: int, at: int, blink: int) -> dict:
    by = {e["frame"]: e for e in entries}
    drawn = {f: by[f]["drawn"][eye] for f in by}
    inside = [drawn[f] for f in range(at, at + blink) if f in drawn]
    return {
        "blink_frames_drawn_shut": int(sum(v >= SHUT for v in inside)),
        "frames_drawn_part_shut": int(sum(PART < v < SHUT for v in drawn.values())),
        "frames_drawn_after_blink": int(sum(v > PART for f, v in drawn.items() if f >= at + blink)),
        "peak": round(max(drawn.values()), 3),
    }


def crops(results: dict, tid: int, frames_at: range, path: Path, per_row: int = 6) -> None:
    """Track `tid`'s eyes in each frame of `frames_at`, 1:1 shown 3x: per filter a row of tiles,
    the rows of all filters together, wrapped every `per_row` frames."""
    strips = {}
    for name, (swapped, log) in results.items():
        boxes = {e["frame"]: np.array(e["box"]) for e in log[tid]}
        tiles = []
        for f in frames_at:
            box = boxes[f]
            w = box[2] - box[0]
            x0, y0 = int(box[0]), int(box[1] + 0.42 * (box[3] - box[1]) - 0.17 * w)
            tile = swapped[f][max(y0, 0) : max(y0, 0) + int(0.34 * w), max(x0, 0) : max(x0, 0) + int(w)]
            tile = cv2.resize(tile, (3 * int(w), 3 * int(0.34 * w)), interpolation=cv2.INTER_NEAREST)
            cv2.putText(tile, f"{name} {f}", (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1)
            tiles.append(tile)
        strips[name] = tiles
    every = [t for tiles in strips.values() for t in tiles]
    h, w = min(t.shape[0] for t in every), min(t.shape[1] for t in every)
    blank = np.zeros((h, w, 3), np.uint8)
    blocks = []
    for start in range(0, len(frames_at), per_row):
        for tiles in strips.values():
            row = [t[:h, :w] for t in tiles[start : start + per_row]]
            blocks.append(np.hstack(row + [blank] * (per_row - len(row))))
        blocks.append(np.full((6, per_row * w, 3), 255, np.uint8))
    cv2.imwrite(str(path), np.vstack(blocks[:-1]))


def draw(result: dict, results: dict, eyes: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    at, blink = result["blink_at"], result["blink_frames"]
    fig, axes = plt.subplots(len(eyes), 1, figsize=(8, 1.9 * len(eyes) + 0.6), squeeze=False)
    for ax, row in zip(axes[:, 0], eyes, strict=True):
        ax.axvspan(at - 0.5, at + blink - 0.5, color="0.85", label="blink (painted)")
        for name, (_, log) in results.items():
            entries = sorted(log[row["track"]], key=lambda e: e["frame"])
            frames = [e["frame"] for e in entries]
            ax.plot(frames, [e["drawn"][row["eye"]] for e in entries], marker=".", label=f"drawn: {name}")
        ax.plot(frames, [e["read"][row["eye"]] for e in entries], "k:", lw=1, label="read from the picture")
        ax.set_ylim(-0.05, 1.05)
        ax.set_ylabel(f"track {row['track']}\neye {row['eye']}", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, ncol=4, loc="upper left")
    axes[-1, 0].set_xlabel("frame")
    fig.suptitle(
        f"how shut each painted eye is drawn (1 = the target's lid), {result['machine']}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=44)
    parser.add_argument("--at", type=int, default=20, help="first frame of the blink")
    parser.add_argument("--blink", type=int, default=4, help="frames the eyes stay shut")
    parser.add_argument("--batch-size", type=int, default=8, help="frames per batch (the CPU default)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench-blink")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    models = load_models("cpu", threads=None, models_dir=None)
    photo = cv2.imread(str(asset_path("t1.jpg")))
    still = HOST.upload([photo])
    faces = models.mesh(HOST, still, models.detector(HOST, still))
    open_eyes = np.flatnonzero((shut_lids(HOST, still, faces, models.regions) < PART).all(axis=1))
    shut = photo
    for f in open_eyes:
        shut = paint_shut(shut, faces.mesh[f], (models.regions.left_eye, models.regions.right_eye))
    painted = np.array(
        [
            [*(faces.box[f, :2] + faces.box[f, 2:]) / 2, (faces.box[f, 2] - faces.box[f, 0]) / 2]
            for f in open_eyes
        ]
    )
    clip = [
        render_frame(shut if args.at <= i < args.at + args.blink else photo, i / FPS, DURATION, SIZE)
        for i in range(args.frames)
    ]

    plain = track.lid_average
    results = {"filter": swap_clip(models, clip, args.batch_size)}
    track.lid_average = lambda values: np.mean(values, axis=0)  # the plain mean over the window
    try:
        results["plain mean"] = swap_clip(models, clip, args.batch_size)
    finally:
        track.lid_average = plain

    log = results["filter"][1]
    eyes = [
        r for r in eye_rows(log, painted, args.at, args.blink, photo.shape) if 2 * r["read_shut"] > args.blink
    ]
    missed = len(open_eyes) * 2 - len(eyes)
    for row in eyes:
        entries = log[row["track"]]
        before = [e["opening"][row["eye"]] for e in entries if e["frame"] < args.at]
        during = [e["opening"][row["eye"]] for e in entries if args.at <= e["frame"] < args.at + args.blink]
        row["mesh_opening_before"] = round(float(np.mean(before)), 3) if before else None
        row["mesh_opening_during"] = round(float(np.mean(during)), 3) if during else None
        for name, (_, other) in results.items():
            row[name] = measure(other[row["track"]], row["eye"], args.at, args.blink)
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "frames": args.frames,
        "blink_at": args.at,
        "blink_frames": args.blink,
        "faces_painted": len(open_eyes),
        "painted_eyes_not_read_shut": missed,
        "eyes": eyes,
    }
    (args.out / "blink.json").write_text(json.dumps(result, indent=1))
    if eyes:
        draw(result, results, eyes, args.out / "blink.png")
        around = range(max(args.at - 2, 0), min(args.at + args.blink + 5, args.frames))
        crops(results, eyes[0]["track"], around, args.out / "blink_crops.png")
    print(json.dumps(result, indent=1))
    print(f"wrote {args.out}/blink.json, blink.png and blink_crops.png")


if __name__ == "__main__":
    main()
