"""What high bit depth costs: the same 1080p pictures rendered at 8, 10 and 16 bits, same run.

The bench clip (scripts/bench.py: a pan over the astronaut portrait, one face) is transcoded
to FFV1 as 8-bit 4:2:0, 10-bit 4:2:2 and 16-bit 4:4:4 (the same pictures), and each is
rendered into FFV1 at its own pixel format (video/pictures/native.py keeps it). Prints fps per depth,
the ratio to 8 bits and the seconds spent composing the swap back into the native pictures,
and checks on the way that pixels outside the faces' painted rectangles came out untouched
(the share of bit-identical luma samples). Numbers are for the machine it runs on.

    python scripts/bench_depth.py [--frames 30] [--out out/bench-depth]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench import make_clip  # noqa: E402

from facefusion_batch.models.assets import asset_path  # noqa: E402

DEPTHS = {
    "8-bit yuv420p": "yuv420p",
    "10-bit yuv422p10le": "yuv422p10le",
    "16-bit yuv444p16le": "yuv444p16le",
}


def transcode(src: Path, dst: Path, pix_fmt: str) -> Path:
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        stream = out.add_stream("ffv1", rate=25, options={"level": "3"})
        stream.width, stream.height = inp.streams.video[0].width, inp.streams.video[0].height
        stream.pix_fmt = pix_fmt
        for i, frame in enumerate(inp.decode(video=0)):
            deep = frame.reformat(format=pix_fmt)
            deep.pts, deep.time_base = i, Fraction(1, 25)
            out.mux(stream.encode(deep))
        out.mux(stream.encode(None))
    return dst


def luma(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        frames = list(container.decode(video=0))
    dtype = np.uint8 if frames[0].format.name == "yuv420p" else np.uint16
    return [np.frombuffer(f.planes[0], dtype).reshape(f.planes[0].height, -1)[:, : f.width] for f in frames]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench-depth")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    clip = make_clip(args.out / f"bench-1080p-{args.frames}.mp4", 1, (1920, 1080), args.frames)
    source = asset_path("astronaut.png")
    results = {}
    for name, pix_fmt in DEPTHS.items():
        src = transcode(clip, args.out / f"in-{pix_fmt}.mkv", pix_fmt)
        out, report = args.out / f"out-{pix_fmt}.mkv", args.out / f"report-{pix_fmt}.json"
        command = [sys.executable, "-m", "facefusion_batch", "render", str(src), "-s", str(source)]
        command += ["-o", str(out), "--encoder", "ffv1", "--backend", "cpu", "--overwrite", "-q"]
        subprocess.run([*command, "--report", str(report)], check=True, cwd=ROOT)
        data = json.loads(report.read_text())
        same = np.mean([np.mean(a == b) for a, b in zip(luma(src), luma(out), strict=True)])
        results[name] = {
            # the render itself: the models' load is the same at every depth
            "fps": data["frames_out"] / (data["wall_seconds"] - data["stage_seconds"].get("load", 0.0)),
            "compose_s": data["stage_seconds"].get("compose", 0.0),
            "faces": data["faces_swapped"],
            "untouched_luma": float(same),
            "frames_as": data.get("frames_as"),
        }
    base = results["8-bit yuv420p"]["fps"]
    for name, r in results.items():
        print(
            f"{name:20s} {r['fps']:6.2f} fps  x{r['fps'] / base:4.2f} of 8-bit"
            f"  compose {r['compose_s']:5.2f} s"
            f"  faces {r['faces']}  luma samples untouched {100 * r['untouched_luma']:.1f}%"
        )
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
