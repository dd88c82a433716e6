"""Benchmark scale-out on one machine: one process versus the same input split over processes.

On a pan over `t1.jpg` (six faces) it measures, each as real `ffbatch` commands:

- `one`: one process renders the whole clip (default workers and threads);
- `split-N`: N processes at once, each `render --frames` on 1/N of the clip with
  `--workers 1 --threads cores/N` (so the processes together use every core once),
  then `ffbatch concat` of the segments with the audio;
- `chunked`: one process with `--chunk-frames` (the resumable path), to show what
  chunking itself costs;
- the join's wall time, and its share of the split render;
- `startup_1_frame`: a one-frame render, i.e. what each process pays before its first frame.

Every wall time includes starting Python and loading the models, as a farm task pays them.
Writes JSON to --out (default out/bench/farm.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import cv2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from facefusion_batch.models.assets import asset_path  # noqa: E402

FFBATCH = [sys.executable, "-m", "facefusion_batch"]


def run(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([*FFBATCH, *args], check=True, capture_output=True)
    return time.perf_counter() - started


def run_parallel(commands: list[list[str]]) -> float:
    started = time.perf_counter()
    procs = [
        subprocess.Popen([*FFBATCH, *c], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands
    ]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(err.decode())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--size", default="640x360")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench")
    args = parser.parse_args()
    from media import make_clip  # tests/media.py: deterministic clips with audio

    width, height = (int(v) for v in args.size.split("x"))
    work = args.out / "farm"
    work.mkdir(parents=True, exist_ok=True)
    clip = work / f"clip-{args.size}-{args.frames}.mp4"
    if not clip.exists():
        photo = cv2.imread(str(asset_path("t1.jpg")))
        make_clip(clip, image=photo, size=(width, height), frames=args.frames)
    source = asset_path("astronaut.png")
    cores = os.cpu_count() or 2
    n = args.processes
    common = ["render", str(clip), "-s", str(source), "-q", "--overwrite"]

    results: dict[str, float] = {}
    # what every process pays before its first frame: Python, imports, model load, source faces
    results["startup_1_frame"] = run(*common, "--frames", "0:1", "-o", str(work / "one-frame.mp4"), "--force")
    results["one"] = run(*common, "-o", str(work / "one.mp4"))
    bounds = [round(i * args.frames / n) for i in range(n + 1)]
    segments = [work / "segs" / f"{a:06d}-{b:06d}.mp4" for a, b in zip(bounds, bounds[1:], strict=False)]
    threads = str(max(1, cores // n))
    results[f"split-{n}-render"] = run_parallel(
        [
            [
                *common,
                "--frames",
                f"{a}:{b}",
                "-o",
                str(seg),
                "--workers",
                "1",
                "--threads",
                threads,
                "--force",
            ]
            for (a, b), seg in zip(zip(bounds, bounds[1:], strict=False), segments, strict=True)
        ]
    )
    results["join"] = run("concat", *map(str, segments), "-o", str(work / "joined.mp4"), "--audio-from",
                          str(clip), "--overwrite", "-q")  # fmt: skip
    results[f"split-{n}"] = results[f"split-{n}-render"] + results["join"]
    results["chunked"] = run(
        *common, "-o", str(work / "chunked.mp4"), "--chunk-frames", str(args.frames // 4)
    )

    from facefusion_batch.farm.concat import join_segments

    started = time.perf_counter()  # the join alone, without starting Python
    join_segments(segments, work / "joined2.mp4", audio_from=clip, overwrite=True)
    results["join_in_process"] = time.perf_counter() - started

    report = {
        "machine": f"{platform.processor() or platform.machine()}, {cores} cores",
        "clip": {"frames": args.frames, "size": args.size, "faces": 6},
        "processes": n,
        "wall_s": {k: round(v, 3) for k, v in results.items()},
        "fps_one": round(args.frames / results["one"], 2),
        f"fps_split_{n}": round(args.frames / results[f"split-{n}"], 2),
        "speedup_split_over_one": round(results["one"] / results[f"split-{n}"], 3),
        "join_share_of_split": round(results["join"] / results[f"split-{n}"], 4),
        "join_in_process_share_of_render": round(
            results["join_in_process"] / results[f"split-{n}-render"], 5
        ),
        "chunked_over_one": round(results["chunked"] / results["one"], 3),
    }
    (args.out / "farm.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
