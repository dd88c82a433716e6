"""What the classical swap's quality features cost on the CPU: the same frames rendered with each
feature on and off, alternated in one run (ratios, not absolute fps: the machines are noisy).

    .venv/bin/python scripts/bench_swap_features.py [--frames 48] [--rounds 3] [--out out/bench/features]

Writes features.json and features.png (fps per variant, relative to all features on).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path

import av
import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from facefusion_batch.kernels.host import HostKernels  # noqa: E402
from facefusion_batch.pipeline.build import build_pipeline, load_models  # noqa: E402
from facefusion_batch.settings.types import SwapSettings  # noqa: E402
from facefusion_batch.swap.classical.settings import ClassicalSettings  # noqa: E402


def classical_swap(**fields) -> SwapSettings:
    """The classical swap with ClassicalSettings `fields` away from their defaults."""
    return SwapSettings(swapper="classical", classical=replace(ClassicalSettings(), **fields))


VARIANTS = {
    "default": {},
    "with the shutter's smear (--shutter 180)": {"shutter": 180.0},
    "no mirror fill": {"mirror_fill": False},
    "no sharpness match": {"match_sharpness": False},
    "no grain match": {"match_grain": False},
    "no tint limit": {"tint_limit": float("inf")},
    "no lids read": {"lids": False},
    "no fit (swap/classical/fit.py)": {"fit": False},
    "no held eyes (eyes: source)": {"eyes_mouth": "source"},
    "none of the four": {
        "mirror_fill": False,
        "match_sharpness": False,
        "match_grain": False,
        "eyes_mouth": "source",
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--input", type=Path, default=ROOT / "examples" / "inputs" / "demo.mp4")
    parser.add_argument("--source", type=Path, default=ROOT / "examples" / "inputs" / "source.png")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "features")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with av.open(str(args.input)) as container:
        frames = [f.to_ndarray(format="bgr24") for f in islice(container.decode(video=0), args.frames)]
    models = load_models("cpu", threads=None, models_dir=None)
    host = HostKernels()
    pipelines = {
        name: build_pipeline(models, (args.source,), classical_swap(**fields), "many")
        for name, fields in VARIANTS.items()
    }
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, pipeline in pipelines.items():
            pipeline.start_job()
            started = time.perf_counter()
            for start in range(0, len(frames), 8):
                pipeline(host, frames[start : start + 8], seq=start // 8)
            seconds[name].append(time.perf_counter() - started)
    fps = {name: len(frames) / float(np.median(s)) for name, s in seconds.items()}
    result = {
        "frames": len(frames),
        "size": list(frames[0].shape[1::-1]),
        "rounds": args.rounds,
        "fps": {k: round(v, 2) for k, v in fps.items()},
        "relative_to_default": {k: round(v / fps["default"], 3) for k, v in fps.items()},
    }
    (args.out / "features.json").write_text(json.dumps(result, indent=2) + "\n")
    chart = np.full((40 + 40 * len(fps), 640, 3), 255, np.uint8)
    top = max(fps.values())
    for i, (name, value) in enumerate(fps.items()):
        y = 30 + 40 * i
        cv2.rectangle(chart, (260, y - 18), (260 + int(340 * value / top), y + 8), (180, 120, 40), -1)
        cv2.putText(chart, name, (8, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.putText(chart, f"{value:.2f} fps", (270, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1)
    cv2.imwrite(str(args.out / "features.png"), chart)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
