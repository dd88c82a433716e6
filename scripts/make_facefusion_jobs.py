"""Write tests/data/facefusion_jobs/ again with FaceFusion's own job commands.

    python scripts/make_facefusion_jobs.py FACEFUSION_CHECKOUT [--python FF_PYTHON] [--out DIR] [--jobs ID...]

FACEFUSION_CHECKOUT: a FaceFusion source tree (3.8.1 for the committed files), FF_PYTHON: a Python
with FaceFusion's requirements installed (a CPU onnxruntime is enough: job commands load no model),
and ffmpeg, ffprobe and curl on PATH (FaceFusion's own start-up check). FaceFusion finds its
processors relative to the current directory, so its commands run in its root, as its docs say; the
media they name (target.mp4, target2.mp4, target.jpg, source.jpg) are written there for the
commands' time and removed after, and every path in the job files is relative to that directory.
Each job is drafted with job-create, given steps with job-add-step / job-remix-step at FaceFusion's
defaults (plus the options listed in JOBS), submitted with job-submit, and copied from the jobs
path's queued/ folder unchanged.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# job id (letters, digits, hyphens: FaceFusion hashes any other) -> its commands after `facefusion.py`
# (the job id and --jobs-path added to each)
JOBS: dict[str, list[list[str]]] = {
    "swap-default": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.mp4", "-o", "output.mp4"],
    ],
    "swap-image": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.jpg", "-o", "output.jpg"],
    ],
    "swap-and-enhance": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.mp4", "-o", "output.mp4",
         "--processors", "face_swapper", "face_enhancer"],
    ],
    "swap-then-enhance-remix": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.mp4", "-o", "swapped.mp4"],
        ["job-remix-step", "0", "-o", "enhanced.mp4", "--processors", "face_enhancer"],
    ],
    "two-steps-one-output": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.mp4", "-o", "output.mp4"],
        ["job-add-step", "-s", "source.jpg", "-t", "target2.mp4", "-o", "output.mp4"],
    ],
    "swap-trimmed": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.mp4", "-o", "output.mp4",
         "--trim-frame-start", "1", "--trim-frame-end", "3"],
    ],
    "lip-syncer": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.mp4", "-o", "output.mp4",
         "--processors", "lip_syncer"],
    ],
    "frame-colorizer": [
        ["job-add-step", "-s", "source.jpg", "-t", "target.mp4", "-o", "output.mp4",
         "--processors", "face_swapper", "frame_colorizer"],
    ],
}  # fmt: skip

MEDIA = {
    "target.mp4": ["-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-f", "lavfi", "-i",
                   "sine=frequency=440:sample_rate=48000", "-t", "1", "-c:v", "libx264",
                   "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest"],
    "target2.mp4": ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-f", "lavfi", "-i",
                    "sine=frequency=660:sample_rate=48000", "-t", "1", "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest"],
    "target.jpg": ["-f", "lavfi", "-i", "testsrc=size=320x240", "-frames:v", "1"],
    "source.jpg": ["-f", "lavfi", "-i", "testsrc2=size=256x256", "-frames:v", "1"],
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("facefusion", type=Path, help="FaceFusion's source checkout")
    parser.add_argument("--python", default=sys.executable, help="Python with FaceFusion's requirements")
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "tests/data/facefusion_jobs")
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), help="only these jobs (default: all)")
    args = parser.parse_args()
    root = args.facefusion.resolve()
    if not (root / "facefusion.py").is_file():
        parser.error(f"{root} is not a FaceFusion checkout (no facefusion.py)")
    made = [root / name for name in MEDIA]
    if any(p.exists() for p in made):
        parser.error(f"{root} already holds one of {', '.join(MEDIA)}; not overwriting it")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as jobs:
        try:
            for name, ffmpeg_args in MEDIA.items():
                subprocess.run(["ffmpeg", "-loglevel", "error", *ffmpeg_args, name], cwd=root, check=True)
            for job_id, commands in JOBS.items():
                if args.jobs and job_id not in args.jobs:
                    continue
                run = [[("job-create"), job_id], *commands, ["job-submit", job_id]]
                for command in run:
                    name, *rest = command
                    if name != "job-create" and name != "job-submit":
                        rest = [job_id, *rest]
                    argv = [args.python, "facefusion.py", name, *rest, "--jobs-path", jobs]
                    print("$", " ".join(argv[1:-2]), flush=True)
                    subprocess.run(argv, cwd=root, check=True)
                shutil.copyfile(Path(jobs) / "queued" / f"{job_id}.json", args.out / f"{job_id}.json")
        finally:
            for path in made:
                path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
