"""Start-up cost of a 1-frame render: `--backend auto` against `--backend cpu`.

Each run is its own process, timed from spawn to exit, its peak RSS read from `wait4`; the
order alternates so both see the same machine load. Also tells whether torch was imported
(`-X importtime`), which `auto` must not do on a machine without an NVIDIA driver.

    python scripts/bench_startup.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from facefusion_batch.models.assets import asset_path  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def one_frame_clip(path: Path) -> Path:
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.full((96, 128, 3), 90, np.uint8), format="bgr24")
        frame.pts, frame.time_base = 0, Fraction(1, 25)
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def run_once(clip: Path, out: Path, backend: str) -> dict[str, float | bool]:
    cmd = [sys.executable, "-X", "importtime", "-m", "facefusion_batch", "render", str(clip)]
    cmd += ["-s", str(asset_path("astronaut.png")), "-o", str(out), "--overwrite", "-q", "--backend", backend]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{backend}: exit {proc.returncode}\n{stderr[-2000:]}")
    modules = {
        line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")
    }
    return {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "torch": "torch" in modules}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench_startup.json")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"auto": [], "cpu": []}
    with tempfile.TemporaryDirectory() as tmp:
        clip = one_frame_clip(Path(tmp) / "one.mp4")
        run_once(clip, Path(tmp) / "warm.mp4", "cpu")  # page cache warm for both
        for i in range(args.runs):
            for backend in ("auto", "cpu") if i % 2 == 0 else ("cpu", "auto"):
                runs[backend].append(run_once(clip, Path(tmp) / f"{backend}.mp4", backend))
    result = {}
    for backend, rs in runs.items():
        result[backend] = {
            "wall_s_median": round(statistics.median(r["wall_s"] for r in rs), 3),
            "peak_rss_mb_median": round(statistics.median(r["peak_rss_mb"] for r in rs), 1),
            "wall_s": [round(r["wall_s"], 3) for r in rs],
            "peak_rss_mb": [round(r["peak_rss_mb"], 1) for r in rs],
            "imported_torch": any(r["torch"] for r in rs),
        }
    result["ratio_wall"] = round(result["auto"]["wall_s_median"] / result["cpu"]["wall_s_median"], 3)
    result["ratio_rss"] = round(result["auto"]["peak_rss_mb_median"] / result["cpu"]["peak_rss_mb_median"], 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
