"""Side by side with FaceFusion: its `headless-run` against `ffbatch render`, same clips, same model files.

For each case (720p / 1080p; 1 face / 6 faces; a few frames of the `make bench` clips) both
programs swap the astronaut's face into the clip with the inswapper_128 and IResNet-50 ArcFace
stand-ins of scripts/make_standins.py (the real architectures, random weights: the real models'
compute, meaningless faces), the same detector file (OpenCV's YuNet: FaceFusion's
yunet_2023_mar, ffbatch's default detector), every face of every frame, libx264 veryfast at
quality 80 (ffbatch's `--face-detector-model yunet`, FaceFusion's reading of the file, would
need `--face-landmarker-score 0` too, or it refines the points with the random 2dfan4 stand-in
and pastes far larger areas). The share of pixels each output changed against the clip (`changed_share`) shows
that both swapped the same faces over about the same area. Each program runs
once untimed (file cache, ffbatch's one-time batch copy of a model), then `--runs` times each,
alternated (A B, B A, ...), each run a fresh process timed from start to exit. The JSON holds
every run's seconds, the medians and the ratio ffbatch fps / FaceFusion fps (median, and run by
run); a PNG chart lies beside it. On a loaded machine only those ratios mean anything.

With --profile each program runs once more under py-spy (CPU samples of every thread, idle ones
left out) and the samples are split into stages (swapper model, recogniser, detection, ...) by
the rules in PROFILE_RULES; ffbatch's own report timings (stage seconds summed over its worker
threads) are kept beside them.

Equivalent options: FaceFusion `--face-selector-mode many --face-landmarker-score 0` (ffbatch
runs no 68-point landmarker; FaceFusion's fan_68_5, fairface and 2dfan4 stand-ins are small),
`--execution-thread-count` = cores (ffbatch: its default --workers with the cores split
between them). FaceFusion's content check (nsfw_1-3, one frame a second) runs on tiny
stand-ins that answer "safe", so its real cost is left out: that favours FaceFusion.

Getting FaceFusion 3.8.1 (once, on a machine with network; it is never fetched by this script):

    git clone https://github.com/facefusion/facefusion FF_DIR && git -C FF_DIR checkout 3.8.1
    python3.12 -m venv FF_VENV && FF_VENV/bin/pip install -r FF_DIR/requirements.txt
    FF_VENV/bin/pip install py-spy      # only for --profile
    # ffmpeg, ffprobe and curl on PATH (FaceFusion's start-up check), e.g. Debian's ffmpeg

Then (FaceFusion's tree is copied into the work folder without its .assets, so FF_DIR stays clean):

    python scripts/bench_facefusion.py --facefusion FF_DIR --facefusion-python FF_VENV/bin/python \\
        [--sizes 720p,1080p] [--faces 1,6] [--frames 10] [--runs 3] [--profile] [--out out/bench]

`make bench-facefusion FACEFUSION=FF_DIR FACEFUSION_PYTHON=FF_VENV/bin/python` runs the same.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
STANDIN = "stand-ins with the real layer structure and random weights (not the published models)"

# Stage of a py-spy stack: the first rule (in this order) whose text occurs in any of its frames.
PROFILE_RULES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "facefusion": [
        (
            "model load + hash",
            ("inference_manager.py", "_create_inference_session", "hash_helper.py", "download.py"),
        ),
        ("swapper model", ("forward_swap_face",)),
        ("recogniser", ("face_recognizer.py",)),
        ("detection", ("face_detector.py",)),
        ("landmarks + classifier", ("face_landmarker.py", "face_classifier.py")),
        ("content check", ("content_analyser.py",)),
        ("masks", ("face_masker.py",)),
        ("decode + encode", ("video_manager.py", "ffmpeg.py", "read_video_frame", "write_video_frame")),
        ("align + paste", ("face_helper.py", "face_swapper/core.py")),
        ("start-up (imports)", ("<module>",)),
    ],
    "ffbatch": [
        ("model load + hash", ("facefusion_batch/models/", "_create_inference_session", "crc32")),
        ("swapper model", ("swap/learned.py",)),
        ("recogniser", ("faces/identity.py",)),
        ("detection", ("faces/detect.py", "faces/facefusion_detectors.py")),
        ("masks", ("swap/masks.py",)),
        ("decode + encode", ("facefusion_batch/video/",)),
        ("align + paste", ("faces/align.py", "facefusion_batch/kernels/", "facefusion_batch/swap/")),
        ("start-up (imports)", ("<module>",)),
    ],
}


# ---- pure parts: arguments, summaries, profiles, the JSON ---------------------------------------


def csv_choices(allowed: list[str]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)} (comma-separated)")
        return items

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--facefusion", type=Path, required=True, help="FaceFusion 3.8.1 source tree")
    parser.add_argument(
        "--facefusion-python", type=Path, required=True, help="a Python with its requirements"
    )
    parser.add_argument("--sizes", type=csv_choices(list(SIZES)), default=list(SIZES))
    parser.add_argument("--faces", type=csv_choices(["1", "6"]), default=["1", "6"])
    parser.add_argument("--frames", type=int, default=10, help="frames of each clip (default 10)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each program (default 3)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="cores given to each")
    parser.add_argument("--profile", action="store_true", help="one more run of each under py-spy")
    parser.add_argument("--standins", type=Path, help="a directory from make_standins.py (made if absent)")
    parser.add_argument("--work", type=Path, help="work folder (default: a new temporary one, removed)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench", help="for the JSON and PNG")
    args = parser.parse_args(argv)
    if not (args.facefusion / "facefusion.py").is_file():
        parser.error(f"--facefusion {args.facefusion}: no facefusion.py there (a FaceFusion source tree?)")
    if not (args.facefusion_python.is_file() and os.access(args.facefusion_python, os.X_OK)):
        parser.error(f"--facefusion-python {args.facefusion_python}: not an executable file")
    for name in ("frames", "runs", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.standins is not None and not args.standins.is_dir():
        parser.error(f"--standins {args.standins}: not a directory")
    return args


def summarise(frames: int, facefusion_s: list[float], ffbatch_s: list[float]) -> dict:
    """Medians and fps of each program and ffbatch's speed-up (FaceFusion seconds / ffbatch seconds),
    of the medians and of each alternated pair."""
    ff, ours = statistics.median(facefusion_s), statistics.median(ffbatch_s)
    pairs = [a / b for a, b in zip(facefusion_s, ffbatch_s, strict=True)]
    return {
        "frames": frames,
        "facefusion": {"runs_s": facefusion_s, "median_s": ff, "fps": frames / ff},
        "ffbatch": {"runs_s": ffbatch_s, "median_s": ours, "fps": frames / ours},
        "ratio_ffbatch_over_facefusion_fps": ff / ours,
        "run_ratios": pairs,
    }


def split_profile(collapsed: str, tool: str) -> dict[str, float]:
    """Shares (summing to 1) of py-spy's collapsed stacks ("frame;frame;... count" a line) per stage."""
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stage = next(
            (name for name, needles in PROFILE_RULES[tool] if any(n in stack for n in needles)), "other"
        )
        counts[stage] += int(count)
    total = sum(counts.values())
    return {k: round(v / total, 4) for k, v in counts.most_common()} if total else {}


def write_results(results: dict, out: Path) -> tuple[Path, Path]:
    """facefusion.json and facefusion.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "facefusion.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    chart = out / "facefusion.png"
    draw_chart(results, chart)
    return path, chart


def draw_chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cases = results["cases"]
    names = [c["case"] for c in cases]
    x = np.arange(len(names))
    profiled = [c for c in cases if c.get("profile")]
    fig, axes = plt.subplots(1, 2 if profiled else 1, figsize=(13 if profiled else 7, 4.8), squeeze=False)
    ax = axes[0][0]
    for offset, tool in ((-0.2, "facefusion"), (0.2, "ffbatch")):
        bars = ax.bar(x + offset, [c[tool]["fps"] for c in cases], 0.4, label=tool)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    for i, c in enumerate(cases):
        top = max(c["facefusion"]["fps"], c["ffbatch"]["fps"])
        ax.text(i, top * 1.12, f"{c['ratio_ffbatch_over_facefusion_fps']:.2f}×", ha="center", fontsize=9)
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("frames per second (median of alternated runs)")
    ax.set_ylim(0, max(max(c["facefusion"]["fps"], c["ffbatch"]["fps"]) for c in cases) * 1.3)
    ax.set_title("throughput, ffbatch ÷ FaceFusion above")
    ax.legend(fontsize=8)
    if profiled:
        ax2 = axes[0][1]
        stages = sorted({s for c in profiled for t in ("facefusion", "ffbatch") for s in c["profile"][t]})
        labels = [f"{c['case']}\n{t}" for c in profiled for t in ("facefusion", "ffbatch")]
        bottom = np.zeros(len(labels))
        for stage in stages:
            vals = np.array(
                [c["profile"][t].get(stage, 0) * 100 for c in profiled for t in ("facefusion", "ffbatch")]
            )
            ax2.bar(np.arange(len(labels)), vals, 0.6, bottom=bottom, label=stage)
            bottom += vals
        ax2.set_xticks(np.arange(len(labels)), labels, fontsize=7)
        ax2.set_ylabel("% of CPU samples (py-spy, idle left out)")
        ax2.set_title("where each spends its time")
        ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle(
        f"ffbatch vs {results.get('facefusion_version', 'FaceFusion')} — {results['machine']}", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- setting up: models, clips, commands ---------------------------------------------------------


def nsfw_standin(size: int, output: list[int]):
    """FaceFusion's content-check model shape: input [1,3,size,size] → zeros of `output` ("safe")."""
    import numpy as np
    import standins
    from onnx import helper

    rest = output[1:]
    zeros = np.zeros([1, 1] + [1] * (2 - len(rest)) + rest, np.float32)
    nodes = [
        helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
        helper.make_node("Mul", ["pooled", "zeros"], ["spread"]),
        helper.make_node(
            "ReduceMean", ["spread"], ["output"], axes=[1] + ([2] if len(rest) == 1 else []), keepdims=0
        ),
    ]
    return standins._model(
        nodes,
        [standins._t("input", [1, 3, size, size])],
        [standins._t("output", output)],
        [standins._init("zeros", zeros)],
        "nsfw",
    )


def place_models(models: Path, standin_dir: Path | None, work: Path) -> None:
    """Every file FaceFusion's start-up checks for these options, with its `.hash`, in `models`;
    ffbatch reads the same directory (--models-dir)."""
    import standin_detectors
    import standins
    from make_standins import inswapper, iresnet50, write

    from facefusion_batch.paths import models_dir

    made = standin_dir if standin_dir is not None else work / "standins"
    for name, make in (("inswapper_128", inswapper), ("arcface_w600k_r50", iresnet50)):
        if not (made / f"{name}.onnx").is_file():
            t0 = time.perf_counter()
            write(make(), made, name)
            print(f"made the {name} stand-in in {time.perf_counter() - t0:.0f} s", flush=True)
        for ext in (".onnx", ".hash"):
            (models / f"{name}{ext}").symlink_to((made / f"{name}{ext}").resolve())
    for name in ("xseg_1", "bisenet_resnet_34", "fairface"):
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


def facefusion_command(py: Path, clip: Path, source: Path, out: Path, threads: int) -> list[str]:
    return [
        str(py), "facefusion.py", "headless-run", "-s", str(source), "-t", str(clip), "-o", str(out),
        "--processors", "face_swapper", "--face-swapper-model", "inswapper_128",
        "--face-detector-model", "yunet", "--face-detector-size", "640x640",
        "--face-selector-mode", "many", "--face-landmarker-score", "0",
        "--execution-providers", "cpu", "--execution-thread-count", str(threads),
        "--output-video-encoder", "libx264", "--output-video-preset", "veryfast",
        "--output-video-quality", "80", "--log-level", "warn",
    ]  # fmt: skip


def ffbatch_command(clip: Path, source: Path, out: Path, models: Path, report: Path) -> list[str]:
    return [
        sys.executable, "-m", "facefusion_batch", "render", str(clip), "-s", str(source), "-o", str(out),
        "--swapper", "learned", "--swapper-model", "inswapper_128", "--models-dir", str(models),
        "--faces", "many",
        "--encoder", "libx264", "--preset", "veryfast", "--quality", "80", "--backend", "cpu",
        "--report", str(report),
    ]  # fmt: skip


CPU_SECONDS: dict[str, list[float]] = {}  # per command's program: user + system seconds of each run


def timed(command: list[str], cwd: Path, out: Path) -> float:
    """Wall seconds of one run; its CPU seconds (user + system, the process and its children)
    are appended to CPU_SECONDS under the program's name."""
    import resource

    out.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    CPU_SECONDS.setdefault("facefusion" if "facefusion.py" in command else "ffbatch", []).append(
        round(cpu, 2)
    )
    if done.returncode != 0 or not out.is_file():
        log = done.stdout[-3000:] + done.stderr[-3000:]
        sys.exit(f"{' '.join(command)}\nexit {done.returncode}, no {out}:\n{log}")
    return seconds


def changed_share(clip: Path, output: Path, levels: int = 48) -> float:
    """Mean share of pixels, over the frames, that differ from the clip's by more than `levels` in
    some channel: encoding noise stays below it, a pasted stand-in face (noise) does not."""
    import av
    import numpy as np

    def frames(path: Path) -> list:
        with av.open(str(path)) as container:
            return [f.to_ndarray(format="bgr24").astype(np.int16) for f in container.decode(video=0)]

    pairs = list(zip(frames(clip), frames(output), strict=False))
    return round(float(np.mean([(np.abs(a - b).max(axis=2) > levels).mean() for a, b in pairs])), 4)


def py_spy(ff_python: Path) -> str | None:
    beside = ff_python.parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def profiled(spy: str, command: list[str], cwd: Path, out: Path, raw: Path) -> str:
    """py-spy's collapsed stacks of one more run (the output removed first: ffbatch keeps an
    existing one and stops)."""
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [spy, "record", "--rate", "50", "--format", "raw", "-o", str(raw), "--", *command],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not out.is_file():
        sys.exit(
            f"py-spy record -- {' '.join(command)}\nexit {done.returncode}, no {out}:\n{done.stderr[-3000:]}"
        )
    return raw.read_text()


def run_case(
    case: str,
    clip: Path,
    jobs: dict[str, tuple[list[str], Path]],
    outs: dict[str, Path],
    frames: int,
    runs: int,
) -> dict:
    """One untimed run of each (ffbatch first: its one-time model preparation), then `runs` of each
    alternated, FaceFusion first in even rounds."""
    first = {tool: timed(*jobs[tool], outs[tool]) for tool in ("ffbatch", "facefusion")}
    times: dict[str, list[float]] = {"facefusion": [], "ffbatch": []}
    CPU_SECONDS.clear()
    loads = []
    for i in range(runs):
        for tool in ("facefusion", "ffbatch") if i % 2 == 0 else ("ffbatch", "facefusion"):
            loads.append(loadavg())
            times[tool].append(round(timed(*jobs[tool], outs[tool]), 3))
    row = {"case": case, **summarise(frames, times["facefusion"], times["ffbatch"])}
    # process CPU seconds: less moved by other work on the machine than the wall time
    for tool in ("facefusion", "ffbatch"):
        row[tool]["cpu_s"] = CPU_SECONDS[tool]
        row[tool]["cpu_median_s"] = statistics.median(CPU_SECONDS[tool])
    row["ratio_cpu_seconds"] = row["facefusion"]["cpu_median_s"] / row["ffbatch"]["cpu_median_s"]
    row["load_before_each_run"] = loads
    row["first_run_s"] = {k: round(v, 2) for k, v in first.items()}
    row["changed_share"] = {tool: changed_share(clip, out) for tool, out in outs.items()}
    return row


def loadavg() -> list[float] | None:
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from bench import make_clip

    from facefusion_batch.models.assets import asset_path

    work = args.work or Path(tempfile.mkdtemp(prefix="ffbatch-bench-facefusion-"))
    ff_root = work / "facefusion"
    if ff_root.exists():
        shutil.rmtree(ff_root)
    shutil.copytree(args.facefusion, ff_root, ignore=shutil.ignore_patterns(".git", ".assets", ".jobs"))
    models = ff_root / ".assets" / "models"
    models.mkdir(parents=True)
    place_models(models, args.standins, work)
    version = subprocess.run(
        [str(args.facefusion_python), "facefusion.py", "--version"],
        cwd=ff_root,
        capture_output=True,
        text=True,
    ).stdout.strip()
    source = asset_path("astronaut.png")
    spy = py_spy(args.facefusion_python) if args.profile else None
    results: dict = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "facefusion_version": version,
        "models": STANDIN,
        "threads": args.threads,
        "runs_each": args.runs,
        "load_before": loadavg(),
        "commands": {
            "facefusion": " ".join(
                facefusion_command(Path("PY"), Path("CLIP"), Path("SRC"), Path("OUT"), args.threads)
            ),
            "ffbatch": " ".join(
                ffbatch_command(Path("CLIP"), Path("SRC"), Path("OUT"), Path("MODELS"), Path("R"))
            ),
        },
        "cases": [],
    }
    for size in args.sizes:
        for faces in args.faces:
            case = f"{size}-{faces}face"
            clip = make_clip(work / f"{case}-{args.frames}.mp4", int(faces), SIZES[size], args.frames)
            report = work / f"{case}.json"
            outs = {"facefusion": work / f"{case}-ff.mp4", "ffbatch": work / f"{case}-ffbatch.mp4"}
            jobs = {
                "facefusion": (
                    facefusion_command(
                        args.facefusion_python, clip, source, outs["facefusion"], args.threads
                    ),
                    ff_root,
                ),
                "ffbatch": (ffbatch_command(clip, source, outs["ffbatch"], models, report), ROOT),
            }
            row = run_case(case, clip, jobs, outs, args.frames, args.runs)
            rep = json.loads(report.read_text())
            row["ffbatch_report"] = {
                k: rep.get(k) for k in ("faces_swapped", "stage_seconds", "wall_seconds", "backend")
            }
            if spy:
                row["profile"] = {
                    tool: split_profile(
                        profiled(spy, *jobs[tool], outs[tool], work / f"{case}-{tool}.spy"), tool
                    )
                    for tool in jobs
                }
            results["cases"].append(row)
            print(
                f"{case}: FaceFusion {row['facefusion']['fps']:.2f} fps, ffbatch {row['ffbatch']['fps']:.2f} "
                f"fps, ratio {row['ratio_ffbatch_over_facefusion_fps']:.2f} "
                f"(runs {', '.join(f'{r:.2f}' for r in row['run_ratios'])}); CPU seconds "
                f"{row['facefusion']['cpu_median_s']:.0f} / {row['ffbatch']['cpu_median_s']:.0f}, "
                f"ratio {row['ratio_cpu_seconds']:.2f}",
                flush=True,
            )
    results["load_after"] = loadavg()
    if args.profile and not spy:
        results["profile_missing"] = "py-spy not found beside --facefusion-python nor on PATH"
    path, chart = write_results(results, args.out)
    print(f"wrote {path} and {chart}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
