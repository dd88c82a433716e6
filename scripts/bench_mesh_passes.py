"""Is the face mesh's second pass still needed, where a track could give the crop? (Not a test.)

FaceMesh runs twice on every face: pass 1 on a crop from the detector's box and eyes, pass 2 on
a crop from pass 1's mesh (YuNet under-reads strong head tilt). A track knows each face's mesh
in the frame before, so it could hand that crop over and save a pass. This measures, on
bench_quality's pan clip of t1.jpg (six people, heads tilted up to about 16 degrees), per face:

- how far the detector's crop is turned (degrees) and moved (share of its side) against the
  crop pass 1's mesh gives;
- the RMS distance of each mesh to the two-pass one, as a share of the eye distance: one pass,
  three passes (how far from settled two are), and one pass on the crop the same face's
  two-pass mesh in the previous frame gives (what a track could hand over, moved by the
  detector box's shift between the frames);
- the seconds of one pass over the whole clip's faces (one model call, as in a render).

The same handed-over crop from --batch-size frames back (the last frame of the batch before)
is measured too. Writes mesh_passes.json and mesh_passes.png to --out. Compare within one run.

Measured (2-core x86_64, 24 frames, 119 faces): one pass 6.3 % of the eye distance from the
two-pass mesh (median; p90 10.3), three passes 1.5 % (4.2): two passes are near settled. One
pass on a handed-over crop, 1.8 % (4.5) from the frame before and 1.9 % (5.1) from 8 frames
back: as good as the second pass. The second pass stays all the same: that crop comes from
the track, the one ordered step, after the mesh, so the mesh of every batch would wait for
the batch before it to be tracked, where today every model stage runs batches in parallel,
and a frame's mesh would hang on where its batch starts (a `--frames` segment or a farm chunk
would no longer match the same frames of a whole render); the pass costs 0.34 s for the 119
faces here (about 3 ms a face).

    .venv/bin/python scripts/bench_mesh_passes.py --frames 24 --out out/bench-mesh
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "scripts")]

from bench_quality import DURATION, FPS, HOST, SIZE  # noqa: E402
from make_inputs import render_frame  # noqa: E402

from facefusion_batch.faces.mesh import eye_frame, roi_from_detection, roi_from_mesh  # noqa: E402
from facefusion_batch.models.assets import asset_path  # noqa: E402
from facefusion_batch.pipeline.build import load_models  # noqa: E402


def rms_share(a: np.ndarray, b: np.ndarray, iod: np.ndarray) -> np.ndarray:
    """[F] RMS point distance between two [F,468,3] meshes, as a share of each face's IOD."""
    return np.sqrt(((a[:, :, :2] - b[:, :, :2]) ** 2).sum(axis=2).mean(axis=1)) / iod


def previous_rows(table) -> np.ndarray:
    """[F] per face, the row of the same face in the frame before (nearest box centre within
    half a box side), -1 where there is none: the link a track makes."""
    centres = (table.box[:, :2] + table.box[:, 2:]) / 2
    sides = (table.box[:, 2:] - table.box[:, :2]).max(axis=1)
    out = np.full(len(table), -1)
    for f in range(len(table)):
        before = np.flatnonzero(table.frame_index == table.frame_index[f] - 1)
        if not len(before):
            continue
        d = np.linalg.norm(centres[before] - centres[f], axis=1)
        if d.min() < 0.5 * sides[f]:
            out[f] = before[int(np.argmin(d))]
    return out


def timed_pass(mesher, frames, frame_index, roi):
    start = time.perf_counter()
    mesh, _ = mesher.run_pass(HOST, frames, frame_index, roi)
    return mesh, time.perf_counter() - start


def draw(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    faces = result["faces"]
    turn = np.array([f["crop_turn_deg"] for f in faces])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, marker in (
        ("one_pass_pct_iod", "one pass (detector crop)", "o"),
        ("track_crop_pct_iod", "one pass (previous frame's crop)", "s"),
        ("track_crop_batch_back_pct_iod", f"one pass (crop from {result['batch_size']} frames back)", "x"),
        ("three_passes_pct_iod", "three passes", "^"),
    ):
        values = np.array([f[key] if f[key] is not None else np.nan for f in faces], float)
        ax.scatter(turn, values, marker=marker, s=18, label=label, alpha=0.8)
    ax.set_xlabel("detector crop turned against the mesh's (degrees)")
    ax.set_ylabel("RMS distance to the two-pass mesh (% of eye distance)")
    ax.set_title(f"face mesh passes, {result['machine']}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8, help="frames per batch (the CPU default)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench-mesh")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    models = load_models("cpu", threads=None, models_dir=None)
    mesher = models.mesh
    t1 = cv2.imread(str(asset_path("t1.jpg")))
    frames = HOST.upload([render_frame(t1, i / FPS, DURATION, SIZE) for i in range(args.frames)])
    table = models.detector(HOST, frames)
    index = table.frame_index

    detector_roi = roi_from_detection(table, mesher.settings.box_scale)
    one, seconds = timed_pass(mesher, frames, index, detector_roi)
    pass1_roi = roi_from_mesh(one, mesher.settings.mesh_scale)
    two, _ = timed_pass(mesher, frames, index, pass1_roi)
    three, _ = timed_pass(mesher, frames, index, roi_from_mesh(two, mesher.settings.mesh_scale))

    iod = np.array([0.7 * eye_frame(m)[1] for m in two])
    link = previous_rows(table)
    centres = (table.box[:, :2] + table.box[:, 2:]) / 2
    sides = (table.box[:, 2:] - table.box[:, :2]).max(axis=1)

    def handed_over(gap: int) -> np.ndarray:
        """[F] RMS to the two-pass mesh of one pass on the crop the same face's two-pass mesh
        `gap` frames before gives, moved and scaled as its detector box moved (NaN: no link)."""
        back = np.arange(len(table))
        for _ in range(gap):
            back = np.where(back >= 0, link[np.maximum(back, 0)], -1)
        rows = np.flatnonzero(back >= 0)
        out = np.full(len(table), np.nan)
        if not len(rows):
            return out
        src = back[rows]
        ratio = (sides[rows] / sides[src])[:, None, None]
        carried = two[src].copy()
        carried[:, :, :2] = (carried[:, :, :2] - centres[src][:, None]) * ratio + centres[rows][:, None]
        mesh, _ = timed_pass(mesher, frames, index[rows], roi_from_mesh(carried, mesher.settings.mesh_scale))
        out[rows] = rms_share(mesh, two[rows], iod[rows])
        return out

    gaps = {gap: handed_over(gap) for gap in (1, args.batch_size)}
    track = gaps[1]
    one_rms, three_rms = rms_share(one, two, iod), rms_share(three, two, iod)
    turn = np.degrees(np.abs(np.angle(np.exp(1j * (detector_roi[2] - pass1_roi[2])))))
    moved = np.linalg.norm(detector_roi[0] - pass1_roi[0], axis=1) / pass1_roi[1]

    def pct(value: float) -> float | None:
        return None if np.isnan(value) else round(100 * float(value), 2)

    faces = [
        {
            "frame": int(index[f]),
            "box_x": round(float(table.box[f, 0]), 1),
            "iod_px": round(float(iod[f]), 1),
            "crop_turn_deg": round(float(turn[f]), 2),
            "crop_move_share": round(float(moved[f]), 3),
            "one_pass_pct_iod": round(100 * float(one_rms[f]), 2),
            "three_passes_pct_iod": round(100 * float(three_rms[f]), 2),
            "track_crop_pct_iod": pct(track[f]),
            "track_crop_batch_back_pct_iod": pct(gaps[args.batch_size][f]),
        }
        for f in range(len(table))
    ]

    def stats(values: np.ndarray) -> dict:
        values = values[~np.isnan(values)] * 100
        points = (("p10", 10), ("median", 50), ("p90", 90))
        return {k: round(float(np.percentile(values, q)), 2) for k, q in points}

    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "frames": args.frames,
        "batch_size": args.batch_size,
        "faces_meshed": len(table),
        "seconds_per_pass": round(seconds, 3),
        "one_pass_pct_iod": stats(one_rms),
        "three_passes_pct_iod": stats(three_rms),
        "track_crop_pct_iod": stats(track),
        f"track_crop_{args.batch_size}_frames_back_pct_iod": stats(gaps[args.batch_size]),
        "faces": faces,
    }
    (args.out / "mesh_passes.json").write_text(json.dumps(result, indent=1))
    draw(result, args.out / "mesh_passes.png")
    print(json.dumps({k: v for k, v in result.items() if k != "faces"}, indent=1))
    print(f"wrote {args.out / 'mesh_passes.json'} and {args.out / 'mesh_passes.png'}")


if __name__ == "__main__":
    main()
