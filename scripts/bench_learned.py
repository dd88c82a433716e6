"""Learned-path throughput on this machine, with architecture-faithful stand-ins (random weights).

Measures, on onnxruntime's CPU provider:

- inswapper_128 stand-in (its real layer structure, ~350 GFLOP per face): faces per second
  run one face per call versus all faces in one call;
- the IResNet-50 ArcFace stand-in: the same, at batch 1 versus 32;
- end to end: `ffbatch render` of a tiny clip (one face per frame) with the learned swapper.

    python scripts/bench_learned.py [--faces 4] [--frames 4] [--out out/bench/learned.json]

The stand-ins come from scripts/make_standins.py (generated into a temporary directory
unless --standins names one). Their outputs are noise; the numbers are compute only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

from make_standins import inswapper, iresnet50, write  # noqa: E402

from facefusion_batch.models.prepare import make_dynamic_batch  # noqa: E402

STANDIN = "stand-in with the real layer structure and random weights (not the published model)"


def session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def per_face(run, feeds: dict[str, np.ndarray], n: int, batch: int) -> float:
    """Seconds per face running `n` items in calls of `batch` (after one warm-up call)."""
    run({k: v[:batch] for k, v in feeds.items()})
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        run({k: v[i : i + batch] for k, v in feeds.items()})
    return (time.perf_counter() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--faces", type=int, default=4, help="inswapper faces per measurement")
    parser.add_argument("--frames", type=int, default=4, help="frames of the end-to-end clip")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--standins", type=Path, help="a directory from make_standins.py (made if absent)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "learned.json")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ffbatch-bench-learned-"))
    models_dir = work / "models"
    t0 = time.perf_counter()
    for name, make in (("inswapper_128", inswapper), ("arcface_w600k_r50", iresnet50)):
        if args.standins and (args.standins / f"{name}.onnx").is_file():
            model = onnx.load(str(args.standins / f"{name}.onnx"))
        else:
            model = make()
        # written with a dynamic batch, so the render does not spend minutes on the one-time
        # batch-equality check of a 350-GFLOP model
        write(make_dynamic_batch(model)[0], models_dir, name)
        del model
    print(f"stand-ins written to {models_dir} in {time.perf_counter() - t0:.0f} s ({STANDIN})")

    rng = np.random.default_rng(0)
    results: dict = {"stand_in": STANDIN, "threads": args.threads, "onnxruntime": ort.__version__}
    swapper = session(models_dir / "inswapper_128.onnx", args.threads)
    n = args.faces
    source = rng.standard_normal((n, 512)).astype(np.float32)
    feeds = {"target": rng.uniform(0, 1, (n, 3, 128, 128)).astype(np.float32), "source": source / 512**0.5}

    s1 = per_face(lambda f: swapper.run(None, f), feeds, n, 1)
    sn = per_face(lambda f: swapper.run(None, f), feeds, n, n)
    results["inswapper_128"] = {
        "faces": n,
        "batch_1_faces_per_s": 1 / s1,
        f"batch_{n}_faces_per_s": 1 / sn,
        "gflop_per_face": 350,
        "effective_gflops_batch_n": 350 / sn,
    }
    print(
        f"inswapper_128 stand-in: batch 1 {1 / s1:.3f} faces/s, batch {n} {1 / sn:.3f} faces/s "
        f"(~{350 / sn:.0f} GFLOP/s)"
    )

    recogniser = session(models_dir / "arcface_w600k_r50.onnx", args.threads)
    m = 32
    crops = {"input": rng.uniform(-1, 1, (m, 3, 112, 112)).astype(np.float32)}

    r1 = per_face(lambda f: recogniser.run(None, f), crops, m, 1)
    rn = per_face(lambda f: recogniser.run(None, f), crops, m, m)
    results["arcface_iresnet50"] = {
        "faces": m,
        "batch_1_faces_per_s": 1 / r1,
        f"batch_{m}_faces_per_s": 1 / rn,
    }
    print(f"arcface IResNet-50 stand-in: batch 1 {1 / r1:.1f} faces/s, batch {m} {1 / rn:.1f} faces/s")

    # end to end: a clip panning over astronaut.png (one face per frame)
    import cv2
    from media import make_clip

    from facefusion_batch import RenderSettings, render
    from facefusion_batch.config import SwapSettings
    from facefusion_batch.models.assets import asset_path
    from facefusion_batch.swap.learned import LearnedSettings

    source_path = asset_path("astronaut.png")
    picture = cv2.imread(str(asset_path("astronaut.png")))
    clip = make_clip(work / "clip.mp4", frames=args.frames, size=(320, 320), image=picture)
    settings = RenderSettings(
        input=clip,
        output=work / "out.mp4",
        sources=(source_path,),
        batch_size=args.frames,
        workers=1,
        threads=args.threads,
        swap=SwapSettings(swapper="learned", learned=LearnedSettings(swapper_model="inswapper_128")),
        models_dir=models_dir,
        quiet=True,
    )
    report = render(settings)
    summary = report.summary()
    results["end_to_end"] = {
        "frames": report.frames_out,
        "faces_swapped": report.faces_swapped,
        "fps": summary["fps"],
        "wall_s": report.wall_seconds,
        "stage_seconds": report.stage_seconds,
        "clip": "320x320, astronaut.png panned, one face per frame",
    }
    print(
        f"end to end ({report.frames_out} frames, {report.faces_swapped} faces, one batch): "
        f"{summary['fps']:.3f} fps, {report.wall_seconds:.1f} s wall "
        f"(load {report.stage_seconds.get('load', 0):.1f} s, "
        f"swap {report.stage_seconds.get('swap', 0):.1f} s)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
