"""Benchmark the default CPU render on a fixed, synthesised workload.

For each clip (720p and 1080p; 1 face and 6 faces; 300 frames by default) it
measures, in the same run and on the same machine:

- ffbatch's batched render (fps, per-stage seconds, peak RSS),
- the floor: a pure decode + encode of the same clip with the same encoder settings,
- a naive loop: decode one frame, run each model on it with batch 1 (one face
  at a time for the mesh), swap, encode, sequentially in one thread,

and reports wall(render) / wall(floor) and wall(naive) / wall(render), each job's CPU seconds,
and the render/floor the decode + encode, the detector and the face mesh alone would give on the
workers' cores (`models_bound_to_floor`): the two models' output is fixed to the bit by the goldens,
so no change that keeps the output renders below it.
`--rss-check` also compares peak RSS for a 3000- and a 300-frame clip.

Each measurement runs in its own process so that peak RSS belongs to it alone.
Writes JSON and a PNG chart to --out (default out/bench). Numbers are for the
machine it runs on: compare ratios, not absolute fps, across machines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from facefusion_batch.models.assets import asset_path  # noqa: E402

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}


def clip_photo(faces: int) -> np.ndarray:
    if faces == 6:
        return cv2.imread(str(asset_path("t1.jpg")))
    # one face: the astronaut portrait, framed like a medium shot
    photo = cv2.imread(str(asset_path("astronaut.png")))
    return cv2.copyMakeBorder(photo, 0, 0, 200, 200, cv2.BORDER_REFLECT)


def make_clip(path: Path, faces: int, size: tuple[int, int], frames: int, fps: int = 25) -> Path:
    """A deterministic pan/zoom over a real photo with a tone as audio."""
    if path.exists():
        return path
    sys.path.insert(0, str(ROOT / "examples"))
    from make_inputs import render_frame  # the demo's camera path

    tmp = path.with_name(f".{path.name}.partial.mp4")
    photo = clip_photo(faces)
    seconds = frames / fps
    with av.open(str(tmp), "w") as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height = size
        video.pix_fmt = "yuv420p"
        video.options = {"crf": "18", "preset": "veryfast"}
        audio = out.add_stream("aac", rate=48000)
        audio.layout = "mono"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(render_frame(photo, i / fps, seconds, size), format="bgr24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        for start in range(0, int(seconds * 48000), 1024):
            t = (start + np.arange(1024)) / 48000
            samples = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
            af = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
            af.sample_rate, af.pts, af.time_base = 48000, start, Fraction(1, 48000)
            out.mux(audio.encode(af))
        out.mux(audio.encode(None))
    tmp.replace(path)
    return path


# ---- the three measured jobs, each run in a child process ---------------------------------------


def job_render(clip: Path, out: Path, source: Path, batch_size: int, workers: int) -> dict:
    from facefusion_batch import RenderSettings, render

    settings = RenderSettings(
        input=clip, output=out, sources=(source,), batch_size=batch_size, workers=workers, overwrite=True
    )
    t0, c0 = time.perf_counter(), cpu_seconds()
    report = render(settings)
    wall = time.perf_counter() - t0
    summary = report.summary()
    return {
        "wall_s": wall,
        "cpu_s": cpu_seconds() - c0,
        "frames": report.frames_out,
        "faces": report.faces_swapped,
        "stage_seconds": summary["stage_seconds"],
        "peak_rss_mb": summary["peak_rss_mb"],
        "batch_latency_p50_s": summary["batch_latency_p50_s"],
    }


def job_floor(clip: Path, out: Path, pixel_format: str = "bgr24", hwaccel: str = "none") -> dict:
    """Decode + encode only, through the same reader and writer as a render: with BGR frames
    (what a CPU render converts to and from) or the decoder's yuv420p planes (no conversion)."""
    from facefusion_batch.pipeline.report import peak_rss_mb
    from facefusion_batch.video.decode.probe import probe
    from facefusion_batch.video.decode.reader import FrameReader
    from facefusion_batch.video.encode.encoder_policy import EncoderSettings
    from facefusion_batch.video.encode.writer import VideoWriter

    info = probe(clip)
    t0, c0 = time.perf_counter(), cpu_seconds()
    n = 0
    with (
        FrameReader(clip, info=info, pixel_format=pixel_format, hwaccel=hwaccel) as reader,
        VideoWriter(out, info, EncoderSettings(), audio_from=clip, pixel_format=pixel_format) as writer,
    ):
        for frame in reader:
            writer.write(frame.image, frame.pts, frame.time_base)
            n += 1
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {"wall_s": wall, "cpu_s": cpu, "frames": n, "peak_rss_mb": peak_rss_mb()}


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children, every thread."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def models_bound(row: dict, cores: int) -> float:
    """render/floor if everything but the decode + encode, the detector and the face mesh took no
    time: those three alone on `cores` cores (their CPU seconds: the floor's, and the two model
    stages' seconds, each run on one core of a worker), over the floor's wall time. Detection and
    the mesh are model inference whose output the goldens fix to the bit, so a render that keeps
    its output cannot go below this."""
    stages = row["render"]["stage_seconds"]
    busy = row["floor"]["cpu_s"] + stages.get("detect", 0.0) + stages.get("mesh", 0.0)
    return busy / cores / row["floor"]["wall_s"]


def job_naive(clip: Path, out: Path, source: Path) -> dict:
    """One frame at a time, one face at a time, one thread: what a simple loop would do."""
    from facefusion_batch.faces.select import select_faces
    from facefusion_batch.kernels.host import HostKernels
    from facefusion_batch.pipeline.build import build_pipeline, load_models
    from facefusion_batch.pipeline.report import peak_rss_mb
    from facefusion_batch.settings.types import SwapSettings

    models = load_models("cpu", threads=os.cpu_count(), models_dir=None)
    pipe = build_pipeline(models, (source,), SwapSettings(swapper="classical"), "many")
    mesh, swapper, k = pipe.stage("mesh"), pipe.stage("swap"), HostKernels()
    t0 = time.perf_counter()
    n = faces = 0
    with av.open(str(clip)) as src, av.open(str(out), "w") as dst:
        vin = src.streams.video[0]
        vout = dst.add_stream("libx264", rate=vin.average_rate)
        vout.width, vout.height, vout.pix_fmt = vin.width, vin.height, "yuv420p"
        vout.options = {"crf": "18", "preset": "veryfast"}
        vout.time_base = vin.time_base
        for frame in src.decode(vin):
            frames = k.upload([frame.to_ndarray(format="bgr24")])
            table = select_faces(pipe.detector(k, frames), "many", 1)
            rows = [mesh(k, frames, table.select(np.array([i]))) for i in range(len(table))]
            for row in rows:  # swap each face separately, like a per-face loop would
                swapper(k, frames, row)
            image = k.download(frames)[0]
            faces += sum(len(r) for r in rows)
            outf = av.VideoFrame.from_ndarray(image, format="bgr24")
            outf.pts, outf.time_base = frame.pts, frame.time_base
            dst.mux(vout.encode(outf))
            n += 1
        dst.mux(vout.encode(None))
    return {"wall_s": time.perf_counter() - t0, "frames": n, "faces": faces, "peak_rss_mb": peak_rss_mb()}


def run_child(kind: str, **kwargs) -> dict:
    args = [sys.executable, __file__, "--child", kind, "--child-args", json.dumps(kwargs, default=str)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_main(kind: str, raw: str) -> None:
    kwargs = json.loads(raw)
    for key in ("clip", "out", "source"):
        if key in kwargs:
            kwargs[key] = Path(kwargs[key])
    fn = {"render": job_render, "floor": job_floor, "naive": job_naive}[kind]
    print(json.dumps(fn(**kwargs)))


# ---- chart ---------------------------------------------------------------------------------------


def draw_chart(results: list[dict], path: Path, machine: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["workload"] for r in results]
    x = np.arange(len(names))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for offset, key, label in (
        (-0.27, "floor", "decode+encode floor"),
        (0.0, "render", "ffbatch (batched)"),
        (0.27, "naive", "naive per-frame loop"),
    ):
        vals = [r[key]["frames"] / r[key]["wall_s"] if key in r else 0 for r in results]
        bars = ax1.bar(x + offset, vals, 0.26, label=label)
        ax1.bar_label(bars, fmt="%.1f", fontsize=7)
    ax1.set_xticks(x, names, fontsize=8)
    ax1.set_ylabel("frames per second")
    ax1.set_yscale("log")
    ax1.set_title("throughput")
    ax1.legend(fontsize=8)
    stages = sorted({s for r in results for s in r["render"]["stage_seconds"]})
    bottom = np.zeros(len(results))
    for stage in stages:
        vals = np.array(
            [r["render"]["stage_seconds"].get(stage, 0) * 1000 / r["render"]["frames"] for r in results]
        )
        ax2.bar(x, vals, 0.5, bottom=bottom, label=stage)
        bottom += vals
    ax2.set_xticks(x, names, fontsize=8)
    ax2.set_ylabel("ms per frame (summed over worker threads)")
    ax2.set_title("ffbatch time per stage")
    ax2.legend(fontsize=8)
    fig.suptitle(f"ffbatch CPU benchmark — {machine}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench")
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--sizes", default="720p,1080p")
    parser.add_argument("--faces", default="1,6")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-naive", action="store_true", help="skip the (slow) naive loop")
    parser.add_argument("--rss-check", action="store_true", help="also 3000 vs 300 frames peak RSS")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.child_args)
        return

    args.out.mkdir(parents=True, exist_ok=True)
    clips = args.out / "clips"
    clips.mkdir(exist_ok=True)
    source = asset_path("astronaut.png")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    results = []
    for size_name in args.sizes.split(","):
        for faces in (int(f) for f in args.faces.split(",")):
            name = f"{size_name}-{faces}face"
            clip = make_clip(clips / f"{name}-{args.frames}.mp4", faces, SIZES[size_name], args.frames)
            out = args.out / f"{name}-out.mp4"
            row = {"workload": name, "frames": args.frames}
            row["floor"] = run_child("floor", clip=clip, out=out)
            row["floor_planes"] = run_child("floor", clip=clip, out=out, pixel_format="yuv420p")
            row["render"] = run_child(
                "render", clip=clip, out=out, source=source, batch_size=args.batch_size, workers=args.workers
            )
            row["ratio_to_floor"] = row["render"]["wall_s"] / row["floor"]["wall_s"]
            row["models_bound_to_floor"] = models_bound(row, min(args.workers, len(os.sched_getaffinity(0))))
            if not args.no_naive:
                row["naive"] = run_child("naive", clip=clip, out=out, source=source)
                row["speedup_over_naive"] = row["naive"]["wall_s"] / row["render"]["wall_s"]
            results.append(row)
            r = row["render"]
            print(
                f"{name}: ffbatch {r['frames'] / r['wall_s']:.2f} fps "
                f"({r['faces']} faces), floor {row['floor']['frames'] / row['floor']['wall_s']:.1f} fps "
                f"(as planes {row['floor_planes']['frames'] / row['floor_planes']['wall_s']:.1f}), "
                f"render/floor {row['ratio_to_floor']:.2f}x (decode, encode, detection and mesh alone "
                f"{row['models_bound_to_floor']:.2f}x)"
                + (
                    f", naive {row['naive']['frames'] / row['naive']['wall_s']:.2f} fps, "
                    f"speedup {row['speedup_over_naive']:.2f}x"
                    if "naive" in row
                    else ""
                )
                + f", peak RSS {r['peak_rss_mb']:.0f} MB",
                flush=True,
            )
    rss = None
    if args.rss_check:
        short = make_clip(clips / "rss-300.mp4", 1, (640, 360), 300)
        long = make_clip(clips / "rss-3000.mp4", 1, (640, 360), 3000)
        a = run_child(
            "render",
            clip=short,
            out=args.out / "rss-out.mp4",
            source=source,
            batch_size=args.batch_size,
            workers=args.workers,
        )
        b = run_child(
            "render",
            clip=long,
            out=args.out / "rss-out.mp4",
            source=source,
            batch_size=args.batch_size,
            workers=args.workers,
        )
        rss = {
            "rss_300_mb": a["peak_rss_mb"],
            "rss_3000_mb": b["peak_rss_mb"],
            "ratio": b["peak_rss_mb"] / a["peak_rss_mb"],
        }
        print(
            f"peak RSS: 300 frames {a['peak_rss_mb']:.0f} MB, 3000 frames {b['peak_rss_mb']:.0f} MB, "
            f"ratio {rss['ratio']:.2f}",
            flush=True,
        )
    report = {
        "machine": machine,
        "settings": {
            "batch_size": args.batch_size,
            "workers": args.workers,
            "encoder": "libx264 veryfast crf 18",
        },
        "results": results,
        "rss": rss,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    (args.out / "bench.json").write_text(json.dumps(report, indent=2))
    draw_chart(results, args.out / "bench.png", machine)
    print(f"wrote {args.out / 'bench.json'} and {args.out / 'bench.png'}")


if __name__ == "__main__":
    main()
