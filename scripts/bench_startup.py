"""Start-up cost of a 1-frame render: `--backend auto` against `--backend cpu`.

Each run is its own process, timed from spawn to exit, its peak RSS read from `wait4`; the
order alternates so both see the same machine load. Also tells whether torch was imported
(`-X importtime`), which `auto` must not do on a machine without an NVIDIA driver.

    python scripts/bench_startup.py --runs 5
    python scripts/bench_startup.py --model-check 550   # checking a 550 MB learned model file

`--model-check MB` times instead what a render spends making sure a learned model file (random
bytes with its CRC32 `.hash` beside it, in a --models-dir) is the one verified before: the first
run hashes it and records it, later runs (fresh processes) trust the record while the file's
size, mtime and inode hold.
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


CHECK = """
import sys, time
from pathlib import Path
started = time.perf_counter()
from facefusion_batch.pipeline.model_resolution import model_state
imported = time.perf_counter()
assert model_state("inswapper_128", Path(sys.argv[1])) == "present"
print(imported - started, time.perf_counter() - imported)
"""


def model_check(megabytes: int, runs: int) -> dict[str, object]:
    """Seconds a fresh process spends checking a learned model file: the first run, then later ones."""
    import zlib

    with tempfile.TemporaryDirectory() as tmp:
        models, env = Path(tmp) / "models", {**ENV, "FFBATCH_HOME": str(Path(tmp) / "home")}
        models.mkdir()
        rng, crc = np.random.default_rng(0), 0
        with open(models / "inswapper_128.onnx", "wb") as fh:
            for _ in range(megabytes):
                block = rng.integers(0, 256, 1_000_000, dtype=np.uint8).tobytes()
                crc = zlib.crc32(block, crc)
                fh.write(block)
        (models / "inswapper_128.hash").write_text(f"{crc:08x}")
        seconds = []
        for _ in range(runs + 1):
            out = subprocess.run(
                [sys.executable, "-c", CHECK, str(models)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            seconds.append(float(out.stdout.split()[1]))
    return {
        "file_mb": megabytes,
        "first_run_check_s": round(seconds[0], 3),
        "later_runs_check_s": [round(s, 3) for s in seconds[1:]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench_startup.json")
    parser.add_argument("--model-check", type=int, metavar="MB", help="time checking a model file of MB MB")
    args = parser.parse_args(argv)
    if args.model_check:
        print(json.dumps(model_check(args.model_check, args.runs), indent=2))
        return 0
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
