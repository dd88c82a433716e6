"""End to end against FaceFusion: its own `headless-run` and `ffbatch headless-run` with the same
argument list, on the same short clip, the same source photo and the same model files.

The clip is a few frames of the `make bench` pan over a real photo, stored losslessly as RGB
(rawvideo in .mov), so both programs read exactly the same pixels; FaceFusion writes rawvideo
RGB (its lossless choice) and ffbatch FFV1 RGB, so what is compared is the arithmetic of the two
swaps, not two encoders. The models are the small stand-ins of tests/standins.py under
FaceFusion's names with their `.hash` (inswapper_128, arcface_w600k_r50, fan_68_5, 2dfan4,
fairface, xseg_1, bisenet_resnet_34, tiny content-check models that answer "safe") and OpenCV's
real YuNet as FaceFusion's yunet_2023_mar, all in one FaceFusion `.assets/models` that ffbatch
reads as `--models-dir`. Both run on one thread, niced. ffbatch's headless-run maps FaceFusion's
face_tracker_score 0 (no tracker) to `--face-presence 0 --smoothing 0` (without them its tracker
holds back a weak face new in the frame and smooths each track's points).

FaceFusion's arithmetic is the reference. For each frame the faces each program swapped are the
connected areas where its output differs from the input; the same faces are those whose areas
overlap (IoU over 0.5). Inside the union of both programs' areas the script reports the mean and
the maximum |FaceFusion − ffbatch| per face and overall, and the share of pixels over 2 levels;
outside them, each output against the input. It writes compare.json and compare.png (per-face
means, and 1:1 crops of the face that differs most: input, FaceFusion, ffbatch, |difference| ×8).

    python scripts/compare_facefusion.py --facefusion FF_DIR --facefusion-python FF_VENV/bin/python \\
        [--frames 3] [--faces 1] [--landmarker-score 0.5] [--out out/compare]

(`make compare-facefusion FACEFUSION=FF_DIR FACEFUSION_PYTHON=PY`; scripts/bench_facefusion.py
says how to get FaceFusion 3.8.1.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

SIZES = {"540p": (960, 540), "720p": (1280, 720)}
LIMIT_MEAN = 2.0  # levels: issue 37's bound on the mean difference inside the swapped faces


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--facefusion", type=Path, required=True, help="FaceFusion 3.8.1 source tree")
    parser.add_argument(
        "--facefusion-python", type=Path, required=True, help="a Python with its requirements"
    )
    parser.add_argument("--frames", type=int, default=3, help="frames of the clip (default 3)")
    parser.add_argument("--faces", choices=["1", "6"], default="1", help="faces in the clip (default 1)")
    parser.add_argument("--size", choices=list(SIZES), default="720p")
    parser.add_argument(
        "--landmarker-score",
        type=float,
        default=0.5,
        help="--face-landmarker-score for both (FaceFusion's default 0.5; 0 runs no landmarker)",
    )
    parser.add_argument("--work", type=Path, help="work folder (default: a new temporary one, removed)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "compare", help="for the JSON and PNG")
    args = parser.parse_args(argv)
    if not (args.facefusion / "facefusion.py").is_file():
        parser.error(f"--facefusion {args.facefusion}: no facefusion.py there (a FaceFusion source tree?)")
    if not (args.facefusion_python.is_file() and os.access(args.facefusion_python, os.X_OK)):
        parser.error(f"--facefusion-python {args.facefusion_python}: not an executable file")
    if args.frames < 1:
        parser.error("--frames must be at least 1")
    return args


# ---- setting up ---------------------------------------------------------------------------------


def place_models(models: Path, work: Path) -> None:
    """The small stand-ins and OpenCV's YuNet under FaceFusion's names, each with its `.hash`."""
    import standin_detectors
    import standins
    from bench_facefusion import nsfw_standin

    from facefusion_batch.paths import models_dir

    for name in ("inswapper_128", "arcface_w600k_r50", "xseg_1", "bisenet_resnet_34", "fairface"):
        standins.write_standin(models, name)
    standins.write_standin(models, "fan_68_5", standin_detectors.fan_68_5())
    standins.write_standin(models, "2dfan4", standin_detectors.fan2d4())
    for name, size, output in (("nsfw_1", 640, [1, 6, 8]), ("nsfw_2", 384, [1, 2]), ("nsfw_3", 448, [1, 4])):
        standins.write_standin(models, name, nsfw_standin(size, output))
    yunet = models_dir() / "face_detection_yunet_2023mar.onnx"
    if not yunet.is_file():
        sys.exit(f"{yunet} is missing: run `make models` (ffbatch models fetch) first")
    standin_detectors.write_detectors(work / "detectors", yunet)
    for ext in (".onnx", ".hash"):
        shutil.copy(work / "detectors" / f"yunet_2023_mar{ext}", models / f"yunet_2023_mar{ext}")


def lossless_clip(path: Path, faces: int, size: tuple[int, int], frames: int) -> Path:
    """The bench clip's frames as rawvideo BGR in .mov (no audio): what both programs decode."""
    import av
    from bench import make_clip

    lossy = make_clip(path.with_suffix(".mp4"), faces, size, frames)
    with av.open(str(lossy)) as src, av.open(str(path), "w") as out:
        stream = out.add_stream("rawvideo", rate=25)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "bgr24"
        for frame in src.decode(video=0):
            picture = av.VideoFrame.from_ndarray(frame.to_ndarray(format="bgr24"), format="bgr24")
            out.mux(stream.encode(picture))
        out.mux(stream.encode(None))
    return path


def facefusion_args(clip: Path, source: Path, out: Path, landmarker_score: float) -> list[str]:
    """FaceFusion's own options, the same for both programs (ffbatch reads FaceFusion's names)."""
    return [
        "headless-run", "-s", str(source), "-t", str(clip), "-o", str(out),
        "--processors", "face_swapper", "--face-swapper-model", "inswapper_128",
        "--face-detector-model", "yunet", "--face-detector-size", "640x640",
        "--face-selector-mode", "many", "--face-landmarker-score", str(landmarker_score),
        "--execution-providers", "cpu",
    ]  # fmt: skip


def run(command: list[str], cwd: Path, out: Path) -> float:
    out.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run(["nice", "-n", "10", *command], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or not out.is_file():
        sys.exit(
            f"{' '.join(command)}\nexit {done.returncode}, no {out}:\n"
            f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return seconds


# ---- comparing ----------------------------------------------------------------------------------


def read_frames(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]


def face_areas(original: np.ndarray, output: np.ndarray) -> list[tuple[int, int, int, int, np.ndarray]]:
    """The areas an output changed, one per face: (x, y, w, h, mask) of each connected part of
    the changed pixels, closed so that one face's pixels left as they were do not split it."""
    import cv2

    changed = (np.abs(output.astype(np.int16) - original).max(axis=2) > 0).astype(np.uint8)
    changed = cv2.morphologyEx(changed, cv2.MORPH_CLOSE, np.ones((15, 15), np.uint8))
    count, labels, stats, _ = cv2.connectedComponentsWithStats(changed)
    areas = []
    for i in range(1, count):
        x, y, w, h, size = (int(v) for v in stats[i])
        if size >= 64:  # a face, not a speck
            areas.append((x, y, w, h, labels == i))
    return areas


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 0.0


def compare_frames(originals: list[np.ndarray], facefusion: list[np.ndarray], ours: list[np.ndarray]) -> dict:
    """Faces matched frame by frame and the differences inside and outside them."""
    frames, worst = [], None
    for n, (orig, ff, ob) in enumerate(zip(originals, facefusion, ours, strict=True)):
        ff_faces, ob_faces = face_areas(orig, ff), face_areas(orig, ob)
        diff = np.abs(ff.astype(np.int16) - ob).max(axis=2)
        inside = np.zeros(orig.shape[:2], bool)
        faces = []
        for x, y, w, h, mask in ff_faces:
            match = max(ob_faces, key=lambda f: iou(mask, f[4]), default=None)
            overlap = iou(mask, match[4]) if match else 0.0
            area = mask | match[4] if match and overlap > 0.5 else mask
            inside |= area
            face = {
                "box_xywh": [x, y, w, h],
                "matched": overlap > 0.5,
                "iou": round(overlap, 3),
                "mean": round(float(np.abs(ff.astype(np.int16) - ob)[area].mean()), 3),
                "max": int(diff[area].max()),
                "over_2_share": round(float((diff[area] > 2).mean()), 4),
            }
            faces.append(face)
            if worst is None or face["mean"] > worst[0]:
                worst = (face["mean"], n, (x, y, w, h))
        unmatched = [
            [x, y, w, h] for x, y, w, h, m in ob_faces if not any(iou(m, f[4]) > 0.5 for f in ff_faces)
        ]
        for _, _, _, _, m in ob_faces:
            inside |= m
        outside = ~inside
        frames.append(
            {
                "frame": n,
                "faces_facefusion": len(ff_faces),
                "faces_ffbatch": len(ob_faces),
                "ffbatch_only_boxes": unmatched,
                "faces": faces,
                "inside_mean": round(float(np.abs(ff.astype(np.int16) - ob)[inside].mean()), 3)
                if inside.any()
                else None,
                "inside_max": int(diff[inside].max()) if inside.any() else None,
                "outside_max_facefusion_vs_input": int(np.abs(ff.astype(np.int16) - orig)[outside].max()),
                "outside_max_ffbatch_vs_input": int(np.abs(ob.astype(np.int16) - orig)[outside].max()),
            }
        )
    all_faces = [f for fr in frames for f in fr["faces"]]
    means = [f["mean"] for f in all_faces]
    summary = {
        "frames": len(frames),
        "faces_facefusion": sum(fr["faces_facefusion"] for fr in frames),
        "faces_ffbatch": sum(fr["faces_ffbatch"] for fr in frames),
        "same_faces": all(f["matched"] for f in all_faces)
        and all(not fr["ffbatch_only_boxes"] for fr in frames),
        "face_mean_max": max(means) if means else None,
        "face_mean_mean": round(float(np.mean(means)), 3) if means else None,
        "face_max": max((f["max"] for f in all_faces), default=None),
        "within_limit": bool(means) and max(means) <= LIMIT_MEAN,
    }
    return {"summary": summary, "frames": frames, "worst": worst}


def draw(results: dict, originals, facefusion, ours, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frames = results["frames"]
    fig = plt.figure(figsize=(14, 7.5))
    grid = fig.add_gridspec(2, 4, height_ratios=[1, 1.3])
    ax = fig.add_subplot(grid[0, :])
    labels, means, maxes = [], [], []
    for fr in frames:
        for i, face in enumerate(fr["faces"]):
            labels.append(f"f{fr['frame']}·{i}")
            means.append(face["mean"])
            maxes.append(face["max"])
    x = np.arange(len(labels))
    ax.bar(x - 0.2, means, 0.4, label="mean |FaceFusion − ffbatch| in the face")
    ax.bar(x + 0.2, maxes, 0.4, label="max")
    ax.axhline(LIMIT_MEAN, color="r", lw=0.8, ls="--", label=f"{LIMIT_MEAN:g} levels")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_yscale("symlog")
    ax.set_ylabel("levels (0–255)")
    ax.legend(fontsize=8)
    s = results["summary"]
    ax.set_title(
        f"{s['faces_facefusion']} faces FaceFusion, {s['faces_ffbatch']} ffbatch, same: {s['same_faces']}; "
        f"worst face mean {s['face_mean_max']}, max {s['face_max']}",
        fontsize=9,
    )
    if results.get("worst"):
        _, n, (x0, y0, w, h) = results["worst"]
        crops = [
            ("input", originals[n]),
            ("FaceFusion", facefusion[n]),
            ("ffbatch", ours[n]),
            (
                "|difference| ×8",
                np.clip(np.abs(facefusion[n].astype(np.int16) - ours[n]) * 8, 0, 255).astype(np.uint8),
            ),
        ]
        for i, (title, picture) in enumerate(crops):
            a = fig.add_subplot(grid[1, i])
            a.imshow(picture[y0 : y0 + h, x0 : x0 + w, ::-1], interpolation="nearest")
            a.set_title(f"{title} (frame {n}, 1:1)", fontsize=8)
            a.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_crops(results: dict, originals, facefusion, ours, out: Path) -> Path | None:
    """The worst face's crops side by side at 1:1 as a PNG of its own (for looking closely)."""
    import cv2

    if not results.get("worst"):
        return None
    _, n, (x, y, w, h) = results["worst"]
    diff = np.clip(np.abs(facefusion[n].astype(np.int16) - ours[n]) * 8, 0, 255).astype(np.uint8)
    row = np.hstack([p[y : y + h, x : x + w] for p in (originals[n], facefusion[n], ours[n], diff)])
    path = out / "compare-crops.png"
    cv2.imwrite(str(path), row)
    return path


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from facefusion_batch.models.assets import asset_path

    work = args.work or Path(tempfile.mkdtemp(prefix="ffbatch-compare-facefusion-"))
    work.mkdir(parents=True, exist_ok=True)
    ff_root = work / "facefusion"
    if ff_root.exists():
        shutil.rmtree(ff_root)
    shutil.copytree(args.facefusion, ff_root, ignore=shutil.ignore_patterns(".git", ".assets", ".jobs"))
    models = ff_root / ".assets" / "models"
    models.mkdir(parents=True)
    place_models(models, work)
    clip = lossless_clip(work / "clip.mov", int(args.faces), SIZES[args.size], args.frames)
    source = asset_path("astronaut.png")
    outs = {"facefusion": work / "facefusion.mov", "ffbatch": work / "ffbatch.mkv"}
    ff_command = [
        str(args.facefusion_python), "facefusion.py",
        *facefusion_args(clip, source, outs["facefusion"], args.landmarker_score),
        "--execution-thread-count", "1", "--output-video-encoder", "rawvideo", "--log-level", "warn",
    ]  # fmt: skip
    our_command = [
        sys.executable, "-m", "facefusion_batch",
        *facefusion_args(clip, source, outs["ffbatch"], args.landmarker_score),
        "--models-dir", str(ff_root), "--workers", "1", "--threads", "1",
        "--encoder", "ffv1", "--pix-fmt", "bgr0",
    ]  # fmt: skip
    seconds = {
        "facefusion": run(ff_command, ff_root, outs["facefusion"]),
        "ffbatch": run(our_command, ROOT, outs["ffbatch"]),
    }
    originals, facefusion, ours = (read_frames(p) for p in (clip, outs["facefusion"], outs["ffbatch"]))
    results = compare_frames(originals, facefusion, ours)
    version = subprocess.run(
        [str(args.facefusion_python), "facefusion.py", "--version"],
        cwd=ff_root,
        capture_output=True,
        text=True,
    ).stdout.strip()
    results.update(
        {
            "facefusion_version": version,
            "clip": f"{args.size}, {args.faces} face(s), {args.frames} frames, rawvideo BGR",
            "models": "tests/standins.py stand-ins (random weights) and OpenCV's YuNet as yunet_2023_mar",
            "arguments": " ".join(
                facefusion_args(Path("CLIP"), Path("SRC"), Path("OUT"), args.landmarker_score)
            ),
            "seconds_one_thread": {k: round(v, 1) for k, v in seconds.items()},
        }
    )
    args.out.mkdir(parents=True, exist_ok=True)
    draw(results, originals, facefusion, ours, args.out / "compare.png")
    write_crops(results, originals, facefusion, ours, args.out)
    (args.out / "compare.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["summary"]))
    print(f"wrote {args.out / 'compare.json'} and {args.out / 'compare.png'}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
